/* cap_launcher N PAIRS WORKER: starts N copies of WORKER (fork + exec, as
 * torchrun/mpirun do) with RANK, LOCAL_RANK and WORLD_SIZE set, each given
 * PAIRS; waits for all; exits 0 when every worker exited 0. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char** argv) {
    int n = argc > 1 ? atoi(argv[1]) : 4;
    const char* pairs = argc > 2 ? argv[2] : "100";
    const char* worker = argc > 3 ? argv[3] : "./cap_worker";
    char ws[16];
    snprintf(ws, sizeof(ws), "%d", n);
    for (int k = 0; k < n; ++k) {
        pid_t pid = fork();
        if (pid == 0) {
            char rank[16];
            snprintf(rank, sizeof(rank), "%d", k);
            setenv("RANK", rank, 1);
            setenv("LOCAL_RANK", rank, 1);
            setenv("WORLD_SIZE", ws, 1);
            execl(worker, worker, pairs, (char*)NULL);
            _exit(127);
        }
    }
    int st, bad = 0;
    while (wait(&st) > 0)
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) bad = 1;
    return bad;
}
