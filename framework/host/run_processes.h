// Whether the console names the process of each warning.
//
// A run of several profiled processes (ranks, DataLoader workers) has one
// pipeline worker per process (supervisor.h), and each says its plugins'
// warnings about the events on the console as they are found: with two
// ranks, rank 0's leak suspects and rank 1's read alike. Once the reader
// needs the processes told apart, each worker names its process in such a
// line and in its error lines (Pipeline::log); until then the console keeps
// upstream's words.
//
// The rule: the console names processes once a process other than the
// run's first has a rank (its environment's when its capture began, or
// torch.distributed's later), or once a second process has a line for the
// console. A second process alone is not enough: a one-process program's
// short helpers (platform.processor()'s `uname -p`, a `git rev-parse`, a
// subprocess.run(["true"])) are profiled processes too, and they say
// nothing; naming the program's own warnings for them only changed its
// words. A helper that inherits RANK is taken for a rank (a one-process
// program with RANK set in its environment then names its lines).
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
// Any process: pid has a rank (its environment's or a late one).
void note_rank(uint32_t pid);
// Any process: pid is about to say a line on the console (a warning about
// its events, an error): a second process to do so turns naming on, that
// line included.
void note_line(uint32_t pid);
// Any process: whether the console names processes now. False without a
// page.
bool naming();

}  // namespace run_processes
}  // namespace msms
