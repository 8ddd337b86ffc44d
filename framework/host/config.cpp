#include "config.h"

#include <yaml-cpp/yaml.h>

#include <boost/program_options.hpp>
#include <algorithm>
#include <fstream>
#include <sstream>

#include <msmemscope/abi.h>

#include "util/json.h"
#include "util/text.h"

namespace po = boost::program_options;

namespace msms {
namespace {

struct OptionDef {
    const char* name;
    bool takes_value;
    const char* help;
};

// Every long option. Order = order in --help.
const OptionDef kOptions[] = {
    {"help", false, "print this help and exit"},
    {"version", false, "print the version and exit"},
    {"config", true, "YAML profile; keys are the long option names ('-' or '_'), the command line wins"},
    {"steps", true, "step ids to collect, at most 5 integers, e.g. --steps=1,2,3 (default: all steps)"},
    {"device", true, "npu, npu:{0..31}, cpu, cuda, cuda:{0..31}; several allowed (default: npu)"},
    {"level", true, "0 or op (operator level, default), 1 or kernel"},
    {"events", true, "alloc, free, launch, access, traceback (default: alloc,free,launch); "
                     "alloc and free imply each other, access implies alloc,free"},
    {"call-stack", true, "python, c, each with an optional :depth 0..1000 (default 50), e.g. c:20,python:10"},
    {"collect-mode", true, "immediate (default: from program start) or deferred (between msmemscope.start()/stop())"},
    {"analysis", true, "analyzers by name, e.g. leaks (default), inefficient, decompose, oom[:K] (K 1..1000); "
                       "empty: none"},
    {"data-format", true, "csv (default) or db (SQLite)"},
    {"sinks", true, "further output sinks by name, e.g. trace,html"},
    {"watch", true, "[start[:outN],]end[,full-content]: watch tensors from op start to op end"},
    {"output", true, "output root, at most 4096 characters (default: memscopeDumpResults)"},
    {"log-level", true, "info, warn (default), error"},
    {"compare", false, "compare two runs offline: --compare --input=<base>,<compare>"},
    {"input", true, "with --compare: the base and compare dump files or folders; with --analyze: the dump "
                    "file (.csv/.db), folder or capture (.msmcap) to analyse"},
    {"analyze", true, "offline: run these analyzers on --input instead of a program, e.g. "
                      "--analyze=inefficient --input=memscope_dump_x.csv (results are written back into the file)"},
    {"follow-fork", true, "true (default): profile child processes too; false: only the program started"},
    {"replay", true, "re-run analyzers and sinks on a saved capture (.msmcap) instead of a program"},
    {"save-capture", true, "true: keep the raw capture (.msmcap) in each process folder (default false)"},
    {"list-plugins", false, "print every plugin found (name, kind, version, path) and why any was refused"},
    {"plugin-option", true, "NAME.KEY=VALUE: an option of plugin NAME (repeatable)"},
    {"plugin-path", true, "more folders to search for plugins (repeatable)"},
    {"serve-session", true, "(internal, used by the Python package) serve the captures created in this folder"},
    {"parent-pid", true, "(internal) with --serve-session: stop when this process has exited"},
    {"ready-fd", true, "(internal) with --serve-session: write 'serving <capture>' to this descriptor once each capture's pipeline runs"},
};

const char* kDeviceAllowed = "npu, npu:{0..31}, cpu, cuda, cuda:{0..31}";
const char* kEventsAllowed = "alloc, free, launch, access, traceback";

std::string canonical(std::string key) {
    std::replace(key.begin(), key.end(), '_', '-');
    return key;
}

std::string bad_value(const std::string& origin, const std::string& value, const std::string& allowed) {
    return origin + ": invalid value '" + value + "' (allowed: " + allowed + ")";
}

const PluginInfo* find_plugin(const Catalog& c, const std::string& name, int kind) {
    for (auto& p : c)
        if (p.name == name && p.kind == kind) return &p;
    return nullptr;
}

std::vector<std::string> names_of_kind(const Catalog& c, int kind) {
    std::vector<std::string> out;
    for (auto& p : c)
        if (p.kind == kind) out.push_back(p.name);
    std::sort(out.begin(), out.end());
    return out;
}

bool parse_bool(const std::string& v, bool& out) {
    if (v == "true" || v == "1" || v == "yes" || v == "on") return out = true, true;
    if (v == "false" || v == "0" || v == "no" || v == "off") return out = false, true;
    return false;
}

}  // namespace

const std::vector<std::string>& option_names() {
    static const std::vector<std::string> names = [] {
        std::vector<std::string> v;
        for (auto& o : kOptions) v.push_back(o.name);
        return v;
    }();
    return names;
}

bool option_takes_value(const std::string& name) {
    for (auto& o : kOptions)
        if (name == o.name) return o.takes_value;
    return false;
}

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
    for (auto& o : kOptions) {
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

bool parse_command_line(int argc, const char* const* argv, RawConfig& raw, std::vector<std::string>& errors) {
    // Split: options first, then the program (after "--" or at the first
    // word that is not an option) with all of its own arguments.
    std::vector<std::string> opts;
    int i = 1;
    for (; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--") {
            ++i;
            break;
        }
        if (a.size() < 2 || a[0] != '-') break;
        if (a == "-h") a = "--help";
        if (a == "-v") a = "--version";
        if (a.rfind("--", 0) != 0) {
            errors.push_back("unknown option '" + a + "' (see --help)");
            continue;
        }
        std::string name = a.substr(2);
        std::string value;
        bool has_value = false;
        size_t eq = name.find('=');
        if (eq != std::string::npos) {
            value = name.substr(eq + 1);
            name = name.substr(0, eq);
            has_value = true;
        }
        std::string canon = canonical(name);
        auto& names = option_names();
        if (std::find(names.begin(), names.end(), canon) == names.end()) {
            std::string guess = did_you_mean(canon, names);
            errors.push_back("unknown option '--" + name + "'" + (guess.empty() ? "" : "; did you mean '--" + guess + "'?"));
            continue;
        }
        if (option_takes_value(canon)) {
            if (!has_value) {
                if (i + 1 < argc) {
                    value = argv[++i];
                } else {
                    errors.push_back("--" + canon + ": missing value");
                    continue;
                }
            }
            // An empty value goes in without '=' and comes out as the implicit "".
            opts.push_back(value.empty() ? "--" + canon : "--" + canon + "=" + value);
        } else {
            if (has_value) {
                errors.push_back("--" + canon + ": takes no value");
                continue;
            }
            opts.push_back("--" + canon);
        }
    }
    for (; i < argc; ++i) raw.program.push_back(argv[i]);

    po::options_description desc;
    for (auto& o : kOptions) {
        if (!o.takes_value)
            desc.add_options()(o.name, o.help);
        else if (std::string(o.name) == "plugin-option" || std::string(o.name) == "plugin-path")
            desc.add_options()(o.name, po::value<std::vector<std::string>>()->composing(), o.help);
        else  // an empty value ("--analysis=") is meaningful: no analysis
            desc.add_options()(o.name,
                               po::value<std::vector<std::string>>()->implicit_value(std::vector<std::string>{""}, ""),
                               o.help);
    }
    po::variables_map vm;
    try {
        std::vector<const char*> args{"msmemscope"};
        for (auto& s : opts) args.push_back(s.c_str());
        po::store(po::parse_command_line(static_cast<int>(args.size()), args.data(), desc), vm);
    } catch (const std::exception& e) {
        errors.push_back(e.what());
        return false;
    }
    for (auto& o : kOptions) {
        std::string n = o.name;
        if (!vm.count(n)) continue;
        if (!o.takes_value) {
            if (n == "help") raw.help = true;
            else if (n == "version") raw.version = true;
            else if (n == "list-plugins") raw.list_plugins = true;
            else raw.values[n] = RawValue{"true", "--" + n};
            continue;
        }
        auto vals = vm[n].as<std::vector<std::string>>();
        if (n == "plugin-option") {
            for (auto& v : vals) {
                size_t dot = v.find('.'), eq = v.find('=');
                if (dot == std::string::npos || eq == std::string::npos || dot > eq) {
                    errors.push_back("--plugin-option: invalid value '" + v + "' (allowed: NAME.KEY=VALUE)");
                    continue;
                }
                std::string plugin = v.substr(0, dot);
                std::string key = v.substr(dot + 1, eq - dot - 1);
                raw.plugin_options[plugin][key] = v.substr(eq + 1);
                raw.plugin_option_origin[plugin] = "--plugin-option";
            }
            continue;
        }
        if (n == "plugin-path") {
            for (auto& v : vals) raw.search_paths.push_back(v);
            continue;
        }
        if (vals.size() > 1) {
            errors.push_back("--" + n + ": given more than once");
            continue;
        }
        if (n == "config") raw.config_file = vals[0];
        else raw.values[n] = RawValue{vals[0], "--" + n};
    }
    return errors.empty();
}

bool load_yaml(const std::string& path, RawConfig& raw, std::vector<std::string>& errors) {
    YAML::Node root;
    try {
        root = YAML::LoadFile(path);
    } catch (const YAML::BadFile&) {
        errors.push_back(path + ": cannot read the file");
        return false;
    } catch (const YAML::Exception& e) {
        errors.push_back(path + ":" + std::to_string(e.mark.line + 1) + ": invalid YAML: " + e.msg);
        return false;
    }
    if (root.IsNull()) return true;
    if (!root.IsMap()) {
        errors.push_back(path + ": the top level must be a mapping of option names to values");
        return false;
    }
    auto line_of = [&](const YAML::Node& n) { return path + ":" + std::to_string(n.Mark().line + 1); };
    auto scalar_or_list = [&](const YAML::Node& n, const std::string& where, std::string& out, bool& is_list) -> bool {
        is_list = false;
        if (n.IsNull()) {
            out.clear();
            return true;
        }
        if (n.IsScalar()) {
            out = n.Scalar();
            return true;
        }
        if (n.IsSequence()) {
            is_list = true;
            std::vector<std::string> items;
            for (auto it : n) {
                if (!it.IsScalar()) {
                    errors.push_back(where + ": list items must be plain values");
                    return false;
                }
                items.push_back(it.Scalar());
            }
            out = join(items, ",");
            return true;
        }
        errors.push_back(where + ": expected a value or a list of values");
        return false;
    };
    std::vector<std::string> yaml_keys;
    for (auto& n : option_names())
        if (n != "help" && n != "version" && n != "config" && n != "list-plugins" && n != "plugin-option" &&
            n != "plugin-path" && n != "serve-session" && n != "parent-pid" &&
            n != "ready-fd")
            yaml_keys.push_back(n);
    yaml_keys.push_back("plugins");
    bool ok = true;
    for (auto it : root) {
        std::string key = it.first.Scalar();
        std::string canon = canonical(key);
        std::string where = line_of(it.first) + ": " + key;
        if (canon == "plugins") {
            const YAML::Node& p = it.second;
            if (!p.IsMap()) {
                errors.push_back(where + ": expected a mapping with search_paths and options");
                ok = false;
                continue;
            }
            for (auto pit : p) {
                std::string pk = canonical(pit.first.Scalar());
                std::string pwhere = line_of(pit.first) + ": plugins." + pit.first.Scalar();
                if (pk == "search-paths") {
                    std::string v;
                    bool is_list;
                    if (!scalar_or_list(pit.second, pwhere, v, is_list)) {
                        ok = false;
                        continue;
                    }
                    for (auto& s : split_list(v)) {
                        // Relative paths are relative to the YAML file.
                        if (!s.empty() && s[0] != '/') {
                            size_t slash = path.rfind('/');
                            if (slash != std::string::npos) s = path.substr(0, slash + 1) + s;
                        }
                        raw.search_paths.push_back(s);
                    }
                } else if (pk == "options") {
                    if (!pit.second.IsMap()) {
                        errors.push_back(pwhere + ": expected a mapping of plugin names to their options");
                        ok = false;
                        continue;
                    }
                    for (auto plug : pit.second) {
                        std::string pname = plug.first.Scalar();
                        std::string owhere = line_of(plug.first) + ": plugins.options." + pname;
                        if (!plug.second.IsMap()) {
                            errors.push_back(owhere + ": expected a mapping of option names to values");
                            ok = false;
                            continue;
                        }
                        for (auto kv : plug.second) {
                            std::string v;
                            bool is_list;
                            if (!scalar_or_list(kv.second, owhere + "." + kv.first.Scalar(), v, is_list)) {
                                ok = false;
                                continue;
                            }
                            if (!raw.plugin_options[pname].count(kv.first.Scalar()))
                                raw.plugin_options[pname][kv.first.Scalar()] = v;
                        }
                        if (!raw.plugin_option_origin.count(pname)) raw.plugin_option_origin[pname] = owhere;
                    }
                } else {
                    std::string guess = did_you_mean(pk, {"search-paths", "options"});
                    errors.push_back(pwhere + ": unknown key" +
                                     (guess.empty() ? std::string() : "; did you mean '" + guess + "'?") +
                                     " (allowed: search_paths, options)");
                    ok = false;
                }
            }
            continue;
        }
        if (std::find(yaml_keys.begin(), yaml_keys.end(), canon) == yaml_keys.end()) {
            std::vector<std::string> cands = yaml_keys;
            for (auto& c : yaml_keys) {
                std::string u = c;
                std::replace(u.begin(), u.end(), '-', '_');
                cands.push_back(u);
            }
            std::string guess = did_you_mean(key, cands);
            if (!guess.empty()) {
                std::string g = guess;
                std::replace(g.begin(), g.end(), '-', '_');
                guess = g;
            }
            errors.push_back(line_of(it.first) + ": unknown key '" + key + "'" +
                             (guess.empty() ? std::string() : "; did you mean '" + guess + "'?"));
            ok = false;
            continue;
        }
        std::string v;
        bool is_list = false;
        if (!scalar_or_list(it.second, where, v, is_list)) {
            ok = false;
            continue;
        }
        if (!raw.values.count(canon)) raw.values[canon] = RawValue{v, where, is_list};
    }
    return ok;
}

bool validate_plugin_options(const PluginInfo& plugin, const std::map<std::string, std::string>& given,
                             const std::string& origin, std::map<std::string, std::string>& out,
                             std::vector<std::string>& errors) {
    bool ok = true;
    std::vector<std::string> names;
    for (auto& o : plugin.options) names.push_back(o.name);
    for (auto& [k, v] : given) {
        if (std::find(names.begin(), names.end(), k) == names.end()) {
            std::string guess = did_you_mean(k, names);
            errors.push_back(origin + ": plugin '" + plugin.name + "' has no option '" + k + "'" +
                             (guess.empty() ? "" : "; did you mean '" + guess + "'?") +
                             (names.empty() ? " (it takes no options)" : " (options: " + join(names, ", ") + ")"));
            ok = false;
        }
    }
    for (auto& o : plugin.options) {
        auto it = given.find(o.name);
        std::string v = it != given.end() ? it->second : o.default_value;
        if (it == given.end() && !o.has_default) continue;
        std::string where = origin + ": " + plugin.name + "." + o.name;
        auto allowed = split_list(o.allowed);
        for (auto& a : allowed) (void)a;
        std::vector<std::string> choices;
        {
            std::string cur;
            for (char c : o.allowed) {
                if (c == '|') {
                    choices.push_back(cur);
                    cur.clear();
                } else {
                    cur += c;
                }
            }
            if (!cur.empty()) choices.push_back(cur);
        }
        switch (o.type) {
        case MSMS_OPT_INT: {
            long long n = 0;
            bool neg = !v.empty() && v[0] == '-';
            unsigned long long u;
            if (!parse_uint(neg ? v.substr(1) : v, u)) {
                errors.push_back(where + ": invalid value '" + v + "' (allowed: an integer in " +
                                 std::to_string(o.min) + ".." + std::to_string(o.max) + ")");
                ok = false;
                continue;
            }
            n = neg ? -static_cast<long long>(u) : static_cast<long long>(u);
            if (n < o.min || n > o.max) {
                errors.push_back(where + ": value " + v + " out of range (allowed: " + std::to_string(o.min) + ".." +
                                 std::to_string(o.max) + ")");
                ok = false;
                continue;
            }
            break;
        }
        case MSMS_OPT_BOOL: {
            bool b;
            if (!parse_bool(v, b)) {
                errors.push_back(where + ": invalid value '" + v + "' (allowed: true, false)");
                ok = false;
                continue;
            }
            v = b ? "true" : "false";
            break;
        }
        case MSMS_OPT_ENUM:
            if (std::find(choices.begin(), choices.end(), v) == choices.end()) {
                errors.push_back(where + ": invalid value '" + v + "' (allowed: " + join(choices, ", ") + ")");
                ok = false;
                continue;
            }
            break;
        case MSMS_OPT_LIST:
            if (!choices.empty()) {
                for (auto& item : split_list(v))
                    if (std::find(choices.begin(), choices.end(), item) == choices.end()) {
                        errors.push_back(where + ": invalid item '" + item + "' (allowed: " + join(choices, ", ") +
                                         ")");
                        ok = false;
                    }
            }
            v = join(split_list(v), ",");
            break;
        default:
            break;
        }
        out[o.name] = v;
    }
    return ok;
}

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

bool Config::wants_device_kind(const std::string& kind) const {
    for (auto& d : devices)
        if (d == kind || d.rfind(kind + ":", 0) == 0) return true;
    return false;
}

std::string Config::backend() const {
    for (auto& d : devices) {
        if (d.rfind("npu", 0) == 0) return "npu";
        if (d.rfind("cuda", 0) == 0) return "cuda";
    }
    return "cpu";
}

std::string Config::agent_options() const {
    std::string s = "events=" + join(std::vector<std::string>(events.begin(), events.end()), ",");
    std::vector<std::string> cs;
    if (c_stack) cs.push_back("c:" + std::to_string(c_depth));
    if (py_stack) cs.push_back("python:" + std::to_string(py_depth));
    s += ";call_stack=" + join(cs, ",");
    s += ";collect_mode=" + collect_mode;
    s += ";follow_fork=" + std::string(follow_fork ? "1" : "0");
    s += ";device=" + join(devices, ",");
    s += ";level=" + std::to_string(level);
    std::vector<std::string> st;
    for (auto n : steps) st.push_back(std::to_string(n));
    s += ";steps=" + join(st, ",");
    if (watch) s += ";watch=" + watch->text;
    s += ";collectors=" + join(collectors, ",");
    for (auto& name : collectors) {
        auto it = plugin_options.find(name);
        if (it == plugin_options.end()) continue;
        for (auto& [k, v] : it->second) s += ";" + name + "." + k + "=" + v;
    }
    return s;
}

std::string Config::to_json() const {
    Json j = Json::object();
    Json st = Json::array();
    for (auto n : steps) st.push(Json(static_cast<int64_t>(n)));
    j.set("steps", st);
    j.set("device", Json::from_list(devices));
    j.set("level", Json(level == 0 ? "op" : "kernel"));
    j.set("events", Json::from_list(std::vector<std::string>(events.begin(), events.end())));
    Json cs = Json::object();
    if (c_stack) cs.set("c", Json(static_cast<int64_t>(c_depth)));
    if (py_stack) cs.set("python", Json(static_cast<int64_t>(py_depth)));
    j.set("call_stack", cs);
    j.set("collect_mode", Json(collect_mode));
    j.set("analysis", Json::from_list(analyzers));
    j.set("data_format", Json(data_format));
    j.set("sinks", Json::from_list(sinks));
    j.set("watch", watch ? Json(watch->text) : Json());
    j.set("output", Json(output));
    j.set("log_level", Json(log_level));
    j.set("follow_fork", Json(follow_fork));
    j.set("collectors", Json::from_list(collectors));
    Json po = Json::object();
    for (auto& [name, opts] : plugin_options) {
        if (opts.empty()) continue;
        Json o = Json::object();
        for (auto& [k, v] : opts) o.set(k, Json(v));
        po.set(name, o);
    }
    j.set("plugin_options", po);
    j.set("program", Json::from_list(program));
    return j.dump(2);
}

}  // namespace msms
