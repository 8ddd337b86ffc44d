// Interposing dlsym, for a collector's hook library whose functions programs
// also reach through dlsym(handle, name) on a library's own handle
// (ctypes.CDLL("libc.so.6").malloc, dlopen("libcuda.so.1") + "cuMemAlloc"):
// such a lookup finds the library's definition, never the preloaded hook.
//
// glibc's dlsym(RTLD_NEXT, ...) searches after the object that *called* it
// (its return address). A C wrapper that forwarded the call would make every
// RTLD_NEXT lookup of the other preloaded libraries start after the hook
// library: wrong, and endless recursion for malloc hooks. So dlsym is a
// trampoline: it asks PRE(handle, name) whether to substitute, and otherwise
// tail-jumps into REAL (the next dlsym) with the caller's return address
// untouched. Several hook libraries doing this compose: each one's REAL is
// the next one's trampoline (find_real_dlsym searches after its caller).
//
//     extern "C" void* mypool_alloc(size_t n);   // the hook (the pool's name, exported)
//     extern "C" {
//     __attribute__((visibility("hidden"))) msmemscope::dlsym_fn my_real_dlsym = nullptr;
//     __attribute__((visibility("hidden"))) void* my_dlsym_pre(void* handle, const char* name) {
//         if (!my_real_dlsym)                                                   // before any return
//             my_real_dlsym = msmemscope::find_real_dlsym(reinterpret_cast<const void*>(&my_dlsym_pre));
//         if (handle == RTLD_NEXT || handle == RTLD_DEFAULT || !name || strcmp(name, "mypool_alloc") != 0)
//             return nullptr;                                                   // passed on unchanged
//         void* theirs = my_real_dlsym ? my_real_dlsym(handle, name) : nullptr;
//         return theirs && theirs != reinterpret_cast<void*>(&mypool_alloc)
//                    ? reinterpret_cast<void*>(&mypool_alloc) : nullptr;
//     }
//     }
//     MSMEMSCOPE_DLSYM_HOOK(my_dlsym_pre, my_real_dlsym)
//
// PRE runs on every dlsym of the process: decide by the name first. With no
// REAL (none found) the trampoline answers NULL, never jumps to it.
// x86-64 and aarch64; elsewhere MSMEMSCOPE_DLSYM_HOOK defines nothing and
// MSMEMSCOPE_HAS_DLSYM_HOOK is 0.
#pragma once

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <dlfcn.h>
#include <string.h>

// The agent's (framework/agent/got_patch.h); weak: a library that does not
// link the agent, or an older agent, has none.
extern "C" __attribute__((weak)) void* msms_agent_got_previous(const char* name, const void* caller);

namespace msmemscope {

using dlsym_fn = void* (*)(void*, const char*);

// The dlsym that comes after the calling library: libc's (glibc 2.34 moved
// it from libdl), or another hook library's trampoline. A hook library that
// the agent loaded into a running process and put in the GOT slots (the
// Python API, --attach) asks the agent first: the trampoline of a hook
// library it installed before this one, so that both are asked as under
// LD_PRELOAD (msms_agent_got_previous; `self`: any function of the calling
// library, e.g. its PRE; nullptr: not asked; the library must link the
// agent). Else RTLD_NEXT; loaded
// RTLD_LOCAL, RTLD_NEXT may find nothing: the loaded libc (or libdl) is then
// asked by name.
inline dlsym_fn find_real_dlsym(const void* self = nullptr) {
    static const char* const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17", "GLIBC_2.0"};
    // (a weak reference: no dlsym here, which may be a trampoline that comes
    // back to this library's PRE before its REAL is known)
    if (self && &msms_agent_got_previous)
        if (void* p = msms_agent_got_previous("dlsym", self)) return reinterpret_cast<dlsym_fn>(p);
    for (const char* v : versions) {
        void* p = dlvsym(RTLD_NEXT, "dlsym", v);
        if (!p) continue;
        // That is libc's (a versioned lookup never matches a trampoline: its
        // dlsym has no symbol version). Another hook library's trampoline
        // may come before libc's, after this library (LD_PRELOAD of two):
        // asked by its plain name through libc's dlsym, called from here so
        // that RTLD_NEXT searches after this library.
        dlsym_fn libc_dlsym = reinterpret_cast<dlsym_fn>(p);
        if (void* next = libc_dlsym(RTLD_NEXT, "dlsym")) return reinterpret_cast<dlsym_fn>(next);
        return libc_dlsym;
    }
    static const char* const libs[] = {"libc.so.6", "libdl.so.2"};
    for (const char* lib : libs) {
        void* h = dlopen(lib, RTLD_LAZY | RTLD_NOLOAD);
        if (!h) continue;
        dlsym_fn found = nullptr;
        for (const char* v : versions) {
            // (libc's own scope: never a trampoline)
            if (void* p = dlvsym(h, "dlsym", v)) {
                found = reinterpret_cast<dlsym_fn>(p);
                break;
            }
        }
        dlclose(h);
        if (found) return found;
    }
    return nullptr;
}

}  // namespace msmemscope

