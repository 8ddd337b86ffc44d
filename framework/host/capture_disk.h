// How much disk a live capture may hold while the host reads it (issue #18
// item 4). Read from the environment by the host (and by the Python
// package, which computes the agent's options): the same values on both sides.
#pragma once

#include <cstdint>

namespace msms {

// The first bytes of a live capture's read part kept for re-running a
// crashed plugin's outputs from the whole capture; released together once
// more was read. MSMEMSCOPE_CAPTURE_KEEP_MIB (MiB, 0 = release at once),
// default 64 MiB.
uint64_t capture_keep_bytes();
// How far the host may fall behind the program beyond the kept part before
// the program waits for it: MSMEMSCOPE_CAPTURE_UNREAD_MIB (MiB, 0 = never
// wait: the unread part may grow with the run), default 256 MiB, 64 MiB
// with --aggregate (a budget the host of a training loop stays within, so
// the loop does not wait for a host that a busy machine starves; 6 MiB made
// a 20-step GPT loop 3-4x slower there).
uint64_t capture_unread_bytes(bool aggregate = false);
// The agent's capture budget in chunks (capture_budget=N, capture_format.h)
// for a live capture that is not saved: unread / chunk size with
// --aggregate (it keeps nothing), else (keep + unread) / chunk size, at
// least 96 (6 MiB); 0: no budget.
uint32_t capture_budget_chunks(bool aggregate);

}  // namespace msms
