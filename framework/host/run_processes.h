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
// The rule: the console names processes once a second process has a line
// for the console, or once a rank tells two processes apart: two processes
// of the run have different ranks (torchrun's, or torch.distributed's
// learned late), or a process has a rank that its parent, a process of the
// run too, had not in its environment (a launcher without a rank that
// starts ranked trainers). A second process alone is not enough: a
// one-process program's short helpers (platform.processor()'s `uname -p`, a
// `git rev-parse`, a subprocess.run(["true"])) are profiled processes too,
// and they say nothing; naming the program's own warnings for them only
// changed its words. Nor is a rank that a helper inherits: users export
// RANK or LOCAL_RANK in their shells and job scripts, and a program run
// with RANK=0 hands it to every helper, which has its parent's rank. (The
// run's first process has no parent in the run: its own rank names
// nothing. A parent's rank is its environment's, which the session reads
// from the capture's header in the order the captures appear, whichever of
// parent and child comes first. A child's rank learned late, from
// torch.distributed in its worker (mp.spawn's trainers), is compared with
// its parent's as the worker's copy of the record has it: the parent's
// capture is found before the child's.)
//
// The session notes each capture's pid, parent and rank before it forks the
// capture's worker; the record is a page shared with the workers, so that
// the first process's worker learns of the second one while it runs. An
// exec's new image (the same pid) is not another process.
#pragma once

#include <cstdint>
#include <string>

namespace msms {
namespace run_processes {

// Main process, before any worker is forked: maps the page (once) and
// forgets what an earlier run saw.
void begin_run();
// Main process: a capture of pid was found (before its worker is forked),
// from its header: ppid, the parent when the capture began, and rank, its
// environment's (valid_rank's text, "" for none). An exec's new image (the
// same pid) replaces what its earlier one said.
void note(uint32_t pid, uint32_t ppid = 0, const std::string& rank = "");
// Any process: pid has a rank (valid_rank's text: its environment's or a
// late one).
void note_rank(uint32_t pid, const std::string& rank);
// Any process: pid is about to say a line on the console (a warning about
// its events, an error): a second process to do so turns naming on, that
// line included.
void note_line(uint32_t pid);
// Any process: whether the console names processes now. False without a
// page.
bool naming();
// Any process: note_line(pid), then what goes before the line on the
// console: "[pid 4242, rank 1] " once the console names processes (rank
// "": "[pid 4242] "), "" until then.
std::string named(uint32_t pid, const std::string& rank);

}  // namespace run_processes
}  // namespace msms
