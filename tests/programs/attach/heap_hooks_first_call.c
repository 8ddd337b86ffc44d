/* heap_hooks_first_call: the host heap's hook library loaded into a running
 * process as --attach and the Python API's start() load it (dlopen,
 * RTLD_LOCAL), then called from two threads while the first call is still
 * setting itself up (tests/python/test_attach.py).
 *
 *   heap_hooks_first_call HOOK_LIBRARY
 *
 * Once the library is loaded, thread A calls its malloc. If that call looks
 * up the real malloc (dlsym(RTLD_NEXT, "malloc")), this program's dlsym,
 * which the library's calls reach first, holds it there until the main
 * thread is done. Either way the main thread waits (on pipes) until A is
 * held or its call came back, then allocates 64 blocks of 4000 bytes
 * through the library's malloc, as a program's other threads do while A
 * sets up, and says where each came from:
 *   "first call held in its look-up: yes|no; 64 block(s): H from the heap,
 *    P from the hooks' start-up pool, F failed"
 * Exits 0 when all came from the heap, 1 otherwise. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/select.h>
#include <unistd.h>

typedef void* (*dlsym_fn)(void*, const char*);
typedef void* (*malloc_fn)(size_t);
typedef void (*free_fn)(void*);

static dlsym_fn libc_dlsym;
static atomic_int armed;
static int held[2], go[2], came_back[2];
static malloc_fn hook_malloc;

static void put(int fd, char c) {
    if (write(fd, &c, 1) != 1) _exit(4);
}

static char get(int fd) {
    char c;
    if (read(fd, &c, 1) != 1) _exit(4);
    return c;
}

/* Exported (-Wl,--export-dynamic-symbol=dlsym): the hook library's dlsym
 * calls find this one before libc's. Looked up from here, RTLD_NEXT finds
 * what it finds from the library: libc's functions. */
__attribute__((visibility("default"))) void* dlsym(void* handle, const char* name) {
    if (handle == RTLD_NEXT && strcmp(name, "malloc") == 0 && atomic_exchange(&armed, 0)) {
        put(held[1], 'h');
        get(go[0]);
    }
    return libc_dlsym(handle, name);
}

static void* first_call(void* arg) {
    (void)arg;
    void* p = hook_malloc(16);
    put(came_back[1], p ? 'r' : 'n');
    return NULL;
}

int main(int argc, char** argv) {
    static const char* const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
    for (size_t i = 0; !libc_dlsym && i < sizeof(versions) / sizeof(versions[0]); ++i)
        libc_dlsym = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
    if (argc != 2 || !libc_dlsym || pipe(held) || pipe(go) || pipe(came_back)) {
        fprintf(stderr, "usage: heap_hooks_first_call HOOK_LIBRARY\n");
        return 2;
    }
    void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "%s\n", dlerror());
        return 3;
    }
    hook_malloc = (malloc_fn)libc_dlsym(lib, "malloc");
    free_fn hook_free = (free_fn)libc_dlsym(lib, "free");
    if (!hook_malloc || !hook_free) return 3;
    atomic_store(&armed, 1);
    pthread_t a;
    if (pthread_create(&a, NULL, first_call, NULL) != 0) return 3;
    fd_set fds;
    FD_ZERO(&fds);
    FD_SET(held[0], &fds);
    FD_SET(came_back[0], &fds);
    if (select((held[0] > came_back[0] ? held[0] : came_back[0]) + 1, &fds, NULL, NULL, NULL) < 0) return 3;
    int was_held = FD_ISSET(held[0], &fds);
    int heap = 0, pool = 0, failed = 0;
    void* blocks[64];
    for (int i = 0; i < 64; ++i) {
        blocks[i] = hook_malloc(4000);
        Dl_info in;
        if (!blocks[i])
            ++failed;
        else if (dladdr(blocks[i], &in) && in.dli_fbase)
            ++pool; /* inside a loaded object: the library's static pool */
        else
            ++heap;
    }
    if (was_held) put(go[1], 'g');
    pthread_join(a, NULL);
    for (int i = 0; i < 64; ++i) hook_free(blocks[i]);
    printf("first call held in its look-up: %s; 64 block(s): %d from the heap, %d from the hooks' start-up pool, "
           "%d failed\n", was_held ? "yes" : "no", heap, pool, failed);
    return heap == 64 ? 0 : 1;
}
