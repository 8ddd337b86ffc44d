// attach_cuda_loop: a long-running program on the simulated CUDA driver
// (tests/fixtures/cuda), linked against libcuda.so.1, for msmemscope
// --attach with --device=cuda (tests/python/test_attach.py). It runs without
// msmemscope; the test attaches to it while it runs.
//
//   attach_cuda_loop READY_FILE
//
// Makes a context on device 0 and allocates 4 MiB before anything can
// attach (a block the profiler cannot know), then loops: each turn mallocs
// and frees a little host memory (an attach gets in at the malloc family)
// and reads commands from stdin without blocking:
//   "cuda N\n" N device blocks of 1 MiB through cuMemAlloc_v2 (the
//              program's GOT slot), kept, and one of 2 MiB through the
//              pointer dlsym(dlopen("libcuda.so.1"), "cuMemAlloc_v2") returns
//              now (the dlsym hook), freed; prints "cuda N at 0x<first>"
//   "quit\n"   frees everything, prints "done", exits 0
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attach_common.h"
#include "cuda_driver_api.h"

extern "C" {
CUresult cuInit(unsigned int);
CUresult cuCtxCreate_v4(CUcontext*, CUctxCreateParams*, unsigned int, CUdevice);
CUresult cuMemAlloc_v2(CUdeviceptr*, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
}

int main(int argc, char** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: attach_cuda_loop READY_FILE\n");
        return 2;
    }
    CUcontext ctx = nullptr;
    CUdeviceptr before = 0;
    if (cuInit(0) != 0 || cuCtxCreate_v4(&ctx, nullptr, 0, 0) != 0 || cuMemAlloc_v2(&before, 4u << 20) != 0) return 3;
    CUdeviceptr kept[256];
    int nkept = 0;
    bool ready = false;
    for (unsigned long turns = 0;; ++turns) {
        char* a = static_cast<char*>(malloc(64 + (turns % 32)));
        if (!a) return 3;
        a[0] = 1;
        free(a);
        if (!ready) {
            attach_write_ready(argv[1]);
            ready = true;
        }
        const char* line = attach_poll_line();
        if (line && strncmp(line, "cuda ", 5) == 0) {
            int n = atoi(line + 5), first = nkept;
            for (int i = 0; i < n && nkept < 256; ++i)
                if (CUresult rc = cuMemAlloc_v2(&kept[nkept++], 1u << 20); rc != 0) {
                    fprintf(stderr, "cuMemAlloc_v2: %d\n", static_cast<int>(rc));
                    return 3;
                }
            void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
            auto alloc = lib ? reinterpret_cast<CUresult (*)(CUdeviceptr*, size_t)>(dlsym(lib, "cuMemAlloc_v2")) : nullptr;
            CUdeviceptr tmp = 0;
            if (!alloc) {
                fprintf(stderr, "dlsym(libcuda.so.1, cuMemAlloc_v2): %s\n", lib ? "not found" : "not loaded");
                return 3;
            }
            if (CUresult rc = alloc(&tmp, 2u << 20); rc != 0) {
                fprintf(stderr, "cuMemAlloc_v2 through dlsym: %d\n", static_cast<int>(rc));
                return 3;
            }
            if (CUresult rc = cuMemFree_v2(tmp); rc != 0) {
                fprintf(stderr, "cuMemFree_v2: %d\n", static_cast<int>(rc));
                return 3;
            }
            printf("cuda %d at 0x%llx\n", n, n > 0 ? static_cast<unsigned long long>(kept[first]) : 0ull);
            fflush(stdout);
        } else if (line && strcmp(line, "quit") == 0) {
            for (int i = 0; i < nkept; ++i) cuMemFree_v2(kept[i]);
            cuMemFree_v2(before);
            printf("done\n");
            return 0;
        }
    }
}
