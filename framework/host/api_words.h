// The Python API's words for what the host says. A plain `python3 script.py`
// with msmemscope.config()/start() runs the host with --serve-session and the
// options config() was given; its user never typed a command-line option, so
// the host's messages to that user (warnings, plugins' messages, the report
// at the end) name config()'s keys instead: "--steps" becomes 'steps',
// "--events=alloc" becomes events="alloc", "--call-stack=c" call_stack="c".
// Options config() has no key for, and any other text, are left as they are.
#pragma once

#include <string>

namespace msms {

std::string api_words(const std::string& text);
// What the host says to its user: api_words(text) where that user is one
// of the Python API's, a session's program (--serve-session) or a caller of
// msmemscope.analyze() or check_inefficient(), the offline analysis the
// package runs with --python-api (Config::offline_api); else text as it is.
struct Config;
std::string said(const Config& cfg, const std::string& text);
// config()'s key for a command-line option (without "--"): "call-stack" ->
// "call_stack"; nullptr for an option config() has no key for.
const char* api_key(const std::string& option);

}  // namespace msms
