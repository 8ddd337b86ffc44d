/* A library whose constructor holds its program's start-up until a test
 * opens the FIFO named by MSMS_TEST_START_GATE for writing (a barrier, no
 * timing). Linked into late_start, its constructor runs before those of the
 * preloaded libraries (the agent's included): the new image of an exec is
 * then alive, with the agent mapped, yet makes no capture for as long as the
 * test wishes. Makes no allocation (the agent's hooks are not set up yet). */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((constructor)) static void hold_start_up(void) {
    const char* fifo = getenv("MSMS_TEST_START_GATE");
    if (!fifo) return;
    int fd = open(fifo, O_RDONLY);  /* blocks until the test opens it to write */
    if (fd < 0) return;
    char c;
    while (read(fd, &c, 1) > 0) {
    }
    close(fd);
}

/* Called by late_start so that the linker keeps the library. */
int late_start_gate_passed(void) { return 1; }
