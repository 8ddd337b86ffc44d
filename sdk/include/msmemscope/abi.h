/*
 * msmemscope plugin ABI — the only contract between the host and a plugin.
 *
 * Plain C, so that nothing from the C++ standard library or Boost crosses the
 * boundary. Rules (see sdk/README.md):
 *   - every struct starts with, or carries, its size; fields are append-only;
 *     removing or reordering a field bumps MSMS_ABI_MAJOR;
 *   - strings are views (pointer + length) of memory owned by whoever passed
 *     them, valid only during the call;
 *   - errors are status codes plus an optional message buffer; no exception
 *     may leave a plugin (the C++ helpers in plugin.hpp catch them);
 *   - the host keeps a plugin library loaded while any object it created lives.
 */
#ifndef MSMEMSCOPE_ABI_H
#define MSMEMSCOPE_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MSMS_ABI_MAJOR 1u
/* 1.1: msms_plugin_descriptor.last_error (older plugins load unchanged).
 * 1.2: msms_host_api.progress (optional for plugins: older ones load and
 *      run unchanged, never calling it).
 * 1.3: msms_run_info.output_dir_fd (older plugins load and run unchanged).
 * 1.4: msms_event.alloc_caller, alloc_caller_id (older plugins load and run
 *      unchanged, never reading them). */
#define MSMS_ABI_MINOR 4u

/* Name of the one exported entry, in either of two forms (the host tells
 * them apart by the ELF symbol type, see msmemscope/entry.hpp):
 *   - a variable holding a pointer to `const msms_plugin_descriptor* fn(void)`
 *     (what MSMEMSCOPE_PLUGIN() and BOOST_DLL_ALIAS export), or
 *   - that function itself, exported under this name (plain C:
 *     `const msms_plugin_descriptor* msmemscope_plugin(void) { ... }`).
 * Anything else under this name (the descriptor itself as a variable, ...) is
 * refused with a message that says what to export. */
#define MSMS_ENTRY_SYMBOL "msmemscope_plugin"

/* Marks the entry of a plain-C plugin for export (msmemscope_add_plugin
 * builds with hidden visibility):
 *   MSMS_PLUGIN_EXPORT const msms_plugin_descriptor* msmemscope_plugin(void) { ... } */
#define MSMS_PLUGIN_EXPORT __attribute__((visibility("default")))

/* ---------------------------------------------------------------- status */
typedef enum msms_status {
    MSMS_OK = 0,
    MSMS_ERR_INVALID_ARGUMENT = 1,
    MSMS_ERR_IO = 2,
    MSMS_ERR_INTERNAL = 3,
    MSMS_ERR_UNSUPPORTED = 4,
    MSMS_ERR_EXCEPTION = 5, /* a C++ exception was caught at the boundary */
    /* An allocation failed (std::bad_alloc caught at the boundary, or a C
     * plugin's malloc returned NULL). The plugin shares the host's address
     * space, so the host treats it as its own: --analyze/--compare stop with
     * "out of memory" (70); a run drops the plugin and names the cause. */
    MSMS_ERR_OUT_OF_MEMORY = 6
} msms_status;

#define MSMS_ERROR_MESSAGE_SIZE 512
typedef struct msms_error {
    char message[MSMS_ERROR_MESSAGE_SIZE]; /* NUL-terminated, filled on failure */
} msms_error;

/* A string view; not NUL-terminated in general. */
typedef struct msms_str {
    const char* data;
    uint32_t size;
} msms_str;

typedef struct msms_kv {
    msms_str key;
    msms_str value;
} msms_kv;

/* ---------------------------------------------------------------- events */
/* The "Event" column of memscope_dump (spec/COMPAT.md §4). Values are part of
 * the ABI and of the capture format: never renumber. */
typedef enum msms_event_kind {
    MSMS_EV_SYSTEM = 0,
    MSMS_EV_MALLOC = 1,
    MSMS_EV_FREE = 2,
    MSMS_EV_ACCESS = 3,
    MSMS_EV_OP_LAUNCH = 4,
    MSMS_EV_KERNEL_LAUNCH = 5,
    MSMS_EV_MSTX = 6,
    MSMS_EV_SNAPSHOT = 7,
    MSMS_EV_OOM_DETAIL = 8,
    /* ours, not rows of memscope_dump: one Python function call or a
     * RecordFunction span (python_trace file); timestamp = end, aux0 = start */
    MSMS_EV_PY_TRACE = 9,
    MSMS_EV_KIND_COUNT = 10
} msms_event_kind;

