// What the console is told before any process's log file exists: the
// configuration's warnings, plugins refused at discovery, selected plugins
// dropped for it, collectors left out for their target library, the warning
// for a run as root, --replay's line of the captures its pattern matched,
// --attach's warnings and its "attached to pid" line. A reader of a run's log
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
    // A line on stdout or stderr, printed as it is (kept by a log at every
    // level, as the report is); "msmemscope: warning: ..."; "msmemscope:
    // error: ...".
    enum Kind { Out, Warning, Error } kind = Warning;
    std::string text;  // the line as printed, or the words after "msmemscope: warning: " / "error: "
};

// LINE on stdout, kept for the logs.
void say_out(const std::string& line);
// LINE on stderr, as it is: a status line (--attach's "attached to pid N")
// that leaves stdout to the report; kept for the logs as say_out's are.
void say_status(const std::string& line);
// "msmemscope: warning: TEXT" on warning_out() (so not with -q), kept for the logs.
void say_warning(const std::string& text);
// "msmemscope: error: TEXT" on stderr, kept for the logs.
void say_error(const std::string& text);
// What was said so far, oldest first.
std::vector<ConsoleNote> console_notes();

}  // namespace msms
