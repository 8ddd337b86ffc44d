/* bench_capture_workload THREADS PAIRS [VIA]
 * Each thread makes PAIRS malloc/free pairs (sizes 16..4096 from a fixed
 * pseudo-random sequence; a window of 64 live blocks, the oldest freed
 * before each new malloc), with every call made 20 frames deep. The threads
 * start together; the program times its own loop and prints
 *     loop_ns=<wall ns from start to the last thread's end> cpu_ns=<process
 *     CPU time, all threads, whole run> threads=T pairs=P user_ns=<of which
 *     user> sys_ns=<of which kernel>
 * VIA says who calls malloc/free (to see what a stack walker recovers through
 * Debian's libc and libstdc++, built without frame pointers):
 *   direct     the loop itself (default)
 *   libc       the loop calls strndup (libc calls malloc) and free
 *   libstdc++  the loop calls a function that calls operator new/delete
 *              (workload_new.cpp; libstdc++ calls malloc/free) */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

void* wl_new(size_t n);
void wl_delete(void* p);

static long g_pairs;
static int g_via; /* 0 direct, 1 libc, 2 libstdc++ */
static char g_text[4097];
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
        if (g_via == 2) {
            wl_delete(live[slot]);
            live[slot] = wl_new(size);
        } else {
            free(live[slot]);
            live[slot] = g_via == 1 ? strndup(g_text, size - 1) : malloc(size);
        }
        *(volatile char*)live[slot] = 1;
    }
    for (int s = 0; s < 64; ++s) {
        if (g_via == 2) wl_delete(live[s]);
        else free(live[s]);
    }
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
    const char* via = argc > 3 ? argv[3] : "direct";
    g_via = !strcmp(via, "libc") ? 1 : !strcmp(via, "libstdc++") ? 2 : 0;
    memset(g_text, 'x', sizeof(g_text) - 1);
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
    unsigned long long user = (unsigned long long)ru.ru_utime.tv_sec * 1000000000ull + ru.ru_utime.tv_usec * 1000ull;
    printf("loop_ns=%llu cpu_ns=%llu threads=%d pairs=%ld user_ns=%llu sys_ns=%llu\n", (unsigned long long)(t1 - t0), cpu,
           threads, g_pairs, user, cpu - user);
    return 0;
}
