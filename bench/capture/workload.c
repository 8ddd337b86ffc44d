/* bench_capture_workload THREADS PAIRS
 * Each thread makes PAIRS malloc/free pairs (sizes 16..4096 from a fixed
 * pseudo-random sequence; a window of 64 live blocks, the oldest freed
 * before each new malloc), with every call made 20 frames deep. The threads
 * start together; the program times its own loop and prints
 *     loop_ns=<wall ns from start to the last thread's end> cpu_ns=<process
 *     CPU time, all threads, whole run> threads=T pairs=P */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

static long g_pairs;
static pthread_barrier_t g_start;

static uint64_t now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static __attribute__((noinline)) void loop(unsigned seed) {
    void* live[64] = {0};
    unsigned x = seed;
    for (long i = 0; i < g_pairs; ++i) {
        x = x * 1103515245u + 12345u;
        size_t size = 16 + (x >> 8) % 4081;
        int slot = (int)(i & 63);
        free(live[slot]);
        live[slot] = malloc(size);
        *(volatile char*)live[slot] = 1;
    }
    for (int s = 0; s < 64; ++s) free(live[s]);
}

static __attribute__((noinline)) void deep(int level, unsigned seed) {
    if (level == 0) {
        loop(seed);
        return;
    }
    deep(level - 1, seed);
    __asm__ volatile("" ::: "memory"); /* keep the frame (no tail call) */
}

static void* worker(void* arg) {
    pthread_barrier_wait(&g_start);
    deep(20, (unsigned)(uintptr_t)arg);
    return NULL;
}

int main(int argc, char** argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    g_pairs = argc > 2 ? atol(argv[2]) : 1000000;
    pthread_t t[64];
    pthread_barrier_init(&g_start, NULL, (unsigned)threads + 1);
    for (int i = 0; i < threads; ++i) pthread_create(&t[i], NULL, worker, (void*)(uintptr_t)(i + 1));
    pthread_barrier_wait(&g_start);
    uint64_t t0 = now();
    for (int i = 0; i < threads; ++i) pthread_join(t[i], NULL);
    uint64_t t1 = now();
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    unsigned long long cpu = (unsigned long long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000ull +
                             (unsigned long long)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000ull;
    printf("loop_ns=%llu cpu_ns=%llu threads=%d pairs=%ld\n", (unsigned long long)(t1 - t0), cpu, threads, g_pairs);
    return 0;
}
