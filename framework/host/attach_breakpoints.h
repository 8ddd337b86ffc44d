// --attach's last resort, undone: gdb that does not stop waiting for the
// process's next malloc-family call, even when interrupted again and again,
// is killed (attach.cpp run_gdb). It dies with its breakpoints in the
// process's malloc, free, calloc and realloc (gdb keeps them in the code
// while the process runs), and the kernel lets the process go on: its next
// call of one of them stops it with SIGTRAP, which kills it.
//
// remove_left_breakpoints puts back, through /proc/PID/mem, the first bytes
// of those four functions where a breakpoint instruction is found, from the
// very libc file the process has mapped (/proc/PID/map_files, else the path
// in /proc/PID/maps when its device and inode are the mapping's). Nothing
// else is written: a function whose first bytes are not a breakpoint is left
// as it is.
#pragma once

#include <sys/types.h>

#include <string>

namespace msms {
namespace attach {

struct BreakpointRepair {
    int removed = 0;   // breakpoints found and written over
    std::string why;   // "": every function checked; else why not (the process may still hold some)
};

BreakpointRepair remove_left_breakpoints(pid_t pid);

}  // namespace attach
}  // namespace msms
