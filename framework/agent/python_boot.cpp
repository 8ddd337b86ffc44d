#include "python_boot.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

namespace msms::agent {

bool is_python_interpreter() { return dlsym(RTLD_DEFAULT, "Py_BytesMain") != nullptr; }

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
    while (a < end) {
        const char* next = a + strlen(a) + 1;
        if (a[0] != '-' || a[1] == 0 || strcmp(a, "--") == 0) return 0;  // the script, stdin, "--"
        if (a[1] == '-') {
            // long options; this one takes the next argument
            if (strcmp(a, "--check-hash-based-pycs") == 0 && next < end) next += strlen(next) + 1;
            a = next;
            continue;
        }
        for (const char* c = a + 1; *c; ++c) {
            if (*c == 'I' || *c == 'E' || *c == 'S') return *c;
            if (*c == 'c' || *c == 'm') return 0;  // what follows is the program's
            if (*c == 'W' || *c == 'X') {
                if (c[1] == 0 && next < end) next += strlen(next) + 1;  // its value is the next argument
                break;
            }
        }
        a = next;
    }
    return 0;
}

bool python_boot_prepare() {
    const char* boot = getenv("MSMEMSCOPE_PYTHON_PATH");
    if (!boot || !*boot || !is_python_interpreter()) return false;
    if (char flag = python_skips_boot()) {
        // Nothing of the Python side would say it is missing.
        char msg[512];
        snprintf(msg, sizeof(msg),
                 "msmemscope: warning: pid %d: Python run with -%c %s, so it never imports msmemscope's "
                 "sitecustomize: no Python-side collection (no Python stacks, no PyTorch tensors or operators); "
                 "its host memory is recorded\n",
                 static_cast<int>(getpid()), flag, flag == 'S' ? "imports no site module" : "ignores PYTHONPATH");
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
