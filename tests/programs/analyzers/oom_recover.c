/* Fails a malloc under its address-space limit (setrlimit RLIMIT_AS), then
 * does what a program does about it: frees an 8 MiB block it kept and
 * allocates again, less. Prints the limit and its VmSize just before the
 * failing call and right after the free (test_oom_after.py: the
 * OOM_Snapshot_After row, written at the free, says the memory it gave
 * back). Exit code 0 when the failure happened as expected. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "vm_size.h"

int main(void) {
    char* keep = malloc((size_t)8 << 20);
    if (!keep) return 1;
    memset(keep, 1, (size_t)8 << 20);
    struct rlimit lim;
    getrlimit(RLIMIT_AS, &lim);
    lim.rlim_cur = (rlim_t)4 << 30;
    if (setrlimit(RLIMIT_AS, &lim) != 0) {
        perror("setrlimit");
        return 1;
    }
    unsigned long long vm_before = vm_size();
    void* volatile p = malloc((size_t)64 << 30);
    if (p != NULL || errno != ENOMEM) return 2;
    free(keep);  /* the answer to the failure */
    unsigned long long vm_freed = vm_size();
    char* again = malloc((size_t)2 << 20);
    if (!again) return 4;
    memset(again, 2, (size_t)2 << 20);
    printf("RLIMIT_AS %llu, VmSize %llu before the failure, %llu after the free\n", (unsigned long long)lim.rlim_cur,
           vm_before, vm_freed);
    free(again);
    return 0;
}
