// Host-heap blocks of Python imports, folded (the Python package's CLI boot,
// bindings/msmemscope/_boot.py, marks the import machinery's work on a
// thread with msms_agent_import_enter/leave; host_heap.python_imports=fold).
//
// While a thread is inside such a scope and collection is on, each HOST
// block it allocates is remembered in this file's table (no row, no stacks)
// for the whole of its life: its free, on any thread and whenever it comes,
// just forgets it. The blocks are written together as one block, the
// imports' heap: a MALLOC with Attr shadow:true,import:true,blocks:N (N
// blocks, their bytes as its size, no stacks) at kImportHeapAddr, an
// address no program's block can have. When a thread's outermost scope ends
// (or collection starts, or the process exits) and the figures changed, it
// is written again: a FREE of the one before, then a MALLOC with the figures
// now. So the host's used/peak count each byte once, the rows pair, and the
// block live at exit says how much of the imports' heap the interpreter
// left (the leak report's "while importing Python modules"). A CPython
// program makes ~300 k such blocks importing torch and frees them at its
// shutdown: two rows instead of ~650 k. A block the table cannot hold is
// written as an ordinary row instead.
//
// msms_agent_import_finalizing (the boot's last atexit handler: the
// interpreter is about to tear its modules down): from then on HOST frees
// are written without stacks.
#pragma once

#include <cstdint>

namespace msms::agent::import_fold {

// The address of the imports' heap rows (the kernel's half of the address
// space: never a block of the program's).
constexpr uint64_t kImportHeapAddr = 0xffff800000000000ull;

// true: the block was folded (write no row). Only HOST blocks are folded.
bool alloc(uint64_t ptr, uint64_t size);
// true: the free is handled (a folded block: no row; or written here).
bool release(uint64_t ptr);
// Collection off: a folded block's free only forgets it (true), no row.
bool release_quiet(uint64_t ptr);
// Writes the imports' heap again when its figures changed (collection on).
void publish();
// A forked child: its stream has no row of the imports' heap yet.
void after_fork();

}  // namespace msms::agent::import_fold
