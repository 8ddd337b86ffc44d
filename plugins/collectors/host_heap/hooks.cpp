// libmsms_host_heap_hook.so — interposes the malloc family in the target.
// Preloaded by the CLI after the agent. Every hook: real call first (record
// after), except free-like calls which record before the real call so that a
// reused address is never seen allocated before it was freed.
#include <msmemscope/agent.h>
#include <msmemscope/dlsym_hook.hpp>

#include <dlfcn.h>
#include <link.h>
#include <sys/auxv.h>
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <string.h>

#include <atomic>

namespace {

using malloc_fn = void* (*)(size_t);
using free_fn = void (*)(void*);
using calloc_fn = void* (*)(size_t, size_t);
using realloc_fn = void* (*)(void*, size_t);
using reallocarray_fn = void* (*)(void*, size_t, size_t);
using posix_memalign_fn = int (*)(void**, size_t, size_t);
using aligned_fn = void* (*)(size_t, size_t);
using valloc_fn = void* (*)(size_t);

struct Real {
    malloc_fn malloc;
    free_fn free;
    calloc_fn calloc;
    realloc_fn realloc;
    reallocarray_fn reallocarray;
    posix_memalign_fn posix_memalign;
    aligned_fn aligned_alloc;
    aligned_fn memalign;
    valloc_fn valloc;
    valloc_fn pvalloc;
};
Real g_real;
std::atomic<int> g_resolved{0};  // 0 no, 1 in progress, 2 done

// dlsym may allocate (calloc) before the real functions are known: serve those
// requests from a static pool that is never freed.
alignas(64) char g_pool[64 * 1024];
std::atomic<size_t> g_pool_used{0};

bool in_pool(const void* p) { return p >= g_pool && p < g_pool + sizeof(g_pool); }

void* pool_alloc(size_t n, size_t align = 16) {
    size_t off = g_pool_used.load();
    for (;;) {
        size_t start = (off + align - 1) & ~(align - 1);
        if (start + n > sizeof(g_pool)) return nullptr;
        if (g_pool_used.compare_exchange_weak(off, start + n)) return g_pool + start;
    }
}

// The dynamic loader's code (ld.so's executable segments, from its program
// headers at AT_BASE: no lock taken): a block allocated from there is the
// loader's (msms_agent_alloc_loader). ld.so calls malloc, calloc and realloc.
uintptr_t g_ld_lo = 0, g_ld_len = 0;

void find_loader() {
    uintptr_t base = getauxval(AT_BASE);
    if (!base) return;  // a static program: no ld.so
    const auto* eh = reinterpret_cast<const ElfW(Ehdr)*>(base);
    const auto* ph = reinterpret_cast<const ElfW(Phdr)*>(base + eh->e_phoff);
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int i = 0; i < eh->e_phnum; ++i) {
        if (ph[i].p_type != PT_LOAD || !(ph[i].p_flags & PF_X)) continue;
        if (base + ph[i].p_vaddr < lo) lo = base + ph[i].p_vaddr;
        if (base + ph[i].p_vaddr + ph[i].p_memsz > hi) hi = base + ph[i].p_vaddr + ph[i].p_memsz;
    }
    if (hi > lo) {
        g_ld_lo = lo;
        g_ld_len = hi - lo;
    }
}

// Whether the hook's caller (its return address) is in ld.so.
inline bool from_loader(const void* ret) { return reinterpret_cast<uintptr_t>(ret) - g_ld_lo < g_ld_len; }

