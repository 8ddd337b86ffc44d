#include "python_boot.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace msms::agent {

bool is_python_interpreter() { return dlsym(RTLD_DEFAULT, "Py_BytesMain") != nullptr; }

void python_boot_prepare() {
    const char* boot = getenv("MSMEMSCOPE_PYTHON_PATH");
    if (!boot || !*boot || !is_python_interpreter()) return;
    const char* old = getenv("PYTHONPATH");
    // A Python exec'd by a Python of the run before _boot restored the
    // variable already starts with ours.
    size_t n = strlen(boot);
    if (old && strncmp(old, boot, n) == 0 && (old[n] == '\0' || old[n] == ':')) return;
    size_t old_n = old ? strlen(old) : 0;
    char* was = static_cast<char*>(malloc(old_n + 2));
    char* path = static_cast<char*>(malloc(n + old_n + 2));
    if (!was || !path) {
        free(was);
        free(path);
        return;
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
}

}  // namespace msms::agent
