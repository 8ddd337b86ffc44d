/* Leaks 10 blocks of 1000 bytes from one site and 3 of 50 from another,
 * frees everything else it allocates. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void* keep[16];

__attribute__((noinline)) void* leak_big(void) { return malloc(1000); }
__attribute__((noinline)) void* leak_small(void) { return malloc(50); }

int main(void) {
    for (int i = 0; i < 10; ++i) {
        keep[i] = leak_big();
        memset(keep[i], 1, 1000);
    }
    for (int i = 0; i < 3; ++i) keep[10 + i] = leak_small();
    for (int i = 0; i < 100; ++i) free(malloc(4096));
    printf("done %p\n", keep[0]);
    return 0;
}
