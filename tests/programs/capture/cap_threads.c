/* cap_threads THREADS PAIRS CROSS
 * THREADS threads start together (barrier) and each does PAIRS malloc/free
 * pairs (sizes 1..256 by index). Then the main thread allocates CROSS blocks
 * of 777 bytes that one other thread frees. Prints nothing; exits 0. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static long g_pairs;
static pthread_barrier_t g_barrier;
static void** g_cross;
static long g_ncross;

static void* worker(void* arg) {
    (void)arg;
    pthread_barrier_wait(&g_barrier);
    for (long i = 0; i < g_pairs; ++i) {
        void* volatile p = malloc((size_t)(i % 256) + 1);
        free(p);
    }
    return NULL;
}

static void* cross_free(void* arg) {
    (void)arg;
    for (long i = 0; i < g_ncross; ++i) free(g_cross[i]);
    return NULL;
}

int main(int argc, char** argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 8;
    g_pairs = argc > 2 ? atol(argv[2]) : 1000;
    g_ncross = argc > 3 ? atol(argv[3]) : 10;
    pthread_t t[256];
    pthread_barrier_init(&g_barrier, NULL, (unsigned)threads);
    for (int i = 0; i < threads; ++i) pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < threads; ++i) pthread_join(t[i], NULL);
    static void* blocks[100000];
    g_cross = blocks;
    for (long i = 0; i < g_ncross; ++i) blocks[i] = malloc(777);
    pthread_t f;
    pthread_create(&f, NULL, cross_free, NULL);
    pthread_join(f, NULL);
    return 0;
}
