/*
 * Several threads free and allocate driver memory (halMemAlloc/halMemFree)
 * at once on the simulated Ascend driver, whose blocks are mappings of
 * their own: the kernel hands an unmapped range out again at once, so one
 * thread's free and another's allocation of the same address race, as on a
 * real NPU. The profile must pair every FREE with the MALLOC of its own
 * block.
 *
 *   npu_hal_reuse THREADS ROUNDS
 *
 * Each thread holds kSlots blocks of kSize bytes on device 0 (all of them:
 * the peak, THREADS * kSlots * kSize); each round, all threads released at
 * once by a barrier, it frees each block and at once allocates another of
 * the same size in its place; at the end every block is freed (final 0).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "ascend_sim.h"

enum { kSlots = 2 };
#define kSize (64ull << 10)

static pthread_barrier_t g_round;
static int g_rounds;
static long g_allocations[64];
static int g_failed[64];

static int allocate(void** p, int thread) {
    int rc = halMemAlloc(p, kSize, SIM_FLAG(0, MEM_DEV_VAL, APP, 0));
    if (rc != DRV_ERROR_NONE) {
        fprintf(stderr, "halMemAlloc failed: %d\n", rc);
        return 0;
    }
    ++g_allocations[thread];
    return 1;
}

static int release(void* p) {
    int rc = halMemFree(p);
    if (rc != DRV_ERROR_NONE) fprintf(stderr, "halMemFree(%p) failed: %d\n", p, rc);
    return rc == DRV_ERROR_NONE;
}

static void* worker(void* arg) {
    const int t = (int)(long)arg;
    void* held[kSlots] = {0};
    int ok = 1;
    for (int i = 0; ok && i < kSlots; ++i) ok = allocate(&held[i], t);
    pthread_barrier_wait(&g_round); /* the peak: every block of every thread held */
    for (int r = 0; r < g_rounds; ++r) {
        pthread_barrier_wait(&g_round); /* all free and allocate at once (a failed thread still waits) */
        for (int i = 0; ok && i < kSlots; ++i) ok = release(held[i]) && allocate(&held[i], t);
    }
    for (int i = 0; ok && i < kSlots; ++i) ok = release(held[i]);
    g_failed[t] = !ok;
    return NULL;
}

int main(int argc, char** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s THREADS ROUNDS\n", argv[0]);
        return 2;
    }
    int threads = atoi(argv[1]);
    g_rounds = atoi(argv[2]);
    if (threads < 2 || threads > 64 || g_rounds < 1) return 2;
    if (aclInit(NULL) != ACL_SUCCESS) return 10;
    pthread_barrier_init(&g_round, NULL, (unsigned)threads);
    pthread_t ids[64];
    for (int t = 0; t < threads; ++t) pthread_create(&ids[t], NULL, worker, (void*)(long)t);
    long allocations = 0;
    int failed = 0;
    for (int t = 0; t < threads; ++t) {
        pthread_join(ids[t], NULL);
        allocations += g_allocations[t];
        failed |= g_failed[t];
    }
    pthread_barrier_destroy(&g_round);
    if (failed) return 11;
    printf("allocations=%ld peak=%llu final=0\n", allocations, threads * kSlots * kSize);
    return 0;
}
