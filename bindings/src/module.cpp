// _msmemscope: the native half of the Python package.
//
//  - the agent: loaded into this process (or found preloaded), attached to
//    a session, driven (start/stop/step/events);
//  - hooks without LD_PRELOAD: the host_heap collector's hooks installed by
//    GOT patching (framework/agent/got_patch.h), and PyTorch's CPU allocator
//    (c10::alloc_cpu -> posix_memalign, c10::free_cpu -> free in libc10)
//    reported as the framework pool (MALLOC/FREE PTA);
//  - Python trace: py_trace.cpp; the agent's entries: agent_api.cpp.
#include <Python.h>
#include <frameobject.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <msmemscope/abi.h>

#include "agent_api.h"
#include "hooks_off.h"
#include "py_frames.h"
#include "py_trace.h"
#include "util/addr_map.h"
#include "util/file_trust.h"
#include "util/spin_lock.h"
#include "util/text.h"

namespace py = pybind11;
namespace fs = std::filesystem;

using namespace msms_py;

namespace {

// ---------------------------------------------------------------- heap hooks
void* g_hook_handle = nullptr;

int install_heap_hooks(const std::string& hook_library, const std::string& skip) {
    need_agent();
    if (!g_agent.got_install) throw std::runtime_error("the msmemscope agent has no GOT patcher");
    if (g_hook_handle) return 0;
    // RTLD_LOCAL: the hooks must not become the process's malloc for symbol
    // lookups; only the GOT slots we patch call them.
    if (std::string why = msms::untrusted_reason(hook_library); !why.empty())
        throw std::runtime_error("the heap hook library " + hook_library + " is refused: " + why);
    void* h = dlopen(hook_library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) throw std::runtime_error(std::string("cannot load ") + hook_library + ": " + dlerror());
    // (dlsym: a lookup in libc's own handle, ctypes.CDLL("libc.so.6"),
    // gets the hooks: plugins/collectors/host_heap/hooks.cpp)
    static const char* names[] = {"malloc", "free", "calloc", "realloc", "reallocarray", "posix_memalign",
                                  "aligned_alloc", "memalign", "valloc", "pvalloc", "dlsym"};
    std::vector<GotHook> hooks;
    for (const char* n : names) {
        void* f = dlsym(h, n);
        if (f) hooks.push_back({n, f, nullptr});
    }
    g_hook_handle = h;
    std::string skip_all = skip + "\n" + fs::path(hook_library).filename().string();
    return g_agent.got_install(nullptr, hooks.data(), static_cast<uint32_t>(hooks.size()), skip_all.c_str());
}

// ---------------------------------------------------------------- third-party collectors
// A collector's target-side library (its hooks), loaded into a process that
// runs without the CLI (issue #29 item 7): under the CLI it is preloaded and
// its exported functions interpose the pool's; here the agent loads it and
// puts each function it exports in the GOT slots of that name in every
// loaded object, and of objects loaded later (msms_agent_got_install_library,
// which --attach uses too). The hook finds the pool's own function with
// msmemscope::next_definition() (msmemscope/hook_next.hpp), as
// dlsym(RTLD_NEXT) finds nothing for a library loaded this way.
// Returns the names it interposes (may be empty: then nothing was loaded).
std::vector<std::string> install_collector_library(const std::string& library, const std::string& skip) {
    need_agent();
    if (!g_agent.got_install_library) throw std::runtime_error("the msmemscope agent cannot load collector libraries");
    if (std::string why = msms::untrusted_reason(library); !why.empty())
        throw std::runtime_error("the collector library " + library + " is refused: " + why);
    char names[4096], error[512] = {0};
    int rc = g_agent.got_install_library(library.c_str(), skip.c_str(), names, sizeof(names), error, sizeof(error));
    if (rc < 0) throw std::runtime_error(error[0] ? error : strerror(-rc));
    std::vector<std::string> out;
    for (const char* p = names; rc > 0 && *p;) {
        const char* nl = strchr(p, '\n');
        out.emplace_back(p, nl ? static_cast<size_t>(nl - p) : strlen(p));
        p = nl ? nl + 1 : p + strlen(p);
    }
    return out;
}

// ---------------------------------------------------------------- mstx tool
// The mstx collector's tool library (libmsms_mstx_hook.so), loaded into a
// process that runs without the CLI: mstx finds its tool through
// MSTX_INJECTION_PATH, which the library's constructor sets to its own path
// (as when the CLI preloads it). Nothing is patched: mstx calls the tool's
// functions once it has loaded it, at its next call (sdk/mstx retries a
// library that found no tool when the variable changes).
void* g_mstx_handle = nullptr;

std::string install_mstx_tool(const std::string& library) {
    need_agent();
    if (g_mstx_handle) return library;
    if (std::string why = msms::untrusted_reason(library); !why.empty())
        throw std::runtime_error("the mstx tool library " + library + " is refused: " + why);
    void* h = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) throw std::runtime_error(std::string("cannot load ") + library + ": " + dlerror());
    if (!dlsym(h, "InitInjectionMstx")) {
        dlclose(h);
        throw std::runtime_error(library + " is no mstx tool (no InitInjectionMstx)");
    }
    g_mstx_handle = h;
    const char* env = getenv("MSTX_INJECTION_PATH");
    return env ? env : "";
}

