/* A workload of argv[1] malloc/free pairs (default 1000000) with a window of
 * live blocks of mixed sizes: the capture the sink benchmark replays. */
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    enum { W = 256 };
    static void* win[W];
    unsigned x = 12345;
    for (long i = 0; i < n; ++i) {
        x = x * 1103515245u + 12345u;
        size_t sz = 16 + (x >> 16) % 4096;
        int slot = (int)(i % W);
        free(win[slot]);
        win[slot] = malloc(sz);
        ((char*)win[slot])[0] = 1;
    }
    for (int i = 0; i < W; i += 2) free(win[i]); /* half stays live: leaks */
    return 0;
}
