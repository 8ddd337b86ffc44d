/* Uses the pool for three steps: weights allocated once and kept, two
 * activation blocks per step freed at the step's end. Marks step ends with
 * msmemscope's step API when the agent is loaded (under msmemscope). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>

#include "mypool.h"

int main(void) {
    uint64_t (*step)(void) = (uint64_t(*)(void))dlsym(RTLD_DEFAULT, "msms_agent_step");
    void* weights = mypool_alloc(8192, "weights");
    for (int s = 1; s <= 3; ++s) {
        void* a = mypool_alloc(1024 * (size_t)s, "activations");
        void* b = mypool_alloc(2048, "activations");
        mypool_free(a);
        mypool_free(b);
        if (step) step();
    }
    mypool_free(weights);
    printf("mypool_demo: done\n");
    return 0;
}
