/* What writing a capture's records costs per record, by how the bytes reach
 * the file (issue #18 item 6): 10-byte records written sequentially into
 * 64 KiB chunks of a MAP_SHARED file, 2048 chunks (128 MiB) per way:
 *
 *   in place, faults      write into the chunk's fresh mapping (a page fault
 *                         per 4 KiB on first touch)
 *   in place, populated   MADV_POPULATE_WRITE each chunk first (what format 3's
 *                         agent did), then write into it
 *   staged + pwrite       write into one reused, already touched 64 KiB
 *                         slot, then pwrite it to the chunk's place (format 4)
 *   touched again         write into pages touched before (the floor)
 *
 * Usage: page_cost [dir]   (default /tmp; the file is unlinked at once) */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

enum { kChunk = 65536, kChunks = 2048, kRecord = 10, kPerChunk = kChunk / kRecord };
#define MADV_POPULATE_WRITE_ 23

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void fill(uint8_t* chunk) {
    for (size_t i = 0; i < kPerChunk; ++i) memset(chunk + i * kRecord, (int)i, kRecord);
}

/* A fresh file region every time: the old one punched out and reserved again. */
static uint8_t* fresh(int fd, uint8_t* old) {
    size_t total = (size_t)kChunks * kChunk;
    if (old) munmap(old, total);
    if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t)total) != 0 ||
        posix_fallocate(fd, 0, (off_t)total) != 0) {
        perror("fallocate");
        exit(1);
    }
    uint8_t* m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    return m;
}

int main(int argc, char** argv) {
    const char* dir = argc > 1 ? argv[1] : "/tmp";
    char path[4096];
    snprintf(path, sizeof path, "%s/page_cost.%d", dir, (int)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        perror(path);
        return 1;
    }
    unlink(path);
    uint8_t* slot = mmap(NULL, kChunk, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    memset(slot, 1, kChunk);
    uint8_t* m = NULL;
    const char* names[] = {"in place, faults", "in place, populated", "staged + pwrite", "touched again"};
    for (int way = 0; way < 4; ++way) {
        m = fresh(fd, m);
        if (way == 3)  /* touched once, untimed */
            for (size_t c = 0; c < kChunks; ++c) fill(m + c * (size_t)kChunk);
        uint64_t t0 = now_ns();
        for (size_t c = 0; c < kChunks; ++c) {
            uint8_t* chunk = m + c * (size_t)kChunk;
            if (way == 1) madvise(chunk, kChunk, MADV_POPULATE_WRITE_);
            if (way == 2) {
                fill(slot);
                if (pwrite(fd, slot, kChunk, (off_t)(c * (size_t)kChunk)) != kChunk) {
                    perror("pwrite");
                    return 1;
                }
            } else {
                fill(chunk);
            }
        }
        uint64_t t1 = now_ns();
        double per = (double)(t1 - t0) / ((double)kChunks * kPerChunk);
        printf("%-22s %6.1f ns per %d-byte record (%5.2f us per 4 KiB page)\n", names[way], per, kRecord,
               per * 4096 / kRecord / 1000);
    }
    return 0;
}
