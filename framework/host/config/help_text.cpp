// --help: usage, the options by group (msMemScope's layout: General,
// Collection, Analysis, Input / Output, Other; then ours), examples.
#include "config.h"

#include <sstream>

#include "options.h"

namespace msms {
using namespace cfgopt;

std::string help_text() {
    std::ostringstream os;
    os << "Description:\n"
          "msmemscope: memory debugging and profiling for NPU, CUDA and CPU programs (compatible with msMemScope).\n"
          "\nUsage:\n"
          "  msmemscope [options] -- <prog> [args]\n"
          "  msmemscope [options] bash user.sh        (our options are read anywhere before '--')\n"
          "  msmemscope --compare --input-path=<base>,<compare> [--level=op|kernel] [--output-path=DIR]\n"
          "  msmemscope --replay=<capture.msmcap> [--analysis=...] [--format=...]\n"
          "  msmemscope --analyze=<analyzer>[,...] --input-path=<dump.csv|dump.db|folder|capture> "
          "[--plugin-option=NAME.KEY=VALUE ...]\n"
          "\nValues are separated by ',' or '\xEF\xBC\x8C'; long options may be shortened to an unambiguous prefix\n"
          "(one that names a single msMemScope option means that option, as there: --st is --steps);\n"
          "a repeated option keeps its last value.\n";
    const char* titles[] = {"General options:", "Collection options:", "Analysis options:", "Input / Output options:",
                            "Other:", "Plugins:", "Internal (used by the Python package):"};
    for (int g = kGeneral; g <= kInternal; ++g) {
        os << "\n" << titles[g] << "\n";
        for (auto& o : options()) {
            if (o.group != g) continue;
            std::string head = o.short_name ? std::string("  -") + o.short_name + ", " : std::string("      ");
            head += std::string("--") + o.name;
            if (o.takes_value) head += std::string(" ") + o.meta;
            os << head;
            if (head.size() < 32) os << std::string(32 - head.size(), ' ');
            else os << "\n" << std::string(32, ' ');
            os << o.help << "\n";
        }
    }
    os << "\nExamples:\n"
          "  # Collect memory events with default options\n"
          "  msmemscope -- python train.py\n"
          "\n"
          "  # Kernel-level tracing with call stacks\n"
          "  msmemscope --level=kernel --call-stack=c:20,python:10 -- python train.py\n"
          "\n"
          "  # Memory comparison\n"
          "  msmemscope --compare --input-path=./baseline,./target\n"
          "\nOutput:\n"
          "  Results are written to <output-path>/msmemscope_{pid}_{timestamp}_{ascend|cpu|cuda}[_rank{N}][_exec{N}]/\n"
          "  (default output path: ./memscopeDumpResults): ascend when an npu device is selected, else cuda when a\n"
          "  cuda one is, else cpu; _rank{N} from its RANK (or LOCAL_RANK), else from torch.distributed once\n"
          "  init_process_group completed (mp.spawn: the folder is renamed at the end); _exec{N} for the N-th image a\n"
          "  process exec'ed into. Each device's rows are in its device_{device}/ folder there (host memory:\n"
          "  device_cpu).\n";
    return os.str();
}

}  // namespace msms
