// --help: the usage lines and one line per option of the option table.
#include "config.h"

#include <sstream>
#include "options.h"
#include "util/text.h"

namespace msms {
using namespace cfgopt;

std::string help_text() {
    std::ostringstream os;
    os << "Usage:\n"
          "  msmemscope [options] bash user.sh\n"
          "  msmemscope [options] -- <prog> [prog args]\n"
          "  msmemscope --compare --input=<base>,<compare> [--level=op|kernel] [--output=DIR]\n"
          "  msmemscope --replay=<capture.msmcap> [--analysis=...] [--data-format=...]\n"
          "  msmemscope --analyze=<analyzer>[,...] --input=<dump.csv|dump.db|folder|capture> "
          "[--plugin-option=NAME.KEY=VALUE ...]\n"
          "\nOptions (values separated by ',' or '\xEF\xBC\x8C'):\n";
    for (auto& o : options()) {
        std::string head = std::string("  --") + o.name + (o.takes_value ? "=VALUE" : "");
        if (std::string(o.name) == "help") head = "  -h, --help";
        if (std::string(o.name) == "version") head = "  -v, --version";
        os << head;
        if (head.size() < 26) os << std::string(26 - head.size(), ' ');
        else os << "\n" << std::string(26, ' ');
        os << o.help << "\n";
    }
    return os.str();
}

}  // namespace msms
