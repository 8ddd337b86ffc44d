// Whether the run has seen more than one process.
//
// A run of several profiled processes (ranks, DataLoader workers) has one
// pipeline worker per process (supervisor.h), and each says its plugins'
// warnings about the events on the console as they are found: with two
// ranks, rank 0's leak suspects and rank 1's read alike. Once the run has
// seen a second process, each worker names its process in such a line
// (Pipeline::log); a run of one process keeps upstream's words.
//
// The session notes each capture's pid before it forks the capture's
// worker; the record is a page shared with the workers, so that the first
// process's worker learns of the second one while it runs. An exec's new
// image (the same pid) is not another process.
#pragma once

#include <cstdint>

namespace msms {
namespace run_processes {

// Main process, before any worker is forked: maps the page (once) and
// forgets what an earlier run saw.
void begin_run();
// Main process: a capture of pid was found (before its worker is forked).
void note(uint32_t pid);
// Any process: whether captures of two different pids were noted. False
// without a page (a replay: nothing is noted).
bool more_than_one();

}  // namespace run_processes
}  // namespace msms