// ---------------------------------------------------------------- PTA (torch CPU allocator)
using posix_memalign_fn = int (*)(void**, size_t, size_t);
using free_fn = void (*)(void*);
posix_memalign_fn g_prev_posix_memalign = nullptr;
free_fn g_prev_free = nullptr;
std::atomic<bool> g_pta_on{false};
// The pool's table and figures below (util/spin_lock.h; held across fork by
// the atfork handlers that install_torch_hooks registers).
msms::SpinLock g_pta_mu;
// Every live block of the pool since the hooks went in, and whether the
// host was told of it (its MALLOC, or a shadow MALLOC: shadow.h).
struct PtaBlock {
    uint64_t size;
    bool reported;
};
// By address: open addressing (util/addr_map.h), no node allocated per
// block; std::unordered_map's lookups were ~0.5% of a PyTorch loop.
msms::AddrMap<PtaBlock>* g_pta_live = nullptr;
// Reported blocks freed while collection was off: shadow FREEs at the next start.
std::vector<uint64_t>* g_pta_unseen_frees = nullptr;
int64_t g_pta_used = 0, g_pta_peak = 0;

// Per-thread context that decides the owner of a new block.
thread_local int t_op_depth = 0;
thread_local char t_owner_label[256];

// The C++ operator observer (_torch_observer) keeps the depth through these
// (capsule "msmemscope.op_depth").
struct OpDepthApi {
    void (*enter)();
    void (*exit)();
};
void op_depth_enter() {
    if (t_op_depth++ == 0) msms_py::frames_op_enter();
}
void op_depth_exit() {
    if (t_op_depth > 0 && --t_op_depth == 0) msms_py::frames_op_exit();
}
OpDepthApi g_op_depth_api{&op_depth_enter, &op_depth_exit};

// Attr text is assembled with memcpy, not snprintf: each tensor's MALLOC
// makes one (a training step makes thousands), and glibc's printf
// machinery showed in the program's profile.
// Appends s at p, cut to leave room for the terminator before end.
char* put_attr_text(char* p, char* end, const char* s) {
    size_t n = strlen(s);
    if (n > static_cast<size_t>(end - p) - 1) n = static_cast<size_t>(end - p) - 1;
    memcpy(p, s, n);
    return p + n;
}
// The pool's bytes after a MALLOC or FREE go in the record's aux1 as
// total + 1 (framework/common/capture_format.h; the host makes them the
// row's `total`), not in its Attr text: the text is interned, and a running
// total made a new string for nearly every row (~1,500 a training step).
uint64_t total_aux(uint64_t total) { return total + 1; }

void owner_attr(char* buf, size_t n) {
    const char* owner = nullptr;
    // Inside Optimizer.step() too: a block is optimizer_state once it is
    // reachable from the optimizer (the tag after step(), _torch.py); what
    // step() allocates and drops (Adam's denominators, record_function's
    // handles) is not (COMPAT §6), and it counted in that owner's peak.
    if (t_owner_label[0]) owner = t_owner_label;
    else if (t_op_depth > 0) owner = "ops@aten";
    char* end = buf + n;
    char* p = put_attr_text(buf, end, owner ? "owner:PTA@" : "owner:PTA");
    if (owner) p = put_attr_text(p, end, owner);
    *p = '\0';
}

// A new block of the pool (a storage allocated or mapped): its entry in the
// table (reported: the host hears of it now) and the pool's figures;
// returns the pool's bytes after it.
uint64_t pta_add(uint64_t ptr, uint64_t n, bool reported) {
    std::lock_guard<msms::SpinLock> lock(g_pta_mu);
    (*g_pta_live)[ptr] = PtaBlock{n, reported};
    g_pta_used += static_cast<int64_t>(n);
    if (g_pta_used > g_pta_peak) g_pta_peak = g_pta_used;
    return static_cast<uint64_t>(g_pta_used);
}

// Its MALLOC row; the caller entered the agent (pta_add's `reported`).
void pta_malloc_row(uint64_t ptr, uint64_t n, uint64_t total, const char* attrs) {
    g_agent.event(MSMS_EV_MALLOC, MSMS_T_PTA, MSMS_DEV_CPU, -1, ptr, n, 0, total_aux(total), nullptr, attrs);
    g_agent.leave();
}

// A block of the pool going away (freed or unmapped; called before the real
// call: the address may be given out again by another thread as soon as it
// returns). A block the host never heard of is not written (it would pair
// with nothing); one it knows, gone while collection is off, gets a shadow
// FREE at the next start.
void pta_gone(uint64_t ptr) {
    bool known = false, reported = false;
    uint64_t total = 0;
    {
        std::lock_guard<msms::SpinLock> lock(g_pta_mu);
        auto it = g_pta_live->find(ptr);
        if (it != g_pta_live->end()) {
            g_pta_used -= static_cast<int64_t>(it->second.size);
            total = static_cast<uint64_t>(g_pta_used);
            reported = it->second.reported;
            g_pta_live->erase(it);
            known = true;
        }
    }
    if (!known || !reported) return;
    if (g_agent.enter()) {
        g_agent.event(MSMS_EV_FREE, MSMS_T_PTA, MSMS_DEV_CPU, -1, ptr, 0, 0, total_aux(total), nullptr, nullptr);
        g_agent.leave();
    } else {
        std::lock_guard<msms::SpinLock> lock(g_pta_mu);
        g_pta_unseen_frees->push_back(ptr);
    }
}

int pta_posix_memalign(void** out, size_t align, size_t n) {
    int rc = g_prev_posix_memalign(out, align, n);
    if (rc != 0 || !g_pta_on.load(std::memory_order_relaxed)) return rc;
    bool on = g_agent.enter();
    uint64_t total = pta_add(reinterpret_cast<uint64_t>(*out), n, on);
    if (on) {
        char attrs[300];
        owner_attr(attrs, sizeof(attrs));
        pta_malloc_row(reinterpret_cast<uint64_t>(*out), n, total, attrs);
    }
    return rc;
}

void pta_free(void* p) {
    if (p && g_pta_live) pta_gone(reinterpret_cast<uint64_t>(p));
    g_prev_free(p);
}