/* The "Event Type" column. */
typedef enum msms_event_type {
    MSMS_T_NONE = 0,
    /* SYSTEM */
    MSMS_T_ACL_INIT = 1,
    MSMS_T_ACL_FINI = 2,
    MSMS_T_START_TRACE = 3,
    MSMS_T_STOP_TRACE = 4,
    MSMS_T_STEP = 5,
    /* MALLOC / FREE: the pool */
    MSMS_T_HAL = 10,
    MSMS_T_PTA = 11,
    MSMS_T_PTA_WORKSPACE = 12,
    MSMS_T_ATB = 13,
    MSMS_T_MINDSPORE = 14,
    MSMS_T_HOST = 15,
    MSMS_T_HOST_PINNED = 16,
    /* ACCESS */
    MSMS_T_READ = 20,
    MSMS_T_WRITE = 21,
    MSMS_T_UNKNOWN = 22,
    /* OP_LAUNCH */
    MSMS_T_ATEN_START = 30,
    MSMS_T_ATEN_END = 31,
    MSMS_T_ATB_START = 32,
    MSMS_T_ATB_END = 33,
    /* KERNEL_LAUNCH */
    MSMS_T_KERNEL_LAUNCH = 40,
    MSMS_T_KERNEL_START = 41,
    MSMS_T_KERNEL_END = 42,
    /* MSTX */
    MSMS_T_MARK = 50,
    MSMS_T_RANGE_START = 51,
    MSMS_T_RANGE_END = 52,
    /* SNAPSHOT */
    MSMS_T_SNAPSHOT = 60,
    /* OOM_DETAIL */
    MSMS_T_OOM_TRIGGER = 70,
    MSMS_T_OOM_RECENT_ALLOC = 71,
    MSMS_T_OOM_TOP_ALLOC = 72,
    /* PY_TRACE */
    MSMS_T_PY_CALL = 80,
    MSMS_T_PY_RECORD_FUNCTION = 81,
    /* A collector's own memory pool (issue #29 item 7). A collector picks one
     * code in [FIRST, LAST] for its pool and names the pool in the Attr "pool"
     * of its MALLOC events ("pool:MYPOOL"; [A-Z][A-Z0-9_]*, at most 31
     * characters, not a built-in type's name). The host then names the type
     * after it everywhere: the Event Type column, leaks' and decompose's
     * reports, the summary (msms_event_type_name below). Blocks of such a pool
     * count in process_used and device_used (its memory is its own), and
     * leaks' step rule judges them as a framework pool's. No new field: hosts
     * and plugins of any 1.x minor read these events. */
    MSMS_T_CUSTOM_POOL_FIRST = 96,
    MSMS_T_CUSTOM_POOL_LAST = 111,
    MSMS_T_TYPE_LIMIT = 128
} msms_event_type;

typedef enum msms_device_kind {
    MSMS_DEV_NA = 0,
    MSMS_DEV_CPU = 1,
    MSMS_DEV_NPU = 2,
    MSMS_DEV_CUDA = 3
} msms_device_kind;

/* One event as analyzers and sinks see it. All strings are views valid for
 * the duration of the call. Numbers that do not apply are 0 (ptr, size, ids)
 * or -1 (the signed running totals). */
typedef struct msms_event {
    uint32_t struct_size;
    uint16_t kind;        /* msms_event_kind */
    uint16_t type;        /* msms_event_type */
    uint64_t id;          /* the output ID: increases with time, per process */
    uint64_t timestamp_ns; /* wall clock (ns since the Unix epoch) */
    uint32_t pid;
    uint32_t tid;
    uint16_t device_kind; /* msms_device_kind */
    int16_t device_id;    /* -1 when the kind has no index (cpu, N/A) */
    uint32_t reserved0;
    uint64_t ptr;
    uint64_t size;
    uint64_t allocation_id; /* same for a block's MALLOC and FREE; 0 if none */
    int64_t pool_used;      /* running live bytes of this pool (device, type) */
    int64_t pool_total;     /* reserved bytes of the pool, -1 if not a pool */
    int64_t process_used;   /* live bytes of all pools of this process */
    int64_t device_used;    /* bytes in use on the device, -1 if unknown */
    uint64_t aux0;          /* kind-specific: stream id, flag word, start ts ... */
    uint64_t aux1;          /* kind-specific: task id, return code ... */
    msms_str name;          /* Name column; empty = N/A */
    const msms_kv* attrs;   /* Attr entries in output order (the host builds
                               them from the fields above plus collector and
                               analyzer extras) */
    uint32_t attr_count;
    uint32_t reserved1;
    msms_str py_stack;      /* one frame per line, empty if not collected */
    msms_str c_stack;
    uint64_t py_stack_id;   /* interned ids: equal ids = equal stacks */
    uint64_t c_stack_id;
    /* ABI 1.4 (an event of a 1.0-1.3 host ends before it: check
     * struct_size). A HOST MALLOC of a run that took Python stacks and no C
     * ones: the native code that called the allocator (its caller, then
     * operator new's caller when that was it), one frame per line as in
     * c_stack, without source lines; empty otherwise. For analyses that
     * judge a block by its native site (the leak analysis's built-in list of
     * one-time set-up); not a C stack, and sinks do not write it. */
    msms_str alloc_caller;
    uint64_t alloc_caller_id;
} msms_event;

