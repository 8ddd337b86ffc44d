/* A program whose start-up a test holds (late_start_gate.c): exec'ed under
 * the CLI, its image makes its capture only once the test lets it go, later
 * than the host waits for it. Allocates a block, frees it, says so.
 * late_start HOLD: once it has allocated, it also waits until the test has
 * opened the FIFO HOLD for writing and closed it (a second barrier: the
 * test looks at the run while this image records). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int late_start_gate_passed(void);

static void wait_for_release(const char* fifo) {
    printf("late image recording\n");
    fflush(stdout);
    int fd = open(fifo, O_RDONLY); /* blocks until the test opens it to write */
    if (fd < 0) return;
    char c;
    while (read(fd, &c, 1) > 0) {
    }
    close(fd);
}

int main(int argc, char** argv) {
    void* volatile p = malloc(4096);
    free(p);
    if (!late_start_gate_passed()) return 1;
    if (argc > 1) wait_for_release(argv[1]);
    printf("late image done\n");
    fflush(stdout);
    return 0;
}
