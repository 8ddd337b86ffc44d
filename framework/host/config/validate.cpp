// validate(): every raw value checked and turned into the effective Config;
// implied events, the analyzers, sinks and collectors chosen.
#include "config.h"

#include <algorithm>

#include <msmemscope/abi.h>
#include "options.h"
#include "util/text.h"

namespace msms {
using namespace cfgopt;

bool validate(const RawConfig& raw, const Catalog& catalog, Config& cfg, std::vector<std::string>& errors) {
    size_t before = errors.size();
    auto get = [&](const char* key) -> const RawValue* {
        auto it = raw.values.find(key);
        return it == raw.values.end() ? nullptr : &it->second;
    };
    cfg.program = raw.program;
    cfg.plugin_search_paths = raw.search_paths;

    if (auto v = get("steps")) {
        cfg.steps.clear();
        auto items = split_list(v->value);
        for (auto& s : items) {
            unsigned long long n;
            if (!parse_uint(s, n) || n > 0x7fffffff)
                errors.push_back(bad_value(v->origin, s, "non-negative integers, e.g. --steps=1,2,3"));
            else
                cfg.steps.push_back(static_cast<long long>(n));
        }
        if (items.size() > 5) errors.push_back(v->origin + ": at most 5 steps, got " + std::to_string(items.size()));
    }
    if (auto v = get("device")) {
        auto items = split_list(v->value);
        if (items.empty()) errors.push_back(v->origin + ": empty value (allowed: " + kDeviceAllowed + ")");
        cfg.devices.clear();
        bool all_npu = false, all_cuda = false;
        for (auto& d : items) {
            if (d == "npu") all_npu = true;
            if (d == "cuda") all_cuda = true;
        }
        for (auto& d : items) {
            bool ok = false;
            if (d == "cpu" || d == "npu" || d == "cuda") ok = true;
            for (const char* kind : {"npu:", "cuda:"}) {
                std::string k = kind;
                if (d.rfind(k, 0) == 0) {
                    unsigned long long id;
                    if (parse_uint(d.substr(k.size()), id) && id <= 31) ok = true;
                    if (ok && ((k == "npu:" && all_npu) || (k == "cuda:" && all_cuda))) {
                        d.clear();  // "npu" together with "npu:N" means all NPUs
                    }
                }
            }
            if (!ok)
                errors.push_back(bad_value(v->origin, d, kDeviceAllowed));
            else if (!d.empty() && std::find(cfg.devices.begin(), cfg.devices.end(), d) == cfg.devices.end())
                cfg.devices.push_back(d);
        }
    }
    if (auto v = get("level")) {
        std::string s = trim(v->value);
        if (s == "0" || s == "op") cfg.level = 0;
        else if (s == "1" || s == "kernel") cfg.level = 1;
        else errors.push_back(bad_value(v->origin, s, "0, op, 1, kernel"));
    }
    if (auto v = get("events")) {
        cfg.events.clear();
        for (auto& e : split_list(v->value)) {
            if (e == "alloc" || e == "free" || e == "launch" || e == "access" || e == "traceback")
                cfg.events.insert(e);
            else
                errors.push_back(bad_value(v->origin, e, kEventsAllowed));
        }
    }
    if (auto v = get("call-stack")) {
        for (auto& item : split_list(v->value)) {
            std::string which = item, depth;
            size_t colon = item.find(':');
            if (colon != std::string::npos) {
                which = item.substr(0, colon);
                depth = item.substr(colon + 1);
            }
            if (which != "c" && which != "python") {
                errors.push_back(bad_value(v->origin, item, "c, python, each with an optional :depth 0..1000, e.g. c:20,python:10"));
                continue;
            }
            unsigned long long d = 50;
            if (colon != std::string::npos && (!parse_uint(depth, d) || d > 1000)) {
                errors.push_back(v->origin + ": depth '" + depth + "' of " + which + " out of range (allowed: 0..1000)");
                continue;
            }
            if (which == "c") {
                cfg.c_stack = true;
                cfg.c_depth = static_cast<int>(d);
            } else {
                cfg.py_stack = true;
                cfg.py_depth = static_cast<int>(d);
            }
        }
    }
    if (auto v = get("collect-mode")) {
        std::string s = trim(v->value);
        if (s != "immediate" && s != "deferred") errors.push_back(bad_value(v->origin, s, "immediate, deferred"));
        else cfg.collect_mode = s;
    }
    if (auto v = get("data-format")) {
        std::string s = trim(v->value);
        if (s != "csv" && s != "db") errors.push_back(bad_value(v->origin, s, "csv, db"));
        else cfg.data_format = s;
    }
    if (auto v = get("log-level")) {
        std::string s = trim(v->value);
        if (s != "info" && s != "warn" && s != "error") errors.push_back(bad_value(v->origin, s, "info, warn, error"));
        else cfg.log_level = s;
    }
    if (auto v = get("output")) {
        if (v->value.empty()) errors.push_back(v->origin + ": empty value (allowed: a folder path)");
        else if (v->value.size() > 4096) errors.push_back(v->origin + ": path longer than 4096 characters");
        else cfg.output = v->value;
    }
    for (const char* key : {"follow-fork", "save-capture", "compare"}) {
        if (auto v = get(key)) {
            bool b;
            if (!parse_bool(trim(v->value), b)) {
                errors.push_back(bad_value(v->origin, v->value, "true, false"));
                continue;
            }
            if (std::string(key) == "follow-fork") cfg.follow_fork = b;
            else if (std::string(key) == "save-capture") cfg.save_capture = b;
            else cfg.compare = b;
        }
    }
    if (auto v = get("input")) {
        cfg.inputs = split_list(v->value);
        for (auto& s : cfg.inputs)
            if (s.size() > 4096) errors.push_back(v->origin + ": path longer than 4096 characters");
    }
    if (auto v = get("replay")) cfg.replay = v->value;
    if (auto v = get("serve-session")) cfg.serve_session = v->value;
    if (auto v = get("parent-pid")) {
        unsigned long long n;
        if (!parse_uint(v->value, n) || n == 0 || n > 0x7fffffff) errors.push_back(bad_value(v->origin, v->value, "a process id"));
        else cfg.parent_pid = static_cast<int>(n);
    }
    if (auto v = get("ready-fd")) {
        unsigned long long n;
        if (!parse_uint(v->value, n) || n < 3 || n > 0x7fffffff)
            errors.push_back(bad_value(v->origin, v->value, "a descriptor number (3 or more)"));
        else cfg.ready_fd = static_cast<int>(n);
    }
    if (auto v = get("watch")) {
        auto items = split_list(v->value);
        WatchSpec w;
        w.text = v->value;
        if (!items.empty() && items.back() == "full-content") {
            w.full_content = true;
            items.pop_back();
        }
        if (items.size() == 1) {
            size_t colon = items[0].rfind(':');  // "aten::sum" is an op name; "op:out0" is not an end op
            if (colon != std::string::npos && items[0].compare(colon + 1, 3, "out") == 0 && colon + 4 < items[0].size() &&
                items[0].find_first_not_of("0123456789", colon + 4) == std::string::npos)
                errors.push_back(v->origin + ": outN needs a start op: " + std::string("--watch=start:outN,end"));
            w.end = items[0];
        } else if (items.size() == 2) {
            w.start = items[0];
            w.end = items[1];
            size_t colon = w.start.rfind(':');
            if (colon != std::string::npos && w.start.compare(colon + 1, 3, "out") == 0) {
                unsigned long long n;
                if (!parse_uint(w.start.substr(colon + 4), n))
                    errors.push_back(bad_value(v->origin, w.start, "start[:outN] with N a number"));
                else
                    w.out_index = static_cast<int>(n);
                w.start = w.start.substr(0, colon);
            }
        } else {
            errors.push_back(bad_value(v->origin, v->value, "[start[:outN],]end[,full-content]"));
        }
        if (w.end.empty() && items.size() <= 2) errors.push_back(v->origin + ": the end op is required ([start[:outN],]end[,full-content])");
        cfg.watch = w;
    }

    // Analyzers by name; "name:value" sets the analyzer's first option.
    auto analyzers = names_of_kind(catalog, MSMS_KIND_ANALYZER);
    std::map<std::string, std::map<std::string, std::string>> given = raw.plugin_options;
    const RawValue* analysis_value = get("analysis");
    if (auto v = get("analyze")) {
        if (v->value.empty()) errors.push_back(v->origin + ": empty value (allowed: analyzer names)");
        cfg.analyze = true;
        analysis_value = v;  // the offline analyzers replace --analysis
    }
    if (auto v = analysis_value) {
        cfg.analyzers.clear();
        for (auto& item : split_list(v->value)) {
            std::string name = item, arg;
            size_t colon = item.find(':');
            if (colon != std::string::npos) {
                name = item.substr(0, colon);
                arg = item.substr(colon + 1);
            }
            const PluginInfo* p = find_plugin(catalog, name, MSMS_KIND_ANALYZER);
            if (!p) {
                std::string guess = did_you_mean(name, analyzers);
                errors.push_back(v->origin + ": unknown analyzer '" + name + "'" +
                                 (guess.empty() ? "" : "; did you mean '" + guess + "'?") + " (available: " +
                                 (analyzers.empty() ? std::string("none found") : join(analyzers, ", ")) + ")");
                continue;
            }
            if (colon != std::string::npos) {
                if (p->options.empty()) {
                    errors.push_back(v->origin + ": analyzer '" + name + "' takes no ':' argument");
                    continue;
                }
                given[name][p->options[0].name] = arg;
            }
            if (std::find(cfg.analyzers.begin(), cfg.analyzers.end(), name) == cfg.analyzers.end())
                cfg.analyzers.push_back(name);
        }
    } else {
        // Default analysis: leaks, when that analyzer is installed.
        cfg.analyzers.clear();
        if (find_plugin(catalog, "leaks", MSMS_KIND_ANALYZER)) cfg.analyzers.push_back("leaks");
    }

    // Sinks: the data format first, then --sinks.
    auto sinks = names_of_kind(catalog, MSMS_KIND_SINK);
    cfg.sinks.clear();
    if (!find_plugin(catalog, cfg.data_format, MSMS_KIND_SINK))
        errors.push_back("--data-format: the '" + cfg.data_format + "' sink plugin was not found (available sinks: " +
                         (sinks.empty() ? std::string("none found") : join(sinks, ", ")) + ")");
    else
        cfg.sinks.push_back(cfg.data_format);
    if (auto v = get("sinks")) {
        for (auto& name : split_list(v->value)) {
            if (!find_plugin(catalog, name, MSMS_KIND_SINK)) {
                std::string guess = did_you_mean(name, sinks);
                errors.push_back(v->origin + ": unknown sink '" + name + "'" +
                                 (guess.empty() ? "" : "; did you mean '" + guess + "'?") + " (available: " +
                                 (sinks.empty() ? std::string("none found") : join(sinks, ", ")) + ")");
                continue;
            }
            if (std::find(cfg.sinks.begin(), cfg.sinks.end(), name) == cfg.sinks.end()) cfg.sinks.push_back(name);
        }
    }

    // Implied events (COMPAT §1): from what the chosen analyzers declare, and
    // alloc <-> free, access -> alloc,free.
    for (auto& name : cfg.analyzers)
        if (auto p = find_plugin(catalog, name, MSMS_KIND_ANALYZER))
            for (auto& e : p->events) cfg.events.insert(e);
    if (cfg.events.count("alloc") || cfg.events.count("free") || cfg.events.count("access")) {
        cfg.events.insert("alloc");
        cfg.events.insert("free");
    }

    // Plugin options: validated against each plugin's schema.
    cfg.plugin_options.clear();
    for (auto& [pname, opts] : given) {
        const PluginInfo* p = nullptr;
        for (auto& q : catalog)
            if (q.name == pname) p = &q;
        auto oit = raw.plugin_option_origin.find(pname);
        std::string origin = oit != raw.plugin_option_origin.end() ? oit->second : "--analysis";
        if (!p) {
            std::vector<std::string> all;
            for (auto& q : catalog) all.push_back(q.name);
            std::string guess = did_you_mean(pname, all);
            errors.push_back(origin + ": options for unknown plugin '" + pname + "'" +
                             (guess.empty() ? "" : "; did you mean '" + guess + "'?"));
            continue;
        }
        validate_plugin_options(*p, opts, origin, cfg.plugin_options[pname], errors);
    }
    for (auto& p : catalog) {
        if (cfg.plugin_options.count(p.name)) continue;
        std::map<std::string, std::string> filled;
        std::vector<std::string> ignored;
        validate_plugin_options(p, {}, "defaults", filled, ignored);
        cfg.plugin_options[p.name] = filled;
    }

    // Collectors: every collector that serves a chosen device kind (or "*")
    // and produces a wanted event class (or declares none).
    cfg.collectors.clear();
    for (auto& p : catalog) {
        if (p.kind != MSMS_KIND_COLLECTOR) continue;
        bool device_ok = p.devices.empty();
        for (auto& d : p.devices)
            if (d == "*" || cfg.wants_device_kind(d)) device_ok = true;
        bool event_ok = p.events.empty();
        for (auto& e : p.events)
            if (cfg.events.count(e)) event_ok = true;
        if (device_ok && event_ok) cfg.collectors.push_back(p.name);
    }

    // --watch turns the watch analyzer on (it writes watch_dump).
    if (cfg.watch && !cfg.analyze && find_plugin(catalog, "watch", MSMS_KIND_ANALYZER) &&
        std::find(cfg.analyzers.begin(), cfg.analyzers.end(), "watch") == cfg.analyzers.end())
        cfg.analyzers.push_back("watch");

    if (cfg.compare) {
        if (cfg.inputs.size() != 2)
            errors.push_back("--input: --compare needs exactly two inputs, --input=<base>,<compare>");
    } else if (cfg.analyze) {
        if (cfg.inputs.size() != 1)
            errors.push_back("--input: --analyze needs exactly one input, --input=<dump.csv|dump.db|folder|capture>");
    } else if (get("input")) {
        errors.push_back("--input: only valid together with --compare");
    }
    if (!cfg.compare && !cfg.analyze && cfg.replay.empty() && cfg.serve_session.empty() && cfg.program.empty() && !raw.list_plugins)
        errors.push_back("no program given (usage: msmemscope [options] -- <prog> [args], or see --help)");
    return errors.size() == before;
}

}  // namespace msms