/* Exact strings of the CSV (COMPAT §4); NULL for an unknown value. */
static inline const char* msms_event_kind_name(uint16_t kind) {
    switch (kind) {
    case MSMS_EV_SYSTEM: return "SYSTEM";
    case MSMS_EV_MALLOC: return "MALLOC";
    case MSMS_EV_FREE: return "FREE";
    case MSMS_EV_ACCESS: return "ACCESS";
    case MSMS_EV_OP_LAUNCH: return "OP_LAUNCH";
    case MSMS_EV_KERNEL_LAUNCH: return "KERNEL_LAUNCH";
    case MSMS_EV_MSTX: return "MSTX";
    case MSMS_EV_SNAPSHOT: return "SNAPSHOT";
    case MSMS_EV_OOM_DETAIL: return "OOM_DETAIL";
    case MSMS_EV_PY_TRACE: return "PY_TRACE";
    default: return 0;
    }
}

/* A collector's own pool type (MSMS_T_CUSTOM_POOL_FIRST..LAST). */
static inline int msms_is_custom_pool(uint16_t type) {
    return type >= MSMS_T_CUSTOM_POOL_FIRST && type <= MSMS_T_CUSTOM_POOL_LAST;
}

/* Defined by the msmemscope host: the name a collector gave its pool type
 * (the "pool" Attr of the type's first MALLOC), or NULL. Weak: a program
 * without it (a unit test, the conformance tool) sees "CUSTOM_POOL". */
extern const char* msms_host_pool_name(uint16_t type) __attribute__((weak, visibility("default")));

static inline const char* msms_event_type_name(uint16_t type) {
    if (msms_is_custom_pool(type)) {
        const char* n = msms_host_pool_name ? msms_host_pool_name(type) : 0;
        return n ? n : "CUSTOM_POOL";
    }
    switch (type) {
    case MSMS_T_NONE: return "N/A";
    case MSMS_T_ACL_INIT: return "ACL_INIT";
    case MSMS_T_ACL_FINI: return "ACL_FINI";
    case MSMS_T_START_TRACE: return "START_TRACE";
    case MSMS_T_STOP_TRACE: return "STOP_TRACE";
    case MSMS_T_STEP: return "STEP";
    case MSMS_T_HAL: return "HAL";
    case MSMS_T_PTA: return "PTA";
    case MSMS_T_PTA_WORKSPACE: return "PTA_WORKSPACE";
    case MSMS_T_ATB: return "ATB";
    case MSMS_T_MINDSPORE: return "MINDSPORE";
    case MSMS_T_HOST: return "HOST";
    case MSMS_T_HOST_PINNED: return "HOST_PINNED";
    case MSMS_T_READ: return "READ";
    case MSMS_T_WRITE: return "WRITE";
    case MSMS_T_UNKNOWN: return "UNKNOWN";
    case MSMS_T_ATEN_START: return "ATEN_START";
    case MSMS_T_ATEN_END: return "ATEN_END";
    case MSMS_T_ATB_START: return "ATB_START";
    case MSMS_T_ATB_END: return "ATB_END";
    case MSMS_T_KERNEL_LAUNCH: return "KERNEL_LAUNCH";
    case MSMS_T_KERNEL_START: return "KERNEL_START";
    case MSMS_T_KERNEL_END: return "KERNEL_END";
    case MSMS_T_MARK: return "Mark";
    case MSMS_T_RANGE_START: return "Range_start";
    case MSMS_T_RANGE_END: return "Range_end";
    case MSMS_T_SNAPSHOT: return "SNAPSHOT";
    case MSMS_T_OOM_TRIGGER: return "OOM_TRIGGER";
    case MSMS_T_OOM_RECENT_ALLOC: return "OOM_RECENT_ALLOC";
    case MSMS_T_OOM_TOP_ALLOC: return "OOM_TOP_ALLOC";
    case MSMS_T_PY_CALL: return "PY_CALL";
    case MSMS_T_PY_RECORD_FUNCTION: return "PY_RECORD_FUNCTION";
    default: return 0;
    }
}

