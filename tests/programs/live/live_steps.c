/* The live view's test program (tests/python/test_live_view.py): STEPS
 * steps, each an mstx range named "step start"; step s keeps one block of
 * s MiB from keep_step_buffer() (live to the end: the top site) and frees
 * 100 blocks of 4 KiB from scratch(). After step BARRIER_AT (argv[2]) it
 * reads one byte from the FIFO argv[1] (a barrier the test opens), then
 * runs the remaining steps and exits without freeing the kept blocks. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mstx/ms_tools_ext.h>

#define STEPS 5
#define MiB (1024 * 1024)

static void* kept[STEPS + 1];

__attribute__((noinline)) void* keep_step_buffer(int step) {
    void* p = malloc((size_t)step * MiB);
    memset(p, 1, (size_t)step * MiB);
    return p;
}

__attribute__((noinline)) void scratch(void) {
    for (int i = 0; i < 100; ++i) {
        void* p = malloc(4096);
        memset(p, 2, 4096);
        free(p);
    }
}

int main(int argc, char** argv) {
    const char* fifo = argc > 1 ? argv[1] : NULL;
    int barrier_at = argc > 2 ? atoi(argv[2]) : 0;
    for (int s = 1; s <= STEPS; ++s) {
        mstxRangeId id = mstxRangeStartA("step start", NULL);
        kept[s] = keep_step_buffer(s);
        scratch();
        mstxRangeEnd(id);
        if (s == barrier_at && fifo) {
            int fd = open(fifo, O_RDONLY);
            char c;
            if (fd >= 0) {
                if (read(fd, &c, 1) < 0) perror("read");
                close(fd);
            }
        }
    }
    return kept[1] ? 0 : 1;
}