// Shared-memory and mapped storages (issue #27 item 5): what torch maps
// instead of allocating (at::MapAllocator in libtorch_cpu: DataLoader
// batches made by `_new_shared` in a worker and rebuilt from a descriptor in
// the process that receives them, `share_memory_()`, `from_file`) never
// passes c10's allocator. Its mmap/munmap calls are hooked in that library
// (GOT) and reported as the same framework pool: MALLOC/FREE PTA with the
// mapping's size, owner PTA@shared_memory (MAP_SHARED) or PTA@mapped_file
// (MAP_PRIVATE) unless the user's describer label is in force, and the
// mapping kind in Attr `mapped`. Each mapping is one block of the process
// that made it, so a storage mapped in two processes is a block in each, and
// one mapped once (torch's shared_cache rebuilds a received storage once per
// process) is one. Only writable, non-executable mappings of a descriptor
// count (MapAllocator always maps a descriptor read-write; JIT code buffers
// are PROT_EXEC or anonymous, a file read through mmap is read-only).
using mmap_fn = void* (*)(void*, size_t, int, int, int, off_t);
using munmap_fn = int (*)(void*, size_t);
mmap_fn g_prev_mmap = nullptr;
mmap_fn g_prev_mmap64 = nullptr;
munmap_fn g_prev_munmap = nullptr;

void* pta_mapped(void* p, size_t n, int prot, int flags, int fd) {
    if (p == MAP_FAILED || fd < 0 || n == 0 || (prot & PROT_EXEC) || !(prot & PROT_WRITE) || !g_pta_live ||
        !g_pta_on.load(std::memory_order_relaxed))
        return p;
    bool on = g_agent.enter();
    uint64_t total = pta_add(reinterpret_cast<uint64_t>(p), n, on);
    if (on) {
        const bool shared = (flags & MAP_SHARED) != 0;
        char attrs[320];
        snprintf(attrs, sizeof(attrs), "owner:PTA@%s,mapped:%s",
                 t_owner_label[0] ? t_owner_label : shared ? "shared_memory" : "mapped_file",
                 shared ? "shared" : "private");
        pta_malloc_row(reinterpret_cast<uint64_t>(p), n, total, attrs);
    }
    return p;
}

void* pta_mmap(void* addr, size_t n, int prot, int flags, int fd, off_t off) {
    return pta_mapped(g_prev_mmap(addr, n, prot, flags, fd, off), n, prot, flags, fd);
}

void* pta_mmap64(void* addr, size_t n, int prot, int flags, int fd, off_t off) {
    return pta_mapped(g_prev_mmap64(addr, n, prot, flags, fd, off), n, prot, flags, fd);
}

int pta_munmap(void* p, size_t n) {
    if (p && g_pta_live) pta_gone(reinterpret_cast<uint64_t>(p));
    return g_prev_munmap(p, n);
}

// At start() (collection on): the pool's blocks the host does not know get a
// MALLOC with shadow:true now (those allocated while collection was off, and
// `existing`: the storages of the tensors that exist, some allocated before
// the hooks went in), and blocks it knows that were freed meanwhile a FREE
// with shadow:true (framework/host/shadow.h). Returns how many rows.
// The pool's table learns `existing` (the storages of the tensors that
// exist: some allocated before the hooks went in), as blocks not written
// yet: their shadow MALLOCs come at the next start (pta_shadow_after_host,
// pta_shadow_sync). Needs the pool's hooks (install_torch_hooks).
void pta_note_existing_locked(const std::vector<std::pair<uint64_t, uint64_t>>& existing) {
    for (auto& [ptr, size] : existing)
        if (ptr && g_pta_live->emplace(ptr, PtaBlock{size, false}).second) {
            g_pta_used += static_cast<int64_t>(size);
            if (g_pta_used > g_pta_peak) g_pta_peak = g_pta_used;
        }
}

void pta_note_existing(const std::vector<std::pair<uint64_t, uint64_t>>& existing) {
    if (!g_pta_live) return;
    std::lock_guard<msms::SpinLock> lock(g_pta_mu);
    pta_note_existing_locked(existing);
}

size_t pta_shadow_sync(const std::vector<std::pair<uint64_t, uint64_t>>& existing) {
    if (!g_pta_live || !g_agent_loaded) return 0;
    std::vector<uint64_t> freed;
    std::vector<std::pair<uint64_t, uint64_t>> born;
    {
        std::lock_guard<msms::SpinLock> lock(g_pta_mu);
        pta_note_existing_locked(existing);
        freed.swap(*g_pta_unseen_frees);
        for (auto& [ptr, b] : *g_pta_live)
            if (!b.reported) {
                born.emplace_back(ptr, b.size);
                b.reported = true;
            }
    }
    if (!agent_collecting()) return 0;
    // (already off when the package's caller turned them off: start() looks
    // for the existing tensors with the hooks off, see _api.py)
    HooksOff hooks_off;
    for (uint64_t ptr : freed)
        g_agent.event(MSMS_EV_FREE, MSMS_T_PTA, MSMS_DEV_CPU, -1, ptr, 0, 0, 0, nullptr, "shadow:true");
    for (auto& [ptr, size] : born) g_agent.alloc(MSMS_T_PTA, MSMS_DEV_CPU, -1, ptr, size, 0, "shadow:true");
    return freed.size() + born.size();
}

// Collection starts: the agent has just written the shadow MALLOC of a host
// heap block allocated while collection was off (msms_agent_start). When a
// storage of the pool, also allocated while off, lies there, its shadow
// MALLOC comes next, as the live hooks write a storage right after the
// malloc it came from: the host then counts those bytes under PTA only (the
// host heap's peak counted a model built before start() twice, until
// pta_shadow_sync wrote it after the search for existing tensors).
void pta_shadow_after_host(uint64_t ptr) {
    if (!g_pta_live) return;
    uint64_t size = 0;
    {
        std::lock_guard<msms::SpinLock> lock(g_pta_mu);
        auto it = g_pta_live->find(ptr);
        if (it == g_pta_live->end() || it->second.reported) return;
        it->second.reported = true;
        size = it->second.size;
    }
    g_agent.alloc(MSMS_T_PTA, MSMS_DEV_CPU, -1, ptr, size, 0, "shadow:true");
}

