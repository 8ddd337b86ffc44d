// Plugin discovery and loading. Plugins are files named
// libmsmemscope_plugin_*.so in, in this order: the built-in folder next to
// the binary (../lib/msmemscope/plugins), the config's plugins.search_paths
// and --plugin-path, then MSMEMSCOPE_PLUGIN_PATH (':'-separated). A plugin
// that cannot be used is refused with a one-line reason; the rest load.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <msmemscope/abi.h>

#include "config.h"

namespace boost::dll {
class shared_library;
}

namespace msms {

struct LoadedPlugin {
    std::string path;
    std::shared_ptr<boost::dll::shared_library> library;  // stays loaded while used
    const msms_plugin_descriptor* descriptor = nullptr;
    PluginInfo info;
    std::string kind_name() const;
};

struct RefusedPlugin {
    std::string path;
    std::string reason;
};

class Registry {
public:
    // Loads every plugin of the given folders (missing folders are skipped).
    void discover(const std::vector<std::string>& dirs);
    // Loads one file; returns false and records the reason when refused.
    bool load(const std::string& path);
    const std::vector<LoadedPlugin>& plugins() const { return plugins_; }
    const std::vector<RefusedPlugin>& refused() const { return refused_; }
    const LoadedPlugin* find(const std::string& name, int kind) const;
    Catalog catalog() const;

    // Folder of the running binary's built-in plugins, and of the agent.
    static std::string builtin_plugin_dir();
    static std::string agent_dir();
    // builtin, then extra, then MSMEMSCOPE_PLUGIN_PATH.
    static std::vector<std::string> search_dirs(const std::vector<std::string>& extra);
    // The same order with another built-in folder (the Python package's
    // install prefix instead of this binary's).
    static std::vector<std::string> search_dirs(const std::string& builtin, const std::vector<std::string>& extra);

private:
    std::vector<LoadedPlugin> plugins_;
    std::vector<RefusedPlugin> refused_;
};

// Checks a descriptor; returns "" when usable, else the reason.
std::string check_descriptor(const msms_plugin_descriptor* d);

}  // namespace msms
