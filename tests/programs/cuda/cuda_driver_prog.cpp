// Calls the (simulated) CUDA driver directly, linked against libcuda.so.1.
// One scenario per argument; prints what a test cannot know in advance
// (pinned host addresses, return codes). Device addresses of the simulated
// driver are deterministic (see tests/fixtures/cuda/fake_libcuda.cpp).
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "cuda_driver_api.h"

extern "C" {
CUresult cuInit(unsigned int);
CUresult cuCtxCreate_v4(CUcontext*, CUctxCreateParams*, unsigned int, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuDevicePrimaryCtxRetain(CUcontext*, CUdevice);
CUresult cuMemAlloc_v2(CUdeviceptr*, size_t);
CUresult cuMemAllocPitch_v2(CUdeviceptr*, size_t*, size_t, size_t, unsigned int);
CUresult cuMemAllocManaged(CUdeviceptr*, size_t, unsigned int);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemAllocAsync(CUdeviceptr*, size_t, CUstream);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr*, size_t, CUstream);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr*, size_t, CUmemoryPool, CUstream);
CUresult cuMemFreeAsync(CUdeviceptr, CUstream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr, CUstream);
CUresult cuMemAddressReserve(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long);
CUresult cuMemAddressFree(CUdeviceptr, size_t);
CUresult cuMemCreate(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long);
CUresult cuMemRelease(CUmemGenericAllocationHandle);
CUresult cuMemMap(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
CUresult cuMemUnmap(CUdeviceptr, size_t);
CUresult cuMemAllocHost_v2(void**, size_t);
CUresult cuMemHostAlloc(void**, size_t, unsigned int);
CUresult cuMemFreeHost(void*);
CUresult cuMemHostRegister_v2(void*, size_t, unsigned int);
CUresult cuMemHostUnregister(void*);
CUresult cuModuleLoadData(CUmodule*, const void*);
CUresult cuModuleGetFunction(CUfunction*, CUmodule, const char*);
CUresult cuLaunchKernel(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
                        unsigned int, unsigned int, CUstream, void**, void**);
CUresult cuLaunchKernel_ptsz(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
                             unsigned int, unsigned int, CUstream, void**, void**);
CUresult cuLaunchKernelEx(const CUlaunchConfig*, CUfunction, void**, void**);
CUresult cuLaunchCooperativeKernel(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
                                   unsigned int, unsigned int, unsigned int, CUstream, void**);
}

