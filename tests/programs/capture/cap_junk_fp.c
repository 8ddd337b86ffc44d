/* cap_junk_fp: a function whose %rbp is not a frame pointer when it calls
 * malloc, as in code built without frame pointers that uses %rbp for data.
 * Its %rbp points at two words of its own stack that look like a frame
 * record whose return address is text ("/tmp/pro", 0x6f72702f706d742f, not
 * a user-space address). Its unwind table (CFI) is right, so an unwinder
 * finds the true chain: junk_fp_alloc <- caller_of_junk <- main.
 *
 * main -> caller_of_junk -> junk_fp_alloc: malloc(4545), kept until main frees it. */
#include <stddef.h>
#include <stdlib.h>

void* junk_fp_alloc(size_t size);

__asm__(
    ".text\n"
    ".globl junk_fp_alloc\n"
    ".type junk_fp_alloc,@function\n"
    "junk_fp_alloc:\n"
    ".cfi_startproc\n"
    "  push %rbp\n"
    ".cfi_def_cfa_offset 16\n"
    ".cfi_offset %rbp, -16\n"
    "  sub $48, %rsp\n"
    ".cfi_def_cfa_offset 64\n"
    /* a fake record at 0(%rsp): next = 16(%rsp), return = text; at
     * 16(%rsp): next = 0 (the chain's end), return = text */
    "  lea 16(%rsp), %rax\n"
    "  mov %rax, 0(%rsp)\n"
    "  movabs $0x6f72702f706d742f, %rax\n"
    "  mov %rax, 8(%rsp)\n"
    "  movq $0, 16(%rsp)\n"
    "  mov %rax, 24(%rsp)\n"
    "  mov %rsp, %rbp\n"
    "  call malloc@PLT\n"
    "  add $48, %rsp\n"
    ".cfi_def_cfa_offset 16\n"
    "  pop %rbp\n"
    ".cfi_def_cfa_offset 8\n"
    "  ret\n"
    ".cfi_endproc\n"
    ".size junk_fp_alloc, .-junk_fp_alloc\n");

__attribute__((noinline)) void* caller_of_junk(void) {
    void* p = junk_fp_alloc(4545);
    __asm__ volatile("" ::: "memory");  /* not a tail call */
    return p;
}

int main(void) {
    void* p = caller_of_junk();
    free(p);
    return 0;
}
