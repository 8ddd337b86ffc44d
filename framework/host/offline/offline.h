// msmemscope --analyze=<analyzer>[,...] --input=<file|folder|capture>:
// runs analyzers on a saved run (COMPAT §2 "Offline"). A memscope_dump CSV or
// DB (ours or upstream's, rows sorted by time first) goes through the same
// Pipeline as a live run; the Attr changes the analyzers make (e.g.
// inefficient, leak) are written back into that file; report lines go to
// stdout. A .msmcap capture is replayed with the chosen analyzers.
#pragma once

#include <string>

#include "config.h"
#include "registry.h"

namespace msms {

int offline_main(const Config& cfg, const Registry& registry);

// Appends what the console said before the analysis read a dump
// (console_notes.h: the run as root, a refused analyzer, an error that
// stopped it) to the logs the analysis of `input` appends to: those of the
// runs that recorded its dumps, or the process folder's own. A live run's
// log starts with the same lines.
void log_said_before_analysis(const std::string& input, const Config& cfg);

// What sets the memory budget of an analysis of `path`, in the words of the
// run's user: the command line's option ("--offline-memory"), or, to a
// caller of the Python API's analyze() or check_inefficient() (--python-api),
// which have no keyword for it, the command line that runs the
// analysis with one.
std::string budget_setter(const Config& cfg, const std::string& path);

}  // namespace msms