#define CHECK(call)                                                          \
    do {                                                                     \
        CUresult rc_ = (call);                                               \
        if (rc_ != 0) {                                                      \
            fprintf(stderr, "%s failed: %d (line %d)\n", #call, rc_, __LINE__); \
            return 10;                                                       \
        }                                                                    \
    } while (0)

static CUstream stream(unsigned long v) { return reinterpret_cast<CUstream>(v); }

static int context(int dev) {
    CUcontext ctx = nullptr;
    CHECK(cuCtxCreate_v4(&ctx, nullptr, 0, dev));
    return 0;
}

static int basic() {
    if (int rc = context(0)) return rc;
    CUdeviceptr a = 0, b = 0, c = 0;
    size_t pitch = 0;
    CHECK(cuMemAlloc_v2(&a, 1000));
    CHECK(cuMemAllocPitch_v2(&b, &pitch, 100, 4, 4));
    CHECK(cuMemAllocManaged(&c, 4096, 1));
    CHECK(cuMemFree_v2(a));
    CHECK(cuMemFree_v2(b));
    CHECK(cuMemFree_v2(c));
    printf("pitch=%zu\n", pitch);
    return 0;
}

static int vmm() {
    if (int rc = context(0)) return rc;
    const size_t page = 2u << 20;
    CUdeviceptr va = 0;
    CHECK(cuMemAddressReserve(&va, 2 * page, 0, 0, 0));
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = MSMS_CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = MSMS_CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemGenericAllocationHandle h1 = 0, h2 = 0;
    CHECK(cuMemCreate(&h1, page, &prop, 0));
    CHECK(cuMemCreate(&h2, page, &prop, 0));
    CHECK(cuMemMap(va, page, 0, h1, 0));
    CHECK(cuMemMap(va + page, page, 0, h2, 0));
    CHECK(cuMemUnmap(va, 2 * page));  // both mappings at once
    CHECK(cuMemRelease(h1));
    CHECK(cuMemRelease(h2));
    CHECK(cuMemAddressFree(va, 2 * page));
    return 0;
}

static int pinned() {
    if (int rc = context(0)) return rc;
    void* a = nullptr;
    void* b = nullptr;
    CHECK(cuMemAllocHost_v2(&a, 4096));
    CHECK(cuMemHostAlloc(&b, 8192, 1));
    void* r = mmap(nullptr, 16384, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r == MAP_FAILED) return 11;
    CHECK(cuMemHostRegister_v2(r, 16384, 0));
    CHECK(cuMemHostUnregister(r));
    CHECK(cuMemFreeHost(a));
    CHECK(cuMemFreeHost(b));
    printf("a=0x%016llx b=0x%016llx r=0x%016llx\n", (unsigned long long)a, (unsigned long long)b,
           (unsigned long long)r);
    munmap(r, 16384);
    return 0;
}

static int async() {
    if (int rc = context(0)) return rc;
    CUdeviceptr a = 0, b = 0, c = 0;
    CHECK(cuMemAllocAsync(&a, 256, stream(0x10)));
    CHECK(cuMemAllocFromPoolAsync(&b, 512, reinterpret_cast<CUmemoryPool>(0x1), stream(0x10)));
    CHECK(cuMemAllocAsync_ptsz(&c, 768, stream(0x2)));
    CHECK(cuMemFreeAsync(a, stream(0x10)));
    CHECK(cuMemFreeAsync(b, stream(0x10)));
    CHECK(cuMemFreeAsync_ptsz(c, stream(0x2)));
    return 0;
}

static int oom() {
    // run with FAKE_CUDA_MEM_LIMIT=1048576
    if (int rc = context(0)) return rc;
    CUdeviceptr a = 0, b = 0;
    CHECK(cuMemAlloc_v2(&a, 524288));
    CUresult rc = cuMemAlloc_v2(&b, 1048576);
    printf("oom rc=%d\n", rc);
    CHECK(cuMemFree_v2(a));
    return 0;
}

static int launch() {
    if (int rc = context(0)) return rc;
    CUmodule m = nullptr;
    CHECK(cuModuleLoadData(&m, "vecAdd;reduce"));
    CUfunction add = nullptr, red = nullptr;
    CHECK(cuModuleGetFunction(&add, m, "vecAdd"));
    CHECK(cuModuleGetFunction(&red, m, "reduce"));
    CHECK(cuLaunchKernel(add, 4, 1, 1, 128, 1, 1, 0, stream(0x20), nullptr, nullptr));
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.hStream = nullptr;
    CHECK(cuLaunchKernelEx(&cfg, red, nullptr, nullptr));
    CHECK(cuLaunchCooperativeKernel(red, 2, 1, 1, 64, 1, 1, 0, stream(0x30), nullptr));
    CHECK(cuLaunchKernel_ptsz(add, 1, 1, 1, 1, 1, 1, 0, stream(0x2), nullptr, nullptr));
    return 0;
}

static int devices() {
    CUcontext c0 = nullptr, c1 = nullptr;
    CHECK(cuCtxCreate_v4(&c0, nullptr, 0, 0));
    CUdeviceptr a = 0, b = 0;
    CHECK(cuMemAlloc_v2(&a, 100));
    CHECK(cuCtxCreate_v4(&c1, nullptr, 0, 1));
    CHECK(cuMemAlloc_v2(&b, 200));
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuMemFree_v2(b));  // device 1's block, freed while device 0 is current
    CHECK(cuMemFree_v2(a));
    return 0;
}

static int snapshot() {
    CUcontext p0 = nullptr, p1 = nullptr;
    CHECK(cuDevicePrimaryCtxRetain(&p1, 1));
    CHECK(cuDevicePrimaryCtxRetain(&p0, 0));
    CHECK(cuCtxSetCurrent(p0));
    CUdeviceptr a = 0;
    CHECK(cuMemAlloc_v2(&a, 1 << 20));
    using snap_fn = int (*)(unsigned long long, const char*, const char*);
    auto snap = reinterpret_cast<snap_fn>(dlsym(RTLD_DEFAULT, "msms_cuda_snapshot"));
    if (!snap) {
        printf("no msms_cuda_snapshot\n");
        return 12;
    }
    int rows = snap(0x3, "before step", "reserved:4096,allocated:1024");
    int rows_current = snap(0, nullptr, nullptr);
    printf("rows=%d current=%d\n", rows, rows_current);
    CHECK(cuMemFree_v2(a));
    return 0;
}

int main(int argc, char** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s basic|vmm|pinned|async|oom|launch|devices|snapshot\n", argv[0]);
        return 2;
    }
    CHECK(cuInit(0));
    const char* what = argv[1];
    if (!strcmp(what, "basic")) return basic();
    if (!strcmp(what, "vmm")) return vmm();
    if (!strcmp(what, "pinned")) return pinned();
    if (!strcmp(what, "async")) return async();
    if (!strcmp(what, "oom")) return oom();
    if (!strcmp(what, "launch")) return launch();
    if (!strcmp(what, "devices")) return devices();
    if (!strcmp(what, "snapshot")) return snapshot();
    fprintf(stderr, "unknown scenario %s\n", what);
    return 2;
}
