/*
 * Snapshot test program: on device 1 of the simulated runtime, allocates
 * 32 MiB, then calls msms_npu_snapshot() (exported by the hal collector's
 * hook library, found with dlsym as the Python package does) for device
 * mask {1} with name "after alloc", and for mask {0} (not the current
 * device: nothing recorded). Prints the return codes.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>

#include "ascend_sim.h"

#define MiB (1ull << 20)

int main(void) {
    typedef int (*snap_fn)(uint64_t, const char*, const char*);
    snap_fn snap = (snap_fn)dlsym(RTLD_DEFAULT, "msms_npu_snapshot");
    aclInit(NULL);
    aclrtSetDevice(1);
    void* p = NULL;
    if (aclrtMalloc(&p, 32 * MiB, ACL_MEM_MALLOC_NORMAL_ONLY) != ACL_SUCCESS) return 1;
    int rc1 = snap ? snap(1ull << 1, "after alloc", "reserved:0") : -99;
    int rc0 = snap ? snap(1ull << 0, "device 0", NULL) : -99;
    printf("snapshot rc %d %d\n", rc1, rc0);
    aclrtFree(p);
    aclFinalize();
    return 0;
}
