/* A known set of host allocations through every hooked function. The
 * integration test checks that exactly these MALLOC/FREE rows appear. */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char** argv) {
    void* a = malloc(1001);
    void* b = calloc(3, 1002);            /* 3006 bytes */
    void* c = realloc(NULL, 1003);
    c = realloc(c, 1004);                 /* FREE of the old block, MALLOC of the new */
    void* d = NULL;
    if (posix_memalign(&d, 64, 1005) != 0) return 10;
    void* e = aligned_alloc(128, 1024);
    void* f = memalign(32, 1006);
    void* g = valloc(1007);
    void* h = reallocarray(NULL, 4, 1008); /* 4032 bytes */
    void* i = pvalloc(1009);               /* rounded up to a page by libc, recorded as asked */
    void* leak = malloc(1010);             /* never freed */
    memset(a, 1, 1001);
    free(a);
    free(b);
    free(c);
    free(d);
    free(e);
    free(f);
    free(g);
    free(h);
    free(i);
    (void)leak;
    return argc > 1 ? atoi(argv[1]) : 0;
}