void resolve() {
    int expected = 0;
    if (!g_resolved.compare_exchange_strong(expected, 1)) {
        while (g_resolved.load() != 2) {
        }
        return;
    }
    Real r;
    r.malloc = reinterpret_cast<malloc_fn>(dlsym(RTLD_NEXT, "malloc"));
    r.free = reinterpret_cast<free_fn>(dlsym(RTLD_NEXT, "free"));
    r.calloc = reinterpret_cast<calloc_fn>(dlsym(RTLD_NEXT, "calloc"));
    r.realloc = reinterpret_cast<realloc_fn>(dlsym(RTLD_NEXT, "realloc"));
    r.reallocarray = reinterpret_cast<reallocarray_fn>(dlsym(RTLD_NEXT, "reallocarray"));
    r.posix_memalign = reinterpret_cast<posix_memalign_fn>(dlsym(RTLD_NEXT, "posix_memalign"));
    r.aligned_alloc = reinterpret_cast<aligned_fn>(dlsym(RTLD_NEXT, "aligned_alloc"));
    r.memalign = reinterpret_cast<aligned_fn>(dlsym(RTLD_NEXT, "memalign"));
    r.valloc = reinterpret_cast<valloc_fn>(dlsym(RTLD_NEXT, "valloc"));
    r.pvalloc = reinterpret_cast<valloc_fn>(dlsym(RTLD_NEXT, "pvalloc"));
    g_real = r;
    find_loader();
    g_resolved.store(2);
}

inline bool ready() {
    if (__builtin_expect(g_resolved.load(std::memory_order_acquire) == 2, 1)) return true;
    if (g_resolved.load() == 1) return false;  // inside dlsym: use the pool
    resolve();
    return true;
}

// The real functions are looked up while the library loads, not at the
// first call of a hook. Loaded into a running process (--attach, the Python
// API's start()), the library is called from every thread as soon as the
// GOT slots point at it: the first caller looked the functions up with
// dlsym while the others' calls were served from the 64 KiB pool, which
// threads allocating without pause used up within microseconds; malloc then
// returned NULL and the program aborted (test_attach.py's four threads in
// malloc, under load: "pid N exited during the attach"). Here, inside
// dlopen, no slot points at the hooks yet. (Preloaded, the program's first
// malloc has looked them up already.)
__attribute__((constructor)) void resolve_at_load() { ready(); }

// Who called a hook: its return address and the stack pointer at the call
// (the word above the return address), taken in the exported hook itself
// (frame pointers: -fno-omit-frame-pointer), for the agent's caller stacks
// (msms_agent_alloc_host). Two register reads.
struct Caller {
    const void* ret;
    const uint64_t* sp;
};
#define MSMS_HH_CALLER() \
    Caller { __builtin_return_address(0), static_cast<const uint64_t*>(__builtin_frame_address(0)) + 2 }

// While collection is off the agent only remembers the block (a shadow
// MALLOC when collection starts: agent.h).
inline void record_alloc(void* p, size_t n, Caller c) {
    if (msms_agent_enter()) {
        msms_agent_alloc_host(reinterpret_cast<uint64_t>(p), n, reinterpret_cast<uint64_t>(c.ret), c.sp);
        msms_agent_leave();
    } else {
        msms_agent_off_alloc(MSMS_T_HOST, MSMS_DEV_CPU, -1, reinterpret_cast<uint64_t>(p), n);
    }
}

// A block the dynamic loader allocated: a short C stack whatever was asked.
void record_loader_alloc(void* p, size_t n) {
    if (msms_agent_enter()) {
        msms_agent_alloc_loader(reinterpret_cast<uint64_t>(p), n);
        msms_agent_leave();
    } else {
        msms_agent_off_alloc(MSMS_T_HOST, MSMS_DEV_CPU, -1, reinterpret_cast<uint64_t>(p), n);
    }
}

inline void record_free(void* p) {
    if (msms_agent_enter()) {
        msms_agent_free(MSMS_T_HOST, MSMS_DEV_CPU, -1, reinterpret_cast<uint64_t>(p));
        msms_agent_leave();
    } else {
        msms_agent_off_free(MSMS_T_HOST, reinterpret_cast<uint64_t>(p));
    }
}

// An allocation of n > 0 bytes failed: feeds the oom analysis.
void record_failure(const char* func, size_t n, int err) {
    if (msms_agent_enter()) {
        msms_agent_event(MSMS_EV_OOM_DETAIL, MSMS_T_OOM_TRIGGER, MSMS_DEV_CPU, -1, 0, n, 0,
                         static_cast<uint64_t>(err), func, nullptr);
        msms_agent_leave();
    }
}