#define MSMEMSCOPE_DLSYM_STR2(x) #x
#define MSMEMSCOPE_DLSYM_STR(x) MSMEMSCOPE_DLSYM_STR2(x)

#if defined(__x86_64__)
#define MSMEMSCOPE_HAS_DLSYM_HOOK 1
#define MSMEMSCOPE_DLSYM_HOOK(PRE, REAL)                        \
    asm(".text\n"                                               \
        ".globl dlsym\n"                                        \
        ".type dlsym, @function\n"                              \
        ".p2align 4\n"                                          \
        "dlsym:\n"                                              \
        ".cfi_startproc\n"                                      \
        "  pushq %rdi\n"                                        \
        ".cfi_adjust_cfa_offset 8\n"                            \
        "  pushq %rsi\n"                                        \
        ".cfi_adjust_cfa_offset 8\n"                            \
        "  subq $8, %rsp\n"                                     \
        ".cfi_adjust_cfa_offset 8\n"                            \
        "  call " MSMEMSCOPE_DLSYM_STR(PRE) "\n"                \
        "  addq $8, %rsp\n"                                     \
        ".cfi_adjust_cfa_offset -8\n"                           \
        "  popq %rsi\n"                                         \
        ".cfi_adjust_cfa_offset -8\n"                           \
        "  popq %rdi\n"                                         \
        ".cfi_adjust_cfa_offset -8\n"                           \
        "  testq %rax, %rax\n"                                  \
        "  jz 1f\n"                                             \
        "  ret\n"                                               \
        "1:\n"                                                  \
        "  movq " MSMEMSCOPE_DLSYM_STR(REAL) "(%rip), %rax\n"   \
        "  testq %rax, %rax\n"                                  \
        "  jz 2f\n"                                             \
        "  jmp *%rax\n"                                         \
        "2:\n" /* no dlsym to pass on to: not found (NULL) */   \
        "  ret\n"                                               \
        ".cfi_endproc\n"                                        \
        ".size dlsym, .-dlsym\n");
#elif defined(__aarch64__)
#define MSMEMSCOPE_HAS_DLSYM_HOOK 1
#define MSMEMSCOPE_DLSYM_HOOK(PRE, REAL)                                        \
    asm(".text\n"                                                               \
        ".globl dlsym\n"                                                        \
        ".type dlsym, %function\n"                                              \
        ".p2align 2\n"                                                          \
        "dlsym:\n"                                                              \
        ".cfi_startproc\n"                                                      \
        "  stp x29, x30, [sp, #-32]!\n"                                         \
        ".cfi_def_cfa_offset 32\n"                                              \
        ".cfi_offset 29, -32\n"                                                 \
        ".cfi_offset 30, -24\n"                                                 \
        "  mov x29, sp\n"                                                       \
        "  stp x0, x1, [sp, #16]\n"                                             \
        "  bl " MSMEMSCOPE_DLSYM_STR(PRE) "\n"                                  \
        "  mov x9, x0\n"                                                        \
        "  ldp x0, x1, [sp, #16]\n"                                             \
        "  ldp x29, x30, [sp], #32\n"                                           \
        ".cfi_restore 30\n"                                                     \
        ".cfi_restore 29\n"                                                     \
        ".cfi_def_cfa_offset 0\n"                                               \
        "  cbz x9, 1f\n"                                                        \
        "  mov x0, x9\n"                                                        \
        "  ret\n"                                                               \
        "1:\n"                                                                  \
        "  adrp x16, " MSMEMSCOPE_DLSYM_STR(REAL) "\n"                          \
        "  ldr x16, [x16, #:lo12:" MSMEMSCOPE_DLSYM_STR(REAL) "]\n"             \
        "  cbz x16, 2f\n"                                                       \
        "  br x16\n"                                                            \
        "2:\n" /* no dlsym to pass on to: not found (NULL) */                   \
        "  mov x0, #0\n"                                                        \
        "  ret\n"                                                               \
        ".cfi_endproc\n"                                                        \
        ".size dlsym, .-dlsym\n");
#else
#define MSMEMSCOPE_HAS_DLSYM_HOOK 0
#define MSMEMSCOPE_DLSYM_HOOK(PRE, REAL)
#endif
