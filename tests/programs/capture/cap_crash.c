/* cap_crash MODE N [CGROUP_DIR]
 * Allocates N blocks of 10000 + i bytes (kept), then ends as MODE says:
 *   sigkill  raise(SIGKILL)           segv   writes through a null pointer
 *   _exit    _exit(7)                 exit   exit(5)
 *   abort    abort()
 *   oom      moves itself into the memory cgroup CGROUP_DIR (if given), waits
 *            200 ms, then allocates and touches 16 MiB blocks until the kernel kills it
 *   rlimit   sets RLIMIT_AS to 256 MiB, allocates 16 MiB blocks until
 *            malloc fails, then abort()s (what a program does on OOM)
 * Before ending it writes "ready\n" to stdout. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

int main(int argc, char** argv) {
    const char* mode = argc > 1 ? argv[1] : "exit";
    long n = argc > 2 ? atol(argv[2]) : 100;
    for (long i = 0; i < n; ++i) {
        void* volatile p = malloc((size_t)(10000 + i));
        (void)p;
    }
    printf("ready\n");
    fflush(stdout);
    if (!strcmp(mode, "sigkill")) raise(SIGKILL);
    if (!strcmp(mode, "segv")) {
        volatile int* z = (volatile int*)0;
        *z = 1;
    }
    if (!strcmp(mode, "_exit")) _exit(7);
    if (!strcmp(mode, "exit")) exit(5);
    if (!strcmp(mode, "abort")) abort();
    if (!strcmp(mode, "oom")) {
        if (argc > 3) {
            char path[4096];
            snprintf(path, sizeof(path), "%s/cgroup.procs", argv[3]);
            FILE* f = fopen(path, "w");
            if (!f) return 3;
            fprintf(f, "%d\n", (int)getpid());
            if (fclose(f) != 0) return 3;
            /* The host looks at a process's cgroups every 10 ms: let it see
             * this one before the kill (a process that changes cgroup and is
             * killed within 10 ms is reported as killed by SIGKILL). */
            usleep(200000);
        }
        for (;;) {
            char* p = (char*)malloc(16 << 20);
            if (!p) return 4;
            memset(p, 1, 16 << 20);
        }
    }
    if (!strcmp(mode, "rlimit")) {
        struct rlimit r = {256ul << 20, 256ul << 20};
        setrlimit(RLIMIT_AS, &r);
        for (;;) {
            char* p = (char*)malloc(16 << 20);
            if (!p) abort();
            memset(p, 1, 4096);
        }
    }
    return 0;
}
