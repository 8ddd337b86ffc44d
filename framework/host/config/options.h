// The option table shared by the command line, the YAML loader and --help,
// and the small value helpers every part of the configuration uses.
#pragma once

#include <string>
#include <vector>

#include "config.h"

namespace msms {
namespace cfgopt {

enum Group { kHidden = -1, kGeneral, kCollection, kAnalysis, kInputOutput, kOther, kPlugins, kInternal };

struct OptionDef {
    const char* name;     // long name, as typed
    char short_name;      // 0: none
    bool takes_value;
    const char* key;      // the setting it writes (RawConfig::values); nullptr: name
    Group group;          // --help section; kHidden: an accepted alias, not listed
    bool upstream;        // one of msMemScope's own names (wins a prefix tie)
    const char* meta;     // --help: "<LEVEL>"
    const char* help;
    std::string setting() const { return key ? key : name; }
};

// Every long option. Order = order in --help within its group.
const std::vector<OptionDef>& options();
// Exact long name, or nullptr.
const OptionDef* find_option(const std::string& name);

extern const char* const kDeviceAllowed;
extern const char* const kEventsAllowed;

// "call_stack" -> "call-stack".
std::string canonical(std::string key);
std::string bad_value(const std::string& origin, const std::string& value, const std::string& allowed);
const PluginInfo* find_plugin(const Catalog& c, const std::string& name, int kind);
std::vector<std::string> names_of_kind(const Catalog& c, int kind);
bool parse_bool(const std::string& v, bool& out);
// A value echoed in an error: at most 80 characters, then "…"; control
// characters escaped (util/text.h escape_controls).
std::string shown(const std::string& value);

}  // namespace cfgopt
}  // namespace msms
