/* attach_loop: a long-running C program for msmemscope --attach
 * (tests/python/test_attach.py). It runs without msmemscope; the test
 * attaches to it while it runs.
 *
 *   attach_loop [--block | --undumpable | --threads] READY_FILE
 *
 * Loops until told to stop: each turn allocates and frees a few blocks
 * (so it is always inside the malloc family soon), and reads commands from
 * stdin without blocking:
 *   "leak N\n"  leak N blocks of 3000 bytes now (one per turn), then
 *               print "leaked N" on stdout
 *   "quit\n"    free the kept blocks, print the checksum, exit 0
 *   "exec PROG ARG\n"  exec PROG with the one argument ARG (the same
 *               stdin and stdout; "exec failed" on stdout if it returns)
 *   "relro\n"   whether the pages the loader made read-only after the
 *               relocations (each object's PT_GNU_RELRO, rounded as the
 *               loader does) are still read-only in /proc/self/maps:
 *               "relro read-only (N objects)", or one line "relro writable:
 *               NAME" per object that has a writable one (the program is
 *               linked with -z now: its malloc slots are in RELRO)
 * READY_FILE is created (holding the pid) once the loop runs. Its stdout
 * is deterministic (the test compares it with a run without attach).
 * --block: write READY_FILE, then wait in read(2) on stdin and _exit(0) at
 * its end, calling nothing of the malloc family (an attach never gets in)
 * unless it reads an 'm': then one malloc and free, and "m" on stdout;
 * an 'x': _exit(10) (an exit code that gdb writes in octal, "012").
 * --undumpable: prctl(PR_SET_DUMPABLE, 0) first (not traceable by its own
 * user, as a setuid program).
 * --threads: four more threads allocate and free without pause until
 * "quit" (the attach and the detach happen while threads are inside
 * malloc and free).
 *
 * Built as attach_loop_held (ATTACH_HOLD_LOOKUP), the program exports a
 * dlsym that the host heap hooks' calls reach first, and holds their look-up
 * of the real malloc (dlsym(RTLD_NEXT, "malloc")) while its threads go on:
 * until they made 1000 more turns if none of the program's own slots of the
 * malloc family points at the hooks yet, for ever if one does (the hooks are
 * in, and their first call is still looking up: the other threads' calls are
 * served from the hooks' start-up pool until it runs out). "quit" then says
 * "look-up held" before "done". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "attach_common.h"

static atomic_int stop_workers;
static atomic_long worker_turns;

#ifdef ATTACH_HOLD_LOOKUP
#include <link.h>
#include <sched.h>

typedef void* (*dlsym_fn)(void*, const char*);
static atomic_int lookup_armed = 1, lookup_held;

static int in_hooks(const void* p) {
    Dl_info in;
    return p && dladdr(p, &in) && in.dli_fname && strstr(in.dli_fname, "libmsms_host_heap_hook");
}

/* Whether one of this program's PLT slots of the malloc family points at
 * the host heap's hooks (the first object dl_iterate_phdr shows is the
 * program). */
static int hooked_slot(struct dl_phdr_info* info, size_t size, void* arg) {
    (void)size;
    const ElfW(Dyn)* dyn = NULL;
    for (int i = 0; i < info->dlpi_phnum; ++i)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn)*)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    const ElfW(Sym)* sym = NULL;
    const char* str = NULL;
    const ElfW(Rela)* rel = NULL;
    size_t bytes = 0;
    for (; dyn && dyn->d_tag != DT_NULL; ++dyn) {
        uintptr_t v = dyn->d_un.d_ptr < info->dlpi_addr ? dyn->d_un.d_ptr + info->dlpi_addr : dyn->d_un.d_ptr;
        if (dyn->d_tag == DT_SYMTAB) sym = (const ElfW(Sym)*)v;
        if (dyn->d_tag == DT_STRTAB) str = (const char*)v;
        if (dyn->d_tag == DT_JMPREL) rel = (const ElfW(Rela)*)v;
        if (dyn->d_tag == DT_PLTRELSZ) bytes = dyn->d_un.d_val;
    }
    for (size_t i = 0; sym && str && rel && i < bytes / sizeof(ElfW(Rela)); ++i) {
        const char* name = str + sym[ELF64_R_SYM(rel[i].r_info)].st_name;
        if ((!strcmp(name, "malloc") || !strcmp(name, "free") || !strcmp(name, "calloc") ||
             !strcmp(name, "realloc")) &&
            in_hooks(*(void**)(info->dlpi_addr + rel[i].r_offset)))
            *(int*)arg = 1;
    }
    return 1; /* the program only */
}

__attribute__((visibility("default"))) void* dlsym(void* handle, const char* name) {
    static dlsym_fn libc_dlsym;
    if (!libc_dlsym) libc_dlsym = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!libc_dlsym) libc_dlsym = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    if (handle == RTLD_NEXT && strcmp(name, "malloc") == 0 && in_hooks(__builtin_return_address(0)) &&
        atomic_exchange(&lookup_armed, 0)) {
        int hooked = 0;
        dl_iterate_phdr(hooked_slot, &hooked);
        long until = atomic_load(&worker_turns) + 1000;
        while (hooked || atomic_load(&worker_turns) < until) sched_yield();
        atomic_store(&lookup_held, 1);
    }
    return libc_dlsym(handle, name);
}
#endif

#include <link.h>

struct relro_state {
    int objects, writable;
};

