/* short_threads THREADS PAIRS
 * Starts THREADS threads one after the other (each joined before the next
 * starts); each does PAIRS malloc(4242)/free pairs. Exits 0. */
#include <pthread.h>
#include <stdlib.h>

static long g_pairs;

static void* worker(void* arg) {
    (void)arg;
    for (long i = 0; i < g_pairs; ++i) {
        void* volatile p = malloc(4242);
        free(p);
    }
    return NULL;
}

int main(int argc, char** argv) {
    long threads = argc > 1 ? atol(argv[1]) : 5000;
    g_pairs = argc > 2 ? atol(argv[2]) : 10;
    for (long t = 0; t < threads; ++t) {
        pthread_t th;
        if (pthread_create(&th, NULL, worker, NULL) != 0) return 3;
        pthread_join(th, NULL);
    }
    return 0;
}