/* True for the pool types a framework manages (used by leaks' step rule). */
static inline int msms_is_framework_pool(uint16_t type) {
    return type == MSMS_T_PTA || type == MSMS_T_PTA_WORKSPACE || type == MSMS_T_ATB ||
           type == MSMS_T_MINDSPORE || msms_is_custom_pool(type);
}

/* ---------------------------------------------------------------- progress */
/* ABI 1.2: how far a plugin's own long work has got (a sink writing its
 * files), for the status line the CLI draws on a terminal. */
typedef enum msms_progress_unit {
    MSMS_PROGRESS_BYTES = 0, /* done/total are bytes (of the plugin's files) */
    MSMS_PROGRESS_ITEMS = 1  /* done/total are items (rows, stacks, entries) */
} msms_progress_unit;

#define MSMS_PROGRESS_ESTIMATE 1u /* flags: total is an estimate, not exact */

typedef struct msms_progress {
    uint32_t struct_size; /* sizeof(msms_progress) of the caller */
    uint32_t unit;        /* msms_progress_unit */
    msms_str what;        /* short phrase: "writing csv", "creating indexes";
                             empty = "writing <type name>" */
    uint64_t done;
    uint64_t total;       /* 0 = not known (the host may estimate it) */
    uint32_t flags;       /* MSMS_PROGRESS_ESTIMATE */
    uint32_t reserved;
} msms_progress;

/* ---------------------------------------------------------------- host API */
/* Given to every plugin instance at create(); valid until destroy(). */
typedef struct msms_host_api {
    uint32_t struct_size;
    void* host; /* opaque, pass back as the first argument */
    /* level: 0 info, 1 warn, 2 error. Goes to the run's log. */
    void (*log)(void* host, int level, msms_str message);
    /* Analyzers: add one Attr entry to the event being delivered now (an
     * entry of the same key is replaced). The analyzers after the caller and
     * the sinks see it; the event the caller was given stays as it was, its
     * views valid, until its on_event returns. Returns
     * MSMS_ERR_INVALID_ARGUMENT outside on_event. */
    int (*add_attr)(void* host, msms_str key, msms_str value);
    /* Analyzers: set an Attr entry on an event already delivered (by id);
     * sinks receive it through on_annotation and patch their output. */
    int (*annotate)(void* host, uint64_t event_id, msms_str key, msms_str value);
    /* Analyzers: inject a new event (e.g. OOM_DETAIL, SNAPSHOT rows). It gets
     * the next ID and the current timestamp if its timestamp is 0, goes to the
     * analyzers after the caller and then to every sink. */
    int (*emit)(void* host, const msms_event* ev);
    /* Analyzers: a row of a findings table ("leaks", "owners", ...); sinks
     * that keep tables (db, html) store it. */
    int (*add_finding)(void* host, msms_str table, const msms_kv* cols, uint32_t n);
    /* A line for the end-of-run report on stdout. */
    void (*report)(void* host, msms_str line);

    /* ABI 1.2 (a 1.0/1.1 host's struct ends before it: check struct_size,
     * or use msmemscope::Host::progress, which does). Where the plugin's
     * own work stands, e.g. bytes of its files written so far and their
     * total, from any callback (on_event, finish ...). The host only stores
     * the numbers (cheap; still, call it per flush or per batch, not per
     * event); each call replaces the plugin's previous one, and the host
     * forgets it when finish() returns. The last call of finish() should
     * say done == total == the files' final size. */
    int (*progress)(void* host, const msms_progress* p);
} msms_host_api;

