// C stacks: a frame-pointer walk (a few ns per frame) bounded by the thread's
// stack, falling back to unwind tables when the chain is broken (code built
// without frame pointers). The fallback is libunwind's unw_backtrace when
// libunwind.so.8 can be loaded at start (no link-time dependency), else
// libgcc's _Unwind_Backtrace. bench/capture measures the three.
//
// Modules: every loaded ELF object is written once as a kModule record (load
// bias, extent, path) so that the host can symbolize; objects loaded later
// (dlopen) are found when a new stack holds an address outside every known
// module, which triggers one rescan.
#include "stacks.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>
#include <unwind.h>

#include <atomic>
#include <cstring>

#include "huge_stretch.h"

namespace msms::agent {
namespace {

constexpr uint32_t kMaxFrames = 1000;
constexpr uint32_t kMaxModules = 4096;

struct Module {
    uintptr_t lo, hi;
    bool tool;  // the agent or a collector's hook library: skipped at the top
};
Module g_modules[kMaxModules];
std::atomic<uint32_t> g_module_count{0};
std::atomic_flag g_scan_lock = ATOMIC_FLAG_INIT;
std::atomic<uint64_t> g_last_scan_ns{0};
std::atomic<uint32_t> g_generation_seen{0};
int g_mode = 0;
using unw_backtrace_fn = int (*)(void**, int);
unw_backtrace_fn g_unw_backtrace = nullptr;

struct UnwindState {
    uint64_t* frames;
    uint32_t n;
    uint32_t max;
};

_Unwind_Reason_Code on_frame(struct _Unwind_Context* ctx, void* arg) {
    auto* s = static_cast<UnwindState*>(arg);
    uintptr_t ip = _Unwind_GetIP(ctx);
    if (ip == 0) return _URC_END_OF_STACK;
    if (s->n >= s->max) return _URC_END_OF_STACK;
    s->frames[s->n++] = ip;
    return _URC_NO_REASON;
}

bool is_tool_name(const char* name) {
    const char* base = strrchr(name, '/');
    base = base ? base + 1 : name;
    // Also the Python package's extensions (_msmemscope: the hooks on c10's
    // CPU allocator; _msmemscope_config: config()'s validator;
    // _torch_observer): a stack starts at the user's caller.
    return strncmp(base, "libmsmemscope_agent", 19) == 0 || strncmp(base, "libmsms_", 8) == 0 ||
           strncmp(base, "_msmemscope.", 12) == 0 || strncmp(base, "_msmemscope_config.", 19) == 0 ||
           strncmp(base, "_torch_observer.", 16) == 0;
}

// libstdc++'s operator new (_Znwm) and operator new[] (_Znam): a HOST
// block's caller stack (capture_caller_stack) holds their caller too. Found
// in the library's dynamic symbol table when the module scan meets it;
// `k`: where the caller's return address sits on the stack, in words from
// the hooked call's stack pointer (kUncalibrated until the first block
// allocated through it, kNoOffset when the one unwind did not find it).
constexpr int kUncalibrated = -2;
constexpr int kNoOffset = -1;
constexpr int kMaxOffset = 16;  // words: the stack above a call is always mapped this far
struct NewRange {
    std::atomic<uintptr_t> lo{0}, len{0};
    std::atomic<int> k{kUncalibrated};
};
NewRange g_new[2];

// The dynamic symbol table of a loaded object (from its PT_DYNAMIC, in
// memory: no lock, no allocation), searched for operator new's two forms.
void find_operator_new(const struct dl_phdr_info* info) {
    const ElfW(Dyn)* dyn = nullptr;
    for (int i = 0; i < info->dlpi_phnum; ++i)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dyn = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    if (!dyn) return;
    // ld.so relocates these entries in place (x86-64); an offset if not.
    auto at = [&](ElfW(Addr) a) { return a < info->dlpi_addr ? a + info->dlpi_addr : a; };
    const ElfW(Sym)* symtab = nullptr;
    const char* strtab = nullptr;
    const uint32_t *gnu = nullptr, *sysv = nullptr;
    for (const ElfW(Dyn)* d = dyn; d->d_tag != DT_NULL; ++d) {
        if (d->d_tag == DT_SYMTAB) symtab = reinterpret_cast<const ElfW(Sym)*>(at(d->d_un.d_ptr));
        else if (d->d_tag == DT_STRTAB) strtab = reinterpret_cast<const char*>(at(d->d_un.d_ptr));
        else if (d->d_tag == DT_GNU_HASH) gnu = reinterpret_cast<const uint32_t*>(at(d->d_un.d_ptr));
        else if (d->d_tag == DT_HASH) sysv = reinterpret_cast<const uint32_t*>(at(d->d_un.d_ptr));
    }
    if (!symtab || !strtab) return;
    uint32_t count = 0;
    if (sysv) {
        count = sysv[1];  // nchain: the number of symbols
    } else if (gnu) {
        // The highest symbol a bucket starts at, then to the end of its chain.
        uint32_t nbuckets = gnu[0], symoffset = gnu[1], bloom_words = gnu[2];
        const uint32_t* buckets = reinterpret_cast<const uint32_t*>(gnu + 4 + bloom_words * (sizeof(ElfW(Addr)) / 4));
        const uint32_t* chain = buckets + nbuckets;
        uint32_t last = 0;
        for (uint32_t b = 0; b < nbuckets; ++b)
            if (buckets[b] > last) last = buckets[b];
        if (last < symoffset) return;
        while (!(chain[last - symoffset] & 1)) ++last;
        count = last + 1;
    }
    for (uint32_t i = 0; i < count; ++i) {
        const ElfW(Sym)& s = symtab[i];
        if (s.st_value == 0 || s.st_size == 0 || ELF64_ST_TYPE(s.st_info) != STT_FUNC) continue;
        const char* name = strtab + s.st_name;
        int which = !strcmp(name, "_Znwm") ? 0 : !strcmp(name, "_Znam") ? 1 : -1;
        if (which < 0 || g_new[which].lo.load(std::memory_order_relaxed) == info->dlpi_addr + s.st_value) continue;
        g_new[which].len.store(0, std::memory_order_relaxed);
        g_new[which].k.store(kUncalibrated, std::memory_order_relaxed);
        g_new[which].lo.store(info->dlpi_addr + s.st_value, std::memory_order_relaxed);
        g_new[which].len.store(s.st_size, std::memory_order_release);
    }
}

struct ScanCtx {
    ThreadWriter** w;
    uint64_t ts;
};

bool known(uintptr_t lo) {
    uint32_t n = g_module_count.load(std::memory_order_acquire);
    for (uint32_t i = 0; i < n; ++i)
        if (g_modules[i].lo == lo) return true;
    return false;
}

int on_module(struct dl_phdr_info* info, size_t, void* arg) {
    auto* ctx = static_cast<ScanCtx*>(arg);
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int i = 0; i < info->dlpi_phnum; ++i) {
        const ElfW(Phdr)& ph = info->dlpi_phdr[i];
        if (ph.p_type != PT_LOAD) continue;
        uintptr_t a = info->dlpi_addr + ph.p_vaddr, b = a + ph.p_memsz;
        if (a < lo) lo = a;
        if (b > hi) hi = b;
    }
    if (hi == 0 || known(lo)) return 0;
    uint32_t n = g_module_count.load(std::memory_order_relaxed);
    if (n >= kMaxModules) return 1;
    const char* name = info->dlpi_name;
    char exe[1024];
    if (!name || !*name) {
        ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        exe[len > 0 ? len : 0] = 0;
        name = exe;
    }
    {
        const char* base = strrchr(name, '/');
        base = base ? base + 1 : name;
        if (strncmp(base, "libstdc++.so", 12) == 0) find_operator_new(info);
    }
    g_modules[n] = Module{lo, hi, is_tool_name(name)};
    g_module_count.store(n + 1, std::memory_order_release);
    ThreadWriter*& w = *ctx->w;
    if (!w) return 0;
    uint64_t path_id = intern(w, name, strlen(name));
    ThreadWriter* ww = writer_for(1 + 40);
    if (!ww) return 0;
    w = ww;
    uint64_t ts = stamp(w);
    uint8_t* p = w->cur;
    *p++ = capture::kModule;
    p = capture::put_varint(p, ts - w->last_ts);
    w->last_ts = ts;
    p = capture::put_varint(p, info->dlpi_addr);
    p = capture::put_varint(p, hi - info->dlpi_addr);
    p = capture::put_varint(p, path_id);
    commit(w, p);
    return 0;
}

// Reports modules not reported yet. Never waits: another thread scanning
// reports them.
void scan_modules(ThreadWriter*& w) {
    if (g_scan_lock.test_and_set(std::memory_order_acquire)) return;
    ScanCtx ctx{&w, 0};
    dl_iterate_phdr(on_module, &ctx);
    g_scan_lock.clear(std::memory_order_release);
}

bool in_module(uintptr_t a, bool* tool) {
    uint32_t n = g_module_count.load(std::memory_order_acquire);
    for (uint32_t i = 0; i < n; ++i) {
        if (a >= g_modules[i].lo && a < g_modules[i].hi) {
            if (tool) *tool = g_modules[i].tool;
            return true;
        }
    }
    return false;
}

// The calling thread's stack, for bounding the frame-pointer walk.
void stack_bounds(ThreadWriter* w) {
    if (w->stack_hi) return;
    pthread_attr_t attr;
    void* addr = nullptr;
    size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        pthread_attr_getstack(&attr, &addr, &size);
        pthread_attr_destroy(&attr);
    }
    w->stack_lo = reinterpret_cast<uintptr_t>(addr);
    w->stack_hi = reinterpret_cast<uintptr_t>(addr) + size;
    if (!w->stack_hi) w->stack_hi = 1;  // unknown: always use unwind tables
}