inline void* after(void* p, size_t n, const char* func, Caller c) {
    if (__builtin_expect(p != nullptr, 1))
        record_alloc(p, n, c);
    else if (n)
        record_failure(func, n, ENOMEM);
    return p;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void* malloc(size_t n) {
    if (!ready()) return pool_alloc(n);
    void* p = g_real.malloc(n);
    if (__builtin_expect(from_loader(__builtin_return_address(0)), 0) && p) {
        record_loader_alloc(p, n);
        return p;
    }
    return after(p, n, "malloc", MSMS_HH_CALLER());
}

__attribute__((visibility("default"))) void free(void* p) {
    if (!p || in_pool(p)) return;
    if (!ready()) return;  // cannot happen for a real block
    record_free(p);
    g_real.free(p);
}

__attribute__((visibility("default"))) void* calloc(size_t n, size_t size) {
    if (!ready()) {
        void* p = pool_alloc(n * size);
        if (p) memset(p, 0, n * size);
        return p;
    }
    void* p = g_real.calloc(n, size);
    if (__builtin_expect(from_loader(__builtin_return_address(0)), 0) && p) {
        record_loader_alloc(p, n * size);
        return p;
    }
    return after(p, n * size, "calloc", MSMS_HH_CALLER());
}

__attribute__((visibility("default"))) void* realloc(void* old, size_t n) {
    if (!ready() || in_pool(old)) {
        void* p = ready() ? malloc(n) : pool_alloc(n);
        if (p && old) {
            size_t avail = static_cast<size_t>(g_pool + sizeof(g_pool) - static_cast<char*>(old));
            memcpy(p, old, n < avail ? n : avail);
        }
        return p;
    }
    if (!old) return after(g_real.realloc(nullptr, n), n, "realloc", MSMS_HH_CALLER());
    if (n == 0) {
        record_free(old);
        return g_real.realloc(old, 0);
    }
    size_t old_size = malloc_usable_size(old);
    record_free(old);
    void* p = g_real.realloc(old, n);
    if (!p) {
        record_alloc(old, old_size, MSMS_HH_CALLER());  // the old block lives on
        record_failure("realloc", n, ENOMEM);
        return nullptr;
    }
    if (__builtin_expect(from_loader(__builtin_return_address(0)), 0)) record_loader_alloc(p, n);
    else record_alloc(p, n, MSMS_HH_CALLER());
    return p;
}

__attribute__((visibility("default"))) void* reallocarray(void* old, size_t n, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(n, size, &total)) {
        errno = ENOMEM;
        return nullptr;
    }
    return realloc(old, total);
}

__attribute__((visibility("default"))) int posix_memalign(void** out, size_t align, size_t n) {
    if (!ready()) {
        *out = pool_alloc(n, align);
        return *out ? 0 : ENOMEM;
    }
    int rc = g_real.posix_memalign(out, align, n);
    if (rc == 0)
        record_alloc(*out, n, MSMS_HH_CALLER());
    else if (rc == ENOMEM)
        record_failure("posix_memalign", n, rc);
    return rc;
}

__attribute__((visibility("default"))) void* aligned_alloc(size_t align, size_t n) {
    if (!ready()) return pool_alloc(n, align);
    return after(g_real.aligned_alloc(align, n), n, "aligned_alloc", MSMS_HH_CALLER());
}

__attribute__((visibility("default"))) void* memalign(size_t align, size_t n) {
    if (!ready()) return pool_alloc(n, align);
    return after(g_real.memalign(align, n), n, "memalign", MSMS_HH_CALLER());
}

__attribute__((visibility("default"))) void* valloc(size_t n) {
    if (!ready()) return pool_alloc(n, 4096);
    return after(g_real.valloc(n), n, "valloc", MSMS_HH_CALLER());
}

__attribute__((visibility("default"))) void* pvalloc(size_t n) {
    if (!ready()) return pool_alloc(n, 4096);
    return after(g_real.pvalloc ? g_real.pvalloc(n) : g_real.valloc(n), n, "pvalloc", MSMS_HH_CALLER());
}

}  // extern "C"

