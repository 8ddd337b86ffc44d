// --analyze and --compare stopped by a signal (Ctrl-C, SIGTERM, SIGHUP)
// say so in one line before they end with the signal's status: "it had not
// finished", and what that means for the files (their results are written
// only at the end, in one step, so nothing of theirs is left half written).
#pragma once

namespace msms {

// `line`: the whole message for SIGINT's case with "%s" where the signal's
// name goes, e.g. "msmemscope: --compare: interrupted by %s before it
// finished; its compare file is written only at the end". Call once, before
// the work starts; the text is formatted now (the handler only writes it).
void say_when_interrupted(const char* line);

}  // namespace msms
