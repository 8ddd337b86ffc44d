// What the console is told before any process's log file exists: the
// configuration's warnings, plugins refused at discovery, selected plugins
// dropped for it, collectors left out for their target library, the warning
// for a run as root, --replay's line of the captures its pattern matched. A reader of a run's log
// alone (msmemscope_logs/*.log, e.g. collected from CI) missed them: each is
// printed here and kept with the time it was said, and every process's log
// repeats them, in order, at those times, once it opens (ProcessRun).
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace msms {

struct ConsoleNote {
    std::chrono::system_clock::time_point when;
    // A line on stdout, printed as it is (kept by a log at every level, as
    // the report is); "msmemscope: warning: ..."; "msmemscope: error: ...".
    enum Kind { Out, Warning, Error } kind = Warning;
    std::string text;  // stdout's line, or the words after "msmemscope: warning: " / "error: "
};

// LINE on stdout, kept for the logs.
void say_out(const std::string& line);
// "msmemscope: warning: TEXT" on warning_out() (so not with -q), kept for the logs.
void say_warning(const std::string& text);
// "msmemscope: error: TEXT" on stderr, kept for the logs.
void say_error(const std::string& text);
// What was said so far, oldest first.
std::vector<ConsoleNote> console_notes();

}  // namespace msms
