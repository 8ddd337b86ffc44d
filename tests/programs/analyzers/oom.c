/* Keeps a few blocks, then asks, from a function of its own, for more than
 * its address-space limit (setrlimit RLIMIT_AS) allows: malloc fails with
 * ENOMEM (tests/python/test_oom_stacks.py: the failure's C stack names
 * ask_for_too_much whatever --call-stack says). Exit code 3 when the
 * failure happened as expected. Prints its VmSize just before and just
 * after the failing call, and the limit (test_oom_memory_bound.py: the
 * OOM_Snapshot's free is the limit less the VmSize at the failure). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "vm_size.h"

__attribute__((noinline)) void* big_block(size_t n) { return malloc(n); }

__attribute__((noinline)) void* ask_for_too_much(size_t n) {
    void* p = malloc(n);
    __asm__ volatile("" ::: "memory");  /* not a tail call: this frame stays on the stack */
    return p;
}

int main(void) {
    static void* keep[8];
    for (int i = 0; i < 8; ++i) {
        keep[i] = big_block((size_t)(i + 1) << 20);
        memset(keep[i], 0, (size_t)(i + 1) << 20);
    }
    struct rlimit lim;
    getrlimit(RLIMIT_AS, &lim);
    lim.rlim_cur = (rlim_t)4 << 30;
    if (setrlimit(RLIMIT_AS, &lim) != 0) {
        perror("setrlimit");
        return 1;
    }
    unsigned long long vm_before = vm_size();
    void* p = ask_for_too_much((size_t)64 << 30);
    int err = errno;
    unsigned long long vm_after = vm_size();
    if (p == NULL && err == ENOMEM) {
        printf("malloc failed as expected\n");
        printf("RLIMIT_AS %llu, VmSize %llu before, %llu after\n", (unsigned long long)lim.rlim_cur, vm_before,
               vm_after);
        for (int i = 0; i < 8; ++i) free(keep[i]);
        return 3;
    }
    free(p);
    return 0;
}
