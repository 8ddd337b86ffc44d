// Attach to a running process: see attach.h. Links libc, libdl, pthread only;
// nothing here runs on the program's hot path.
#include "attach.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

#include <msmemscope/agent.h>

#include "channel.h"
#include "got_patch.h"

extern "C" int msms_agent_attach(const char* session_dir, const char* opts);
extern "C" void msms_agent_start(void);
extern "C" void msms_agent_stop(void);

namespace {

char g_dir[4096];
char g_py_start[8192];
// What the attach installed, one line per target library ("hooks NAME: N
// function(s)", "skipped NAME: why" or "failed NAME: why"), for the host
// (msms_agent_attach_report).
char g_report[4096];
size_t g_report_len = 0;

void report(const char* what, const char* name, const char* text) {
    int n = snprintf(g_report + g_report_len, sizeof(g_report) - g_report_len, "%s %s: %s\n", what, name, text);
    if (n > 0) g_report_len = std::min(sizeof(g_report) - 1, g_report_len + static_cast<size_t>(n));
}
uint64_t g_steps_limit = 0;
int g_host_pid = 0;  // msmemscope: when it is gone (killed), nobody reads the capture: detach
std::atomic<bool> g_attached{false};
std::atomic<bool> g_detach_wanted{false};
std::atomic<bool> g_detached{false};  // a detach has begun
std::atomic<bool> g_released{false};  // ... and the capture is let go
// The Python side: 0 none, 1 queued, 2 running its start, 3 started,
// 4 stopped (or never to start).
std::atomic<int> g_py_state{0};
std::atomic<bool> g_py_queued{false};

using py_initialized_fn = int (*)(void);
using py_pending_fn = int (*)(int (*)(void*), void*);
using py_run_fn = int (*)(const char*, void*);
py_pending_fn g_add_pending = nullptr;
py_run_fn g_run_string = nullptr;

void say(const char* text) {
    ssize_t r = write(2, text, strlen(text));
    (void)r;
}

void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, nullptr);
}

// A CPython interpreter that has finished starting: its pending-call queue
// runs our Python code on its main thread, with the GIL.
bool find_python() {
    auto initialized = reinterpret_cast<py_initialized_fn>(dlsym(RTLD_DEFAULT, "Py_IsInitialized"));
    g_add_pending = reinterpret_cast<py_pending_fn>(dlsym(RTLD_DEFAULT, "Py_AddPendingCall"));
    g_run_string = reinterpret_cast<py_run_fn>(dlsym(RTLD_DEFAULT, "PyRun_SimpleStringFlags"));
    return initialized && g_add_pending && g_run_string && initialized() == 1;
}

// The package's start and finish run on the program's main thread with the
// hooks off there: importing the package, joining the session, installing
// the collectors and the search for the tensors that exist (gc.get_objects():
// a list of every live object, ~800 KiB in a PyTorch process) are the
// profiler's work, not the program's memory at the line it was on. They
// were rows at "<string>(1): <lambda>" (MiBs, the run's HOST peak) and a
// leak site there. The rows they write on purpose (shadow rows, owners)
// are written all the same, as under start()'s HooksOff (bindings/_api.py).
struct HooksOffHere {
    msms::agent::Tls& t = msms::agent::tls();
    HooksOffHere() { ++t.depth; }
    ~HooksOffHere() { --t.depth; }
};

int py_start(void*) {
    int queued = 1;
    if (!g_py_state.compare_exchange_strong(queued, 2)) return 0;  // detached before it ran
    {
        HooksOffHere off;
        g_run_string(g_py_start, nullptr);  // errors are printed by Python (the package catches its own)
    }
    g_py_state.store(3);
    return 0;
}

int py_stop(void*) {
    {
        HooksOffHere off;
        g_run_string("__import__('msmemscope._attach', fromlist=['finish']).finish()\n", nullptr);
    }
    g_py_state.store(4);
    return 0;
}

bool add_pending(int (*fn)(void*)) {
    // The queue holds a few dozen calls; a full one empties at the next check.
    for (int i = 0; i < 200; ++i) {
        if (g_add_pending(fn, nullptr) == 0) return true;
        sleep_ms(10);
    }
    return false;
}

