/* Bursts of failing allocations for the oom analysis's rate limit (#29 item
 * 10): BURST failures of malloc(1 PiB) as fast as they go, then, once this
 * process's own monotonic clock says GAP_MS have passed since the first
 * burst ended (a barrier on the clock, not a sleep), a second burst. The
 * test derives what the one-second limit must keep from the timestamps of
 * the trigger rows, never from this program's timing.
 * Usage: oom_burst BURST GAP_MS */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void* volatile g_keep[4];

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int burst(int n) {
    int failed = 0;
    for (int i = 0; i < n; ++i) {
        void* volatile p = malloc((size_t)1 << 50);
        if (!p) ++failed;
        free(p);
    }
    return failed;
}

int main(int argc, char** argv) {
    int n = argc > 1 ? atoi(argv[1]) : 20;
    long long gap = argc > 2 ? atoll(argv[2]) : 1200;
    for (int i = 0; i < 4; ++i) g_keep[i] = malloc((size_t)(i + 1) << 16);  /* live blocks to list */
    int failed = burst(n);
    long long end = now_ms();
    while (now_ms() - end < gap) {
    }
    failed += burst(n);
    printf("%d failed\n", failed);
    return 0;
}
