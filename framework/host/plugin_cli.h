// What the CLI does about plugins besides loading them: --list-plugins (with
// --verbose, every option), --describe-plugin=NAME, the selected plugins that
// could not be loaded (dropped from the selection with an error; the run goes
// on and ends with exit status 71), and the plugin settings a Python program
// run under the CLI inherits.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "config.h"
#include "registry.h"

namespace msms {

// The table of --list-plugins; with verbose, each plugin's options below it.
void print_plugin_list(const Registry& reg, bool verbose, std::ostream& out);
// --describe-plugin=NAME: false (and an error line) when no plugin has that name.
bool print_plugin_description(const Registry& reg, const std::string& name, std::ostream& out, std::string& error);
// One option as "name (int, default 5, range 1..100): help".
std::string describe_option(const PluginInfo::Option& o);
// A plugin the raw selection names (--analysis, --sinks, --analyze) that
// was found but refused: the option's key, the item as given ("oom:5"),
// the plugin's name, and why ("PATH: REASON", escaped for the terminal).
struct RefusedSelection {
    std::string key, item, name, why;
};
std::vector<RefusedSelection> refused_selections(const RawConfig& raw, const Registry& reg);
// Removes from the raw selection (--analysis, --sinks, --analyze and their
// plugin options) every plugin that was found but refused, saying so as an
// error (console_notes.h: the logs repeat it) that names the selection as
// its user made it (a Python API user: config()'s key, or nothing for the
// analyzer analyze() was called for); returns how many were removed.
int drop_unloadable_selections(RawConfig& raw, const Registry& reg);
// True when --analyze is left with no analyzer (each one it named was
// dropped): there is nothing to run, and the drop's error said why.
bool analyzes_nothing(const RawConfig& raw);
// The plugins drop_unloadable_selections dropped in this process: (name,
// why), for each process's config.json ("dropped").
const std::vector<std::pair<std::string, std::string>>& dropped_at_load();

// Puts the command line's plugin folders (--plugin-path, YAML
// plugins.search_paths; absolute, ':'-separated) and plugin options
// ("NAME.KEY=VALUE" lines) into this process's environment as
// MSMEMSCOPE_CLI_PLUGIN_PATHS and MSMEMSCOPE_CLI_PLUGIN_OPTIONS, for the
// profiled program to inherit: msmemscope.config() in a Python target checks
// its values against the same plugins.
void export_plugin_settings(const RawConfig& raw);

}  // namespace msms