// x86-64's lower half (47-bit user space): a return address at or above it
// is not one.
constexpr uintptr_t kUserSpaceEnd = uintptr_t{1} << 47;

// Returns false when the chain is broken before its end (no frame pointers).
__attribute__((noinline)) bool fp_walk(ThreadWriter* w, uint64_t* out, uint32_t max, uint32_t& n) {
    uintptr_t fp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
    uintptr_t lo = w->stack_lo, hi = w->stack_hi;
    if (fp < lo || fp >= hi) return false;
    n = 0;
    while (n < max) {
        if (fp < lo || fp + 16 > hi || (fp & 7)) return false;
        const uintptr_t* f = reinterpret_cast<const uintptr_t*>(fp);
        uintptr_t next = f[0], ret = f[1];
        if (ret < 4096) return next == 0;
        // Not a user-space address: %rbp held data here, in code built
        // without frame pointers (text on the stack read as a return
        // address). The words beyond are no frames either.
        if (ret >= kUserSpaceEnd) return false;
        out[n++] = ret;
        if (next == 0) return true;  // outermost frame
        if (next <= fp) return false;
        fp = next;
    }
    return true;
}

// The process-wide table behind shared_find: open addressing over a fixed
// array (static, never the hooked heap), a few probes. A slot's key is the
// hash (set once); its value is (generation << 40 | id), id 0 while the
// claiming thread writes the definition. A value of another channel
// generation (the stream was reopened after fork) is stale: reclaimed.
constexpr uint32_t kSharedSlots = 1u << 17;
constexpr uint32_t kSharedProbes = 16;
constexpr uint64_t kIdMask = (1ull << 40) - 1;
struct SharedSlot {
    std::atomic<uint64_t> key;
    std::atomic<uint64_t> value;
};
// One huge-page stretch (huge_stretch.h), made at the first stack: the hash
// spreads a run's few thousand stacks over every page of it, which as static
// 4 KiB pages took a fault each (~250 a torch run).
static_assert(sizeof(SharedSlot) * kSharedSlots == huge_stretch::kBytes, "the table fills its stretch");
std::atomic<SharedSlot*> g_shared{nullptr};

