/*
 * A small "training" program on the simulated Ascend runtime (two devices),
 * for the npu integration tests (tests/python/test_npu_*.py). Every step is
 * an mstx range named "step start". Per step and device:
 *   - a PyTorch-like caching pool (mstx domain "ptaCaching", a 64 MiB heap
 *     from aclrtMalloc) hands out two blocks: A = 4 MiB at the pool start,
 *     B = 8 MiB at pool + 4 MiB + (step-1) * 8 MiB; both are given back in
 *     the same step, except B of step 3 on device 1 (the leak);
 *   - two kernel launches: add_kernel (rtKernelLaunch) and matmul_kernel
 *     (aclrtLaunchKernel) on the device's stream;
 *   - a 1 MiB driver block (halMemAlloc, module APP) allocated and freed;
 *   - in step 5 on device 1, a 96 MiB halMemAlloc that does not fit
 *     (ASCEND_SIM_DEVICE_MEM=128 MiB): DRV_ERROR_OUT_OF_MEMORY.
 * Before the steps, per device: the pool (aclrtMalloc -> halMemAlloc, module
 * RUNTIME, huge pages) and a 2 MiB workspace (halMemCreate, module HCCL).
 * After: three more launches on device 1 (rtKernelLaunchWithFlagV2,
 * rtAicpuKernelLaunchExWithArgs "aicpu_op", aclrtLaunchKernelV2), a mark
 * "training done", pinned host memory (aclrtHostRegisterV2, 16 KiB) and a
 * 1 MiB host-memory driver block, then everything is released.
 * Prints one line per notable result, exits 0.
 */
#include <stdio.h>
#include <stdlib.h>

#include <mstx/ms_tools_ext.h>

#include "ascend_sim.h"

#define MiB (1ull << 20)
#define NDEV 2
#define NSTEPS 5

static void add_kernel_stub(void) {}

static char host_buf[16384] __attribute__((aligned(4096)));

static void check(int rc, const char* what) {
    if (rc != 0) {
        fprintf(stderr, "train: %s failed: %d\n", what, rc);
        exit(1);
    }
}

