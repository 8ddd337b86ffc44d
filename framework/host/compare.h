// msmemscope --compare --input=<base>,<compare>: offline comparison of two
// runs (spec/COMPAT.md §6). Returns the process exit code.
#pragma once

#include "compare_log.h"
#include "config.h"

namespace msms {

// What it tells the user goes through `log` (printed, and kept in its log).
int compare_main(const Config& cfg, CompareLog& log);

}  // namespace msms