SharedSlot* shared_table() {
    SharedSlot* t = g_shared.load(std::memory_order_acquire);
    if (t) return t;
    // zeroed: every key 0
    return huge_stretch::publish(g_shared, static_cast<SharedSlot*>(huge_stretch::map()), huge_stretch::kBytes);
}

inline uint64_t gen_tag() { return static_cast<uint64_t>(g_generation.load(std::memory_order_relaxed) & 0xffffff) << 40; }

// Writes a kStack record (kind 0 = C addresses, 1 = Python string ids, 2 = C
// addresses of a start-up stack, 3 of a loader's block, 4 a block's
// allocator caller, capture_format.h) unless
// this stack is known in this stream already (any thread); returns the id.
uint64_t intern_stack(ThreadWriter*& w, uint8_t kind, const uint64_t* frames, uint32_t n) {
    if (n == 0) return 0;
    uint64_t hash = 1469598103934665603ull ^ kind;
    for (uint32_t i = 0; i < n; ++i) hash = (hash ^ frames[i]) * 1099511628211ull;
    hash = (hash ^ n) * 1099511628211ull;
    hash |= 1;
    uint32_t slot = static_cast<uint32_t>(hash >> 40) % ThreadWriter::kCacheSize;
    // Stacks share the string cache (ids come from the same counter).
    if (w->string_hash[slot] == hash) return w->string_id[slot];
    int64_t claim = -1;
    if (uint64_t known_id = shared_find(hash, claim)) {
        w->string_hash[slot] = hash;
        w->string_id[slot] = known_id;
        return known_id;
    }
    if (kind != 1) {
        // A new C stack: make sure the host can map its addresses.
        for (uint32_t i = 0; i < n; ++i) {
            if (!in_module(frames[i], nullptr)) {
                uint64_t now = now_ns(), last = g_last_scan_ns.load(std::memory_order_relaxed);
                if (now - last > 1000000 && g_last_scan_ns.compare_exchange_strong(last, now)) scan_modules(w);
                break;
            }
        }
    }
    size_t need = 1 + 10 * 3 + 10 * static_cast<size_t>(n);
    ThreadWriter* ww = writer_for(need);
    if (!ww) {
        shared_publish(claim, 0);
        return 0;
    }
    w = ww;
    uint64_t id = next_string_id();
    uint8_t* p = w->cur;
    *p++ = capture::kStack;
    p = capture::put_varint(p, id);
    p = capture::put_varint(p, kind);
    p = capture::put_varint(p, n);
    for (uint32_t i = 0; i < n; ++i) p = capture::put_varint(p, frames[i]);
    commit(w, p);
    shared_publish(claim, id);
    if (capture::CaptureHeader* h = channel_header()) h->stacks_defined.fetch_add(1, std::memory_order_relaxed);
    w->string_hash[slot] = hash;
    w->string_id[slot] = id;
    return id;
}

}  // namespace

