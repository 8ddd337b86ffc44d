/* A program whose start-up a test holds (late_start_gate.c): exec'ed under
 * the CLI, its image makes its capture only once the test lets it go, later
 * than the host waits for it. Allocates a block, frees it, says so. */
#include <stdio.h>
#include <stdlib.h>

int late_start_gate_passed(void);

int main(void) {
    void* volatile p = malloc(4096);
    free(p);
    if (!late_start_gate_passed()) return 1;
    printf("late image done\n");
    fflush(stdout);
    return 0;
}
