// Host-heap blocks of Python imports, folded (the Python package's CLI boot,
// bindings/msmemscope/_boot.py, marks the import machinery's work on a
// thread with msms_agent_import_enter/leave; host_heap.python_imports=fold).
//
// While a thread is inside such a scope and collection is on, each HOST
// block it allocates is remembered in live_blocks (no row, no stacks), and a
// free of a remembered block (on any thread) just forgets it. When the
// thread's outermost scope ends, every block still remembered is written as
// a MALLOC with Attr shadow:true,import:true (no stacks), so that its later
// FREE pairs and the host's used/peak stay right from then on. A block the
// table cannot hold is written as an ordinary row instead.
//
// msms_agent_import_finalizing (the boot's last atexit handler: the
// interpreter is about to tear its modules down): from then on HOST frees
// are written without stacks.
#pragma once

#include <cstdint>

namespace msms::agent::import_fold {

// true: the block was folded (write no row). Only HOST blocks are folded.
bool alloc(uint64_t ptr, uint64_t size);
// true: the free is handled (a folded block: no row; or written here).
bool release(uint64_t ptr);

}  // namespace msms::agent::import_fold
