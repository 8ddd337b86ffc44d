/* close_fds PAIRS [hide]
 * Daemon style: closes every descriptor from 3 up (close_range, else one by
 * one up to the descriptor limit), then does PAIRS malloc(4242)/free pairs
 * and leaks 5 blocks of 7777 bytes from leak_after_close(). Prints
 * "closed" and exits 0. With "hide", first renames the captures in
 * $MSMEMSCOPE_SESSION (*.msmcap -> *.msmcap.hidden) after the close, so that
 * msmemscope cannot open its capture again. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static void* keep[5];

__attribute__((noinline)) void* leak_after_close(void) { return malloc(7777); }

int main(int argc, char** argv) {
    long pairs = argc > 1 ? atol(argv[1]) : 100000;
#ifdef SYS_close_range
    if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0)
#endif
    {
        long max = sysconf(_SC_OPEN_MAX);
        for (long fd = 3; fd < max; ++fd) close((int)fd);
    }
    const char* dir = getenv("MSMEMSCOPE_SESSION");
    if (argc > 2 && strcmp(argv[2], "hide") == 0 && dir) {
        DIR* d = opendir(dir);
        struct dirent* e;
        while (d && (e = readdir(d)) != NULL) {
            size_t n = strlen(e->d_name);
            if (n < 7 || strcmp(e->d_name + n - 7, ".msmcap") != 0) continue;
            char from[4096], to[4200];
            snprintf(from, sizeof(from), "%s/%s", dir, e->d_name);
            snprintf(to, sizeof(to), "%s.hidden", from);
            rename(from, to);
        }
        if (d) closedir(d);
    }
    for (long i = 0; i < pairs; ++i) {
        void* volatile p = malloc(4242);
        free(p);
    }
    for (int i = 0; i < 5; ++i) {
        keep[i] = leak_after_close();
        memset(keep[i], 1, 7777);
    }
    printf("closed %p\n", keep[0]);
    return 0;
}
