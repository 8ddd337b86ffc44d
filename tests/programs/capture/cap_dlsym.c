/* cap_dlsym: the malloc family looked up in libc's own handle, as
 * ctypes.CDLL("libc.so.6") and cffi do, and a dlsym(RTLD_NEXT, ...) that must
 * stay relative to its caller.
 *
 * - dlsym(libc, "malloc")(6161): kept (a leak at exit);
 * - malloc(6262) freed with dlsym(libc, "free"): no leak;
 * - dlsym(RTLD_NEXT, "sigaction") from this program must be what
 *   dlsym(RTLD_DEFAULT, "sigaction") is (the first definition after the
 *   program: the agent's, when preloaded). Prints "rtld_next: same" or
 *   "rtld_next: differs". */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef void* (*malloc_fn)(size_t);
typedef void (*free_fn)(void*);

void* volatile g_kept;

int main(void) {
    void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    if (!libc) return 2;
    malloc_fn m = (malloc_fn)dlsym(libc, "malloc");
    free_fn f = (free_fn)dlsym(libc, "free");
    g_kept = m(6161);
    void* p = malloc(6262);
    f(p);
    void* next = dlsym(RTLD_NEXT, "sigaction");
    void* def = dlsym(RTLD_DEFAULT, "sigaction");
    printf("rtld_next: %s\n", next && next == def ? "same" : "differs");
    return 0;
}
