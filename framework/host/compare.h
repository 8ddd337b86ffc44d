// msmemscope --compare --input=<base>,<compare>: offline comparison of two
// runs (spec/COMPAT.md §6). Returns the process exit code.
#pragma once

#include "config.h"

namespace msms {

int compare_main(const Config& cfg);

}  // namespace msms
