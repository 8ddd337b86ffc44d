// msmemscope --attach=PID: profile a process that is already running.
//
// Session::attach (attach.cpp) checks the target (it exists, is ours or we
// are root, is not profiled already, is a dynamically linked glibc program),
// creates the session folder as a normal run does, then runs
// `gdb -batch -nx -p PID`: gdb stops the process, waits until one of its
// threads enters malloc/free/calloc/realloc (a point where that thread holds
// no allocator lock, so that loading a library is safe), dlopens the agent by
// its absolute path and calls msms_agent_attach_running
// (framework/agent/attach.h) once, then detaches. The host reads the capture
// as in a normal run. Detach (Ctrl-C/SIGTERM/SIGHUP, --attach-for): the host
// creates <session>/detach.<pid>, which the agent's thread polls;
// --attach-steps is counted by the agent. The process keeps running.
//
// gdb never stays: a timeout interrupts gdb (which then detaches and leaves
// the process as it was), and gdb runs in its own process group so a Ctrl-C
// at the terminal reaches only msmemscope.
#pragma once

#include <sys/types.h>

#include <string>

namespace msms::attach {

// "" when `pid` can be attached, else the error (without "msmemscope: error: ").
std::string check_target(pid_t pid);

struct Injection {
    std::string agent;    // absolute path of libmsmemscope_agent.so
    std::string dir;      // session folder
    std::string options;  // agent options
    std::string libs;     // '\n'-separated collector target libraries
    std::string pypath;   // folder holding the msmemscope Python package ("" = none)
    unsigned steps = 0;   // --attach-steps
};

// Runs gdb; "" on success, else the error.
// `report`: what the agent installed, one line per target library ("hooks
// NAME: ...", "skipped NAME: why" or "failed NAME: why").
std::string inject(pid_t pid, const Injection& what, unsigned timeout_s, std::string& report);
// What inject returns when the CLI got SIGINT, SIGTERM or SIGHUP while it
// waited for the process's first malloc: it stopped waiting and left the
// process as it was.
extern const char* const kCancelled;
// The fallback when the agent did not answer a detach request.
std::string force_detach(pid_t pid, const std::string& agent, unsigned timeout_s);

}  // namespace msms::attach