int install_torch_hooks(const std::string& library) {
    need_agent();
    HooksOff hooks_off;  // the pool's tables
    if (!g_agent.got_install) throw std::runtime_error("the msmemscope agent has no GOT patcher");
    static bool installed = false;
    if (!g_pta_live) {
        g_pta_live = new msms::AddrMap<PtaBlock>();
        g_pta_unseen_frees = new std::vector<uint64_t>();
        // fork with no table update in progress; the child's lock is free
        pthread_atfork([] { g_pta_mu.lock(); }, [] { g_pta_mu.unlock(); }, [] { g_pta_mu.reset(); });
        using observer_fn = void (*)(void (*)(uint64_t));
        if (auto set = reinterpret_cast<observer_fn>(dlsym(RTLD_DEFAULT, "msms_agent_set_shadow_host_observer")))
            set(&pta_shadow_after_host);
    }
    g_pta_on = true;
    if (installed) return 0;
    installed = true;
    GotHook hooks[] = {{"posix_memalign", reinterpret_cast<void*>(&pta_posix_memalign),
                        reinterpret_cast<void**>(&g_prev_posix_memalign)},
                       {"free", reinterpret_cast<void*>(&pta_free), reinterpret_cast<void**>(&g_prev_free)}};
    return g_agent.got_install(library.c_str(), hooks, 2, nullptr);
}

// The mapping hooks above, in the library that holds at::MapAllocator
// (libtorch_cpu.so). Needs install_torch_hooks first (the pool's state).
int install_torch_map_hooks(const std::string& library) {
    need_agent();
    if (!g_agent.got_install) throw std::runtime_error("the msmemscope agent has no GOT patcher");
    if (!g_pta_live) throw std::runtime_error("install_torch_hooks first");
    static bool installed = false;
    if (installed) return 0;
    installed = true;
    GotHook hooks[] = {{"mmap", reinterpret_cast<void*>(&pta_mmap), reinterpret_cast<void**>(&g_prev_mmap)},
                       {"mmap64", reinterpret_cast<void*>(&pta_mmap64), reinterpret_cast<void**>(&g_prev_mmap64)},
                       {"munmap", reinterpret_cast<void*>(&pta_munmap), reinterpret_cast<void**>(&g_prev_munmap)}};
    return g_agent.got_install(library.c_str(), hooks, 3, nullptr);
}

// ---------------------------------------------------------------- release
// After msms_agent_detach() the stream is complete, but the host only knows
// it when the writer's flock on the capture file goes, i.e. when no
// descriptor and no mapping of it remains in this process (else at exit,
// too late for this process to wait for the host). Replaces the mappings
// with anonymous memory (a late write by another thread lands harmlessly)
// and closes the descriptors. Returns how many mappings were replaced.
int release_capture(const std::string& dir) {
    int replaced = 0;
    FILE* f = fopen("/proc/self/maps", "r");
    if (f) {
        char line[4096];
        std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
        while (fgets(line, sizeof(line), f)) {
            if (!strstr(line, dir.c_str()) || !strstr(line, ".msmcap")) continue;
            unsigned long a, b;
            if (sscanf(line, "%lx-%lx", &a, &b) == 2) ranges.emplace_back(a, b);
        }
        fclose(f);
        for (auto& [a, b] : ranges) {
            void* p = mmap(reinterpret_cast<void*>(a), b - a, PROT_READ | PROT_WRITE,
                           MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p != MAP_FAILED) ++replaced;
        }
    }
    for (auto& e : fs::directory_iterator("/proc/self/fd")) {
        std::error_code ec;
        auto target = fs::read_symlink(e.path(), ec);
        if (ec) continue;
        std::string t = target.string();
        if (t.rfind(dir + "/", 0) == 0 && t.find(".msmcap") != std::string::npos)
            close(atoi(e.path().filename().c_str()));
    }
    return replaced;
}

// ---------------------------------------------------------------- the session's end at exit()
// A Python API session ends when the process exits, with its exit status: the
// package's atexit handler only turns collection off (msms_agent_stop_at_exit:
// no Python code may run later), CPython finalizes and calls exit(status);
// the agent's on_exit handler (registered at attach) then ends the stream with
// that status, and this one, registered before the attach so that it runs
// after the agent's, does what the atexit handler did after ending the stream:
// releases the capture, ends the lifeline (the host's --parent-pid) and waits
// for the host to write every file, at most MSMEMSCOPE_STOP_WAIT_S seconds.
// No Python object is touched: the interpreter is gone by then.
struct EndAtExit {
    bool armed = false;
    pid_t pid = 0;  // the session's process (a forked child inherits the handler, not the session)
    std::string dir;
    double wait_s = 600;       // at most this long for the host (<= 0: no limit)
    std::string late_warning;  // said when it is longer
    int lifeline_fd = -1;  // our own copy of the lifeline's pipe: finalization closes Python's
    int python_fd = -1;    // Python's (still open after an exit() from C, with no finalization)
    dev_t pipe_dev = 0;    // the pipe, to know Python's descriptor from a later one of that number
    ino_t pipe_ino = 0;
    pid_t lifeline = 0, host = 0;
    std::string output;  // the output folder as config() named it (the words when the host was killed)
};
EndAtExit g_end;

