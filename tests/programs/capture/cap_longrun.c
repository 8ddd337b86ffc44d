/* cap_longrun PAIRS LEAKS [wait]
 * A long run in small: PAIRS malloc/free pairs (sizes 16..4096 from a fixed
 * pseudo-random sequence, a window of 32 live blocks, from two call sites),
 * then LEAKS blocks never freed from two other sites (leak_a: 3/4 of them,
 * leak_b: the rest), then, with "wait", prints "ready" and waits for a line
 * on stdin before it exits (the test's barrier: it looks at the capture
 * file while the process is still alive). Exit code 0. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void* volatile g_keep[1 << 16];

static __attribute__((noinline)) void* site_one(size_t n) { return malloc(n); }
static __attribute__((noinline)) void* site_two(size_t n) { return malloc(n); }
static __attribute__((noinline)) void* leak_a(size_t n) { return malloc(n); }
static __attribute__((noinline)) void* leak_b(size_t n) { return malloc(n); }

static __attribute__((noinline)) void churn(long pairs) {
    void* live[32] = {0};
    unsigned x = 12345;
    for (long i = 0; i < pairs; ++i) {
        x = x * 1103515245u + 12345u;
        size_t n = 16 + (x >> 16) % 4081;
        int k = (int)(i & 31);
        free(live[k]);
        live[k] = (i & 1) ? site_one(n) : site_two(n);
        if (live[k]) memset(live[k], 0, 8);
    }
    for (int k = 0; k < 32; ++k) free(live[k]);
}

int main(int argc, char** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: cap_longrun PAIRS LEAKS [wait]\n");
        return 2;
    }
    long pairs = atol(argv[1]);
    long leaks = atol(argv[2]);
    if (leaks > (1 << 16)) leaks = 1 << 16;
    churn(pairs);
    for (long i = 0; i < leaks; ++i) g_keep[i] = (i % 4 == 3) ? leak_b(64 + (size_t)i % 7) : leak_a(128 + (size_t)i % 5);
    if (argc > 3 && strcmp(argv[3], "wait") == 0) {
        printf("ready\n");
        fflush(stdout);
        char line[16];
        if (!fgets(line, sizeof(line), stdin)) return 0;
    }
    return 0;
}
