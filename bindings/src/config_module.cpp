// _msmemscope_config: msmemscope.config()'s validation, apart from the
// _msmemscope extension that every profiled Python process loads at its
// start. It links the CLI's own parser and validator and the plugin registry
// (msmemscope::host: boost, yaml-cpp, spdlog, libdw), so that config()
// accepts and refuses exactly what the command line does, with the same
// messages; loading those libraries cost each Python start under the CLI
// ~3 ms (issue #30), so only config() and the offline plugin list load this.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config.h"
#include "hooks_off.h"
#include "plugin_cli.h"
#include "registry.h"
#include "util/text.h"

namespace py = pybind11;
namespace fs = std::filesystem;

namespace {

struct Catalogs {
    std::unique_ptr<msms::Registry> registry;
    std::string key;
};
Catalogs g_catalog;

msms::Registry& registry_for(const std::string& prefix, const std::vector<std::string>& extra) {
    std::string key = prefix;
    for (auto& e : extra) key += "\n" + e;
    if (const char* env = getenv("MSMEMSCOPE_PLUGIN_PATH")) key += std::string("\n$") + env;
    if (g_catalog.registry && g_catalog.key == key) return *g_catalog.registry;
    auto reg = std::make_unique<msms::Registry>();
    // Plugins are first loaded in the installed probe helper (registry.h):
    // one that crashes while being loaded is refused, and never loaded here.
    std::string helper = prefix + "/lib/msmemscope/msmemscope-plugin-probe";
    reg->set_probe_helper(access(helper.c_str(), X_OK) == 0 ? helper : "");
    reg->discover(msms::Registry::search_dirs(prefix + "/lib/msmemscope/plugins", extra));
    g_catalog.registry = std::move(reg);
    g_catalog.key = key;
    return *g_catalog.registry;
}

// Validates the Python config (canonical CLI option names -> text values).
py::dict validate_config(const std::map<std::string, std::string>& values,
                         const std::map<std::string, std::string>& origins, const std::string& prefix,
                         const std::vector<std::string>& plugin_paths,
                         const std::map<std::string, std::map<std::string, std::string>>& plugin_options,
                         const std::string& plugin_options_origin) {
    // The profiler's own work (the plugin catalog, kept for the next call;
    // the validator's tables), not the program's memory at its config() line.
    msms_py::HooksOff hooks_off;
    msms::RawConfig raw;
    for (auto& [k, v] : values) {
        auto it = origins.find(k);
        raw.values[k] = msms::RawValue{v, it != origins.end() ? it->second : k};
    }
    raw.values["serve-session"] = msms::RawValue{"python", "serve_session"};
    raw.search_paths = plugin_paths;
    raw.plugin_options = plugin_options;
    for (auto& [name, kv] : plugin_options) raw.plugin_option_origin[name] = plugin_options_origin;
    msms::Registry& reg = registry_for(prefix, plugin_paths);
    msms::Config cfg;
    std::vector<std::string> errors;
    // A plugin the user selected that was found but refused (one of their
    // own, built for another ABI, without its entry symbol, ...): why, and
    // not "unknown analyzer" (the catalog has only the plugins loaded).
    for (auto& r : msms::refused_selections(raw, reg))
        errors.push_back(raw.values[r.key].origin + ": plugin '" + r.name + "' cannot be loaded: " + r.why);
    if (!errors.empty() || !msms::validate(raw, reg.catalog(), cfg, errors)) {
        std::string msg;
        for (auto& e : errors) msg += (msg.empty() ? "" : "\n") + e;
        throw py::value_error(msg);
    }
    py::dict d;
    d["agent_options"] = cfg.agent_options();
    d["output"] = cfg.output;
    d["data_format"] = cfg.data_format;
    d["analysis"] = cfg.analyzers;
    d["sinks"] = cfg.sinks;
    d["events"] = std::vector<std::string>(cfg.events.begin(), cfg.events.end());
    d["written_events"] = std::vector<std::string>(cfg.written_events.begin(), cfg.written_events.end());
    d["backend"] = cfg.backend();
    d["warnings"] = cfg.warnings;
    d["devices"] = cfg.devices;
    d["collectors"] = cfg.collectors;
    d["collect_mode"] = cfg.collect_mode;
    d["json"] = cfg.to_json();
    // The collectors' target-side libraries (what the CLI would preload).
    std::vector<std::string> libs;
    for (auto& name : cfg.collectors) {
        const msms::LoadedPlugin* p = reg.find(name, MSMS_KIND_COLLECTOR);
        if (!p || !p->descriptor->agent_library) continue;
        fs::path dir = fs::path(p->path).parent_path();
        std::string lib = p->descriptor->agent_library;
        for (auto& c : {dir / lib, dir.parent_path() / "agent" / lib, dir / "agent" / lib}) {
            if (access(c.c_str(), R_OK) == 0) {
                libs.push_back(fs::absolute(c).lexically_normal().string());
                break;
            }
        }
    }
    d["agent_libraries"] = libs;
    return d;
}

py::list list_plugins(const std::string& prefix, const std::vector<std::string>& plugin_paths) {
    msms_py::HooksOff hooks_off;  // as validate_config
    msms::Registry& reg = registry_for(prefix, plugin_paths);
    py::list out;
    for (auto& p : reg.plugins()) {
        py::dict d;
        d["name"] = p.info.name;
        d["kind"] = p.kind_name();
        d["version"] = std::string(p.descriptor->version ? p.descriptor->version : "");
        d["description"] = std::string(p.descriptor->description ? p.descriptor->description : "");
        d["events"] = p.info.events;
        d["path"] = p.path;
        py::list opts;
        for (auto& o : p.info.options) {
            py::dict od;
            static const char* types[] = {"string", "int", "bool", "enum", "list"};
            od["name"] = o.name;
            od["type"] = std::string(o.type >= 0 && o.type < 5 ? types[o.type] : "string");
            od["default"] = o.has_default ? py::object(py::str(o.default_value)) : py::object(py::none());
            od["allowed"] = o.allowed;
            if (o.type == MSMS_OPT_INT) {
                od["min"] = o.min;
                od["max"] = o.max;
            }
            od["description"] = o.description;
            opts.append(od);
        }
        d["options"] = opts;
        out.append(d);
    }
    return out;
}

// Why the plugin `name` was refused ("PATH: REASON", escaped), or None when
// none of that name was: analyze() says it of a plugin it cannot run.
py::object refusal_of(const std::string& prefix, const std::vector<std::string>& plugin_paths,
                      const std::string& name) {
    msms_py::HooksOff hooks_off;  // as validate_config
    msms::Registry& reg = registry_for(prefix, plugin_paths);
    const msms::RefusedPlugin* r = reg.find(name, 0) ? nullptr : reg.refusal_of(name);
    if (!r) return py::none();
    return py::str(msms::escape_controls(r->path) + ": " + msms::escape_controls(r->reason));
}

}  // namespace

PYBIND11_MODULE(_msmemscope_config, m) {
    msms_py::HooksOff hooks_off;  // pybind11's function records: the package's memory, not the program's
    m.doc() = "msmemscope.config()'s validation: the CLI's parser, validator and plugin registry";
    m.def("validate_config", &validate_config, py::arg("values"), py::arg("origins"), py::arg("prefix"),
          py::arg("plugin_paths"), py::arg("plugin_options") = std::map<std::string, std::map<std::string, std::string>>{},
          py::arg("plugin_options_origin") = std::string("plugin_options"));
    m.def("list_plugins", &list_plugins, py::arg("prefix"), py::arg("plugin_paths"));
    m.def("refusal_of", &refusal_of, py::arg("prefix"), py::arg("plugin_paths"), py::arg("name"));
}