// dlsym(handle, "malloc") with a handle of libc itself (ctypes.CDLL("libc.so.6"),
// cffi's dlopen("c"), a program's own dlopen) finds libc's definition, not
// the preloaded one: such a malloc went unrecorded, and such a free of a
// recorded block left it "leaked". Those lookups get the hooks instead
// (msmemscope/dlsym_hook.hpp: every other lookup goes on unchanged).
extern "C" {
__attribute__((visibility("hidden"))) msmemscope::dlsym_fn msms_hh_real_dlsym = nullptr;

// The hooks' own addresses (hidden: never resolved to another object's
// malloc, as `&malloc` would be from an RTLD_LOCAL copy of this library).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-attributes"
void* msms_hh_malloc(size_t) __attribute__((alias("malloc"), visibility("hidden")));
void msms_hh_free(void*) __attribute__((alias("free"), visibility("hidden")));
void* msms_hh_calloc(size_t, size_t) __attribute__((alias("calloc"), visibility("hidden")));
void* msms_hh_realloc(void*, size_t) __attribute__((alias("realloc"), visibility("hidden")));
void* msms_hh_reallocarray(void*, size_t, size_t) __attribute__((alias("reallocarray"), visibility("hidden")));
int msms_hh_posix_memalign(void**, size_t, size_t) __attribute__((alias("posix_memalign"), visibility("hidden")));
void* msms_hh_aligned_alloc(size_t, size_t) __attribute__((alias("aligned_alloc"), visibility("hidden")));
void* msms_hh_memalign(size_t, size_t) __attribute__((alias("memalign"), visibility("hidden")));
void* msms_hh_valloc(size_t) __attribute__((alias("valloc"), visibility("hidden")));
void* msms_hh_pvalloc(size_t) __attribute__((alias("pvalloc"), visibility("hidden")));
#pragma GCC diagnostic pop

// A lookup in a given object of a name we hook: libc's definition becomes the
// hook (a library's own malloc, e.g. jemalloc's, is left alone).
__attribute__((visibility("hidden"))) void* msms_hh_dlsym_pre(void* handle, const char* name) {
    if (!msms_hh_real_dlsym) msms_hh_real_dlsym = msmemscope::find_real_dlsym(reinterpret_cast<const void*>(&msms_hh_dlsym_pre));
    if (handle == RTLD_NEXT || handle == RTLD_DEFAULT || !name || !msms_hh_real_dlsym) return nullptr;
    static const char* const names[] = {"malloc", "free", "calloc", "realloc", "reallocarray",
                                        "posix_memalign", "aligned_alloc", "memalign", "valloc", "pvalloc"};
    int i = 0;
    while (i < 10 && strcmp(name, names[i]) != 0) ++i;
    if (i == 10 || !ready()) return nullptr;  // (not ready: the hooks' own resolve is under way)
    const Real& r = g_real;
    void* const real[] = {reinterpret_cast<void*>(r.malloc),         reinterpret_cast<void*>(r.free),
                          reinterpret_cast<void*>(r.calloc),         reinterpret_cast<void*>(r.realloc),
                          reinterpret_cast<void*>(r.reallocarray),   reinterpret_cast<void*>(r.posix_memalign),
                          reinterpret_cast<void*>(r.aligned_alloc),  reinterpret_cast<void*>(r.memalign),
                          reinterpret_cast<void*>(r.valloc),         reinterpret_cast<void*>(r.pvalloc)};
    void* const hook[] = {reinterpret_cast<void*>(&msms_hh_malloc),        reinterpret_cast<void*>(&msms_hh_free),
                          reinterpret_cast<void*>(&msms_hh_calloc),        reinterpret_cast<void*>(&msms_hh_realloc),
                          reinterpret_cast<void*>(&msms_hh_reallocarray),  reinterpret_cast<void*>(&msms_hh_posix_memalign),
                          reinterpret_cast<void*>(&msms_hh_aligned_alloc), reinterpret_cast<void*>(&msms_hh_memalign),
                          reinterpret_cast<void*>(&msms_hh_valloc),        reinterpret_cast<void*>(&msms_hh_pvalloc)};
    void* f = msms_hh_real_dlsym(handle, name);
    return f && f == real[i] ? hook[i] : nullptr;
}
}  // extern "C"

MSMEMSCOPE_DLSYM_HOOK(msms_hh_dlsym_pre, msms_hh_real_dlsym)
