/* Allocates, keeps some blocks, then dies: argv[1] = "kill" (SIGKILL on
 * itself) or "segv" (a null write). The sinks must still write valid files. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char** argv) {
    const char* how = argc > 1 ? argv[1] : "kill";
    static void* volatile keep[64];
    for (int i = 0; i < 200; ++i) {
        void* p = malloc(1000 + i);
        memset(p, 1, 16);
        if (i % 4 == 0) keep[i / 4 % 64] = p;
        else free(p);
    }
    fflush(stdout);
    if (strcmp(how, "segv") == 0) {
        volatile int* np = (volatile int*)0;
        *np = 1;
    }
    raise(SIGKILL);
    return 0;
}
