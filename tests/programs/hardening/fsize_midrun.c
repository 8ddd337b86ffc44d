/* Lowers its own file-size limit (RLIMIT_FSIZE, soft and hard) partway
 * through a run, below the size its capture has already reached, then keeps
 * allocating (#29 item 10): the agent's writes past the new limit must not
 * kill the program with SIGXFSZ; the tool reports the capture cut short.
 * Usage: fsize_midrun PAIRS LIMIT_BYTES */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

static void pairs(long n) {
    for (long i = 0; i < n; ++i) {
        void* volatile p = malloc(16 + (size_t)(i & 255));
        free(p);
    }
}

int main(int argc, char** argv) {
    long n = argc > 1 ? atol(argv[1]) : 200000;
    rlim_t limit = argc > 2 ? (rlim_t)atoll(argv[2]) : 65536;
    pairs(n);
    struct rlimit rl = {limit, limit};
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) {
        perror("setrlimit");
        return 2;
    }
    pairs(n);
    printf("done\n");
    fflush(stdout);
    return 0;
}
