/* cap_worker PAIRS: PAIRS malloc/free pairs of 200 + RANK bytes. */
#include <stdlib.h>

int main(int argc, char** argv) {
    long pairs = argc > 1 ? atol(argv[1]) : 100;
    const char* r = getenv("RANK");
    int rank = r ? atoi(r) : 0;
    for (long i = 0; i < pairs; ++i) {
        void* volatile p = malloc((size_t)(200 + rank));
        free(p);
    }
    return 0;
}