uint64_t shared_find(uint64_t hash, int64_t& claim) {
    claim = -1;
    SharedSlot* table = shared_table();
    if (!table) return 0;  // no memory for it: each thread defines its own (still correct)
    const uint64_t tag = gen_tag();
    uint32_t start = static_cast<uint32_t>(hash >> 20);
    for (uint32_t i = 0; i < kSharedProbes; ++i) {
        uint32_t idx = (start + i) & (kSharedSlots - 1);
        SharedSlot& s = table[idx];
        uint64_t k = s.key.load(std::memory_order_acquire);
        if (k == 0) {
            if (!s.key.compare_exchange_strong(k, hash, std::memory_order_acq_rel) && k != hash) continue;
        } else if (k != hash) {
            continue;
        }
        // The slot is this hash's.
        for (int spin = 0; spin < 4096; ++spin) {
            uint64_t v = s.value.load(std::memory_order_acquire);
            if ((v & ~kIdMask) != tag) {
                // Stale (another stream) or never set: claim it.
                if (s.value.compare_exchange_strong(v, tag, std::memory_order_acq_rel)) {
                    claim = idx;
                    return 0;
                }
                continue;
            }
            if (v & kIdMask) return v & kIdMask;
            // Another thread is writing the definition: it is a few stores away.
            __builtin_ia32_pause();
        }
        return 0;  // not published in time: define it again (a second id, still correct)
    }
    return 0;  // the table is full around this hash
}

