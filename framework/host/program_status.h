// The wait status of the program the CLI started, for the pipeline workers.
//
// A program killed by SIGKILL leaves no end record in its capture: only the
// CLI, which reaps it, knows how it ended. The console says so from the wait
// status (Session::how_ended), but summary.json is written by the worker that
// read the capture, a process of its own (supervisor.h). This is one page of
// shared memory, mapped by the CLI before its first worker is forked (every
// worker inherits it): the CLI writes the program's pid when it starts it and
// the wait status when it reaps it; a worker that finds no end record in the
// program's capture waits briefly for that status.
#pragma once

#include <sys/types.h>

#include <chrono>

namespace msms {
namespace program_status {

// In the CLI, before any worker is forked; false if no page could be mapped
// (the workers then know nothing beyond the capture).
bool setup();
// In the CLI: the program it started (its pid), then how it ended.
void started(pid_t pid);
void reaped(pid_t pid, int wait_status);

// In a worker (or a thread of the CLI): true and the status when `pid` is the
// program the CLI started and it has been reaped, waiting up to `wait` for
// that; false at once when `pid` is not that program.
bool wait_for(pid_t pid, std::chrono::milliseconds wait, int& wait_status);

}  // namespace program_status
}  // namespace msms
