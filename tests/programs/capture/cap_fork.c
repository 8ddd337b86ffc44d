/* cap_fork WORKERS PAIRS
 * Forks WORKERS children; child k does PAIRS malloc/free pairs of 100 + k
 * bytes and exits with code k. The parent does 3 pairs of 50 bytes and waits
 * for all children. */
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char** argv) {
    int workers = argc > 1 ? atoi(argv[1]) : 4;
    long pairs = argc > 2 ? atol(argv[2]) : 1000;
    for (int k = 0; k < workers; ++k) {
        pid_t pid = fork();
        if (pid == 0) {
            for (long i = 0; i < pairs; ++i) {
                void* volatile p = malloc((size_t)(100 + k));
                free(p);
            }
            exit(k);
        }
    }
    for (int i = 0; i < 3; ++i) {
        void* volatile p = malloc(50);
        free(p);
    }
    int st;
    while (wait(&st) > 0) {
    }
    return 0;
}
