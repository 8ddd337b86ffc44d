/*
 * libms_tools_ext.so — mstx without CANN (see include/mstx/ms_tools_ext.h).
 * Every entry point initialises once (loads the tool, see
 * mstx_injection.h), then calls the tool's function if it installed one.
 */
#define _GNU_SOURCE
#include "mstx/mstx_injection.h"

#include <dlfcn.h>
#include <sched.h>
#include <stdlib.h>

typedef void (*mark_fn)(const char*, aclrtStream);
typedef mstxRangeId (*range_start_fn)(const char*, aclrtStream);
typedef void (*range_end_fn)(mstxRangeId);
typedef void (*tool_id_fn)(uint64_t*);
typedef mstxDomainHandle_t (*domain_create_fn)(const char*);
typedef void (*domain_destroy_fn)(mstxDomainHandle_t);
typedef void (*domain_mark_fn)(mstxDomainHandle_t, const char*, aclrtStream);
typedef mstxRangeId (*domain_range_start_fn)(mstxDomainHandle_t, const char*, aclrtStream);
typedef void (*domain_range_end_fn)(mstxDomainHandle_t, mstxRangeId);
typedef mstxMemHeapHandle_t (*heap_register_fn)(mstxDomainHandle_t, mstxMemHeapDesc_t const*);
typedef void (*heap_unregister_fn)(mstxDomainHandle_t, mstxMemHeapHandle_t);
typedef void (*regions_register_fn)(mstxDomainHandle_t, mstxMemRegionsRegisterBatch_t const*);
typedef void (*regions_unregister_fn)(mstxDomainHandle_t, mstxMemRegionsUnregisterBatch_t const*);

/* The tool's functions (NULL = nothing to call). */
static struct {
    mark_fn mark;
    range_start_fn range_start;
    range_end_fn range_end;
    tool_id_fn tool_id;
    domain_create_fn domain_create;
    domain_destroy_fn domain_destroy;
    domain_mark_fn domain_mark;
    domain_range_start_fn domain_range_start;
    domain_range_end_fn domain_range_end;
    heap_register_fn heap_register;
    heap_unregister_fn heap_unregister;
    regions_register_fn regions_register;
    regions_unregister_fn regions_unregister;
} g_tool;

/* Slot tables handed to the tool: entry 0 and the last entry are NULL. */
static mstxFuncPointer* g_core[MSTX_API_CORE_SIZE + 1] = {
    0, (mstxFuncPointer*)&g_tool.mark, (mstxFuncPointer*)&g_tool.range_start, (mstxFuncPointer*)&g_tool.range_end,
    (mstxFuncPointer*)&g_tool.tool_id, 0};
static mstxFuncPointer* g_domain[MSTX_API_CORE2_SIZE + 1] = {
    0, (mstxFuncPointer*)&g_tool.domain_create, (mstxFuncPointer*)&g_tool.domain_destroy,
    (mstxFuncPointer*)&g_tool.domain_mark, (mstxFuncPointer*)&g_tool.domain_range_start,
    (mstxFuncPointer*)&g_tool.domain_range_end, 0};
static mstxFuncPointer* g_mem[MSTX_API_CORE_MEM_SIZE + 1] = {
    0, (mstxFuncPointer*)&g_tool.heap_register, (mstxFuncPointer*)&g_tool.heap_unregister,
    (mstxFuncPointer*)&g_tool.regions_register, (mstxFuncPointer*)&g_tool.regions_unregister, 0};

static int get_module_table(mstxFuncModule module, mstxFuncTable* out, unsigned int* size) {
    mstxFuncTable t;
    unsigned int n;
    switch (module) {
    case MSTX_API_MODULE_CORE: t = g_core; n = MSTX_API_CORE_SIZE; break;
    case MSTX_API_MODULE_CORE_DOMAIN: t = g_domain; n = MSTX_API_CORE2_SIZE; break;
    case MSTX_API_MODULE_CORE_MEM: t = g_mem; n = MSTX_API_CORE_MEM_SIZE; break;
    default: return MSTX_FAIL;
    }
    if (!out || !size) return MSTX_FAIL;
    *out = t;
    *size = n;
    return MSTX_SUCCESS;
}

/*
 * States: UNINIT (no call yet), BUSY (one thread loads the tool, the others
 * wait), DONE (a tool installed its functions: never reloaded), NO_TOOL (no
 * tool was found, or it refused: calls do nothing).
 *
 * NO_TOOL is not final: a profiler may come into the process after the
 * program's first mstx call (msmemscope.start() in a script that ran without
 * the CLI loads msmemscope's tool then and sets MSTX_INJECTION_PATH). While
 * NO_TOOL, each call compares MSTX_INJECTION_PATH with the value last tried
 * (by hash: no copy, no allocation) and loads the tool again when it names
 * another library. Marks and ranges are rare, so the getenv is cheap enough.
 */
enum { UNINIT = 0, BUSY = 1, DONE = 2, NO_TOOL = 3 };
static volatile int g_state = UNINIT;
static uint64_t g_tried_hash; /* hash of the MSTX_INJECTION_PATH last tried; 0 = none */

