// Several threads allocate and free device memory at once on the simulated
// CUDA driver, which hands a freed address out again at once (lowest free
// range first): one thread's free and another's allocation of the same
// address race, as they do on a real GPU. The profile must pair every FREE
// with the MALLOC of its own block.
//
//   cuda_reuse_prog THREADS ROUNDS
//
// Each thread holds kSlots blocks. It first allocates them all at kMaxSize
// (the peak: THREADS * kSlots * kMaxSize, all held at the first barrier);
// then each round, all threads released at once by a barrier, it frees each
// block and at once allocates one no larger in its place, alternating
// cuMemAlloc/cuMemFree and cuMemAllocAsync/cuMemFreeAsync. No thread ever
// holds more than at the start, so the peak is the same whatever the
// threads' order; at the end every block is freed (final 0).
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <atomic>
#include <vector>

#include "cuda_driver_api.h"

extern "C" {
CUresult cuInit(unsigned int);
CUresult cuCtxCreate_v4(CUcontext*, CUctxCreateParams*, unsigned int, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuMemAlloc_v2(CUdeviceptr*, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemAllocAsync(CUdeviceptr*, size_t, CUstream);
CUresult cuMemFreeAsync(CUdeviceptr, CUstream);
}

namespace {

constexpr int kSlots = 3;
constexpr size_t kMaxSize = 4096;
// Sizes of the blocks allocated in the rounds, all at most kMaxSize: spans
// of 512 to 4096 bytes in the driver, so that a freed range is taken again
// by a block of another size, from another thread.
constexpr size_t kSizes[] = {4096, 1000, 2048, 512, 3000, 100, 1536, 4000, 700};
constexpr int kSizeCount = sizeof(kSizes) / sizeof(kSizes[0]);

struct Block {
    CUdeviceptr ptr = 0;
    bool async = false;
};

pthread_barrier_t g_round;
CUcontext g_ctx = nullptr;
int g_rounds = 0;
std::atomic<long> g_allocations{0};
std::atomic<int> g_failures{0};

CUstream stream_of(int thread) { return reinterpret_cast<CUstream>(static_cast<unsigned long>(0x10 + thread)); }

bool allocate(Block& b, size_t size, bool async, CUstream s) {
    CUresult rc = async ? cuMemAllocAsync(&b.ptr, size, s) : cuMemAlloc_v2(&b.ptr, size);
    if (rc != MSMS_CUDA_SUCCESS) {
        fprintf(stderr, "%s(%zu) failed: %d\n", async ? "cuMemAllocAsync" : "cuMemAlloc_v2", size, rc);
        return false;
    }
    b.async = async;
    ++g_allocations;
    return true;
}

bool release(Block& b, CUstream s) {
    CUresult rc = b.async ? cuMemFreeAsync(b.ptr, s) : cuMemFree_v2(b.ptr);
    if (rc != MSMS_CUDA_SUCCESS) {
        fprintf(stderr, "%s(0x%llx) failed: %d\n", b.async ? "cuMemFreeAsync" : "cuMemFree_v2",
                static_cast<unsigned long long>(b.ptr), rc);
        return false;
    }
    b.ptr = 0;
    return true;
}

// A size no larger than kMaxSize that differs between threads, slots and
// rounds.
size_t size_for(int thread, int slot, int round) { return kSizes[(round * 7 + thread * 3 + slot * 5) % kSizeCount]; }

void* worker(void* arg) {
    const int t = static_cast<int>(reinterpret_cast<long>(arg));
    const CUstream s = stream_of(t);
    bool ok = cuCtxSetCurrent(g_ctx) == MSMS_CUDA_SUCCESS;
    Block held[kSlots];
    for (int i = 0; ok && i < kSlots; ++i) ok = allocate(held[i], kMaxSize, i % 2 == 1, s);
    pthread_barrier_wait(&g_round);  // the peak: every block of every thread held
    for (int r = 0; r < g_rounds; ++r) {
        pthread_barrier_wait(&g_round);  // all threads free and allocate at once (a failed one still waits)
        for (int i = 0; ok && i < kSlots; ++i)
            ok = release(held[i], s) && allocate(held[i], size_for(t, i, r), (r + i + t) % 2 == 1, s);
    }
    for (int i = 0; ok && i < kSlots; ++i) ok = release(held[i], s);
    if (!ok) ++g_failures;
    return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s THREADS ROUNDS\n", argv[0]);
        return 2;
    }
    const int threads = atoi(argv[1]);
    g_rounds = atoi(argv[2]);
    if (threads < 2 || g_rounds < 1) return 2;
    if (cuInit(0) != MSMS_CUDA_SUCCESS || cuCtxCreate_v4(&g_ctx, nullptr, 0, 0) != MSMS_CUDA_SUCCESS) return 10;
    pthread_barrier_init(&g_round, nullptr, static_cast<unsigned>(threads));
    std::vector<pthread_t> ids(threads);
    for (int t = 0; t < threads; ++t) pthread_create(&ids[t], nullptr, worker, reinterpret_cast<void*>(long{t}));
    for (pthread_t id : ids) pthread_join(id, nullptr);
    pthread_barrier_destroy(&g_round);
    if (g_failures) return 11;
    printf("allocations=%ld peak=%zu final=0\n", g_allocations.load(), threads * kSlots * kMaxSize);
    return 0;
}
