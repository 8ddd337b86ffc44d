/* attach_static: a statically linked program (no ld-linux, no libc.so.6)
 * that msmemscope --attach must refuse, leaving it untouched
 * (tests/python/test_attach.py). Writes its pid to READY_FILE, then waits
 * for the end of stdin and exits 0. */
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char** argv) {
    if (argc != 2) return 2;
    char pid[32], c;
    int n = snprintf(pid, sizeof(pid), "%d", (int)getpid());
    int fd = open(argv[1], O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0) return 3;
    if (write(fd, pid, (size_t)n) != n) return 3;
    close(fd);
    while (read(0, &c, 1) > 0) {
    }
    puts("static done");
    return 0;
}
