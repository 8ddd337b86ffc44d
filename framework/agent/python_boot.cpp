#include "python_boot.h"

#include <msmemscope/agent.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

namespace msms::agent {

bool is_python_interpreter() { return dlsym(RTLD_DEFAULT, "Py_BytesMain") != nullptr; }

namespace {
bool g_x_dev = false;  // -X dev on the command line (python_skips_boot)
}

char python_skips_boot() {
    static char buf[16384];  // the constructor's: single-threaded, no allocation
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = 0, r;
    while (n < static_cast<ssize_t>(sizeof(buf)) - 1 && (r = read(fd, buf + n, sizeof(buf) - 1 - n)) > 0) n += r;
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    const char* end = buf + n;
    const char* a = buf + strlen(buf) + 1;  // past argv[0]
    char skips = 0;
    while (a < end) {
        const char* next = a + strlen(a) + 1;
        if (a[0] != '-' || a[1] == 0 || strcmp(a, "--") == 0) return skips;  // the script, stdin, "--"
        if (a[1] == '-') {
            // long options; this one takes the next argument
            if (strcmp(a, "--check-hash-based-pycs") == 0 && next < end) next += strlen(next) + 1;
            a = next;
            continue;
        }
        for (const char* c = a + 1; *c; ++c) {
            if ((*c == 'I' || *c == 'E' || *c == 'S') && !skips) skips = *c;
            if (*c == 'c' || *c == 'm') return skips;  // what follows is the program's
            if (*c == 'W' || *c == 'X') {
                const char* value = c + 1;
                if (c[1] == 0 && next < end) {
                    value = next;
                    next += strlen(next) + 1;  // its value is the next argument
                }
                if (*c == 'X' && strcmp(value, "dev") == 0) g_x_dev = true;
                break;
            }
        }
        a = next;
    }
    return skips;
}

namespace {

// An interpreter run with -I, -E or -S never imports the CLI's
// sitecustomize.py: the agent runs it itself, from an audit hook added
// before the interpreter starts (PySys_AddAuditHook may be called before
// Py_Initialize), at the first cpython.run_* event, when the start-up is
// done and the program's first line is next. The hook's folder and the
// package's are on sys.path only while it runs (the program's sys.path is
// as isolated as it asked), and the program's own sitecustomize, which the
// site module imported already (or, with -S, never), is not run again.
const char kSkippedBoot[] =
    "__import__('builtins').exec(\"\"\"\n"
    "def _msmemscope_skipped_boot():\n"
    "    import os, sys\n"
    "    paths = [p for p in os.environ.get('MSMEMSCOPE_PYTHON_PATH', '').split(':') if p]\n"
    "    if not paths:\n"
    "        return\n"
    "    sys.path[:0] = paths\n"
    "    try:\n"
    "        f = os.path.join(paths[0], 'sitecustomize.py')\n"
    "        with open(f) as h:\n"
    "            code = compile(h.read(), f, 'exec')\n"
    "        exec(code, {'__name__': 'sitecustomize', '__file__': f, '_msmemscope_site_ran': True})\n"
    "    finally:\n"
    "        for p in paths:\n"
    "            if p in sys.path:\n"
    "                sys.path.remove(p)\n"
    "_msmemscope_skipped_boot()\n"
    "\"\"\", {'__builtins__': __import__('builtins')})\n";

int skipped_boot_hook(const char* event, void*, void*) {
    static bool done = false;  // the main thread's, before the program's first line
    if (done || strncmp(event, "cpython.run_", 12) != 0) return 0;
    done = true;
    using run_t = int (*)(const char*);
    if (auto run = reinterpret_cast<run_t>(dlsym(RTLD_DEFAULT, "PyRun_SimpleString"))) run(kSkippedBoot);
    // The program's first line is next, whatever the boot did.
    msms_agent_python_started();
    return 0;
}

}  // namespace

bool python_boot_prepare() {
    const char* boot = getenv("MSMEMSCOPE_PYTHON_PATH");
    if (!boot || !*boot || !is_python_interpreter()) return false;
    if (char flag = python_skips_boot()) {
        // Not where the interpreter will use its debug allocators (-X dev,
        // PYTHONDEVMODE or PYTHONMALLOC=*debug where the environment counts,
        // a debug build): a hook added now is allocated before they are set
        // up, and the interpreter's exit, which frees it with them, aborts
        // (_PyMem_DebugRawFree: bad ID).
        const char* dev = getenv("PYTHONDEVMODE");
        const char* mem = getenv("PYTHONMALLOC");
        bool env_counts = flag == 'S';
        bool debug_allocators = g_x_dev || (env_counts && ((dev && *dev) || (mem && strstr(mem, "debug")))) ||
                                dlsym(RTLD_DEFAULT, "_Py_NegativeRefcount") != nullptr;
        using hook_t = int (*)(const char*, void*, void*);
        using add_t = int (*)(hook_t, void*);
        auto add = reinterpret_cast<add_t>(dlsym(RTLD_DEFAULT, "PySys_AddAuditHook"));
        if (!debug_allocators && add && add(&skipped_boot_hook, nullptr) == 0) return true;
        // Nothing of the Python side would say it is missing.
        char msg[640];
        snprintf(msg, sizeof(msg),
                 "msmemscope: warning: pid %d: Python run with -%c %s, so it never imports msmemscope's "
                 "sitecustomize%s: no Python-side collection (no Python stacks, no PyTorch tensors or operators); "
                 "its host memory is recorded\n",
                 static_cast<int>(getpid()), flag, flag == 'S' ? "imports no site module" : "ignores PYTHONPATH",
                 !debug_allocators ? ""
                                   : ", and with the interpreter's debug allocators (-X dev, PYTHONDEVMODE, "
                                     "PYTHONMALLOC=debug, a debug build) msmemscope cannot run it itself");
        ssize_t w = write(2, msg, strlen(msg));
        (void)w;
        return false;
    }
    const char* old = getenv("PYTHONPATH");
    // A Python exec'd by a Python of the run before _boot restored the
    // variable already starts with ours.
    size_t n = strlen(boot);
    if (old && strncmp(old, boot, n) == 0 && (old[n] == '\0' || old[n] == ':')) return true;
    size_t old_n = old ? strlen(old) : 0;
    char* was = static_cast<char*>(malloc(old_n + 2));
    char* path = static_cast<char*>(malloc(n + old_n + 2));
    if (!was || !path) {
        free(was);
        free(path);
        return false;
    }
    if (old) snprintf(was, old_n + 2, "=%s", old);
    else snprintf(was, 2, "-");
    if (old_n) snprintf(path, n + old_n + 2, "%s:%s", boot, old);
    else snprintf(path, n + 1, "%s", boot);
    // Both before PYTHONPATH: _boot restores from the first.
    setenv("MSMEMSCOPE_PYTHONPATH_WAS", was, 1);
    setenv("PYTHONPATH", path, 1);
    free(was);
    free(path);
    return true;
}

}  // namespace msms::agent
