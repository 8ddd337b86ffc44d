#include "plugin_cli.h"

#include <stdlib.h>

#include <algorithm>
#include <filesystem>

#include <msmemscope/abi.h>

#include "api_words.h"
#include "console_notes.h"
#include "util/text.h"

namespace msms {

namespace {

const char* type_name(int t) {
    switch (t) {
    case MSMS_OPT_STRING: return "string";
    case MSMS_OPT_INT: return "int";
    case MSMS_OPT_BOOL: return "bool";
    case MSMS_OPT_ENUM: return "enum";
    case MSMS_OPT_LIST: return "list";
    default: return "unknown";
    }
}

std::string pad(std::string s, size_t n) {
    if (s.size() < n) s.resize(n, ' ');
    return s;
}

}  // namespace

std::string describe_option(const PluginInfo::Option& o) {
    std::string s = o.name + " (" + type_name(o.type);
    if (o.has_default) s += ", default " + (o.default_value.empty() ? std::string("\"\"") : o.default_value);
    else s += ", no default";
    if (o.type == MSMS_OPT_INT) s += ", range " + std::to_string(o.min) + ".." + std::to_string(o.max);
    if (o.type == MSMS_OPT_ENUM) s += ", one of " + o.allowed;
    if (o.type == MSMS_OPT_LIST && !o.allowed.empty()) s += ", items from " + o.allowed;
    s += ")";
    if (!o.description.empty()) s += ": " + o.description;
    return s;
}

void print_plugin_list(const Registry& reg, bool verbose, std::ostream& out) {
    out << "NAME                 KIND       VERSION    PATH\n";
    for (auto& p : reg.plugins()) {
        std::string ver = p.descriptor->version ? p.descriptor->version : "";
        out << pad(p.info.name, 20) << " " << pad(p.kind_name(), 10) << " " << pad(ver, 10) << " " << p.path << "\n";
        if (!verbose) continue;
        if (p.info.options.empty()) out << "    (no options)\n";
        for (auto& o : p.info.options) out << "    " << describe_option(o) << "\n";
    }
    for (auto& r : reg.refused()) out << "refused: " << r.path << ": " << r.reason << "\n";
}

bool print_plugin_description(const Registry& reg, const std::string& name, std::ostream& out, std::string& error) {
    const LoadedPlugin* p = reg.find(name, 0);
    if (!p) {
        if (const RefusedPlugin* r = reg.refusal_of(name)) {
            error = "--describe-plugin: plugin '" + name + "' was refused: " + r->path + ": " + r->reason;
            return false;
        }
        std::vector<std::string> names;
        for (auto& q : reg.plugins()) names.push_back(q.info.name);
        error = "--describe-plugin: no plugin named '" + name + "' (found: " + join(names, ", ") + ")";
        return false;
    }
    const msms_plugin_descriptor* d = p->descriptor;
    out << p->info.name << ": " << p->kind_name() << " " << (d->version ? d->version : "") << ", ABI " << d->abi_major
        << "." << d->abi_minor << "\n";
    out << "  path: " << p->path << "\n";
    if (d->description && *d->description) out << "  description: " << d->description << "\n";
    if (!p->info.events.empty()) out << "  events: " << join(p->info.events, ", ") << "\n";
    if (!p->info.devices.empty()) out << "  devices: " << join(p->info.devices, ", ") << "\n";
    if (d->agent_library) out << "  agent library: " << d->agent_library << "\n";
    if (p->info.options.empty()) {
        out << "  options: none\n";
    } else {
        out << "  options (--plugin-option=" << p->info.name << ".NAME=VALUE):\n";
        for (auto& o : p->info.options) out << "    " << describe_option(o) << "\n";
    }
    return true;
}

namespace {
std::vector<std::pair<std::string, std::string>> g_dropped_at_load;
}

const std::vector<std::pair<std::string, std::string>>& dropped_at_load() { return g_dropped_at_load; }

std::vector<RefusedSelection> refused_selections(const RawConfig& raw, const Registry& reg) {
    std::vector<RefusedSelection> out;
    for (const char* key : {"analysis", "sinks", "analyze"}) {
        auto it = raw.values.find(key);
        if (it == raw.values.end()) continue;
        for (auto& item : split_list(it->second.value)) {
            std::string name = item.substr(0, item.find(':'));  // oom:5
            if (reg.find(name, 0)) continue;
            if (const RefusedPlugin* r = reg.refusal_of(name))
                out.push_back({key, item, name, escape_controls(r->path) + ": " + escape_controls(r->reason)});
        }
    }
    return out;
}

namespace {

// Where a dropped selection came from, in the words of the user who made
// it. A Python API session's program chose it with config(analysis=...):
// 'analysis', as api_words names a key. The caller of msmemscope.analyze()
// or check_inefficient() (--python-api) named it by the call, which the
// package names before the line ("msmemscope.analyze: "): no origin, as
// "--analyze: " is left out of that caller's other errors. The command
// line's and a YAML file's user: the option or the file's line.
std::string selected_by(const RawConfig& raw, const std::string& origin) {
    if (raw.values.count("python-api")) return "";
    if (raw.values.count("serve-session")) return " (selected by " + api_words(origin) + ")";
    return " (selected by " + origin + ")";
}

}  // namespace

int drop_unloadable_selections(RawConfig& raw, const Registry& reg) {
    auto refused = refused_selections(raw, reg);
    for (const char* key : {"analysis", "sinks", "analyze"}) {
        auto it = raw.values.find(key);
        if (it == raw.values.end()) continue;
        std::vector<std::string> keep;
        std::vector<const RefusedSelection*> dropped;
        for (auto& item : split_list(it->second.value)) {
            auto r = std::find_if(refused.begin(), refused.end(),
                                  [&](const RefusedSelection& s) { return s.key == key && s.item == item; });
            if (r == refused.end()) keep.push_back(item);
            else dropped.push_back(&*r);
        }
        if (dropped.empty()) continue;
        // An offline analysis that loses every analyzer it named has none
        // to run without them: it stops there (analyzes_nothing).
        bool none_left = keep.empty() && std::string(key) == "analyze";
        for (auto* d : dropped) {
            say_error("plugin '" + d->name + "'" + selected_by(raw, it->second.origin) + " cannot be loaded: " +
                      d->why + (none_left ? "; no analyzer is left to run" : "; running without it"));
            raw.plugin_options.erase(d->name);
            g_dropped_at_load.emplace_back(d->name, "cannot be loaded: " + d->why);
        }
        it->second.value = join(keep, ",");
    }
    return static_cast<int>(refused.size());
}

bool analyzes_nothing(const RawConfig& raw) {
    auto it = raw.values.find("analyze");
    return it != raw.values.end() && it->second.value.empty();
}

void export_plugin_settings(const RawConfig& raw) {
    std::vector<std::string> dirs;
    for (auto& d : raw.search_paths) {
        std::error_code ec;
        auto abs = std::filesystem::absolute(d, ec);
        dirs.push_back(ec ? d : abs.lexically_normal().string());
    }
    std::string opts;
    for (auto& [name, kv] : raw.plugin_options)
        for (auto& [k, v] : kv) opts += name + "." + k + "=" + v + "\n";
    setenv("MSMEMSCOPE_CLI_PLUGIN_PATHS", join(dirs, ":").c_str(), 1);
    setenv("MSMEMSCOPE_CLI_PLUGIN_OPTIONS", opts.c_str(), 1);
}

}  // namespace msms