// What the program is told when the host was killed before it wrote this
// process's files (nothing else would say it: the host cannot, and its files
// are missing or partial). The package's Session._wait_for_host says the same.
std::string host_killed_text(pid_t host, int sig, const std::string& output) {
    const char* abbrev = sigabbrev_np(sig);
    std::string name = abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
    return "msmemscope: error: the host process (pid " + std::to_string(host) + ") was killed by " + name +
           (sig == SIGKILL ? " (out of memory? the OOM killer sends SIGKILL)" : "") +
           " before it had written this process's files; the outputs in " + output + " are incomplete\n";
}

// The child's wait status, -1 when not known (reaped by someone else).
int reap(pid_t pid) {
    int st = 0;
    pid_t w;
    while ((w = waitpid(pid, &st, 0)) < 0 && errno == EINTR) {
    }
    return w == pid ? st : -1;
}

// Whether the child `pid` ended within `limit` seconds (<= 0: no limit); reaped
// then, its wait status in *status (-1: not known).
bool reap_within(pid_t pid, double limit, int* status) {
    *status = -1;
    if (limit <= 0) {
        *status = reap(pid);
        return true;
    }
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double deadline = now.tv_sec + now.tv_nsec / 1e9 + limit;
    int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    for (;;) {
        int st = 0;
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) *status = st;
        if (w == pid || (w < 0 && errno != EINTR)) break;  // ended (ECHILD: reaped by someone else)
        clock_gettime(CLOCK_MONOTONIC, &now);
        double left = deadline - (now.tv_sec + now.tv_nsec / 1e9);
        if (left <= 0) {
            if (fd >= 0) close(fd);
            return false;
        }
        if (fd >= 0) {  // readable when the process ends
            struct pollfd p = {fd, POLLIN, 0};
            poll(&p, 1, static_cast<int>(std::min(left * 1000 + 1, 3.6e6)));
        } else {  // no pidfd (kernel < 5.3): look again shortly
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, nullptr);
        }
    }
    if (fd >= 0) close(fd);
    return true;
}

void end_session_at_exit(int, void*) {
    if (!g_end.armed || getpid() != g_end.pid) return;
    g_end.armed = false;
    release_capture(g_end.dir);
    close(g_end.lifeline_fd);
    // exit() called from C (ctypes, an extension): no finalization closed
    // Python's end of the pipe, and the lifeline would wait for it.
    struct stat st;
    if (fstat(g_end.python_fd, &st) == 0 && st.st_dev == g_end.pipe_dev && st.st_ino == g_end.pipe_ino)
        close(g_end.python_fd);
    reap(g_end.lifeline);  // reaped, or the host would see it alive (a zombie) for ever
    int status = -1;
    if (!reap_within(g_end.host, g_end.wait_s, &status)) {
        ssize_t n = write(2, g_end.late_warning.data(), g_end.late_warning.size());
        (void)n;
    } else if (status != -1 && WIFSIGNALED(status)) {
        std::string text = host_killed_text(g_end.host, WTERMSIG(status), g_end.output);
        ssize_t n = write(2, text.data(), text.size());
        (void)n;
    }
}

// Registers end_session_at_exit (once): before the agent's attach, so that
// the agent's on_exit handler runs first. Returns false when the agent cannot
// leave the stream to exit() (an older agent): the atexit handler ends it.
// `wait_s` and `late_warning`: the package's (Session.stop_wait(): its one
// reading of MSMEMSCOPE_STOP_WAIT_S and its words when the host is late).
bool end_at_exit(const std::string& dir, int lifeline_fd, int lifeline_pid, int host_pid, double wait_s,
                 const std::string& late_warning, const std::string& output) {
    need_agent();
    if (!g_agent.stop_at_exit) return false;
    static bool registered = false;
    struct stat st;
    if (fstat(lifeline_fd, &st) != 0) return false;
    int fd = fcntl(lifeline_fd, F_DUPFD_CLOEXEC, 3);
    if (fd < 0) return false;
    if (!registered) {
        if (on_exit(end_session_at_exit, nullptr) != 0) {
            close(fd);
            return false;
        }
        registered = true;
    }
    if (g_end.lifeline_fd >= 0) close(g_end.lifeline_fd);
    g_end.dir = dir;
    g_end.wait_s = wait_s;
    g_end.late_warning = late_warning;
    g_end.output = output;
    g_end.lifeline_fd = fd;
    g_end.python_fd = lifeline_fd;
    g_end.pipe_dev = st.st_dev;
    g_end.pipe_ino = st.st_ino;
    g_end.lifeline = lifeline_pid;
    g_end.host = host_pid;
    g_end.pid = getpid();
    g_end.armed = true;
    return true;
}

// The session ended before exit (start() failed, or the process is about to
// die by a signal: an uncaught KeyboardInterrupt): nothing left for exit().
void end_at_exit_disarm() {
    g_end.armed = false;
    if (g_end.lifeline_fd >= 0) close(g_end.lifeline_fd);
    g_end.lifeline_fd = -1;
}

// ---------------------------------------------------------------- os._exit
// The agent's _exit/_Exit (its end record: "exited with code N (_exit)")
// interpose libc's only where it is preloaded (the CLI). Loaded by the
// package, it puts them in every loaded object's GOT slots, as it does the
// heap hooks: os._exit(N) is then known too. Returns the slots written.
int install_exit_hooks(const std::string& skip) {
    need_agent();
    if (!g_agent.got_install) return 0;
    static bool installed = false;
    if (installed) return 0;
    Dl_info info{};
    if (!dladdr(reinterpret_cast<void*>(g_agent.attach), &info) || !info.dli_fname) return 0;
    void* h = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    if (!h) return 0;
    std::vector<GotHook> hooks;
    for (const char* n : {"_exit", "_Exit"}) {
        void* f = dlsym(h, n);
        // (preloaded: its definition is already the process's)
        if (f && f != dlsym(RTLD_DEFAULT, n)) hooks.push_back({n, f, nullptr});
    }
    dlclose(h);
    installed = true;
    if (hooks.empty()) return 0;
    int rc = g_agent.got_install(nullptr, hooks.data(), static_cast<uint32_t>(hooks.size()), skip.c_str());
    return rc < 0 ? 0 : rc;
}