void shared_publish(int64_t claim, uint64_t id) {
    if (claim < 0) return;
    // id 0 gives the claim up (a value of generation 0 is stale for everyone).
    g_shared.load(std::memory_order_acquire)[claim].value.store(id ? (gen_tag() | (id & kIdMask)) : 0,
                                                                std::memory_order_release);
}

int unwind_mode() { return g_mode; }


void stacks_init() {
    const char* m = getenv("MSMEMSCOPE_UNWIND");
    if (m && !strcmp(m, "libgcc")) g_mode = 1;
    else if (m && !strcmp(m, "libunwind")) g_mode = 2;
    else g_mode = 0;
    if (!(m && !strcmp(m, "libgcc"))) {
        void* h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
        if (h) g_unw_backtrace = reinterpret_cast<unw_backtrace_fn>(dlsym(h, "unw_backtrace"));
    }
    if (g_mode == 2 && !g_unw_backtrace) g_mode = 1;
    // The stream changed (attach, or a child after fork): report everything
    // again into it.
    uint32_t gen = static_cast<uint32_t>(g_module_count.load());
    (void)gen;
    g_module_count.store(0);
    ThreadWriter* w = writer_for(64);
    scan_modules(w);
}

uint64_t capture_c_stack(ThreadWriter*& w, uint32_t depth, uint8_t kind) {
    uint64_t frames[kMaxFrames + 16];
    if (depth > kMaxFrames) depth = kMaxFrames;
    // Room for the agent's and the hook library's own frames, skipped below.
    uint32_t max = depth + 8, n = 0;
    bool ok = false;
    if (g_mode == 0) {
        stack_bounds(w);
        ok = fp_walk(w, frames, max, n);
        // A chain that ends before the user's code is as bad as a broken one.
        if (ok && n < 3) ok = false;
    }
    if (!ok) {
        n = 0;
        if (g_unw_backtrace && g_mode != 1) {
            int r = g_unw_backtrace(reinterpret_cast<void**>(frames), static_cast<int>(max));
            n = r > 0 ? static_cast<uint32_t>(r) : 0;
        } else {
            UnwindState s{frames, 0, max};
            _Unwind_Backtrace(on_frame, &s);
            n = s.n;
        }
    }
    // Drop the frames of the agent and of the hook libraries at the top.
    uint32_t first = 0;
    while (first < n) {
        bool tool = false;
        if (!in_module(frames[first], &tool) || !tool) break;
        ++first;
    }
    n -= first;
    if (n > depth) n = depth;
    return intern_stack(w, kind, frames + first, n);
}

namespace {

// The return addresses of up to `max` frames from here (the unwinder that
// capture_c_stack falls back on).
uint32_t unwind_frames(uint64_t* frames, uint32_t max) {
    if (g_unw_backtrace && g_mode != 1) {
        int r = g_unw_backtrace(reinterpret_cast<void**>(frames), static_cast<int>(max));
        return r > 0 ? static_cast<uint32_t>(r) : 0;
    }
    UnwindState s{frames, 0, max};
    _Unwind_Backtrace(on_frame, &s);
    return s.n;
}

// Where operator new's caller's return address is on the stack, learnt
// from the first block operator new allocates: one unwind (its frames are
// the truth) and a look at the words above the hooked call. kNoOffset when
// the unwind does not show operator new, or the words do not hold its caller.
int calibrate_new(NewRange& r, uint64_t ret, const uint64_t* caller_sp) {
    uint64_t frames[64];
    uint32_t n = unwind_frames(frames, 64);
    int k = kNoOffset;
    for (uint32_t j = 0; j + 1 < n; ++j) {
        if (frames[j] != ret) continue;
        for (int i = 0; i < kMaxOffset; ++i)
            if (caller_sp[i] == frames[j + 1]) {
                k = i;
                break;
            }
        break;
    }
    int expected = kUncalibrated;
    r.k.compare_exchange_strong(expected, k, std::memory_order_relaxed);
    return r.k.load(std::memory_order_relaxed);
}

}  // namespace

