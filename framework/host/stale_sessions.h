// Session folders of runs whose host was killed (SIGKILL, OOM, a reboot):
// each session folder names its host in an `owner` file (pid and the
// process's start time); a later run into the same --output removes those
// whose host is provably gone (no such pid, or a pid reused by a process
// that started at another time). Folders without an owner file, of another
// user, or links are never touched.
#pragma once

#include <string>

namespace msms {

// Writes `dir`/owner for this process (created exclusively, no links).
// Returns "" or why not.
std::string write_session_owner(const std::string& dir);

// Removes the stale `.msmemscope_session_*` folders in `output`; returns
// how many.
size_t remove_stale_sessions(const std::string& output);

// The start time of `pid` in clock ticks since boot (/proc/PID/stat field
// 22); 0 when there is no such process.
unsigned long long process_start_time(long pid);

}  // namespace msms
