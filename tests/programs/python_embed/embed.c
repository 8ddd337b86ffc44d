// Embeds CPython. One block is allocated before the interpreter starts and
// never freed: the program's own leak, which must be reported with its
// site (this file), while the interpreter's own start-up blocks are not.
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) static void* kept_before_the_interpreter(void) {
    char* p = malloc(43210);
    if (p) memset(p, 7, 43210);
    return p;
}

int main(void) {
    void* volatile kept = kept_before_the_interpreter();
    Py_Initialize();
    if (PyRun_SimpleString("import sys\nprint('embedded', sys.version_info[0])") != 0) return 1;
    if (Py_FinalizeEx() < 0) return 2;
    (void)kept;
    return 0;
}
