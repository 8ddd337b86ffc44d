// One plugin failure as the run's JSON files name it.
//
// A plugin the supervisor excluded (it crashed, hung or threw) is listed
// under "plugin_failures" in summary.json (process_summary_json.cpp) and in
// the live view's live.json (live/live_state.cpp). Both build the entry here
// so the two files cannot drift apart in the keys they give a failure.
#pragma once

#include <string>

#include "util/json.h"

namespace msms {

// {"plugin": ..., "kind": ..., "what": ...}: the failing plugin's name, its
// kind (collector, analyzer, sink) and what happened, as the console said it.
// A caller may set more keys after these (live.json adds the banner "text").
Json plugin_failure_json(const std::string& plugin, const std::string& kind, const std::string& what);

}  // namespace msms