// ---------------------------------------------------------------- misc
uint64_t text_to_u64(const std::string& s) {
    unsigned long long v = 0;
    msms::parse_uint(s, v);
    return v;
}

// Copies "<Label>: <n> kB" lines of a /proc file into d[key] (in bytes).
void read_kb_fields(const char* path, std::initializer_list<std::pair<const char*, const char*>> fields,
                    py::dict& d) {
    FILE* f = fopen(path, "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof(line), f)) {
        for (auto& [label, key] : fields) {
            size_t n = strlen(label);
            unsigned long long kb;
            if (strncmp(line, label, n) == 0 && line[n] == ':' && sscanf(line + n + 1, " %llu kB", &kb) == 1) {
                d[key] = kb * 1024ull;
                break;
            }
        }
    }
    fclose(f);
}

py::dict memory_info() {
    py::dict d;
    read_kb_fields("/proc/meminfo", {{"MemTotal", "total"}, {"MemAvailable", "free"}}, d);
    read_kb_fields("/proc/self/status", {{"VmRSS", "rss"}, {"VmHWM", "peak_rss"}}, d);
    {
        std::lock_guard<msms::SpinLock> lock(g_pta_mu);
        d["pta_used"] = g_pta_used;
        d["pta_peak"] = g_pta_peak;
    }
    // Whether the figures above follow torch's CPU allocator: not before the
    // hooks go in (the first start()), so a snapshot then counts otherwise.
    d["pta_tracked"] = g_pta_on.load(std::memory_order_relaxed);
    return d;
}

}  // namespace

namespace {

// put_unrecorded(table, key, value): table[key] = value with the agent's
// hooks off, positional only and, like event(), a plain CPython function
// that allocates nothing of its own. The package's PyTorch hooks keep tables
// (msmemscope/_torch.py) that grow with the model and last until exit: made
// with the hooks on, a table's block named the program's line then running
// and was listed as its host memory still allocated at exit.
const char kPutUnrecordedDoc[] =
    "put_unrecorded(table, key, value)\n"
    "table[key] = value for a dict, with the agent's hooks off (positional arguments only).";

PyObject* put_unrecorded_fast(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyDict_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "put_unrecorded() takes a dict, a key and a value");
        return nullptr;
    }
    int rc;
    {
        HooksOff hooks_off;
        rc = PyDict_SetItem(args[0], args[1], args[2]);
    }
    if (rc != 0) return nullptr;
    Py_RETURN_NONE;
}

// event(kind, type, dev_kind, dev_id, ptr=0, size=0, aux0=0, aux1=0, name="", attrs=""),
// positional only: a plain CPython function, not a pybind11 one. The
// package's hooks call it for every tag and trace row of a step (a
// gradient's owner after backward()), and pybind11's call allocates its
// argument vectors and a std::string per str argument: rows of the
// profiler's own memory at the program's lines. Here nothing is allocated
// (an ASCII str's UTF-8 is its own buffer).
const char kEventDoc[] =
    "event(kind, type, dev_kind, dev_id, ptr=0, size=0, aux0=0, aux1=0, name='', attrs='')\n"
    "Writes one event (positional arguments only).";

PyObject* event_fast(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs < 4 || nargs > 10) {
        PyErr_Format(PyExc_TypeError, "event() takes from 4 to 10 positional arguments (%zd given)", nargs);
        return nullptr;
    }
    long small[4];
    for (int i = 0; i < 4; ++i) {
        small[i] = PyLong_AsLong(args[i]);
        if (small[i] == -1 && PyErr_Occurred()) return nullptr;
    }
    unsigned long long big[4] = {0, 0, 0, 0};
    for (Py_ssize_t i = 4; i < nargs && i < 8; ++i) {
        big[i - 4] = PyLong_AsUnsignedLongLong(args[i]);
        if (big[i - 4] == static_cast<unsigned long long>(-1) && PyErr_Occurred()) return nullptr;
    }
    const char* text[2] = {nullptr, nullptr};
    for (Py_ssize_t i = 8; i < nargs; ++i) {
        Py_ssize_t len = 0;
        const char* t = PyUnicode_AsUTF8AndSize(args[i], &len);
        if (!t) return nullptr;
        text[i - 8] = len ? t : nullptr;
    }
    if (!g_agent_loaded) {
        PyErr_SetString(PyExc_RuntimeError, "msmemscope: the agent is not loaded");
        return nullptr;
    }
    g_agent.event(static_cast<uint16_t>(small[0]), static_cast<uint16_t>(small[1]), static_cast<uint16_t>(small[2]),
                  static_cast<int16_t>(small[3]), big[0], big[1], big[2], big[3], text[0], text[1]);
    Py_RETURN_NONE;
}

void python_started() {
    using fn_t = void (*)();
    static const fn_t fn = reinterpret_cast<fn_t>(dlsym(RTLD_DEFAULT, "msms_agent_python_started"));
    if (fn) fn();
}

// Kept for the process's life (audit hooks cannot be removed): after its
// one use, a flag test per audit event.
int startup_audit_hook(const char* event, PyObject*, void*) {
    static bool done = false;
    if (!done && strncmp(event, "cpython.run_", 12) == 0) {
        done = true;
        python_started();
    }
    return 0;
}

}  // namespace

