/* Execs a program by descriptor, as fexecve() or execveat() do (Python's
 * os.execve(fd, ...) calls fexecve), after allocating a block it never frees
 * (what the image held goes with the exec: no leak).
 * Usage: exec_by_fd fexecve|execveat|execveat-rel keep|drop PROGRAM [ARG...]
 *   execveat: the program's own descriptor (AT_EMPTY_PATH); execveat-rel:
 *   its folder's descriptor and its name; keep: the environment as it is;
 *   drop: an empty one (no LD_PRELOAD). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char** environ;

int main(int argc, char** argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: exec_by_fd fexecve|execveat|execveat-rel keep|drop PROGRAM [ARG...]\n");
        return 2;
    }
    void* volatile held = malloc(5000);
    (void)held;
    char* empty[] = {NULL};
    char** env = strcmp(argv[2], "keep") == 0 ? environ : empty;
    char dir[4096], name[4096];
    snprintf(dir, sizeof(dir), "%s", argv[3]);
    snprintf(name, sizeof(name), "%s", argv[3]);
    const int rel = strcmp(argv[1], "execveat-rel") == 0;
    int fd = open(rel ? dirname(dir) : argv[3], (rel ? O_DIRECTORY : 0) | O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        perror("open");
        return 2;
    }
    if (strcmp(argv[1], "fexecve") == 0)
        fexecve(fd, argv + 3, env);
    else
        execveat(fd, rel ? basename(name) : "", argv + 3, env, rel ? 0 : AT_EMPTY_PATH);
    perror("exec");
    return 3;
}