// The capture's mappings become anonymous memory (a write by a thread still
// inside a hook lands harmlessly) and its descriptors are closed: the host
// sees the writer's lock go, so the stream is complete, while the process
// goes on. (The Python package's release_capture, without the heap.)
void release_capture() {
    static char buf[1 << 16];
    static char line[8192];
    static uintptr_t ranges[4096][2];
    int nranges = 0;
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        size_t ll = 0;
        for (;;) {
            ssize_t n = read(fd, buf, sizeof(buf));
            if (n <= 0) break;
            for (ssize_t i = 0; i < n; ++i) {
                char c = buf[i];
                if (c != '\n') {
                    if (ll + 1 < sizeof(line)) line[ll++] = c;
                    continue;
                }
                line[ll] = 0;
                ll = 0;
                if (!strstr(line, g_dir) || !strstr(line, ".msmcap") || nranges >= 4096) continue;
                unsigned long a = 0, b = 0;
                if (sscanf(line, "%lx-%lx", &a, &b) == 2) {
                    ranges[nranges][0] = a;
                    ranges[nranges][1] = b;
                    ++nranges;
                }
            }
        }
        close(fd);
    }
    for (int i = 0; i < nranges; ++i)
        mmap(reinterpret_cast<void*>(ranges[i][0]), ranges[i][1] - ranges[i][0], PROT_READ | PROT_WRITE,
             MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    int dfd = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return;
    size_t dlen = strlen(g_dir);
    alignas(8) static char ents[8192];
    for (;;) {
        long n = syscall(SYS_getdents64, dfd, ents, sizeof(ents));
        if (n <= 0) break;
        for (long off = 0; off < n;) {
            struct linux_dirent64 {
                uint64_t d_ino;
                int64_t d_off;
                unsigned short d_reclen;
                unsigned char d_type;
                char d_name[];
            };
            auto* e = reinterpret_cast<linux_dirent64*>(ents + off);
            off += e->d_reclen;
            if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
            char target[4200];
            ssize_t t = readlinkat(dfd, e->d_name, target, sizeof(target) - 1);
            if (t <= 0) continue;
            target[t] = 0;
            if (strncmp(target, g_dir, dlen) == 0 && target[dlen] == '/' && strstr(target, ".msmcap")) {
                int num = atoi(e->d_name);
                if (num != dfd) close(num);
            }
        }
    }
    close(dfd);
}

// Whoever did not begin the detach waits until the one who did has let
// the capture go. The host's gdb call (msms_agent_attach_detach_now) must
// not return early: the agent's thread may be half-way through its own
// detach of a process that was stopped (SIGSTOP), and gdb's detach stops
// the process again, that thread with it, the capture still locked: the
// host then gave up on the outputs after 41 s (test_attach.py's detach
// test, under load). The wait ends: the other detach waits at most ~10 s
// for Python, and every thread runs while gdb's call does.
void wait_until_released() {
    while (!g_released.load()) sleep_ms(1);
}

void detach() {
    if (g_detached.exchange(true)) {
        wait_until_released();
        return;
    }
    // The Python collectors first (their last rows still go in).
    int queued = 1;
    if (!g_py_state.compare_exchange_strong(queued, 4)) {
        for (int i = 0; i < 500 && g_py_state.load() == 2; ++i) sleep_ms(10);
        if (g_py_state.load() == 3 && add_pending(py_stop))
            for (int i = 0; i < 500 && g_py_state.load() == 3; ++i) sleep_ms(10);
    }
    msms::agent::end_stream_detached();
    release_capture();
    g_released.store(true);
}

void* watcher(void*) {
    ++msms::agent::tls().depth;  // nothing this thread does is the program's
    if (g_py_state.load() == 1 && !g_py_queued.load() && !add_pending(py_start)) {
        g_py_state.store(4);
        say("msmemscope: warning: the Python interpreter took no pending call; Python-side collectors not "
            "started\n");
    }
    char path[4200];
    snprintf(path, sizeof(path), "%s/detach.%d", g_dir, static_cast<int>(getpid()));
    while (!g_detached.load()) {
        if (g_detach_wanted.load() || access(path, F_OK) == 0 ||
            (g_host_pid > 0 && kill(g_host_pid, 0) != 0 && errno == ESRCH)) {
            detach();
            break;
        }
        sleep_ms(20);
    }
    return nullptr;
}

}  // namespace

namespace msms::agent {
bool attach_step_allowed() { return !g_detach_wanted.load(std::memory_order_relaxed) && !g_detached.load(); }

void attach_step_done(uint64_t n) {
    if (!g_attached.load(std::memory_order_relaxed) || g_steps_limit == 0 || n < g_steps_limit) return;
    // This step's mark is the last row: nothing of the next step goes in.
    msms_agent_stop();
    g_detach_wanted.store(true);
}
}  // namespace msms::agent

