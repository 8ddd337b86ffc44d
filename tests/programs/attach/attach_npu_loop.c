/* attach_npu_loop: a long-running program on the simulated Ascend runtime
 * (tests/fixtures/ascend) for msmemscope --attach with --device=npu
 * (tests/python/test_attach.py). It runs without msmemscope; the test
 * attaches to it while it runs.
 *
 *   attach_npu_loop READY_FILE
 *
 * Sets device 0 up, allocates 4 MiB of device memory before anything can
 * attach (a block the profiler cannot know), then loops: each turn mallocs
 * and frees a little host memory (an attach gets in at the malloc family)
 * and reads commands from stdin without blocking:
 *   "npu N\n"  N device blocks of 1 MiB through aclrtMalloc (libascendcl
 *              calls halMemAlloc: its GOT slot), kept, and one 2 MiB block
 *              through halMemAlloc + halMemFree (the program's own slot);
 *              prints "npu N at 0x<first block>"
 *   "quit\n"   frees everything, prints "done", exits 0 */
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ascend_sim.h"
#include "attach_common.h"

int main(int argc, char** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: attach_npu_loop READY_FILE\n");
        return 2;
    }
    if (aclInit(NULL) != ACL_SUCCESS || aclrtSetDevice(0) != ACL_SUCCESS) return 3;
    void* before = NULL;
    if (aclrtMalloc(&before, 4u << 20, ACL_MEM_MALLOC_HUGE_FIRST) != ACL_SUCCESS) return 3;
    void* kept[256];
    int nkept = 0;
    int ready = 0;
    for (unsigned long turns = 0;; ++turns) {
        char* a = malloc(64 + (turns % 32));
        if (!a) return 3;
        a[0] = 1;
        free(a);
        if (!ready) {
            attach_write_ready(argv[1]);
            ready = 1;
        }
        const char* line = attach_poll_line();
        if (line && strncmp(line, "npu ", 4) == 0) {
            int n = atoi(line + 4), first = nkept;
            for (int i = 0; i < n && nkept < 256; ++i)
                if (aclrtMalloc(&kept[nkept++], 1u << 20, ACL_MEM_MALLOC_HUGE_FIRST) != ACL_SUCCESS) return 3;
            void* tmp = NULL;
            if (halMemAlloc(&tmp, 2u << 20, SIM_FLAG(0, MEM_DEV_VAL, APP, 0)) != DRV_ERROR_NONE || halMemFree(tmp) != DRV_ERROR_NONE) return 3;
            printf("npu %d at %p\n", n, n > 0 ? kept[first] : NULL);
            fflush(stdout);
        } else if (line && strcmp(line, "quit") == 0) {
            for (int i = 0; i < nkept; ++i) aclrtFree(kept[i]);
            aclrtFree(before);
            printf("done\n");
            return 0;
        }
    }
}
