/* The oom programs' (oom.c, oom_recover.c) own VmSize, which they print
 * around the failing call for the tests to compare with the OOM_Snapshot
 * rows' numbers. */
#ifndef MSMEMSCOPE_TESTS_ANALYZERS_VM_SIZE_H
#define MSMEMSCOPE_TESTS_ANALYZERS_VM_SIZE_H

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

/* VmSize in bytes, read without allocating (no heap growth of its own). */
static unsigned long long vm_size(void) {
    char text[128];
    int fd = open("/proc/self/statm", O_RDONLY);
    ssize_t n = fd < 0 ? -1 : read(fd, text, sizeof(text) - 1);
    if (fd >= 0) close(fd);
    if (n <= 0) return 0;
    text[n] = '\0';
    return strtoull(text, NULL, 10) * (unsigned long long)sysconf(_SC_PAGESIZE);
}

#endif