extern "C" {

__attribute__((visibility("default"))) int msms_agent_attach_running(const char* dir, const char* opts,
                                                                     const char* libs, const char* pypath,
                                                                     uint64_t steps, int host_pid) {
    if (!dir || !*dir || strlen(dir) >= sizeof(g_dir)) return EINVAL;
    if (g_attached.load()) return EALREADY;
    msms::agent::Tls& t = msms::agent::tls();
    ++t.depth;
    int rc = msms_agent_attach(dir, opts);
    if (rc != 0) {
        --t.depth;
        return rc;
    }
    snprintf(g_dir, sizeof(g_dir), "%s", dir);
    g_steps_limit = steps;
    g_host_pid = host_pid;
    // Each collector's target library, as the Python package installs them
    // (GOT slots of every loaded object, and of those loaded later): the host
    // heap hooks by their fixed names; the device runtimes' hooks (hal, cuda,
    // kernel_launch) and third-party collectors' by the functions they
    // export. The mstx tool is not loaded (below).
    for (const char* p = libs ? libs : ""; *p;) {
        const char* e = strchr(p, '\n');
        size_t len = e ? static_cast<size_t>(e - p) : strlen(p);
        char lib[4096];
        if (len < sizeof(lib)) {
            memcpy(lib, p, len);
            lib[len] = 0;
            const char* base = strrchr(lib, '/');
            base = base ? base + 1 : lib;
            if (strstr(base, "mstx_hook")) {
                // Not loaded: its constructor's setenv(MSTX_INJECTION_PATH)
                // while the program's threads run aborted 3 of 15 attaches
                // to a program with four threads in malloc (test_attach.py).
                report("skipped", base, "mstx marks are not recorded after an attach");
            } else if (!strstr(base, "host_heap")) {
                char names[2048], why[512] = {0};
                int n = msms_agent_got_install_library(lib, "_msmemscope", names, sizeof(names), why, sizeof(why));
                char text[600];
                if (n < 0) report("failed", base, why[0] ? why : strerror(-n));
                else {
                    snprintf(text, sizeof(text), "%d function(s)", n);
                    report("hooks", base, text);
                }
            } else {
                void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
                if (!h) {
                    report("failed", base, "cannot be loaded");
                } else {
                    // (dlsym: a lookup in libc's own handle gets the hooks)
                    static const char* names[] = {"malloc", "free", "calloc", "realloc", "reallocarray",
                                                  "posix_memalign", "aligned_alloc", "memalign", "valloc",
                                                  "pvalloc", "dlsym"};
                    msms_got_hook hooks[11];
                    uint32_t n = 0;
                    for (const char* name : names)
                        if (void* f = dlsym(h, name)) hooks[n++] = {name, f, nullptr};
                    char skip[4200];
                    snprintf(skip, sizeof(skip), "_msmemscope\n%s", base);
                    int rc = msms_agent_got_install(nullptr, hooks, n, skip);
                    if (rc < 0) report("failed", base, strerror(-rc));
                    else report("hooks", base, "the malloc family");
                }
            }
        }
        p += len;
        if (*p == '\n') ++p;
    }
    bool python = find_python();
    if (python && pypath && *pypath) {
        // One statement, no name left in __main__; the package catches and
        // reports its own errors.
        int n = snprintf(g_py_start, sizeof(g_py_start),
                         "(lambda s, p: (p in s.path or s.path.insert(0, p), "
                         "__import__('msmemscope._attach', fromlist=['run']).run()))(__import__('sys'), %s%s%s)\n",
                         "r'''", pypath, "'''");
        if (n > 0 && static_cast<size_t>(n) < sizeof(g_py_start) && !strstr(pypath, "'''")) g_py_state.store(1);
    }
    msms_agent_start();
    g_attached.store(true);
    // Queued now, before gdb lets the process go: the main thread runs it at
    // its next check between bytecodes, before any later line of the
    // program. (Py_AddPendingCall needs no GIL; this thread is at the entry
    // of the malloc family, holding no lock of the interpreter's.)
    if (g_py_state.load() == 1 && g_add_pending(py_start, nullptr) == 0) g_py_queued.store(true);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);  // the thread takes none of the program's signals
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    rc = pthread_create(&th, &attr, watcher, nullptr);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (rc == 0) pthread_setname_np(th, "msmemscope");
    else say("msmemscope: warning: the agent's thread did not start; detach needs the host's second call\n");
    --t.depth;
    return 0;
}

// What msms_agent_attach_running installed (see report()); gdb prints it.
__attribute__((visibility("default"))) const char* msms_agent_attach_report(void) { return g_report; }

__attribute__((visibility("default"))) void msms_agent_attach_detach_now(void) {
    msms::agent::Tls& t = msms::agent::tls();
    ++t.depth;
    detach();
    --t.depth;
}

}  // extern "C"
