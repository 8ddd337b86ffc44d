// Where the CLI's "msmemscope: warning: ..." lines go: stderr, or nowhere
// once the run asked for errors only (-q, --log-level=error), as the log's
// own stderr sink does. Errors always go to stderr.
#pragma once

#include <ostream>

namespace msms {

// From the command line (and the profile), before the first warning.
void set_warnings_shown(bool shown);
// std::cerr, or a stream that drops what it is given.
std::ostream& warning_out();
// Whether warning_out() prints (a log keeps the warnings the console showed).
bool warnings_shown();

}  // namespace msms