/* Whether a mapping of /proc/self/maps with 'w' overlaps [start, end). */
static int writable_in_maps(unsigned long start, unsigned long end) {
    FILE* f = fopen("/proc/self/maps", "r");
    char line[4352];
    int found = 0;
    while (f && !found && fgets(line, sizeof(line), f)) {
        unsigned long a, b;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &a, &b, perms) == 3 && a < end && b > start && perms[1] == 'w') found = 1;
    }
    if (f) fclose(f);
    return found;
}

static int relro_object(struct dl_phdr_info* info, size_t size, void* arg) {
    (void)size;
    struct relro_state* st = arg;
    unsigned long page = (unsigned long)sysconf(_SC_PAGESIZE);
    for (int i = 0; i < info->dlpi_phnum; ++i) {
        if (info->dlpi_phdr[i].p_type != PT_GNU_RELRO) continue;
        unsigned long start = (info->dlpi_addr + info->dlpi_phdr[i].p_vaddr) & ~(page - 1);
        unsigned long end = (info->dlpi_addr + info->dlpi_phdr[i].p_vaddr + info->dlpi_phdr[i].p_memsz) & ~(page - 1);
        if (start >= end) continue;
        ++st->objects;
        if (writable_in_maps(start, end)) {
            ++st->writable;
            printf("relro writable: %s\n", info->dlpi_name && *info->dlpi_name ? info->dlpi_name : "(the program)");
        }
    }
    return 0;
}

static void relro_report(void) {
    struct relro_state st = {0, 0};
    dl_iterate_phdr(relro_object, &st);
    if (!st.writable) printf("relro read-only (%d objects)\n", st.objects);
    fflush(stdout);
}

static void* worker(void* arg) {
    unsigned long n = (unsigned long)arg, sum = 0;
    void* keep[16] = {0};
    while (!atomic_load(&stop_workers)) {
        size_t size = 16 + (n * 7919) % 4000;
        char* p = malloc(size);
        if (!p) abort();
        p[0] = (char)n;
        sum += (unsigned char)p[0];
        void* old = keep[n % 16];
        keep[n % 16] = realloc(old, size / 2 + 1);
        free(p);
        ++n;
        atomic_fetch_add(&worker_turns, 1);
    }
    for (int i = 0; i < 16; ++i) free(keep[i]);
    return (void*)sum;
}

int main(int argc, char** argv) {
    int block = argc == 3 && strcmp(argv[1], "--block") == 0;
    int nworkers = argc == 3 && strcmp(argv[1], "--threads") == 0 ? 4 : 0;
    pthread_t workers[4];
    for (int i = 0; i < nworkers; ++i)
        if (pthread_create(&workers[i], NULL, worker, (void*)(unsigned long)(i * 1000003)) != 0) return 4;
    if (argc == 3 && strcmp(argv[1], "--undumpable") == 0) prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    if (argc == 3) {
        argv[1] = argv[2];
        argc = 2;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: attach_loop [--block | --undumpable | --threads] READY_FILE\n");
        return 2;
    }
    if (block) {
        char c;
        attach_write_ready(argv[1]);
        while (read(0, &c, 1) > 0) {
            if (c == 'x') _exit(10);
            if (c == 'm') {
                /* asked for a malloc-family call: the process still makes
                 * them after an attach that gave up (no breakpoint left) */
                void* (*volatile alloc)(size_t) = malloc;
                char* p = alloc(100);
                if (!p) _exit(3);
                p[0] = 1;
                free(p);
                ssize_t w = write(1, "m\n", 2);
                (void)w;
            }
        }
        _exit(0);
    }
    unsigned long checksum = 0, turns = 0;
    void* kept[64] = {0};
    int nkept = 0;
    int to_leak = 0, leak_total = 0;
    int ready = 0;
    for (;;) {
        /* a little work each turn: allocations the profiler sees */
        char* a = malloc(128 + (turns % 64));
        char* b = calloc(4, 64);
        if (!a || !b) return 3;
        memset(a, (int)(turns & 0xff), 128);
        checksum += (unsigned char)a[7] + (unsigned char)b[3];
        free(b);
        free(a);
        if (nkept < 64 && turns % 1000 == 0) kept[nkept++] = malloc(256);
        if (to_leak > 0) {
            char* leak = malloc(3000);
            if (!leak) return 3;
            leak[0] = 1; /* never freed */
            if (--to_leak == 0) {
                printf("leaked %d\n", leak_total);
                fflush(stdout);
            }
        }
        ++turns;
        if (!ready) {
            attach_write_ready(argv[1]);
            ready = 1;
        }
        const char* line = attach_poll_line();
        if (line && strncmp(line, "leak ", 5) == 0) {
            to_leak = atoi(line + 5);
            leak_total = to_leak;
        } else if (line && strcmp(line, "relro") == 0) {
            relro_report();
        } else if (line && strcmp(line, "quit") == 0) {
            break;
        } else if (line && strncmp(line, "exec ", 5) == 0) {
            char prog[1024];
            snprintf(prog, sizeof(prog), "%s", line + 5);
            char* arg = strchr(prog, ' ');
            if (arg) *arg++ = '\0';
            execl(prog, prog, arg, (char*)NULL);
            printf("exec failed\n");
            fflush(stdout);
        }
        /* pace the loop (the test waits on lines, never on time) */
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    atomic_store(&stop_workers, 1);
    for (int i = 0; i < nworkers; ++i) pthread_join(workers[i], NULL);
    for (int i = 0; i < nkept; ++i) free(kept[i]);
#ifdef ATTACH_HOLD_LOOKUP
    if (atomic_load(&lookup_held)) printf("look-up held\n");
#endif
    printf("done\n");
    (void)checksum;
    return 0;
}