int main(void) {
    check(aclInit(NULL), "aclInit");
    check(rtFunctionRegister(NULL, (const void*)add_kernel_stub, "add_kernel", "add_kernel", 0), "rtFunctionRegister");
    aclrtFuncHandle matmul = NULL;
    check(aclrtBinaryGetFunction(NULL, "matmul_kernel", &matmul), "aclrtBinaryGetFunction");
    mstxDomainHandle_t pta = mstxDomainCreateA("ptaCaching");

    aclrtStream stream[NDEV];
    void* pool[NDEV];
    drv_mem_handle_t* ws[NDEV];
    mstxMemHeapHandle_t heap[NDEV];
    for (int dev = 0; dev < NDEV; ++dev) {
        check(aclrtSetDevice(dev), "aclrtSetDevice");
        check(aclrtCreateStream(&stream[dev]), "aclrtCreateStream");
        check(aclrtMalloc(&pool[dev], 64 * MiB, ACL_MEM_MALLOC_HUGE_FIRST), "aclrtMalloc");
        struct drv_mem_prop prop = {1, (uint32_t)dev, HCCL, 0, 0, 0};
        check(halMemCreate(&ws[dev], 2 * MiB, &prop, 0), "halMemCreate");
        mstxMemVirtualRangeDesc_t range = {(uint32_t)dev, pool[dev], 64 * MiB};
        mstxMemHeapDesc_t desc = {MSTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR, MSTX_MEM_TYPE_VIRTUAL_ADDRESS, &range};
        heap[dev] = mstxMemHeapRegister(pta, &desc);
        printf("device %d pool %p workspace %p\n", dev, pool[dev], (void*)ws[dev]);
    }

    for (int step = 1; step <= NSTEPS; ++step) {
        mstxRangeId id = mstxRangeStartA("step start", NULL);
        for (int dev = 0; dev < NDEV; ++dev) {
            check(aclrtSetDevice(dev), "aclrtSetDevice");
            char* base = (char*)pool[dev];
            void* a = base;
            void* b = base + 4 * MiB + (uint64_t)(step - 1) * 8 * MiB;
            mstxMemVirtualRangeDesc_t blocks[2] = {{(uint32_t)dev, a, 4 * MiB}, {(uint32_t)dev, b, 8 * MiB}};
            mstxMemRegionsRegisterBatch_t reg = {heap[dev], MSTX_MEM_TYPE_VIRTUAL_ADDRESS, 2, blocks, NULL};
            mstxMemRegionsRegister(pta, &reg);

            check(rtKernelLaunch((const void*)add_kernel_stub, 8, NULL, 0, NULL, stream[dev]), "rtKernelLaunch");
            check(aclrtLaunchKernel(matmul, 8, NULL, 0, stream[dev]), "aclrtLaunchKernel");

            void* tmp = NULL;
            check(halMemAlloc(&tmp, 1 * MiB, SIM_FLAG(dev, MEM_DEV_VAL, APP, 0)), "halMemAlloc");
            printf("step %d device %d tmp %p\n", step, dev, tmp);
            check(halMemFree(tmp), "halMemFree");

            if (step == NSTEPS && dev == 1) {
                void* big = NULL;
                int rc = halMemAlloc(&big, 96 * MiB, SIM_FLAG(dev, MEM_DEV_VAL, APP, 0));
                printf("step %d device %d: halMemAlloc(96 MiB) = %d\n", step, dev, rc);
            }

            mstxMemRegionRef_t refs[2];
            size_t n = 0;
            refs[n].refType = MSTX_MEM_REGION_REF_TYPE_POINTER;
            refs[n++].pointer = a;
            if (!(step == 3 && dev == 1)) {
                refs[n].refType = MSTX_MEM_REGION_REF_TYPE_POINTER;
                refs[n++].pointer = b;
            } else {
                printf("step %d device %d: leaking %p\n", step, dev, b);
            }
            mstxMemRegionsUnregisterBatch_t unreg = {n, refs};
            mstxMemRegionsUnregister(pta, &unreg);
        }
        mstxRangeEnd(id);
        printf("step %d range %llu\n", step, (unsigned long long)id);
    }

    check(aclrtSetDevice(1), "aclrtSetDevice");
    check(rtKernelLaunchWithFlagV2((const void*)add_kernel_stub, 4, NULL, NULL, stream[1], 0, NULL),
          "rtKernelLaunchWithFlagV2");
    check(rtAicpuKernelLaunchExWithArgs(0, "aicpu_op", 1, NULL, NULL, stream[1], 0), "rtAicpuKernelLaunchExWithArgs");
    check(aclrtLaunchKernelV2(matmul, 4, NULL, 0, NULL, stream[1]), "aclrtLaunchKernelV2");
    mstxMarkA("training done", NULL);

    check(aclrtHostRegisterV2(host_buf, sizeof(host_buf), ACL_HOST_REG_PINNED), "aclrtHostRegisterV2");
    check(aclrtHostUnregister(host_buf), "aclrtHostUnregister");
    void* host_block = NULL;
    check(halMemAlloc(&host_block, 1 * MiB, SIM_FLAG(0, MEM_HOST_VAL, APP, 0)), "halMemAlloc(host)");
    printf("host block %p pinned %p\n", host_block, (void*)host_buf);
    check(halMemFree(host_block), "halMemFree(host)");

    for (int dev = 0; dev < NDEV; ++dev) {
        check(aclrtSetDevice(dev), "aclrtSetDevice");
        mstxMemHeapUnregister(pta, heap[dev]);
        check(halMemRelease(ws[dev]), "halMemRelease");
        check(aclrtFree(pool[dev]), "aclrtFree");
        check(aclrtDestroyStream(stream[dev]), "aclrtDestroyStream");
    }
    check(aclFinalize(), "aclFinalize");
    printf("done\n");
    return 0;
}
