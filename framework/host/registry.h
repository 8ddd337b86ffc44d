// Plugin discovery and loading. Plugins are files named
// libmsmemscope_plugin_*.so in, in this order: the built-in folder next to
// the binary (../lib/msmemscope/plugins), the config's plugins.search_paths
// and --plugin-path, then MSMEMSCOPE_PLUGIN_PATH (':'-separated). A plugin
// that cannot be used is refused with a one-line reason; the rest load.
//
// discover() first loads the files in a helper process
// (msmemscope-plugin-probe, plugin_probe.cpp): a library that crashes or ends
// the process while being loaded (a constructor that aborts, a sanitizer
// runtime that refuses to start) is refused with what happened and the
// loader's last words, and never loaded here.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <msmemscope/abi.h>

#include "config.h"

namespace msms {

// "collector", "analyzer", "sink" (or "unknown") for a descriptor's kind.
std::string plugin_kind_name(int kind);

struct LoadedPlugin {
    std::string path;
    std::shared_ptr<void> library;  // the dlopen handle; stays loaded while used
    const msms_plugin_descriptor* descriptor = nullptr;
    PluginInfo info;
    std::string kind_name() const;
};

struct RefusedPlugin {
    std::string path;
    std::string reason;
    std::string name;  // the type name when the descriptor was read, else ""
};

class Registry {
public:
    Registry();
    // Loads every plugin of the given folders (missing folders are skipped).
    void discover(const std::vector<std::string>& dirs);
    // Loads one file in this process; returns false and records the reason
    // when refused.
    bool load(const std::string& path);
    const std::vector<LoadedPlugin>& plugins() const { return plugins_; }
    const std::vector<RefusedPlugin>& refused() const { return refused_; }
    const LoadedPlugin* find(const std::string& name, int kind) const;
    // The refusal of a plugin called `name` (by its type name, or by its file
    // name libmsmemscope_plugin_<name>.so when no descriptor was read).
    const RefusedPlugin* refusal_of(const std::string& name) const;
    Catalog catalog() const;

    // The probe helper discover() runs ("" = load in this process only).
    // Default: msmemscope-plugin-probe in agent_dir(), when it exists.
    void set_probe_helper(std::string path) { probe_helper_ = std::move(path); }
    const std::string& probe_helper() const { return probe_helper_; }

    // Folder of the running binary's built-in plugins, and of the agent.
    static std::string builtin_plugin_dir();
    static std::string agent_dir();
    // builtin, then extra, then MSMEMSCOPE_PLUGIN_PATH.
    static std::vector<std::string> search_dirs(const std::vector<std::string>& extra);
    // The same order with another built-in folder (the Python package's
    // install prefix instead of this binary's).
    static std::vector<std::string> search_dirs(const std::string& builtin, const std::vector<std::string>& extra);

private:
    // Runs the probe helper over files; returns, per file that took the
    // helper down, its index and the reason.
    std::vector<std::pair<size_t, std::string>> probe(const std::vector<std::string>& files) const;

    std::vector<LoadedPlugin> plugins_;
    std::vector<RefusedPlugin> refused_;
    std::string probe_helper_;
};

// Checks a descriptor against every rule of the ABI (sdk/README.md): version,
// size, kind, names, events, devices, functions, the option schema and its
// defaults. Returns "" when usable, else the first problem. The host refuses
// on it at load, and the conformance suite reports it.
std::string check_descriptor(const msms_plugin_descriptor* d);
// The catalog entry of a descriptor that passed check_descriptor().
PluginInfo plugin_info(const msms_plugin_descriptor* d);
// The message of an instance's last failed call (ABI 1.1 last_error), ""
// when the plugin has none or is older.
std::string plugin_last_error(const msms_plugin_descriptor* d, void* instance);
// What a plugin option name must look like ([A-Za-z][A-Za-z0-9_-]*, at most 64).
bool valid_option_name(const std::string& name);

// The refusals a run warns about (issue #29): a plugin refused in a folder
// the user added (--plugin-path, plugins.search_paths, MSMEMSCOPE_PLUGIN_PATH:
// `user_dirs`) is named by --list-plugins, and by the error that drops it when
// it is selected, not on every run (all of them with `verbose`). Refusals in
// the installed folder (a broken or tampered install) and of the probe helper
// are always said. Paths and reasons escaped for the terminal.
std::vector<RefusedPlugin> refusals_to_warn(const Registry& reg, const std::vector<std::string>& user_dirs,
                                            bool verbose);

}  // namespace msms
