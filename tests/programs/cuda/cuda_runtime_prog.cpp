// Uses the fake CUDA runtime, which reaches the driver only through
// dlopen("libcuda.so.1") + cuGetProcAddress — as libcudart does.
// FAKE_CUDART_GPA=v1 makes the runtime use the CUDA 11 cuGetProcAddress ABI.
#include <stdio.h>
#include <sys/mman.h>

#include "fake_cudart.h"

#define CHECK(call)                                                              \
    do {                                                                         \
        int rc_ = (call);                                                        \
        if (rc_ != 0) {                                                          \
            fprintf(stderr, "%s failed: %d (line %d)\n", #call, rc_, __LINE__);   \
            return 10;                                                           \
        }                                                                        \
    } while (0)

int main() {
    CHECK(fakertInit());
    CHECK(fakertSetDevice(0));
    void* d = nullptr;
    void* h = nullptr;
    void* a = nullptr;
    CHECK(fakertMalloc(&d, 4096));
    CHECK(fakertMallocHost(&h, 1024));
    void* r = mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r == MAP_FAILED) return 11;
    CHECK(fakertHostRegister(r, 8192));
    CHECK(fakertLaunch("gemm", reinterpret_cast<void*>(0x40), 1));
    CHECK(fakertLaunch("relu", nullptr, 0));
    CHECK(fakertMallocAsync(&a, 2048, reinterpret_cast<void*>(0x40), 1));
    CHECK(fakertFreeAsync(a, reinterpret_cast<void*>(0x40), 1));
    CHECK(fakertHostUnregister(r));
    CHECK(fakertFree(d));
    CHECK(fakertFreeHost(h));
    printf("h=0x%016llx r=0x%016llx\n", (unsigned long long)h, (unsigned long long)r);
    munmap(r, 8192);
    return 0;
}
