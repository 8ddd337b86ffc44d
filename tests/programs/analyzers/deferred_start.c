/* Blocks allocated before a deferred start (msmemscope --collect-mode=deferred):
 * collection starts through the agent's msms_agent_start (what
 * msmemscope.start() calls), so the blocks made before it must come out as
 * shadow MALLOC rows (issue #15 item 4). Prints the two pre-start blocks'
 * addresses for the test.
 *   kept:  allocated before start, never freed (a leak the report names)
 *   freed: allocated before start, freed while collecting
 *   gone:  allocated and freed before start (never written)
 *   late:  allocated while collecting, never freed (a leak judged as any) */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*agent_fn)(void);

static void* volatile keep_alive;
static void* volatile keep_late;

int main(void) {
    agent_fn start = (agent_fn)dlsym(RTLD_DEFAULT, "msms_agent_start");
    agent_fn stop = (agent_fn)dlsym(RTLD_DEFAULT, "msms_agent_stop");
    if (!start || !stop) {
        fprintf(stderr, "deferred_start: the msmemscope agent is not loaded\n");
        return 3;
    }
    char* kept = malloc(12345);
    char* freed = malloc(23456);
    char* gone = malloc(34567);
    if (!kept || !freed || !gone) return 4;
    memset(gone, 3, 34567);
    free(gone);
    memset(kept, 1, 12345);
    memset(freed, 2, 23456);
    printf("kept %p\nfreed %p\n", (void*)kept, (void*)freed);
    fflush(stdout);
    start();
    free(freed);
    char* during = malloc(4567);
    if (!during) return 4;
    free(during);
    char* late = malloc(4321);
    if (!late) return 4;
    memset(late, 5, 4321);
    keep_late = late;
    stop();
    keep_alive = kept;
    return 0;
}
