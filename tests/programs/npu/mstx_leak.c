/*
 * Upstream's leak check by marks (python/msmemscope/analyzer/leaks.py,
 * example/leaks) on the simulated Ascend runtime: three mstx marks named
 * "leak check" around driver allocations on device 0:
 *   mark 1; x = 1 MiB (freed after mark 2), y = 2 MiB (never freed);
 *   mark 2; z = 4 MiB (freed before mark 3); free x; mark 3; exit.
 * Between marks 1 and 2 only y stays allocated: the one leak.
 * Prints "leak <address of y>", exits 0.
 */
#include <stdio.h>
#include <stdlib.h>

#include <mstx/ms_tools_ext.h>

#include "ascend_sim.h"

#define MiB (1ull << 20)

static void* alloc(unsigned long long n) {
    void* p = NULL;
    if (halMemAlloc(&p, n, SIM_FLAG(0, MEM_DEV_VAL, APP, 0)) != 0) {
        fprintf(stderr, "mstx_leak: halMemAlloc failed\n");
        exit(1);
    }
    return p;
}

int main(void) {
    if (aclInit(NULL) != 0 || aclrtSetDevice(0) != 0) return 1;
    mstxMarkA("leak check", NULL);
    void* x = alloc(1 * MiB);
    void* y = alloc(2 * MiB);
    mstxMarkA("leak check", NULL);
    void* z = alloc(4 * MiB);
    halMemFree(z);
    halMemFree(x);
    mstxMarkA("leak check", NULL);
    printf("leak %p\n", y);
    return 0;
}
