// Stack capture in the target: walk, intern (a stack is an id), write the
// definition once per thread. Symbolization happens in the host, which maps
// addresses to modules with the kModule records written here.
#pragma once

#include <msmemscope/agent.h>

#include <cstdint>

#include "channel.h"

namespace msms::agent {

// Learns the agent's and the collectors' own code ranges (frames skipped at
// the top of every stack) and reports the loaded modules.
void stacks_init();
// Returns the interned id of the current C stack (0 when none), at most
// `depth` frames, skipping the agent's and the hook libraries' frames.
// `kind`: 0 an ordinary C stack; 2 a CPython process's start-up stack and
// 3 a block of the dynamic loader's, both taken when no one asked for C
// stacks (capture_format.h kStack: the host gives their frames no source
// lines, and a last line that says what they are).
uint64_t capture_c_stack(ThreadWriter*& w, uint32_t depth, uint8_t kind = 0);
// The native code that called the allocator, for a HOST block of a run that
// asked for Python stacks and no C ones (kStack kind 4, capture_format.h):
// `ret`, the malloc hook's return address, and when that is in libstdc++'s
// operator new, operator new's own caller, read from the caller's stack
// (`caller_sp`: the stack pointer at the hooked call) at an offset learnt
// once per process by one unwind. No walk on the hot path.
uint64_t capture_caller_stack(ThreadWriter*& w, uint64_t ret, const uint64_t* caller_sp);
// Same for the Python stack given by the provider.
uint64_t capture_py_stack(ThreadWriter*& w, msms_stack_provider provider, uint32_t depth);
// Same, from a provider that names its answers: an answer named as the
// thread's last one costs neither a copy nor a compare.
uint64_t capture_py_stack_named(ThreadWriter*& w, msms_stack_provider_named provider, uint32_t depth);

// Process-wide interning: one id per distinct string or stack in a stream,
// whichever thread defines it first (the per-thread caches sit in front).
// Returns the id published for `hash`, or 0; with 0 and claim >= 0 the
// caller writes the definition and then calls shared_publish(claim, id)
// (id 0: the definition could not be written, the claim is given up).
uint64_t shared_find(uint64_t hash, int64_t& claim);
void shared_publish(int64_t claim, uint64_t id);

// Which walker: 0 frame pointers with unwind-table fallback (default),
// 1 unwind tables only (MSMEMSCOPE_UNWIND=tables; for measurements).
int unwind_mode();

}  // namespace msms::agent
