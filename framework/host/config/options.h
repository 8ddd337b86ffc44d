// The option table shared by the command line, the YAML loader and --help,
// and the small value helpers every part of the configuration uses.
#pragma once

#include <string>
#include <vector>

#include "config.h"

namespace msms {
namespace cfgopt {

struct OptionDef {
    const char* name;
    bool takes_value;
    const char* help;
};

// Every long option. Order = order in --help.
const std::vector<OptionDef>& options();

extern const char* const kDeviceAllowed;
extern const char* const kEventsAllowed;

// "call_stack" -> "call-stack".
std::string canonical(std::string key);
std::string bad_value(const std::string& origin, const std::string& value, const std::string& allowed);
const PluginInfo* find_plugin(const Catalog& c, const std::string& name, int kind);
std::vector<std::string> names_of_kind(const Catalog& c, int kind);
bool parse_bool(const std::string& v, bool& out);

}  // namespace cfgopt
}  // namespace msms
