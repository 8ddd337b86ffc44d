// Stack capture in the target: walk, intern (a stack is an id), write the
// definition once per thread. Symbolization happens in the host.
#pragma once

#include <msmemscope/agent.h>

#include <cstdint>

#include "channel.h"

namespace msms::agent {

// Returns the interned id of the current C stack (0 when none), at most
// `depth` frames, skipping the agent's own frames.
uint64_t capture_c_stack(ThreadWriter*& w, uint32_t depth);
// Same for the Python stack given by the provider.
uint64_t capture_py_stack(ThreadWriter*& w, msms_stack_provider provider, uint32_t depth);

}  // namespace msms::agent
