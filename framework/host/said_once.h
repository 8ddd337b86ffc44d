// Which texts some process of the run has already said on the console.
//
// A run of several profiled processes (a DataLoader's workers) has one
// pipeline worker per process (supervisor.h), and each says its plugins'
// warnings about their setup, and often those of the end alike: the same
// words, once per process. The first worker to say a text says it at once;
// the others keep it in their log only (the session names them all at the
// end: Session::say_setup_warnings).
//
// The record is a page shared with the workers, mapped by the session before
// the first worker is forked; a worker re-run after a crash sees what the
// crashed one said.
#pragma once

#include <string>

namespace msms {
namespace said_once {

// Main process, before any worker is forked: maps the page (once) and
// forgets what an earlier run said.
void begin_run();
// Whether this process is the first of the run to say text (it now owns
// it). Always true without a page, or once the page is full: saying a text
// twice is better than not saying it.
bool first_to_say(const std::string& text);

}  // namespace said_once
}  // namespace msms
