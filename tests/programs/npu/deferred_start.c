/* Device blocks allocated before a deferred start, on the simulated Ascend
 * runtime (issue #15 item 4): collection starts through the agent's
 * msms_agent_start (what msmemscope.start() calls), so the blocks made
 * before it must come out as HAL rows with shadow:true.
 *   kept:  aclrtMalloc'ed before start, never freed (a leak)
 *   freed: aclrtMalloc'ed before start, freed while collecting */
#include <dlfcn.h>
#include <stdio.h>

#include "ascend_sim.h"

#define MiB (1ull << 20)

typedef void (*agent_fn)(void);

int main(void) {
    agent_fn start = (agent_fn)dlsym(RTLD_DEFAULT, "msms_agent_start");
    agent_fn stop = (agent_fn)dlsym(RTLD_DEFAULT, "msms_agent_stop");
    if (!start || !stop) {
        fprintf(stderr, "deferred_start: the msmemscope agent is not loaded\n");
        return 3;
    }
    void *kept = NULL, *freed = NULL;
    if (aclInit(NULL) != 0 || aclrtSetDevice(0) != 0) return 4;
    if (aclrtMalloc(&kept, 3 * MiB, 0) != 0 || aclrtMalloc(&freed, 5 * MiB, 0) != 0) return 4;
    printf("kept %p\nfreed %p\n", kept, freed);
    fflush(stdout);
    start();
    if (aclrtFree(freed) != 0) return 4;
    stop();
    return 0;
}