PYBIND11_MODULE(_msmemscope, m) {
    HooksOff hooks_off;  // pybind11's function records and internals: the package's memory
    // This thread's block of the extension's thread-locals (a dlopen'ed
    // module's: glibc allocates all of them, ~12 KiB, at the first access):
    // the package's memory, made now with the hooks off, not at the first
    // import scope, where without stacks it read as the program's leak.
    *static_cast<volatile int*>(&t_op_depth) = 0;
    m.doc() = "native half of the msmemscope package (not a public API)";
    m.def("load_agent", &load_agent, py::arg("path"));
    m.def("agent_loaded", [] { return g_agent_loaded; });
    // The host's trust check (util/file_trust.h): the package checks every
    // executable it runs with it (the host binary from MSMEMSCOPE_HOME, #29).
    m.def("untrusted_reason", [](const std::string& path) { return msms::untrusted_reason(path); }, py::arg("path"));
    m.def("attach", [](const std::string& dir, const std::string& opts) {
        need_agent();
        return g_agent.attach(dir.c_str(), opts.c_str());
    });
    m.def("attached", [] { return g_agent_loaded && g_agent.attached(); });
    // end_kind/end_code: how the process ends as far as the package can tell
    // (msms_agent_detach_ended: 1 = exit with end_code, 3 = signal end_code;
    // 0 = not known, the end record then says so).
    m.def(
        "detach",
        [](uint32_t end_kind, int32_t end_code) {
            if (!g_agent_loaded) return;
            if (g_agent.detach_ended) g_agent.detach_ended(end_kind, end_code);
            else g_agent.detach();
        },
        py::arg("end_kind") = 0, py::arg("end_code") = 0);
    // msmemscope.finish(): the stream ends as a detach's, the process goes on.
    m.def("detach_running", [] {
        if (!g_agent_loaded) return;
        if (g_agent.end_detached) g_agent.end_detached();
        else g_agent.detach();
    });
    // options: the agent's new options for this range and on (config()
    // between two ranges), attrs: START_TRACE's (both "" when unchanged).
    m.def(
        "start",
        [](const std::string& options, const std::string& attrs) {
            need_agent();
            if (options.empty() && attrs.empty()) return g_agent.start();
            if (!g_agent.start_with)
                throw std::runtime_error("msmemscope: the agent loaded in this process is older than this package: "
                                         "it cannot change the collection options between ranges");
            g_agent.start_with(options.empty() ? nullptr : options.c_str(), attrs.empty() ? nullptr : attrs.c_str());
        },
        py::arg("options") = std::string(), py::arg("attrs") = std::string());
    m.def("stop", [] {
        need_agent();
        g_agent.stop();
    });
    m.def("step", [] {
        need_agent();
        return g_agent.step();
    });
    // A STEP row with Attr attrs ("provisional:true"); again: the last
    // step's number once more (framework/host/provisional_step.h). None when
    // the agent is older than this package.
    m.def("step_with", [](const std::string& attrs, bool again) -> py::object {
        need_agent();
        if (!g_agent.step_with) return py::none();
        return py::int_(g_agent.step_with(attrs.c_str(), again ? 1 : 0));
    });
    m.def("collecting", [] { return g_agent_loaded && g_agent.collecting(); });
    // Whether the program marks its steps with mstx "step start" ranges
    // (then the optimizer's steps are not marked as well: _shared.auto_steps).
    m.def("mstx_steps_seen", [] { return g_agent_loaded && g_agent.mstx_steps_seen && g_agent.mstx_steps_seen(); });
    m.def("wants", [](const std::string& cls) { return g_agent_loaded && g_agent.wants(cls.c_str()); });
    m.def("option", [](const std::string& key) {
        need_agent();
        char buf[4096];
        g_agent.option(key.c_str(), buf, sizeof(buf));
        return std::string(buf);
    });
    // Host-heap import scopes (_boot.py); False: the agent has none.
    m.def("import_scopes", [] { return g_agent_loaded && g_agent.import_enter && g_agent.import_leave; });
    m.def("import_enter", [] {
        if (g_agent_loaded && g_agent.import_enter) g_agent.import_enter();
    });
    m.def("import_leave", [] {
        if (g_agent_loaded && g_agent.import_leave) g_agent.import_leave();
    });
    m.def("profile_pause", [] { return msms_py::profile_pause(); });
    m.def("profile_resume", [] { msms_py::profile_resume(); });
    m.def("import_finalizing", [] {
        if (g_agent_loaded && g_agent.import_finalizing) g_agent.import_finalizing();
    });
    // fn() with the agent's hooks off on this thread: the profiler's own
    // work in the program's process (_boot.py restoring the program's
    // environment: libc keeps every setenv string until exit).
    m.def("without_hooks", [](py::function fn) {
        HooksOff hooks_off;
        return fn();
    });
    // The interpreter's start-up (agent.h): over, or paused while the
    // program's own sitecustomize runs. The agent the CLI preloaded, whether
    // or not this process joined its session.
    m.def("python_started", [] { python_started(); });
    m.def("python_startup_paused", [](bool paused) {
        using fn_t = void (*)(int);
        static const fn_t fn = reinterpret_cast<fn_t>(dlsym(RTLD_DEFAULT, "msms_agent_python_startup_paused"));
        if (fn) fn(paused ? 1 : 0);
    });
    // The start-up ends where the program's first line runs: CPython raises
    // "cpython.run_file" (or _command, _module, _stdin, _interactivehook)
    // just before. After Py_RunMain's own set-up (what it copies then stays
    // live when the program ends by sys.exit). False: no hook.
    m.def("end_startup_at_program", [] { return PySys_AddAuditHook(&startup_audit_hook, nullptr) == 0; });
    m.def("now", [] {
        need_agent();
        return g_agent.now();
    });
    // Any event; recorded whenever a stream is open (callers decide).
    static PyMethodDef event_def = {"event", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&event_fast)),
                                    METH_FASTCALL, kEventDoc};
    m.add_object("event", py::reinterpret_steal<py::object>(PyCFunction_NewEx(&event_def, nullptr, m.attr("__name__").ptr())));
    static PyMethodDef put_def = {"put_unrecorded",
                                  reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&put_unrecorded_fast)),
                                  METH_FASTCALL, kPutUnrecordedDoc};
    m.add_object("put_unrecorded",
                 py::reinterpret_steal<py::object>(PyCFunction_NewEx(&put_def, nullptr, m.attr("__name__").ptr())));
    // Operator boundaries (the dispatch mode): also the owner context.
    // dev_kind/dev_id: the operator row's device (cpu; CUDA mode: the current device).
    m.def(
        "op_begin",
        [](const std::string& name, int dev_kind, int dev_id) {
            ++t_op_depth;
            if (g_agent_loaded && g_agent.collecting() && g_agent.wants("op_launch"))
                g_agent.event(MSMS_EV_OP_LAUNCH, MSMS_T_ATEN_START, static_cast<uint16_t>(dev_kind),
                              static_cast<int16_t>(dev_id), 0, 0, 0, 0, name.c_str(), nullptr);
        },
        py::arg("name"), py::arg("dev_kind") = static_cast<int>(MSMS_DEV_CPU), py::arg("dev_id") = -1);
    m.def(
        "op_end",
        [](const std::string& name, int dev_kind, int dev_id) {
            if (t_op_depth > 0) --t_op_depth;
            if (g_agent_loaded && g_agent.collecting() && g_agent.wants("op_launch"))
                g_agent.event(MSMS_EV_OP_LAUNCH, MSMS_T_ATEN_END, static_cast<uint16_t>(dev_kind),
                              static_cast<int16_t>(dev_id), 0, 0, 0, 0, name.c_str(), nullptr);
        },
        py::arg("name"), py::arg("dev_kind") = static_cast<int>(MSMS_DEV_CPU), py::arg("dev_id") = -1);
    m.attr("op_depth_api") = py::capsule(static_cast<void*>(&g_op_depth_api), "msmemscope.op_depth");
    m.def("set_owner_label", [](const std::string& label) {
        size_t n = std::min(label.size(), sizeof(t_owner_label) - 1);
        memcpy(t_owner_label, label.data(), n);
        t_owner_label[n] = 0;
    });
    m.def("install_heap_hooks", &install_heap_hooks, py::arg("hook_library"), py::arg("skip"));
    m.def("install_mstx_tool", &install_mstx_tool, py::arg("library"));
    m.def("install_collector_library", &install_collector_library, py::arg("library"), py::arg("skip"));
    m.def("install_torch_hooks", &install_torch_hooks, py::arg("library"));
    m.def("install_torch_map_hooks", &install_torch_map_hooks, py::arg("library"));
    m.def("torch_hooks_off", [] { g_pta_on = false; });
    m.def("pta_shadow_sync", &pta_shadow_sync, py::arg("existing"));
    m.def("pta_note_existing", &pta_note_existing, py::arg("existing"));
    m.def("profile_install", &profile_install, py::arg("emit"), py::arg("forced"), py::arg("skip_prefixes"));
    m.def("profile_stop_emit", &profile_stop_emit, py::arg("forced_only"));
    m.def("profile_install_thread", &profile_install_thread);
    m.def("oom_stacks_install", &oom_stacks_install, py::arg("skip_prefixes"));
    m.def("profile_function_needed", &msms_py::profile_function_needed, py::arg("emit"), py::arg("forced"));
    m.def("profile_uninstall", &profile_uninstall);
    m.def("profile_range_stop", &profile_range_stop);
    m.def("autograd_enter", &autograd_enter);
    m.def("autograd_exit", &autograd_exit);
    m.def("memory_info", &memory_info);
    m.def("release_capture", &release_capture, py::arg("dir"));
    m.def("end_at_exit", &end_at_exit, py::arg("dir"), py::arg("lifeline_fd"), py::arg("lifeline_pid"),
          py::arg("host_pid"), py::arg("wait_s"), py::arg("late_warning"), py::arg("output") = "");
    m.def("host_killed_text", &host_killed_text, py::arg("host"), py::arg("sig"), py::arg("output"));
    m.def("end_at_exit_disarm", &end_at_exit_disarm);
    m.def("stop_at_exit", [] { return g_agent_loaded && g_agent.stop_at_exit && g_agent.stop_at_exit() != 0; });
    m.def("install_exit_hooks", &install_exit_hooks, py::arg("skip"));
    m.def("parse_uint", &text_to_u64);
    m.attr("EV") = py::dict(py::arg("SYSTEM") = 0, py::arg("MALLOC") = 1, py::arg("FREE") = 2, py::arg("ACCESS") = 3,
                            py::arg("OP_LAUNCH") = 4, py::arg("KERNEL_LAUNCH") = 5, py::arg("MSTX") = 6,
                            py::arg("SNAPSHOT") = 7, py::arg("OOM_DETAIL") = 8, py::arg("PY_TRACE") = 9);
    m.attr("T") = py::dict(py::arg("NONE") = 0, py::arg("PTA") = 11, py::arg("READ") = 20, py::arg("WRITE") = 21,
                           py::arg("UNKNOWN") = 22, py::arg("ATEN_START") = 30, py::arg("ATEN_END") = 31,
                           py::arg("MARK") = 50, py::arg("SNAPSHOT") = 60, py::arg("PY_CALL") = 80,
                           py::arg("PY_RECORD_FUNCTION") = 81);
    m.attr("DEV") = py::dict(py::arg("NA") = 0, py::arg("CPU") = 1, py::arg("NPU") = 2, py::arg("CUDA") = 3);
}
