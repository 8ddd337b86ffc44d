#include "registry.h"

#include <boost/dll/shared_library.hpp>
#include <boost/dll/runtime_symbol_info.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "util/file_trust.h"
#include "util/text.h"

namespace fs = std::filesystem;

namespace msms {

std::string LoadedPlugin::kind_name() const {
    switch (descriptor ? descriptor->kind : 0) {
    case MSMS_KIND_COLLECTOR: return "collector";
    case MSMS_KIND_ANALYZER: return "analyzer";
    case MSMS_KIND_SINK: return "sink";
    default: return "unknown";
    }
}

std::string check_descriptor(const msms_plugin_descriptor* d) {
    if (!d) return "the entry returned no descriptor";
    if (d->abi_major != MSMS_ABI_MAJOR || d->abi_minor > MSMS_ABI_MINOR)
        return "wrong ABI version: got " + std::to_string(d->abi_major) + "." + std::to_string(d->abi_minor) +
               ", supported " + std::to_string(MSMS_ABI_MAJOR) + "." + std::to_string(MSMS_ABI_MINOR);
    // Everything up to finish() is part of ABI 1.0.
    if (d->struct_size < offsetof(msms_plugin_descriptor, finish) + sizeof(d->finish))
        return "descriptor too small: " + std::to_string(d->struct_size) + " bytes";
    if (d->kind < MSMS_KIND_COLLECTOR || d->kind > MSMS_KIND_SINK)
        return "unknown plugin kind " + std::to_string(d->kind) + " (allowed: 1 collector, 2 analyzer, 3 sink)";
    std::string name = d->type_name ? d->type_name : "";
    bool ok = !name.empty() && name[0] >= 'a' && name[0] <= 'z' && name.size() <= 64;
    for (char c : name)
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) ok = false;
    if (!ok) return "invalid type name '" + name + "' (allowed: [a-z][a-z0-9_]*, at most 64 characters)";
    if (!d->create || !d->destroy) return "plugin '" + name + "' has no create/destroy function";
    if (d->kind != MSMS_KIND_COLLECTOR && !d->on_event) return "plugin '" + name + "' has no on_event function";
    for (uint32_t i = 0; i < d->option_count; ++i)
        if (!d->options || !d->options[i].name) return "plugin '" + name + "' has an option without a name";
    return "";
}

bool Registry::load(const std::string& path) {
    // As root, nothing another user could have written is loaded (#16).
    if (std::string why = untrusted_reason(path); !why.empty()) {
        refused_.push_back({path, why});
        return false;
    }
    auto lib = std::make_shared<boost::dll::shared_library>();
    try {
        lib->load(path, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
    } catch (const std::exception& e) {
        refused_.push_back({path, std::string("cannot load: ") + e.what()});
        return false;
    }
    if (!lib->has(MSMS_ENTRY_SYMBOL)) {
        refused_.push_back({path, std::string("no entry symbol '") + MSMS_ENTRY_SYMBOL + "'"});
        return false;
    }
    const msms_plugin_descriptor* d = nullptr;
    try {
        auto& entry = lib->get_alias<const msms_plugin_descriptor*()>(MSMS_ENTRY_SYMBOL);
        d = entry();
    } catch (const std::exception& e) {
        refused_.push_back({path, std::string("entry failed: ") + e.what()});
        return false;
    }
    std::string why = check_descriptor(d);
    if (!why.empty()) {
        refused_.push_back({path, why});
        return false;
    }
    for (auto& p : plugins_) {
        if (std::string(p.descriptor->type_name) == d->type_name) {
            refused_.push_back({path, std::string("duplicate type name '") + d->type_name + "' (already provided by " +
                                          p.path + ")"});
            return false;
        }
    }
    LoadedPlugin lp;
    lp.path = path;
    lp.library = lib;
    lp.descriptor = d;
    lp.info.name = d->type_name;
    lp.info.kind = static_cast<int>(d->kind);
    lp.info.events = split_list(d->events ? d->events : "");
    lp.info.devices = split_list(d->devices ? d->devices : "");
    for (uint32_t i = 0; i < d->option_count; ++i) {
        const msms_option_spec& s = d->options[i];
        PluginInfo::Option o;
        o.name = s.name;
        o.type = static_cast<int>(s.type);
        o.has_default = s.default_value != nullptr;
        o.default_value = s.default_value ? s.default_value : "";
        o.allowed = s.allowed ? s.allowed : "";
        o.min = s.min;
        o.max = s.max;
        o.description = s.description ? s.description : "";
        lp.info.options.push_back(o);
    }
    plugins_.push_back(std::move(lp));
    return true;
}

void Registry::discover(const std::vector<std::string>& dirs) {
    for (auto& dir : dirs) {
        std::error_code ec;
        if (!fs::is_directory(dir, ec)) continue;
        std::vector<std::string> files;
        for (auto& e : fs::directory_iterator(dir, ec)) {
            std::string name = e.path().filename().string();
            if (name.rfind("libmsmemscope_plugin_", 0) == 0 && name.size() > 3 &&
                name.compare(name.size() - 3, 3, ".so") == 0)
                files.push_back(e.path().string());
        }
        std::sort(files.begin(), files.end());
        for (auto& f : files) load(f);
    }
}

const LoadedPlugin* Registry::find(const std::string& name, int kind) const {
    for (auto& p : plugins_)
        if (p.info.name == name && (kind == 0 || p.info.kind == kind)) return &p;
    return nullptr;
}

Catalog Registry::catalog() const {
    Catalog c;
    for (auto& p : plugins_) c.push_back(p.info);
    return c;
}

std::string Registry::builtin_plugin_dir() { return agent_dir() + "/plugins"; }

std::string Registry::agent_dir() {
    if (const char* env = std::getenv("MSMEMSCOPE_HOME"))  // <prefix> of an install or build tree
        return std::string(env) + "/lib/msmemscope";
    fs::path exe = boost::dll::program_location().string();
    return (exe.parent_path().parent_path() / "lib" / "msmemscope").lexically_normal().string();
}

std::vector<std::string> Registry::search_dirs(const std::vector<std::string>& extra) {
    return search_dirs(builtin_plugin_dir(), extra);
}

std::vector<std::string> Registry::search_dirs(const std::string& builtin, const std::vector<std::string>& extra) {
    std::vector<std::string> dirs{builtin};
    for (auto& e : extra) dirs.push_back(e);
    if (const char* env = std::getenv("MSMEMSCOPE_PLUGIN_PATH")) {
        std::string s = env;
        size_t start = 0;
        while (start <= s.size()) {
            size_t colon = s.find(':', start);
            if (colon == std::string::npos) colon = s.size();
            if (colon > start) dirs.push_back(s.substr(start, colon - start));
            start = colon + 1;
        }
    }
    return dirs;
}

}  // namespace msms