/* What a run looks like, given to begin(). */
typedef struct msms_run_info {
    uint32_t struct_size;
    uint32_t pid;
    msms_str output_dir;   /* this process's folder: .../msmemscope_{PID}_{ts}_{backend} */
    msms_str timestamp;    /* YYYYmmddHHMMSS used in file names */
    msms_str config_json;  /* the whole effective configuration */
    msms_str command_line; /* the profiled program and its arguments */
    uint32_t level;        /* 0 op, 1 kernel */
    uint32_t reserved;
    /* ABI 1.3 (a 1.0-1.2 host's struct ends before it: check struct_size, or
     * use msmemscope::RunInfo::output_dir_fd, which does; -1 = none). A
     * descriptor of output_dir, opened without following links, valid until
     * finish() returns; the plugin must not close it. Create every file
     * relative to it, O_CREAT|O_EXCL|O_NOFOLLOW (msmemscope/output_files.hpp):
     * a folder swapped for a link during the run is never written through. */
    int32_t output_dir_fd;
    uint32_t reserved2;
} msms_run_info;

/* ---------------------------------------------------------------- options */
typedef enum msms_option_type {
    MSMS_OPT_STRING = 0,
    MSMS_OPT_INT = 1,   /* decimal integer within [min, max] */
    MSMS_OPT_BOOL = 2,  /* true/false */
    MSMS_OPT_ENUM = 3,  /* one of `allowed` ('|'-separated) */
    MSMS_OPT_LIST = 4   /* comma list; each item one of `allowed` if set */
} msms_option_type;

typedef struct msms_option_spec {
    const char* name;
    uint32_t type; /* msms_option_type */
    const char* default_value; /* as text; NULL = no default */
    const char* allowed;       /* ENUM/LIST: "a|b|c"; NULL = free */
    int64_t min;               /* INT bounds */
    int64_t max;
    const char* description;
} msms_option_spec;

/* ---------------------------------------------------------------- descriptor */
typedef enum msms_plugin_kind {
    MSMS_KIND_COLLECTOR = 1,
    MSMS_KIND_ANALYZER = 2,
    MSMS_KIND_SINK = 3
} msms_plugin_kind;

/* Returned by the entry function. Append-only: new fields go at the end and
 * bump MSMS_ABI_MINOR; the host reads only up to struct_size. */
typedef struct msms_plugin_descriptor {
    uint32_t abi_major;
    uint32_t abi_minor;
    uint32_t struct_size;
    uint32_t kind; /* msms_plugin_kind */
    const char* type_name; /* [a-z][a-z0-9_]*, unique among loaded plugins */
    const char* version;
    const char* description;
    /* comma list of the events this plugin needs (analyzers, sinks) or
     * produces (collectors): alloc, free, launch, access, traceback */
    const char* events;
    const msms_option_spec* options;
    uint32_t option_count;
    uint32_t reserved;
    /* collectors: file name of the library to load into the target (next to
     * the plugin .so), NULL if none; and the devices it serves ("cpu", "npu",
     * "cuda", comma list). */
    const char* agent_library;
    const char* devices;

    /* Lifecycle. create() gets the validated options (every option present,
     * defaults filled in). Every function returns an msms_status. */
    int (*create)(const msms_host_api* host, const msms_kv* options, uint32_t option_count,
                  void** instance, msms_error* err);
    void (*destroy)(void* instance);
    int (*begin)(void* instance, const msms_run_info* run, msms_error* err);
    /* Analyzers and sinks: events in timestamp order. */
    int (*on_event)(void* instance, const msms_event* ev);
    /* Sinks: an analyzer changed an Attr entry of an earlier event. */
    int (*on_annotation)(void* instance, uint64_t event_id, msms_str key, msms_str value);
    /* Sinks: a findings row. */
    int (*on_finding)(void* instance, msms_str table, const msms_kv* cols, uint32_t n);
    /* End of the stream. May be called once; the host never calls on_event after. */
    int (*finish)(void* instance, msms_error* err);

    /* ABI 1.1. The message of the instance's last failure: after on_event,
     * on_annotation or on_finding returned a status other than MSMS_OK the
     * host calls it and shows the text with the plugin's name. NUL-terminated,
     * valid until the next call into the instance; NULL or "" when there is
     * none. May itself be NULL. The C++ adapter (plugin.hpp) fills it with
     * the exception's what(). */
    const char* (*last_error)(void* instance);
} msms_plugin_descriptor;

typedef const msms_plugin_descriptor* (*msms_entry_fn)(void);

#ifdef __cplusplus
}
#endif
#endif
