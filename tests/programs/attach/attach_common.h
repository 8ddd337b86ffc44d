/* What the attach test programs share (tests/python/test_attach.py drives
 * them): commands read from stdin without blocking, and the ready file the
 * test waits on. Plain C, usable from C and C++. */
#ifndef MSMS_ATTACH_COMMON_H
#define MSMS_ATTACH_COMMON_H

#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <unistd.h>

/* One complete line from stdin, or NULL (never blocks). */
static inline const char* attach_poll_line(void) {
    static char cmd[256];
    static size_t cmd_len;
    struct pollfd p = {0, POLLIN, 0};
    if (poll(&p, 1, 0) <= 0) return NULL;
    char c;
    while (read(0, &c, 1) == 1) {
        if (c == '\n') {
            cmd[cmd_len] = 0;
            cmd_len = 0;
            return cmd;
        }
        if (cmd_len + 1 < sizeof(cmd)) cmd[cmd_len++] = c;
        if (poll(&p, 1, 0) <= 0) break;
    }
    return NULL;
}

/* Creates `path` (exclusively) holding this process's pid: the test's
 * barrier that the program runs. */
static inline void attach_write_ready(const char* path) {
    char pid[32];
    int n = snprintf(pid, sizeof(pid), "%d", (int)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0) return;
    ssize_t w = write(fd, pid, (size_t)n);
    (void)w;
    close(fd);
}

#endif