static uint64_t path_hash(const char* path) {
    if (!path || !*path) return 0;
    uint64_t h = 1469598103934665603ULL; /* FNV-1a, never 0 for a non-empty path in practice */
    for (const unsigned char* c = (const unsigned char*)path; *c; ++c) h = (h ^ *c) * 1099511628211ULL;
    return h ? h : 1;
}

static void clear_tool(void) {
    /* a tool that failed half-way must not be called */
    g_tool.mark = 0;
    g_tool.range_start = 0;
    g_tool.range_end = 0;
    g_tool.tool_id = 0;
    g_tool.domain_create = 0;
    g_tool.domain_destroy = 0;
    g_tool.domain_mark = 0;
    g_tool.domain_range_start = 0;
    g_tool.domain_range_end = 0;
    g_tool.heap_register = 0;
    g_tool.heap_unregister = 0;
    g_tool.regions_register = 0;
    g_tool.regions_unregister = 0;
}

/* Runs in state BUSY; returns the next state. */
static int load_tool(void) {
    const char* path = getenv(MSTX_INJECTION_PATH_ENV);
    __atomic_store_n(&g_tried_hash, path_hash(path), __ATOMIC_RELAXED);
    void* lib = (path && *path) ? dlopen(path, RTLD_LAZY | RTLD_LOCAL) : NULL;
    mstxInitInjectionFunc init =
        (mstxInitInjectionFunc)dlsym(lib ? lib : RTLD_DEFAULT, MSTX_INJECTION_INIT_SYMBOL);
    if (!init || init(get_module_table) != MSTX_SUCCESS) {
        clear_tool();
        return NO_TOOL;
    }
    return DONE;
}

static inline void init_once(void) {
    for (;;) {
        int s = __atomic_load_n(&g_state, __ATOMIC_ACQUIRE);
        if (s == DONE) return;
        if (s == BUSY) {
            sched_yield();
            continue;
        }
        if (s == NO_TOOL &&
            path_hash(getenv(MSTX_INJECTION_PATH_ENV)) == __atomic_load_n(&g_tried_hash, __ATOMIC_RELAXED))
            return;
        int expected = s;
        if (__atomic_compare_exchange_n(&g_state, &expected, BUSY, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            __atomic_store_n(&g_state, load_tool(), __ATOMIC_RELEASE);
            return;
        }
    }
}

MSTX_API void mstxMarkA(const char* message, aclrtStream stream) {
    init_once();
    if (message && g_tool.mark) g_tool.mark(message, stream);
}

MSTX_API mstxRangeId mstxRangeStartA(const char* message, aclrtStream stream) {
    init_once();
    return (message && g_tool.range_start) ? g_tool.range_start(message, stream) : 0;
}

MSTX_API void mstxRangeEnd(mstxRangeId id) {
    init_once();
    if (g_tool.range_end) g_tool.range_end(id);
}

MSTX_API void mstxGetToolId(uint64_t* id) {
    init_once();
    if (!id) return;
    *id = MSTX_TOOL_INVALID_ID;
    if (g_tool.tool_id) g_tool.tool_id(id);
}

MSTX_API mstxDomainHandle_t mstxDomainCreateA(const char* name) {
    init_once();
    return (name && g_tool.domain_create) ? g_tool.domain_create(name) : 0;
}

MSTX_API void mstxDomainDestroy(mstxDomainHandle_t domain) {
    init_once();
    if (g_tool.domain_destroy) g_tool.domain_destroy(domain);
}

MSTX_API void mstxDomainMarkA(mstxDomainHandle_t domain, const char* message, aclrtStream stream) {
    init_once();
    if (message && g_tool.domain_mark) g_tool.domain_mark(domain, message, stream);
}

MSTX_API mstxRangeId mstxDomainRangeStartA(mstxDomainHandle_t domain, const char* message, aclrtStream stream) {
    init_once();
    return (message && g_tool.domain_range_start) ? g_tool.domain_range_start(domain, message, stream) : 0;
}

MSTX_API void mstxDomainRangeEnd(mstxDomainHandle_t domain, mstxRangeId id) {
    init_once();
    if (g_tool.domain_range_end) g_tool.domain_range_end(domain, id);
}

MSTX_API mstxMemHeapHandle_t mstxMemHeapRegister(mstxDomainHandle_t domain, mstxMemHeapDesc_t const* desc) {
    init_once();
    return (desc && g_tool.heap_register) ? g_tool.heap_register(domain, desc) : 0;
}

MSTX_API void mstxMemHeapUnregister(mstxDomainHandle_t domain, mstxMemHeapHandle_t heap) {
    init_once();
    if (g_tool.heap_unregister) g_tool.heap_unregister(domain, heap);
}

MSTX_API void mstxMemRegionsRegister(mstxDomainHandle_t domain, mstxMemRegionsRegisterBatch_t const* desc) {
    init_once();
    if (desc && g_tool.regions_register) g_tool.regions_register(domain, desc);
}

MSTX_API void mstxMemRegionsUnregister(mstxDomainHandle_t domain, mstxMemRegionsUnregisterBatch_t const* desc) {
    init_once();
    if (desc && g_tool.regions_unregister) g_tool.regions_unregister(domain, desc);
}