uint64_t capture_caller_stack(ThreadWriter*& w, uint64_t ret, const uint64_t* caller_sp) {
    uint64_t frames[2] = {ret, 0};
    uint32_t n = 1;
    for (NewRange& r : g_new) {
        uintptr_t len = r.len.load(std::memory_order_acquire);
        if (ret - r.lo.load(std::memory_order_relaxed) >= len) continue;
        int k = r.k.load(std::memory_order_relaxed);
        if (k == kUncalibrated && caller_sp) k = calibrate_new(r, ret, caller_sp);
        if (k >= 0 && caller_sp) frames[n++] = caller_sp[k];
        break;
    }
    if (n == w->caller_last_n && frames[0] == w->caller_last[0] && (n == 1 || frames[1] == w->caller_last[1]))
        return w->caller_last_id;
    // intern_stack may move to another writer (a fresh one has no memo).
    uint64_t id = intern_stack(w, 4, frames, n);
    if (id) {
        w->caller_last_n = n;
        w->caller_last[0] = frames[0];
        w->caller_last[1] = frames[1];
        w->caller_last_id = id;
    }
    return id;
}

namespace {

// A few words compared inline: a Python stack is 4-8 frames deep in a
// training loop, and libc's memcmp (a call, its size dispatch) showed in
// the program's profile on every allocation.
inline bool same_frames(const uint64_t* a, const uint64_t* b, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i)
        if (a[i] != b[i]) return false;
    return true;
}

// Interns frames[0..n) as this thread's Python stack, through its memo.
uint64_t intern_py_stack(ThreadWriter*& w, const uint64_t* frames, uint32_t n, uint64_t token) {
    if (n != 0 && n == w->py_last_n && same_frames(frames, w->py_last, n)) {
        w->py_last_token = token;  // the same values: either token names them
        return w->py_last_id;
    }
    // intern_stack may move to another writer (a fresh one has no memo).
    uint64_t id = intern_stack(w, 1, frames, n);
    if (id && n <= ThreadWriter::kPyLast) {
        memcpy(w->py_last, frames, n * sizeof(uint64_t));
        w->py_last_n = n;
        w->py_last_id = id;
        w->py_last_token = token;
    }
    return id;
}

}  // namespace

uint64_t capture_py_stack(ThreadWriter*& w, msms_stack_provider provider, uint32_t depth) {
    uint64_t frames[kMaxFrames];
    if (depth > kMaxFrames) depth = kMaxFrames;
    uint32_t n = provider(frames, depth);
    if (n > depth) n = depth;
    return intern_py_stack(w, frames, n, 0);
}

uint64_t capture_py_stack_named(ThreadWriter*& w, msms_stack_provider_named provider, uint32_t depth) {
    uint64_t frames[kMaxFrames];
    if (depth > kMaxFrames) depth = kMaxFrames;
    // The memo's token only while the memo holds an answer (its depth is
    // the process's: a new stream, whose options may differ, has new writers).
    uint64_t token = w->py_last_n ? w->py_last_token : 0;
    const uint64_t held = token;
    uint32_t n = provider(frames, depth, &token);
    if (n == MSMS_STACK_SAME) {
        if (held != 0 && token == held) return w->py_last_id;
        return 0;  // a provider that broke its contract: no stack rather than a wrong one
    }
    if (n > depth) n = depth;
    return intern_py_stack(w, frames, n, token);
}

}  // namespace msms::agent
