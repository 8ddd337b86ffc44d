// libmsmemscope_agent.so: the one library loaded into the target. It owns the
// channel, the options the host passed, collection on/off, fork handling and
// the record encoders behind sdk/include/msmemscope/agent.h.
//
// Links libc, libdl and pthread only.
#include <msmemscope/agent.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

#include "attach.h"
#include "channel.h"
#include "end_signals.h"
#include "import_fold.h"
#include "live_blocks.h"
#include "memory_bound.h"
#include "options.h"
#include "python_boot.h"
#include "stacks.h"

using namespace msms;
using namespace msms::agent;

namespace {

std::atomic<bool> g_collecting{false};
// Blocks allocated while collection is off are remembered (live_blocks.h)
// from attach until the process ends.
std::atomic<bool> g_off_tracking{false};
std::atomic<uint64_t> g_step{0};
std::atomic<msms_stack_provider> g_py_provider{nullptr};
std::atomic<msms_stack_provider_named> g_py_provider_named{nullptr};  // takes the plain one's place
// A Python stack provider was registered in this process: with Python
// stacks and no C ones, its HOST blocks get their allocator's caller
// (heap_record) also where no provider is registered now (after the
// package turned it off at exit: what the interpreter's teardown allocates).
std::atomic<bool> g_py_seen{false};
// The Python package's provider for out-of-memory failures only
// (oom_stacks): registered in every Python process that loads the
// package, whatever --call-stack says, and consulted at a failure only.
std::atomic<msms_stack_provider> g_py_oom_provider{nullptr};
char g_session_dir[4096];
bool g_follow_fork = true;

struct Guard {
    Tls& t;
    explicit Guard(Tls& tl) : t(tl) { ++t.depth; }
    ~Guard() { --t.depth; }
};

// ts must come from stamp(w) (taken after the last writer_for of the record).
inline uint8_t* begin_record(ThreadWriter* w, uint8_t tag, uint64_t ts) {
    uint8_t* p = w->cur;
    *p++ = tag;
    p = capture::put_varint(p, ts - w->last_ts);
    w->last_ts = ts;
    return p;
}

// The calling thread's interned Python stack if the user asked for it (0: none).
inline uint64_t py_stack_for(ThreadWriter*& w) {
    if (options().py_depth == 0) return 0;
    if (msms_stack_provider_named named = g_py_provider_named.load(std::memory_order_relaxed))
        return capture_py_stack_named(w, named, options().py_depth);
    msms_stack_provider prov = g_py_provider.load(std::memory_order_relaxed);
    return prov ? capture_py_stack(w, prov, options().py_depth) : 0;
}

// Interns the current C / Python stack if the user asked for it.
inline void stacks_for(ThreadWriter*& w, uint64_t& cstack, uint64_t& pystack) {
    cstack = options().c_depth > 0 ? capture_c_stack(w, options().c_depth) : 0;
    pystack = py_stack_for(w);
}

inline bool want_stacks() {
    return options().c_depth > 0 ||
           (options().py_depth > 0 && (g_py_provider_named.load(std::memory_order_relaxed) ||
                                       g_py_provider.load(std::memory_order_relaxed)));
}

// A CPython interpreter's own start-up. From the agent's constructor until
// the program's first line (msms_agent_python_started: the Python package's
// boot calls it at CPython's "cpython.run_*" audit event, or when the boot
// is done), except while the program's own sitecustomize runs
// (msms_agent_python_startup_paused), the HOST blocks the process allocates get a
// C stack of kStartupDepth frames even when no C stacks, or fewer frames (a
// site of c:1 is strdup, not the setlocale that called it), were asked for. What the interpreter
// keeps from its start-up until exit (~750 KB: its types, interned strings,
// the site module's state) is then known by its site, the interpreter, and
// the leak analysis's built-in list takes it out; without a stack it read
// as a leak at an unknown site in every Python process of a run. A block a
// program embedding Python allocates before Py_Initialize gets its own
// stack and site, so nothing of the program's is hidden. An interpreter
// run with -I, -E or -S has its boot run by the agent's audit hook, which
// ends the window (python_boot.cpp); one that cannot (debug allocators),
// or one of a session without the boot (python_boot_prepare): no window (its start-up reads
// as an unknown site again, but its program's own blocks are never taken
// for the interpreter's). A boot that could not load the package closes it
// too (the CLI's sitecustomize.py, through ctypes); kStartupBlocks bounds it
// only should nothing close it. The bound is far above any start-up: one
// that compiles the standard library from source (`python3 -O` where no
// .opt-1.pyc is installed, as on Debian; an empty pycache_prefix; an image
// whose .pyc were deleted) takes ~20000 blocks before the boot, and with the
// former bound of 16384 what it kept after that (~77 KB) was a leak at an
// unknown site of every such run.
constexpr uint32_t kStartupDepth = 8;
constexpr uint32_t kStartupBlocks = 1u << 20;
std::atomic<uint32_t> g_startup_left{0};
uint32_t g_startup_paused = 0;  // what was left when the program's own code began (start-up is single-threaded)

// The start-up's C stack for a HOST block (0: the window is closed): a
// start-up stack (kind 2, no source lines, capture_format.h) when the run
// asked for no C stacks, else an ordinary one, deeper than asked.
inline uint64_t startup_c_stack(ThreadWriter*& w) {
    uint32_t left = g_startup_left.load(std::memory_order_relaxed);
    if (left == 0) return 0;
    g_startup_left.store(left - 1, std::memory_order_relaxed);  // a bound, not a count: races are harmless
    return capture_c_stack(w, kStartupDepth, options().c_depth == 0 ? 2 : 0);
}

std::atomic<int> g_exit_status{-1};
// An mstx range named "step start" began: the program marks its own steps
// (the Python package then leaves the optimizer's steps unmarked).
std::atomic<bool> g_mstx_steps{false};  // from an explicit exit(): the status

// The compact host-heap record (the hot path): tag, time delta, pointer
// delta, size (mallocs only), and the interned stacks when asked for.
// Without stacks the fields are packed (capture::kPacked): the record is
// built in two registers and written with two 8-byte stores (one per field
// when it is longer than 16 bytes), instead of a varint loop per field whose
// unpredictable lengths cost more than the stores. writer_for's room
// (kMaxFixedRecord) covers the stores' spill past the record's end.
// A host-heap record with its interned stacks (the varint layout).
void heap_record_stacks(uint8_t tag_with_stacks, uint64_t ptr, const uint64_t* size, uint64_t cs, uint64_t ps) {
    ThreadWriter* w = writer_for(capture::kMaxFixedRecord);
    if (!w) return count_drop();
    uint64_t ts = stamp(w);
    uint8_t* p = begin_record(w, tag_with_stacks, ts);
    p = capture::put_varint(p, capture::zigzag(static_cast<int64_t>(ptr - w->last_ptr)));
    w->last_ptr = ptr;
    if (size) p = capture::put_varint(p, *size);
    p = capture::put_varint(p, cs);
    p = capture::put_varint(p, ps);
    commit(w, p);
}

// `caller`, `caller_sp`: the malloc hook's return address and the stack
// pointer at the hooked call (msms_agent_alloc_host), else 0 and nullptr.
inline void heap_record(uint8_t tag_with_stacks, uint64_t ptr, const uint64_t* size, uint64_t caller = 0,
                        const uint64_t* caller_sp = nullptr) {
    ThreadWriter* w = writer_for(capture::kMaxFixedRecord);
    if (!w) return count_drop();
    const bool caller_wanted = size && caller && options().c_depth == 0 && options().py_depth > 0 &&
                               g_py_seen.load(std::memory_order_relaxed);
    if (__builtin_expect(!want_stacks(), 1) && __builtin_expect(!caller_wanted, 1) &&
        __builtin_expect(!size || g_startup_left.load(std::memory_order_relaxed) == 0, 1)) {
        uint64_t ts = stamp(w);
        uint64_t dt = ts - w->last_ts;
        uint64_t dp = capture::zigzag(static_cast<int64_t>(ptr - w->last_ptr));
        w->last_ts = ts;
        w->last_ptr = ptr;
        uint32_t tl = capture::packed_len(dt), pl = capture::packed_len(dp);
        uint32_t hl = 1, sl = 0;
        uint64_t head = capture::kPacked | ((tl - 1) << 3) | (pl - 1);
        if (size) {
            sl = capture::packed_len(*size);
            head |= capture::kPackedMalloc | ((sl - 1) << 8);
            hl = 2;
        }
        uint8_t* p = w->cur;
        uint32_t len = hl + tl + pl + sl;
        if (__builtin_expect(len <= 16, 1)) {
            // The usual record (6-12 bytes) in two registers, two stores.
            unsigned __int128 r = head;
            uint32_t bits = 8 * hl;
            r |= static_cast<unsigned __int128>(dt) << bits;
            bits += 8 * tl;
            r |= static_cast<unsigned __int128>(dp) << bits;
            bits += 8 * pl;
            if (size) r |= static_cast<unsigned __int128>(*size) << bits;
            memcpy(p, &r, 16);
            p += len;
        } else {
            memcpy(p, &head, 8);
            p += hl;
            memcpy(p, &dt, 8);
            p += tl;
            memcpy(p, &dp, 8);
            p += pl;
            if (size) {
                memcpy(p, size, 8);
                p += sl;
            }
        }
        commit(w, p);
        return;
    }
    uint64_t cs = 0, ps = 0;
    if (size && options().c_depth < kStartupDepth && g_startup_left.load(std::memory_order_relaxed) != 0) {
        cs = startup_c_stack(w);
        ps = py_stack_for(w);
    } else if (caller_wanted) {
        // Python stacks without C ones: the allocator's caller too (kind 4,
        // for the leak analysis only: stacks.h capture_caller_stack).
        cs = capture_caller_stack(w, caller, caller_sp);
        ps = py_stack_for(w);
    } else {
        stacks_for(w, cs, ps);
    }
    heap_record_stacks(tag_with_stacks, ptr, size, cs, ps);
}

// A HOST block the dynamic loader allocated: a thread's static TLS and DTV
// (pthread_create), a library's thread-local block at a thread's first use
// of it (__tls_get_addr), dlopen's maps. ld.so keeps them (glibc caches
// finished threads' stacks with their TLS). With only Python stacks, such a
// block's site was the program's line that started the thread or first ran
// the library's code in it, and it read as that line's leak; with a C stack
// its site is the loader, which the leak analysis's built-in list knows.
// So it gets kLoaderDepth frames whatever --call-stack asks for (kind 3
// when no C stacks were asked for; attach_impl takes the module table in
// every process for it).
constexpr uint32_t kLoaderDepth = 8;

void loader_record(uint64_t ptr, uint64_t size) {
    if (options().c_depth >= kLoaderDepth) return heap_record(capture::kHeapMallocS, ptr, &size);
    ThreadWriter* w = writer_for(capture::kMaxFixedRecord);
    if (!w) return count_drop();
    uint64_t cs = capture_c_stack(w, kLoaderDepth, options().c_depth == 0 ? 3 : 0);
    uint64_t ps = py_stack_for(w);
    heap_record_stacks(capture::kHeapMallocS, ptr, &size, cs, ps);
}

// An allocation that failed for lack of memory (the collectors' OOM_DETAIL
// OOM_TRIGGER) gets its C and Python stacks whatever --call-stack asks for,
// as upstream takes them (csrc/event_trace/hal_hooks/hal_hooks.cpp
// HandleOOM: "at OOM take the C and Python call stacks directly, not
// depending on the config"), kOomDepth frames each: upstream's
// DEFAULT_CALL_STACK_DEPTH (csrc/framework/config_info.h), or the user's
// depth where it asked for more (a failure is rare and its stack is what
// is read first; fewer frames than the user's other rows would be odd).
// Taken on the failure path only: the malloc/free paths are unchanged.
// The C stack is an ordinary one (kind 0, source lines): the module table
// is written in every process (attach_impl), so the host symbolizes it
// without --call-stack too. The Python stack comes from the package's
// failure provider (msms_agent_set_python_oom_stack_provider), which
// reads the failing thread's own frames with or without --call-stack=python;
// with an older package, from the ordinary provider when Python stacks
// were asked for.
constexpr uint32_t kOomDepth = 50;

void oom_stacks(ThreadWriter*& w, uint64_t& cstack, uint64_t& pystack) {
    // The failing call's errno (ENOMEM) is the program's: the walk (the
    // main thread's stack bounds read from /proc, the module rescan, the
    // unwinder) may set its own.
    const int saved_errno = errno;
    const uint32_t c_depth = options().c_depth > kOomDepth ? options().c_depth : kOomDepth;
    cstack = capture_c_stack(w, c_depth);
    if (msms_stack_provider prov = g_py_oom_provider.load(std::memory_order_acquire)) {
        const uint32_t py_depth = options().py_depth > kOomDepth ? options().py_depth : kOomDepth;
        pystack = capture_py_stack(w, prov, py_depth);
    } else {
        pystack = py_stack_for(w);
    }
    errno = saved_errno;
}

// Rows that carry the Python stack only, as upstream's current code writes
// them (AtenManager: ReportAtenLaunch / ReportAtenAccess take the Python
// call stack when it is collected, never a C one): a framework operator's
// start and end, and its tensors' accesses.
inline bool py_stack_only(uint16_t kind, uint16_t type) {
    return kind == MSMS_EV_ACCESS ||
           (kind == MSMS_EV_OP_LAUNCH && (type == MSMS_T_ATEN_START || type == MSMS_T_ATEN_END));
}

// The generic record (every event but the compact heap and Python-call
// ones): interns attrs, takes stacks for memory events when asked for and
// for out-of-memory failures always (oom_stacks), the Python stack for
// operator rows (py_stack_only; `py_known`: the caller's, taken for this
// operator already).
void generic_record(ThreadWriter* w, uint16_t kind, uint16_t type, uint16_t dev_kind, int16_t dev_id, uint64_t ptr,
                    uint64_t size, uint64_t aux0, uint64_t aux1, uint64_t name_id, const char* attrs,
                    bool stacks = true, const uint64_t* py_known = nullptr) {
    uint64_t attrs_id = attrs && *attrs ? intern(w, attrs, strlen(attrs)) : 0;
    uint64_t cs = 0, ps = 0;
    if (stacks && (kind == MSMS_EV_MALLOC || kind == MSMS_EV_FREE) && want_stacks())
        stacks_for(w, cs, ps);
    else if (stacks && kind == MSMS_EV_OOM_DETAIL)
        oom_stacks(w, cs, ps);
    else if (stacks && py_stack_only(kind, type))
        ps = py_known ? *py_known : py_stack_for(w);
    w = writer_for(capture::kMaxFixedRecord);
    if (!w) return count_drop();
    uint64_t ts = stamp(w);
    uint8_t* p = begin_record(w, capture::kGeneric, ts);
    p = capture::put_varint(p, kind);
    p = capture::put_varint(p, type);
    p = capture::put_varint(p, dev_kind);
    p = capture::put_varint(p, capture::zigzag(dev_id));
    p = capture::put_varint(p, ptr);
    p = capture::put_varint(p, size);
    p = capture::put_varint(p, aux0);
    p = capture::put_varint(p, aux1);
    p = capture::put_varint(p, name_id);
    p = capture::put_varint(p, attrs_id);
    p = capture::put_varint(p, cs);
    p = capture::put_varint(p, ps);
    commit(w, p);
}

// A cpu allocation has no driver to say how much memory there was: the
// trigger of its failure carries the process's binding memory bound, read
// here, in the failing thread, at the failure (memory_bound.h); the oom
// analyzer writes it into the OOM_Snapshot row. The failing call's errno is
// the program's: the reads may set their own.
constexpr size_t kBoundAttrsMax = 512;

const char* with_memory_bound(const char* attrs, char* out, size_t out_size) {
    const int saved_errno = errno;
    memory_bound::format_attrs(out, out_size, attrs, memory_bound::read_now());
    errno = saved_errno;
    return out;
}

// Registered with on_exit, which hands over the status given to exit() --
// also when main returned (its value goes to exit() inside libc, not through
// our exit() below), so every process's summary says its exit code.
void at_exit(int status, void*) {
    // what the interpreter's shutdown left of the imports' heap (live at exit)
    import_fold::publish();
    Tls& t = tls();
    ++t.depth;
    g_off_tracking.store(false, std::memory_order_relaxed);
    g_collecting.store(false, std::memory_order_release);
    int st = g_exit_status.load();
    channel_close(st >= 0 ? st : (status & 0xff), capture::EndKind::Exit);
}

// Why this process is not recorded: channel_open's error in words.
const char* unrecorded_reason(const char* dir, int rc) {
    static char why[4800];
    if (rc == EFBIG) return "the file-size limit, ulimit -f, is smaller than one capture chunk";
    snprintf(why, sizeof(why), "cannot open the capture in %s (%s)", dir, strerror(rc));
    return why;
}

void child_after_fork() {
    Tls& t = tls();
    ++t.depth;
    bool was_open = channel_is_open();
    // The process this child was forked from: the pid of the capture it
    // inherited (getppid() would name init or a subreaper should the parent
    // already be gone). Recorded in the child's capture, so that its end by
    // _exit is known as "_exit after fork" whatever became of the parent.
    const capture::CaptureHeader* parent = channel_header();
    uint32_t forked_from = parent ? parent->pid : static_cast<uint32_t>(getppid());
    channel_forget_after_fork();
    import_fold::after_fork();
    // The child's stream has no module records for start-up stacks.
    g_startup_left.store(0, std::memory_order_relaxed);
    if (was_open && g_follow_fork && g_session_dir[0]) {
        if (int rc = channel_open(g_session_dir, forked_from); rc != 0) {
            g_collecting.store(false);
            note_unrecorded(g_session_dir, unrecorded_reason(g_session_dir, rc));
        } else stacks_init();
    } else {
        g_collecting.store(false);
        g_off_tracking.store(false, std::memory_order_relaxed);
    }
    --t.depth;
}

int attach_impl(const char* dir, const char* opts) {
    Tls& t = tls();
    Guard g(t);
    if (channel_is_open()) return EALREADY;
    parse_options(opts ? opts : "");
    g_follow_fork = options().follow_fork;
    strncpy(g_session_dir, dir, sizeof(g_session_dir) - 1);
    int rc = channel_open(dir);
    if (rc != 0) return rc;
    static bool registered = false;
    if (!registered) {
        registered = true;
        on_exit(at_exit, nullptr);
        pthread_atfork(nullptr, nullptr, child_after_fork);
        install_end_signal_handlers();
    }
    // (also without C stacks asked for: blocks of the loader's and of a
    // CPython's start-up get one)
    stacks_init();
    g_off_tracking.store(true, std::memory_order_relaxed);
    return 0;
}

__attribute__((constructor(101))) void agent_init() {
    const char* dir = getenv("MSMEMSCOPE_SESSION");
    if (!dir || !*dir) return;  // loaded without a host: wait for msms_agent_attach
    const char* opts = getenv("MSMEMSCOPE_AGENT_OPTS");
    parse_options(opts ? opts : "");
    if (!options().follow_fork) {
        // Only the program the CLI started is profiled.
        const char* root = getenv("MSMEMSCOPE_ROOT_PID");
        if (root && atoi(root) != getpid()) return;
    }
    int rc = attach_impl(dir, opts);
    if (rc != 0) {
        char msg[512];
        snprintf(msg, sizeof(msg), "[msmemscope] warning: cannot open the capture in %s (%s); not profiling pid %d\n",
                 dir, rc == EFBIG ? "the file-size limit, ulimit -f, is smaller than one capture chunk" : strerror(rc),
                 getpid());
        ssize_t r = write(2, msg, strlen(msg));
        (void)r;
        // The host says so and exits with 70 (issue #29 item 5).
        note_unrecorded(dir, unrecorded_reason(dir, rc));
        return;
    }
    {
        Guard g(tls());
        // (a boot that will not run: no window, nothing would close it)
        if (python_boot_prepare() && options().c_depth < kStartupDepth) {
            g_startup_left.store(kStartupBlocks, std::memory_order_relaxed);
        }
    }
    if (!options().deferred) msms_agent_start();
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int msms_agent_enter(void) {
    Tls& t = tls();
    if (t.depth != 0 || !g_collecting.load(std::memory_order_relaxed)) return 0;
    ++t.depth;
    return 1;
}

__attribute__((visibility("default"))) void msms_agent_leave(void) { --tls().depth; }

// The hooks off on this thread whether or not collection is on (the Python
// package's own work: bindings/src/hooks_off.h), until msms_agent_leave().
// msms_agent_enter() does nothing while collection is off, and then what
// libc allocates for the package (realpath's result, which the package
// frees with a call no hook sees) was remembered as a block of the
// program's "before collection started". Always 1.
__attribute__((visibility("default"))) int msms_agent_hooks_off(void) {
    ++tls().depth;
    return 1;
}

__attribute__((visibility("default"))) void msms_agent_python_started(void) {
    g_startup_left.store(0, std::memory_order_relaxed);
    g_startup_paused = 0;
}

__attribute__((visibility("default"))) void msms_agent_python_startup_paused(int paused) {
    if (paused) {
        g_startup_paused = g_startup_left.exchange(0, std::memory_order_relaxed);
    } else {
        g_startup_left.store(g_startup_paused, std::memory_order_relaxed);
        g_startup_paused = 0;
    }
}

__attribute__((visibility("default"))) int msms_agent_collecting(void) {
    return g_collecting.load(std::memory_order_relaxed) ? 1 : 0;
}

static_assert(sizeof(std::atomic<bool>) == 1 && std::atomic<bool>::is_always_lock_free,
              "msms_agent_collecting_flag hands out the flag's byte");
__attribute__((visibility("default"))) const unsigned char* msms_agent_collecting_flag(void) {
    return reinterpret_cast<const unsigned char*>(&g_collecting);
}

__attribute__((visibility("default"))) int msms_agent_wants(const char* cls) { return wants(cls) ? 1 : 0; }

__attribute__((visibility("default"))) size_t msms_agent_option(const char* key, char* buf, size_t n) {
    return option_text(key, buf, n);
}

__attribute__((visibility("default"))) uint64_t msms_agent_now(void) { return now_ns(); }

__attribute__((visibility("default"))) void msms_agent_alloc(uint16_t type, uint16_t dev_kind, int16_t dev_id,
                                                             uint64_t ptr, uint64_t size, uint64_t aux0,
                                                             const char* attrs) {
    if (type == MSMS_T_HOST && aux0 == 0 && !attrs) {
        if (import_fold::alloc(ptr, size)) return;  // inside a Python import (import_fold.h)
        heap_record(capture::kHeapMallocS, ptr, &size);
        return;
    }
    msms_agent_event(MSMS_EV_MALLOC, type, dev_kind, dev_id, ptr, size, aux0, 0, nullptr, attrs);
}

__attribute__((visibility("default"))) void msms_agent_alloc_host(uint64_t ptr, uint64_t size, uint64_t caller,
                                                                  const uint64_t* caller_sp) {
    if (import_fold::alloc(ptr, size)) return;  // inside a Python import (import_fold.h)
    heap_record(capture::kHeapMallocS, ptr, &size, caller, caller_sp);
}

__attribute__((visibility("default"))) void msms_agent_alloc_loader(uint64_t ptr, uint64_t size) {
    if (import_fold::alloc(ptr, size)) return;
    loader_record(ptr, size);
}

__attribute__((visibility("default"))) void msms_agent_free(uint16_t type, uint16_t dev_kind, int16_t dev_id,
                                                            uint64_t ptr) {
    if (type == MSMS_T_HOST) {
        if (import_fold::release(ptr)) return;
        heap_record(capture::kHeapFreeS, ptr, nullptr);
        return;
    }
    msms_agent_event(MSMS_EV_FREE, type, dev_kind, dev_id, ptr, 0, 0, 0, nullptr, nullptr);
}

__attribute__((visibility("default"))) void msms_agent_event(uint16_t kind, uint16_t type, uint16_t dev_kind,
                                                             int16_t dev_id, uint64_t ptr, uint64_t size,
                                                             uint64_t aux0, uint64_t aux1, const char* name,
                                                             const char* attrs) {
    if (kind == MSMS_EV_MSTX && type == MSMS_T_RANGE_START && name &&
        (!strcmp(name, "step start") || !strcmp(name, "\"step start\"")))
        g_mstx_steps.store(true, std::memory_order_relaxed);
    ThreadWriter* w = writer_for(capture::kMaxFixedRecord);
    if (!w) return count_drop();
    char with_bound[kBoundAttrsMax];
    if (kind == MSMS_EV_OOM_DETAIL && type == MSMS_T_OOM_TRIGGER && dev_kind == MSMS_DEV_CPU)
        attrs = with_memory_bound(attrs, with_bound, sizeof(with_bound));
    uint64_t name_id = name && *name ? intern(w, name, strlen(name)) : 0;
    generic_record(w, kind, type, dev_kind, dev_id, ptr, size, aux0, aux1, name_id, attrs);
}

__attribute__((visibility("default"))) int msms_agent_mstx_steps_seen(void) {
    return g_mstx_steps.load(std::memory_order_relaxed) ? 1 : 0;
}

}  // extern "C"

// ---- fast paths for the Python package (agent.h, appended) ----
namespace {
// What a caller's two-word cache of an id in this thread's stream is keyed
// by: the channel generation and the thread (never 0).
inline uint64_t cache_key(const ThreadWriter* w) { return (static_cast<uint64_t>(w->generation) << 32) | w->tid; }

// The name's id in this thread's stream, from the caller's two-word cache.
inline uint64_t cached_name(ThreadWriter*& w, const char* name, uint64_t* cache) {
    if (!name || !*name) return 0;
    uint64_t key = cache_key(w);
    if (cache && cache[0] == key) return cache[1];
    uint64_t id = intern(w, name, strlen(name));
    if (cache && id) {
        cache[0] = key;
        cache[1] = id;
    }
    return id;
}
}  // namespace

extern "C" __attribute__((visibility("default"))) void msms_agent_py_call(uint64_t start, const char* name,
                                                                         uint64_t cache[2]) {
    // Runs on every Python call: with the name's id cached (the usual case)
    // it is one writer_for, one clock read and about ten bytes.
    constexpr size_t kRecord = 1 + 3 * 10;  // tag, ts delta, duration, name id
    ThreadWriter* w = writer_for(kRecord);
    if (!w) return count_drop();
    uint64_t name_id;
    if (cache && cache[0] == cache_key(w)) {
        name_id = cache[1];
    } else {
        // Interning may seal the chunk and take another: ask again.
        name_id = cached_name(w, name, cache);
        w = writer_for(kRecord);
        if (!w) return count_drop();
    }
    uint64_t ts = stamp(w);
    // The duration in ns (start is CLOCK_MONOTONIC ns: msms_agent_now).
    uint64_t end_ns = clock_to_ns(ts);
    if (start > end_ns) start = end_ns;
    uint8_t* p = begin_record(w, capture::kPyCall, ts);
    p = capture::put_varint(p, end_ns - start);
    p = capture::put_varint(p, name_id);
    commit(w, p);
}

extern "C" __attribute__((visibility("default"))) void msms_agent_event_cached(
    uint16_t kind, uint16_t type, uint16_t dev_kind, int16_t dev_id, uint64_t ptr, uint64_t size, uint64_t aux0,
    uint64_t aux1, const char* name, uint64_t name_cache[2], const char* attrs) {
    ThreadWriter* w = writer_for(capture::kMaxFixedRecord);
    if (!w) return count_drop();
    uint64_t name_id = cached_name(w, name, name_cache);
    generic_record(w, kind, type, dev_kind, dev_id, ptr, size, aux0, aux1, name_id, attrs);
}

// An operator's row (OP_LAUNCH ATEN_START/END, or an ACCESS of one of its
// tensors) with the operator's Python stack taken once: `stack` is two words
// the caller keeps per operator call (zeroed at its start); the first row
// takes the stack and keeps its id there (key: channel generation and
// thread, as the name cache), the others reuse it. While an operator runs,
// its caller's Python frames cannot change (it is a C call made from the
// innermost frame; Python code it calls runs above them and returns), so
// the end row's stack is the start row's.
extern "C" __attribute__((visibility("default"))) void msms_agent_op_event(
    uint16_t kind, uint16_t type, uint16_t dev_kind, int16_t dev_id, uint64_t ptr, uint64_t size, const char* name,
    uint64_t name_cache[2], const char* attrs, uint64_t stack[2]) {
    ThreadWriter* w = writer_for(capture::kMaxFixedRecord);
    if (!w) return count_drop();
    uint64_t name_id = cached_name(w, name, name_cache);
    const uint64_t* known = nullptr;
    if (stack && py_stack_only(kind, type)) {
        if (stack[0] != cache_key(w)) {
            stack[1] = py_stack_for(w);
            // keyed by the writer the stack was interned for (interning may
            // have moved to a fresh chunk of the same thread: same key)
            stack[0] = cache_key(w);
        }
        known = &stack[1];
    }
    generic_record(w, kind, type, dev_kind, dev_id, ptr, size, 0, 0, name_id, attrs, true, known);
}

namespace msms::agent {
// import_fold.cpp's shadow rows.
void write_shadow_malloc(const live_blocks::Block& b, const char* attrs) {
    ThreadWriter* w = writer_for(capture::kMaxFixedRecord);
    if (!w) return count_drop();
    generic_record(w, MSMS_EV_MALLOC, b.type, b.dev_kind, b.dev_id, b.ptr, b.size, 0, 0, 0, attrs, false);
}
void write_host_free_plain(uint64_t ptr, const char* attrs) {
    ThreadWriter* w = writer_for(capture::kMaxFixedRecord);
    if (!w) return count_drop();
    generic_record(w, MSMS_EV_FREE, MSMS_T_HOST, MSMS_DEV_CPU, -1, ptr, 0, 0, 0, 0, attrs, false);
}
bool collecting_now() { return g_collecting.load(std::memory_order_relaxed); }
}  // namespace msms::agent

namespace {

// The host blocks freed while collection was off that were not allocated
// while it was off (not in live_blocks' table): a block a collection range
// recorded and the program freed after stop(). Their FREE is written when
// collection starts again, with Attr shadow:true, so that the next range's
// rows, the pool's figures and the leak report do not keep them live to the
// end (the host pairs it with the block's MALLOC, and leaves out one that
// pairs with nothing: a block from before the hooks went in).
live_blocks::Table g_freed_off;

// msms_agent_set_shadow_host_observer's (agent.h).
std::atomic<msms_shadow_host_observer> g_shadow_host_observer{nullptr};

// The Attr extras of blocks allocated while collection is off
// (msms_agent_off_alloc_attrs): each distinct text once, for the process's
// life, so that the table of such blocks holds a 6-bit index (tag N is
// slot N - 1). A slot goes empty -> being written -> ready, never back.
// The last tag is kept for "virtual:true" alone: a mapping whose text finds
// no slot still says it, so that the host counts its memory once.
namespace off_attrs {
constexpr size_t kSlots = live_blocks::kMaxTag - 1, kLen = 192;
constexpr uint8_t kVirtualTag = live_blocks::kMaxTag;
constexpr const char* kVirtualText = "virtual:true";
char g_text[kSlots][kLen];
std::atomic<int> g_state[kSlots];  // 0 empty, 1 being written, 2 ready

// 0: none (empty text), or no room (a full table, a text too long): -1.
int tag_of(const char* attrs) {
    if (!attrs || !*attrs) return 0;
    const size_t n = strlen(attrs);
    if (n >= kLen) return -1;
    for (size_t i = 0; i < kSlots; ++i) {
        int st = g_state[i].load(std::memory_order_acquire);
        if (st == 2) {
            if (strcmp(g_text[i], attrs) == 0) return static_cast<int>(i + 1);
            continue;
        }
        if (st == 1) continue;  // another thread's text: it may be this one (then held twice)
        if (g_state[i].compare_exchange_strong(st, 1, std::memory_order_acq_rel)) {
            memcpy(g_text[i], attrs, n + 1);
            g_state[i].store(2, std::memory_order_release);
            return static_cast<int>(i + 1);
        }
        if (st == 2 && strcmp(g_text[i], attrs) == 0) return static_cast<int>(i + 1);
    }
    return -1;
}

const char* text(uint8_t tag) {
    if (tag == kVirtualTag) return kVirtualText;
    if (tag == 0 || tag > kSlots || g_state[tag - 1].load(std::memory_order_acquire) != 2) return nullptr;
    return g_text[tag - 1];
}
}  // namespace off_attrs

// Collection starts: every block freed while it was off (above) gets its
// shadow FREE, then every block allocated while it was off and still live
// is written now as a MALLOC with Attr shadow:true and no stacks (upstream's
// shadow events; the host then pairs its FREE and counts it in `used`). The
// FREEs come first: an address freed and allocated again while collection
// was off is the old block's FREE, then the new block's MALLOC.
void emit_shadow_mallocs() {
    g_freed_off.drain(
        [](const live_blocks::Block& b, void*) {
            if (b.type == MSMS_T_HOST) return write_host_free_plain(b.ptr, "shadow:true");
            // a device block (or pinned host memory): on the device of its MALLOC
            ThreadWriter* w = writer_for(capture::kMaxFixedRecord);
            if (!w) return count_drop();
            generic_record(w, MSMS_EV_FREE, b.type, b.dev_kind, b.dev_id, b.ptr, 0, 0, 0, 0, "shadow:true", false);
        },
        nullptr);
    uint64_t lost = live_blocks::drain(
        [](const live_blocks::Block& b, void*) {
            // with the extras its MALLOC would have carried (off_attrs)
            const char* extra = off_attrs::text(b.tag);
            char attrs[off_attrs::kLen + 16];
            if (extra) snprintf(attrs, sizeof(attrs), "shadow:true,%s", extra);
            write_shadow_malloc(b, extra ? attrs : "shadow:true");
            if (b.type != MSMS_T_HOST) return;
            if (msms_shadow_host_observer fn = g_shadow_host_observer.load(std::memory_order_acquire)) fn(b.ptr);
        },
        nullptr);
    if (lost) {
        char msg[256];
        snprintf(msg, sizeof(msg),
                 "msmemscope: warning: %llu block(s) allocated while collection was off could not be remembered "
                 "(pid %d); their frees are not written\n",
                 static_cast<unsigned long long>(lost), getpid());
        ssize_t r = write(2, msg, strlen(msg));
        (void)r;
    }
}

// SYSTEM STOP_TRACE with `attrs` (nullptr: none), when collecting.
void stop_collecting(const char* attrs) {
    if (!channel_is_open()) return;
    Tls& t = tls();
    Guard g(t);
    if (!g_collecting.load()) return;
    msms_agent_event(MSMS_EV_SYSTEM, MSMS_T_STOP_TRACE, MSMS_DEV_NA, -1, 0, 0, 0, 0, nullptr, attrs);
    g_collecting.store(false);
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int msms_agent_off_alloc(uint16_t type, uint16_t dev_kind, int16_t dev_id,
                                                                uint64_t ptr, uint64_t size) {
    return msms_agent_off_alloc_attrs(type, dev_kind, dev_id, ptr, size, nullptr);
}

__attribute__((visibility("default"))) int msms_agent_off_alloc_attrs(uint16_t type, uint16_t dev_kind,
                                                                      int16_t dev_id, uint64_t ptr, uint64_t size,
                                                                      const char* attrs) {
    if (tls().depth != 0 || g_collecting.load(std::memory_order_relaxed) ||
        !g_off_tracking.load(std::memory_order_relaxed))
        return 0;
    // A host block of a Python import joins the imports' heap while
    // collection is off too (import_fold.h): the next start() writes it as
    // the one block it is when collecting. Each its own shadow MALLOC, a
    // deferred start wrote ~327 k rows (and as many shadow FREEs) for the
    // interpreter's imports: a 93 MB CSV for a script of 4 steps.
    if (type == MSMS_T_HOST && !attrs && import_fold::alloc(ptr, size)) return 1;
    int tag = off_attrs::tag_of(attrs);
    // No room for the text: the shadow MALLOC says shadow:true alone; a
    // mapping's says virtual:true too (the host would count its memory twice).
    if (tag < 0) tag = strstr(attrs, off_attrs::kVirtualText) ? off_attrs::kVirtualTag : 0;
    return live_blocks::note_alloc(type, dev_kind, dev_id, ptr, size, true, static_cast<uint8_t>(tag)) ? 1 : 0;
}

__attribute__((visibility("default"))) void msms_agent_off_free_device(uint16_t type, uint16_t dev_kind,
                                                                      int16_t dev_id, uint64_t ptr) {
    if (tls().depth != 0) return;
    if (type == MSMS_T_HOST && import_fold::release_quiet(ptr)) return;  // a block of the imports' heap
    if (!g_off_tracking.load(std::memory_order_relaxed)) return;
    if (live_blocks::note_free(type, ptr)) return;
    // A block collection may have recorded (emit_shadow_mallocs), with the
    // device of its MALLOC (the host pairs a FREE within its device's pool).
    // Not remembered when the table is full: the block then stays live in
    // the host's figures, as before, until its address is allocated again.
    g_freed_off.note_free(type, ptr);  // (an address is held once)
    g_freed_off.note_alloc(type, dev_kind, dev_id, ptr, 0, false);
    // A start() in between (this hook saw collection off before it): its
    // drain may have missed the entry, which would then free the block
    // recorded at this address in the new range when the next one starts.
    // Taken back: the block stays live in the host's figures, as before.
    if (g_collecting.load()) g_freed_off.note_free(type, ptr);
}

// Only HOST blocks: the other types' hooks know the block's device and call
// msms_agent_off_free_device (an older hook calling this for a device block
// keeps it live, as before: its FREE would go to no device's pool).
__attribute__((visibility("default"))) void msms_agent_off_free(uint16_t type, uint64_t ptr) {
    if (type != MSMS_T_HOST) {
        if (tls().depth == 0 && g_off_tracking.load(std::memory_order_relaxed)) live_blocks::note_free(type, ptr);
        return;
    }
    msms_agent_off_free_device(type, MSMS_DEV_CPU, -1, ptr);
}

__attribute__((visibility("default"))) void msms_agent_start_with(const char* opts, const char* attrs) {
    if (!channel_is_open()) return;
    if (g_collecting.load()) return;
    {
        Tls& t = tls();
        Guard g(t);
        if (opts) reparse_options(opts);
    }
    if (g_collecting.exchange(true)) return;
    Tls& t = tls();
    Guard g(t);
    msms_agent_event(MSMS_EV_SYSTEM, MSMS_T_START_TRACE, MSMS_DEV_NA, -1, 0, 0, 0, 0, nullptr, attrs);
    emit_shadow_mallocs();
    import_fold::publish();  // imports that ended while collection was off
}

__attribute__((visibility("default"))) void msms_agent_start(void) { msms_agent_start_with(nullptr, nullptr); }

__attribute__((visibility("default"))) void msms_agent_stop(void) { stop_collecting(nullptr); }

__attribute__((visibility("default"))) void msms_agent_set_shadow_host_observer(msms_shadow_host_observer fn) {
    g_shadow_host_observer.store(fn, std::memory_order_release);
}

// A STEP row with Attr attrs (nullptr: none). again: the row says the last
// step's number once more, a row that takes a provisional one over (the
// Python package's optimizer marks: framework/host/provisional_step.h).
__attribute__((visibility("default"))) uint64_t msms_agent_step_with(const char* attrs, int again) {
    // Outside a collection range (before start(), after stop()) a step marks
    // nothing, as upstream's step() (a row ahead of START_TRACE, steps that
    // summary.json counted): the last step's number is returned.
    if (!g_collecting.load()) return g_step.load();
    uint64_t n = again ? g_step.load() : g_step.fetch_add(1) + 1;
    if (!channel_is_open() || !attach_step_allowed()) return n;
    Tls& t = tls();
    Guard g(t);
    char name[24];
    snprintf(name, sizeof(name), "%llu", static_cast<unsigned long long>(n));
    msms_agent_event(MSMS_EV_SYSTEM, MSMS_T_STEP, MSMS_DEV_NA, -1, 0, 0, n, 0, name, attrs);
    if (!again) attach_step_done(n);  // --attach-steps (attach.h)
    return n;
}

__attribute__((visibility("default"))) uint64_t msms_agent_step(void) { return msms_agent_step_with(nullptr, 0); }

__attribute__((visibility("default"))) void msms_agent_set_python_stack_provider(msms_stack_provider fn) {
    if (fn) g_py_seen.store(true, std::memory_order_relaxed);
    g_py_provider.store(fn);
}

__attribute__((visibility("default"))) void msms_agent_set_python_oom_stack_provider(msms_stack_provider fn) {
    g_py_oom_provider.store(fn, std::memory_order_release);
}

__attribute__((visibility("default"))) void msms_agent_set_python_stack_provider_named(msms_stack_provider_named fn) {
    if (fn) g_py_seen.store(true, std::memory_order_relaxed);
    g_py_provider_named.store(fn);
}

// Changes whenever interned ids stop being valid (a new stream: attach, or
// a child after fork): lets callers cache ids (the Python stack provider).
__attribute__((visibility("default"))) uint32_t msms_agent_stream_generation(void) {
    return channel_is_open() ? g_generation.load(std::memory_order_relaxed) : 0;
}

__attribute__((visibility("default"))) uint64_t msms_agent_intern(const char* s) {
    if (!s) return 0;
    Tls& t = tls();
    Guard g(t);
    ThreadWriter* w = writer_for(1);
    if (!w) return 0;
    return intern(w, s, strlen(s));
}

__attribute__((visibility("default"))) int msms_agent_attach(const char* session_dir, const char* opts) {
    if (!session_dir || !*session_dir) return EINVAL;
    return attach_impl(session_dir, opts);
}

}  // extern "C"

// attach.h: the end of an attach (the process goes on; no exit status).
void msms::agent::end_stream_detached() {
    Tls& t = tls();
    Guard g(t);
    msms_agent_stop();
    g_collecting.store(false);
    g_off_tracking.store(false, std::memory_order_relaxed);
    channel_close(0, capture::EndKind::Unknown);
}

extern "C" {

__attribute__((visibility("default"))) void msms_agent_detach(void) {
    Tls& t = tls();
    Guard g(t);
    msms_agent_stop();
    g_collecting.store(false);
    g_off_tracking.store(false, std::memory_order_relaxed);
    channel_close(0, capture::EndKind::Returned);
}

// The Python package's msmemscope.finish(): the session ends while the
// process goes on, as --attach's detach ends it (no exit status: the host
// says "detached").
__attribute__((visibility("default"))) void msms_agent_end_detached(void) { msms::agent::end_stream_detached(); }

// The Python package's end of its session in its atexit handler, where the
// end cannot be left to exit() (msms_agent_stop_at_exit): an uncaught
// KeyboardInterrupt, which ends the process by SIGINT without exit(), or an
// extension that could not register its on_exit handler. The exit status
// does not exist yet then: the end record says what the package could tell
// (EndKind::Exit with code 1 after an uncaught exception, Signal SIGINT
// after an uncaught KeyboardInterrupt), else Returned: not known. A
// STOP_TRACE it writes (collection still on) has Attr at_exit:true.
__attribute__((visibility("default"))) void msms_agent_detach_ended(uint32_t end_kind, int32_t end_code) {
    Tls& t = tls();
    Guard g(t);
    // Collection still on (no stop() before the exit): what is live now is
    // live at exit, not at a stop() of the program's (the leak analysis).
    stop_collecting("at_exit:true");
    g_collecting.store(false);
    g_off_tracking.store(false, std::memory_order_relaxed);
    capture::EndKind kind = capture::EndKind::Returned;
    if (end_kind == static_cast<uint32_t>(capture::EndKind::Exit) ||
        end_kind == static_cast<uint32_t>(capture::EndKind::Signal))
        kind = static_cast<capture::EndKind>(end_kind);
    channel_close(kind == capture::EndKind::Returned ? 0 : end_code, kind);
}

// The Python package's end of collection at the interpreter's exit (its
// atexit handler), the stream left open: no Python code runs after it, and
// the on_exit handler registered at attach (at_exit) ends the stream with
// the status CPython then gives exit() -- sys.exit(N), a normal end, an
// uncaught exception. Returns 1 (0: no stream open). A STOP_TRACE it writes
// (collection still on) has Attr at_exit:true, as msms_agent_detach_ended's.
__attribute__((visibility("default"))) int msms_agent_stop_at_exit(void) {
    if (!channel_is_open()) return 0;
    Tls& t = tls();
    Guard g(t);
    stop_collecting("at_exit:true");
    g_collecting.store(false);
    g_off_tracking.store(false, std::memory_order_relaxed);
    return 1;
}

__attribute__((visibility("default"))) int msms_agent_attached(void) { return channel_is_open() ? 1 : 0; }

}  // extern "C"

// ---- how the process ends ---------------------------------------------------
// exit() and _exit()/_Exit() called by the program (through the PLT) are seen
// here when the agent is preloaded, so the summary can give the status of
// every process, not only the one the CLI started. _exit skips atexit: the
// end record is written here. (glibc's own internal calls, e.g. returning
// from main, do not come through here: atexit covers those.)
extern "C" {

__attribute__((visibility("default"))) void exit(int status) noexcept {
    using exit_fn = void (*)(int);
    static exit_fn real = nullptr;
    if (!real) real = reinterpret_cast<exit_fn>(dlsym(RTLD_NEXT, "exit"));
    g_exit_status.store(status & 0xff);
    real(status);
    __builtin_unreachable();
}

[[noreturn]] static void quick_exit_common(const char* name, int status) {
    using exit_fn = void (*)(int);
    Tls& t = tls();
    ++t.depth;
    capture::CaptureHeader* h = channel_header();
    if (h && h->pid == static_cast<uint32_t>(getpid())) {  // not a vfork child
        --t.depth;
        import_fold::publish();
        ++t.depth;
        g_off_tracking.store(false, std::memory_order_relaxed);
        g_collecting.store(false, std::memory_order_release);
        channel_close(status & 0xff, capture::EndKind::QuickExit);
    }
    exit_fn real = reinterpret_cast<exit_fn>(dlsym(RTLD_NEXT, name));
    if (real) real(status);
    syscall(SYS_exit_group, status);
    __builtin_unreachable();
}

__attribute__((visibility("default"))) void _exit(int status) { quick_exit_common("_exit", status); }
__attribute__((visibility("default"))) void _Exit(int status) noexcept { quick_exit_common("_Exit", status); }

}  // extern "C"

// ---- exec -------------------------------------------------------------------
// An exec ends this image's capture without exit: without a word it would
// read as killed (no end record), and what the image held as leaked. The
// exec calls the program makes through the PLT are seen here and noted in
// the end record (EndKind::Exec, the program given; end_code 0: the new
// environment does not preload the agent, `env -i prog` or a launcher that
// builds its own; 1: it does), taken back should the exec fail. Whether the
// new image was recorded is the host's to tell (its capture of the same pid):
// one that keeps LD_PRELOAD may still not load the agent (a static or
// set-user-ID program).
namespace {

bool keeps_agent(char* const envp[]) {
    if (!envp) return false;
    for (char* const* e = envp; *e; ++e)
        if (strncmp(*e, "LD_PRELOAD=", 11) == 0 && strstr(*e + 11, "libmsmemscope_agent")) return true;
    return false;
}

void before_exec(const char* path, char* const envp[]) {
    char abs[4096];
    const char* shown = path;
    if (path && strchr(path, '/') && realpath(path, abs)) shown = abs;
    channel_note_exec(shown, keeps_agent(envp));
}

// The program an exec by descriptor runs (fexecve, execveat: Python's
// os.execve(fd, ...)), as /proc names the descriptor's file, joined with
// `rel` when one is given relative to a folder's descriptor.
void before_exec_at(int fd, const char* rel, char* const envp[]) {
    if (rel && rel[0] == '/') return before_exec(rel, envp);
    if (fd == AT_FDCWD) return before_exec(rel, envp);
    char link[64], target[4096];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof(target) - 1);
    if (n < 0) n = 0;
    target[n] = 0;
    if (rel && rel[0] && static_cast<size_t>(n) + 1 + strlen(rel) < sizeof(target)) {
        strcat(target, "/");
        strcat(target, rel);
    }
    channel_note_exec(target[0] ? target : "?", keeps_agent(envp));
}

template <typename Fn>
Fn real_fn(const char* name) {
    return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

int after_exec(int rc) {
    int e = errno;
    channel_exec_failed();
    errno = e;
    return rc;
}

// execl*'s arguments as an argv (at most 4096; more is E2BIG, as the kernel would say).
bool collect_args(const char* arg, va_list ap, const char** argv, size_t max) {
    size_t n = 0;
    argv[n++] = arg;
    while (arg) {
        if (n >= max) return false;
        arg = va_arg(ap, const char*);
        argv[n++] = arg;
    }
    return true;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int execve(const char* path, char* const argv[], char* const envp[]) {
    using fn = int (*)(const char*, char* const[], char* const[]);
    fn real = real_fn<fn>("execve");
    before_exec(path, envp);
    return after_exec(real(path, argv, envp));
}

__attribute__((visibility("default"))) int fexecve(int fd, char* const argv[], char* const envp[]) {
    using fn = int (*)(int, char* const[], char* const[]);
    fn real = real_fn<fn>("fexecve");
    before_exec_at(fd, nullptr, envp);
    return after_exec(real(fd, argv, envp));
}

__attribute__((visibility("default"))) int execveat(int dirfd, const char* path, char* const argv[],
                                                    char* const envp[], int flags) {
    using fn = int (*)(int, const char*, char* const[], char* const[], int);
    fn real = real_fn<fn>("execveat");
    if (!real) {  // a libc without the wrapper (before glibc 2.34)
        errno = ENOSYS;
        return -1;
    }
    before_exec_at(dirfd, path, envp);
    return after_exec(real(dirfd, path, argv, envp, flags));
}

__attribute__((visibility("default"))) int execv(const char* path, char* const argv[]) {
    using fn = int (*)(const char*, char* const[]);
    fn real = real_fn<fn>("execv");
    before_exec(path, environ);
    return after_exec(real(path, argv));
}

__attribute__((visibility("default"))) int execvp(const char* file, char* const argv[]) {
    using fn = int (*)(const char*, char* const[]);
    fn real = real_fn<fn>("execvp");
    before_exec(file, environ);
    return after_exec(real(file, argv));
}

__attribute__((visibility("default"))) int execvpe(const char* file, char* const argv[], char* const envp[]) {
    using fn = int (*)(const char*, char* const[], char* const[]);
    fn real = real_fn<fn>("execvpe");
    before_exec(file, envp);
    return after_exec(real(file, argv, envp));
}

__attribute__((visibility("default"))) int execl(const char* path, const char* arg, ...) {
    const char* argv[4096];
    va_list ap;
    va_start(ap, arg);
    bool ok = collect_args(arg, ap, argv, 4096);
    va_end(ap);
    if (!ok) {
        errno = E2BIG;
        return -1;
    }
    return execv(path, const_cast<char* const*>(argv));
}

__attribute__((visibility("default"))) int execlp(const char* file, const char* arg, ...) {
    const char* argv[4096];
    va_list ap;
    va_start(ap, arg);
    bool ok = collect_args(arg, ap, argv, 4096);
    va_end(ap);
    if (!ok) {
        errno = E2BIG;
        return -1;
    }
    return execvp(file, const_cast<char* const*>(argv));
}

__attribute__((visibility("default"))) int execle(const char* path, const char* arg, ...) {
    const char* argv[4096];
    va_list ap;
    va_start(ap, arg);
    bool ok = collect_args(arg, ap, argv, 4096);
    char* const* envp = ok ? va_arg(ap, char* const*) : nullptr;
    va_end(ap);
    if (!ok) {
        errno = E2BIG;
        return -1;
    }
    return execve(path, const_cast<char* const*>(argv), envp);
}

}  // extern "C"
