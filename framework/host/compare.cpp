#include "compare.h"

#include <iostream>

namespace msms {

// Placeholder until the compare analysis lands (issue: analyzers).
int compare_main(const Config& cfg) {
    std::cerr << "msmemscope: error: --compare is not available in this build\n";
    return 2;
}

}  // namespace msms
