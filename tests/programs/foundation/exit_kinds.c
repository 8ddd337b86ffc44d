/* Ends in the way argv[1] says: "code N", "signal N", "abort". Allocates a
 * marker block (2024 bytes) first so the test can see it was profiled. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char** argv) {
    void* p = malloc(2024);
    (void)p;
    if (argc > 2 && strcmp(argv[1], "code") == 0) return atoi(argv[2]);
    if (argc > 2 && strcmp(argv[1], "signal") == 0) raise(atoi(argv[2]));
    if (argc > 1 && strcmp(argv[1], "abort") == 0) abort();
    return 0;
}
