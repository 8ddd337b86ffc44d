// validate(): every raw value checked and turned into the effective Config;
// implied events, the analyzers, sinks and collectors chosen.
#include "config.h"
#include "api_words.h"

#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string_view>

#include <msmemscope/abi.h>
#include "options.h"
#include "util/text.h"

namespace msms {
using namespace cfgopt;

namespace {

const char* const kWatchAllowed = "[start[:N]],end[,full-content], e.g. ";

// A device id as msMemScope reads it: decimal, 0x hex or 0 octal.
bool parse_device_id(const std::string& s, unsigned long long& out) {
    if (s.empty() || !isxdigit(static_cast<unsigned char>(s[0]))) return false;
    errno = 0;
    char* end = nullptr;
    out = std::strtoull(s.c_str(), &end, 0);
    return errno == 0 && end && *end == '\0';
}

// --watch=[start[:N]],end[,full-content] as msMemScope reads it: the start
// part (possibly empty) always ends at the first ','; N is a bare output
// index (our older "outN" is also read); an op name may contain "::".
std::string parse_watch(const std::string& value, WatchSpec& w) {
    size_t comma = value.find(',');
    if (comma == std::string::npos) return "no ',' before the end op";
    std::string start = value.substr(0, comma);
    size_t colon = start.rfind(':');
    if (colon != std::string::npos && !(colon > 0 && start[colon - 1] == ':')) {
        std::string idx = start.substr(colon + 1);
        start = start.substr(0, colon);
        if (start.empty() || idx.empty()) return "':' needs a start op before it and an output index after it";
        if (idx.rfind("out", 0) == 0 && idx.size() > 3) idx = idx.substr(3);
        unsigned long long n;
        if (!parse_uint(idx, n) || (idx.size() > 1 && idx[0] == '0') || n > 4294967295ull)
            return "the output index must be a number 0..4294967295 without leading zeros";
        w.out_index = static_cast<long long>(n);
    }
    std::string rest = value.substr(comma + 1);
    size_t next = rest.find(',');
    std::string end = rest.substr(0, next);
    std::string tail = next == std::string::npos ? "" : rest.substr(next + 1);
    if (end.empty()) return "the end op is required";
    if (!tail.empty() && tail != "full-content") return "only 'full-content' may follow the end op";
    w.start = start;
    w.end = end;
    w.full_content = tail == "full-content";
    w.text = (start.empty() ? "" : start + (w.out_index >= 0 ? ":out" + std::to_string(w.out_index) : "")) + "," + end +
             (w.full_content ? ",full-content" : "");
    return "";
}

// A dotted Python name: identifiers (ASCII) joined by single dots.
bool dotted_name(const std::string& s) {
    if (s.empty() || s.size() > 256) return false;
    bool start = true;
    for (char c : s) {
        if (c == '.') {
            if (start) return false;
            start = true;
        } else if (isalpha(static_cast<unsigned char>(c)) || c == '_' || (!start && isdigit(static_cast<unsigned char>(c)))) {
            start = false;
        } else {
            return false;
        }
    }
    return !start;
}

// --step-on: "module:qualname", or "module.function" (split at the last dot).
bool parse_step_on(const std::string& s, std::string& norm) {
    size_t colon = s.find(':');
    std::string module, qual;
    if (colon != std::string::npos) {
        module = s.substr(0, colon);
        qual = s.substr(colon + 1);
    } else {
        size_t dot = s.rfind('.');
        if (dot == std::string::npos) return false;
        module = s.substr(0, dot);
        qual = s.substr(dot + 1);
    }
    if (!dotted_name(module) || !dotted_name(qual)) return false;
    norm = module + ":" + qual;
    return true;
}

bool valid_output_char(const std::string& s, size_t& i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
        ++i;
        // A space, but no other white space: '\n', '\r', '\t', '\v', '\f' in a
        // folder name break every line that names it (the summary, logs).
        return isalnum(c) || c == '.' || c == '/' || c == '_' || c == '-' || c == '~' || c == ' ';
    }
    // Chinese characters U+4E00..U+9FA5 (three UTF-8 bytes), as msMemScope allows.
    if (i + 2 < s.size() && (c & 0xF0) == 0xE0 && (s[i + 1] & 0xC0) == 0x80 && (s[i + 2] & 0xC0) == 0x80) {
        unsigned cp = ((c & 0x0Fu) << 12) | ((static_cast<unsigned char>(s[i + 1]) & 0x3Fu) << 6) |
                      (static_cast<unsigned char>(s[i + 2]) & 0x3Fu);
        i += 3;
        return cp >= 0x4E00 && cp <= 0x9FA5;
    }
    ++i;
    return false;
}

// msMemScope's rules for --output: not blank; letters, digits, '.', '/',
// '_', '-', '~', spaces and Chinese characters only; each folder name at
// most 255 bytes, the whole at most 4096, at most 32 levels deep.
std::string check_output_path(const std::string& p) {
    if (trim(p).empty()) return "empty value (allowed: a folder path)";
    if (p.size() > 4096) return "path longer than 4096 characters";
    for (size_t i = 0; i < p.size();) {
        size_t at = i;
        if (!valid_output_char(p, i)) {
            std::string ch = escape_controls(p.substr(at, i - at));
            return "invalid character '" + ch + "' in '" + shown(p) +
                   "' (allowed: letters, digits, '.', '/', '_', '-', '~', spaces, Chinese characters)";
        }
    }
    for (size_t start = 0; start <= p.size();) {
        size_t slash = p.find('/', start);
        if (slash == std::string::npos) slash = p.size();
        if (slash - start > 255) return "a folder name is longer than 255 characters";
        start = slash + 1;
    }
    std::string abs = p;
    if (p[0] != '/') {
        char cwd[4096];
        if (getcwd(cwd, sizeof cwd)) abs = std::string(cwd) + "/" + p;
    }
    // Levels are folder names: "a//b/" and "a/./b" are two deep, as "a/b".
    int levels = 0;
    for (size_t start = 0; start < abs.size();) {
        size_t slash = abs.find('/', start);
        if (slash == std::string::npos) slash = abs.size();
        std::string_view name(abs.data() + start, slash - start);
        if (!name.empty() && name != ".") ++levels;
        start = slash + 1;
    }
    if (levels > 32) return "more than 32 folder levels deep";
    return "";
}

}  // namespace

// (config.h)
std::vector<std::string> expand_path_pattern(const std::string& value, const std::string& origin,
                                             std::vector<std::string>& errors) {
    struct stat st;
    if (value.find_first_of("*?[") == std::string::npos || stat(value.c_str(), &st) == 0) return {value};
    glob_t g{};
    int rc = glob(value.c_str(), GLOB_ERR, nullptr, &g);
    std::vector<std::string> out;
    if (rc == 0)
        for (size_t i = 0; i < g.gl_pathc; ++i) out.push_back(g.gl_pathv[i]);
    globfree(&g);
    if (out.empty())
        errors.push_back(origin + ": no file matches the pattern '" + shown(value) + "'");
    return out;
}

namespace {

// An input that exists but is not a regular file (a FIFO, a pipe from
// "<(...)", a socket, a device; a folder unless folders are allowed): one
// message naming what it is, before anything opens it (a FIFO would block
// the open, a device would be read without end). "" when it is fine or does
// not exist (said elsewhere, where the file is opened).
// folder_said: a folder is left to the reader, which says what it expected.
std::string not_regular(const std::string& origin, const std::string& path, bool folder_ok, bool folder_said = false) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode) || ((folder_ok || folder_said) && S_ISDIR(st.st_mode)))
        return "";
    return origin + ": '" + shown(path) + "' is not a regular file (" + file_kind(st.st_mode) + "); give a file" +
           (folder_ok ? " or a folder" : "");
}

// "a, b (and N more)" for an error message.
std::string some_paths(const std::vector<std::string>& paths) {
    std::vector<std::string> head(paths.begin(), paths.begin() + std::min<size_t>(paths.size(), 5));
    return join(head, ", ") + (paths.size() > 5 ? " (and " + std::to_string(paths.size() - 5) + " more)" : "");
}

}  // namespace

// Collectors: every collector that serves a chosen device kind (or "*")
// and produces a wanted event class (or declares none).
void choose_collectors(const Catalog& catalog, Config& cfg) {
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
}

namespace {

// The Python API's session (--serve-session: a plain `python3 script.py`
// with msmemscope.start()): the options came from msmemscope.config(), and
// its messages name config()'s keys, not the command line's options (the
// package passes `format` and `output_path` as --format and --output-path).
bool api_session(const RawConfig& raw) { return raw.values.count("serve-session") != 0; }

// (the internal options the package adds, --serve-session..., keep their names)
std::string py_key(const std::string& origin) {
    if (origin.rfind("--", 0) != 0) return origin;
    const char* k = api_key(origin.substr(2));
    return k ? k : origin;
}

// How the user set an option to a value: --events=alloc, or events="alloc".
std::string set_as(bool api, const std::string& origin, const std::string& value) {
    return api ? origin + "=\"" + value + "\"" : origin + "=" + value;
}

// How to set one: --analysis=leaks, or msmemscope.config(analysis="leaks").
std::string how_to_set(bool api, const std::string& option, const std::string& value) {
    return api ? "msmemscope.config(" + py_key("--" + option) + "=\"" + value + "\")" : "--" + option + "=" + value;
}

}  // namespace

bool validate(const RawConfig& raw_given, const Catalog& catalog, Config& cfg, std::vector<std::string>& errors) {
    const bool api = api_session(raw_given);
    RawConfig api_raw;
    if (api) {
        api_raw = raw_given;
        for (auto& [k, v] : api_raw.values) v.origin = py_key(v.origin);
        for (auto& [k, o] : api_raw.plugin_option_origin) o = py_key(o);
    }
    const RawConfig& raw = api ? api_raw : raw_given;
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
        if (items.empty())
            errors.push_back(v->origin + ": empty value (allowed: at most 5 step ids 1..4294967295, e.g. " +
                             how_to_set(api, "steps", "1,2,3") + ")");
        for (auto& s : items) {
            unsigned long long n;
            if (!parse_uint(s, n) || n == 0 || n > 4294967295ull)
                errors.push_back(bad_value(v->origin, s, "step ids 1..4294967295, e.g. " + how_to_set(api, "steps", "1,2,3")));
            else
                cfg.steps.push_back(static_cast<long long>(n));
        }
        if (items.size() > 5) errors.push_back(v->origin + ": at most 5 steps, got " + std::to_string(items.size()));
    }
    if (auto v = get("plugin-time-budget")) {
        auto items = split_list(v->value);
        const char* allowed = "seconds 0..86400 for one call, optionally ',' and seconds for finish(), e.g. 60,600";
        unsigned long long n[2] = {0, 0};
        bool ok = !items.empty() && items.size() <= 2;
        for (size_t i = 0; ok && i < items.size(); ++i) ok = parse_uint(items[i], n[i]) && n[i] <= 86400;
        if (!ok) {
            errors.push_back(bad_value(v->origin, v->value, allowed));
        } else {
            cfg.plugin_call_budget_s = static_cast<unsigned>(n[0]);
            cfg.plugin_finish_budget_s = static_cast<unsigned>(items.size() == 2 ? n[1] : std::max(n[0], 600ull));
        }
    }
    if (auto v = get("offline-memory")) {
        unsigned long long n = 0;
        if (!parse_uint(v->value, n) || n < 16 || n > 4194304)
            errors.push_back(bad_value(v->origin, v->value, "MiB 16..4194304, e.g. --offline-memory=2048"));
        else
            cfg.offline_memory_mib = n;
    }
    if (auto v = get("step-on")) {
        cfg.step_on.clear();
        auto items = split_list(v->value);
        const char* allowed = "module:function or module:Class.method, e.g. --step-on=__main__:generate_token";
        if (items.empty()) errors.push_back(v->origin + ": empty value (allowed: " + allowed + ")");
        for (auto& s : items) {
            std::string norm;
            if (!parse_step_on(s, norm)) errors.push_back(bad_value(v->origin, s, allowed));
            else cfg.step_on.push_back(norm);
        }
    }
    if (auto v = get("device")) {
        cfg.devices_given = true;
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
                    if (parse_device_id(d.substr(k.size()), id) && id <= 31) {
                        ok = true;
                        d = k + std::to_string(id);  // npu:0x1f -> npu:31
                    }
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
        unsigned levels = 0;
        auto items = split_list(v->value);
        if (items.empty()) errors.push_back(v->origin + ": empty value (allowed: op, kernel, op,kernel; 0 = op, 1 = kernel)");
        for (auto& s : items) {
            if (s == "0" || s == "op") levels |= 1u;
            else if (s == "1" || s == "kernel") levels |= 2u;
            else errors.push_back(bad_value(v->origin, s, "op, kernel, op,kernel; 0 = op, 1 = kernel"));
        }
        if (levels) {
            cfg.levels = levels;
            cfg.level = (levels & 2u) ? 1 : 0;
            cfg.level_given = true;
        }
    }
    if (auto v = get("events")) {
        cfg.events.clear();
        auto items = split_list(v->value);
        bool none = std::find(items.begin(), items.end(), "none") != items.end();
        for (auto& e : items) {
            if (e == "alloc" || e == "free" || e == "launch" || e == "access" || e == "traceback" || e == "none") {
                if (!none) cfg.events.insert(e);
            } else {
                errors.push_back(bad_value(v->origin, e, std::string(kEventsAllowed) + ", none"));
            }
        }
        if (none && items.size() > 1)
            cfg.warnings.push_back(v->origin + ": 'none' mixed with other event types; no events are written");
        // What is written is exactly what was listed (msMemScope's dump filter).
        cfg.written_events = cfg.events;
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
            if (colon != std::string::npos && (!parse_uint(depth, d) || d > 1000 || (depth.size() > 1 && depth[0] == '0'))) {
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
        if (s != "debug" && s != "info" && s != "warn" && s != "warning" && s != "error")
            errors.push_back(bad_value(v->origin, s, "debug, info, warning, warn, error"));
        else
            cfg.log_level = s == "warning" ? "warn" : s;
    }
    if (auto v = get("output")) {
        std::string why = check_output_path(v->value);
        if (!why.empty()) errors.push_back(v->origin + ": " + why);
        else cfg.output = v->value;
    }
    for (const char* key : {"follow-fork", "save-capture", "compare", "aggregate"}) {
        if (auto v = get(key)) {
            bool b;
            if (!parse_bool(trim(v->value), b)) {
                errors.push_back(bad_value(v->origin, v->value, "true, false"));
                continue;
            }
            if (std::string(key) == "follow-fork") cfg.follow_fork = b;
            else if (std::string(key) == "save-capture") cfg.save_capture = b;
            else if (std::string(key) == "aggregate") cfg.aggregate = b;
            else cfg.compare = b;
        }
    }
    bool input_pattern_failed = false;
    if (auto v = get("input")) {
        size_t errors_before = errors.size();
        cfg.inputs.clear();
        for (auto& s : split_list(v->value)) {
            if (s.size() > 4096) {
                errors.push_back(v->origin + ": path longer than 4096 characters");
                continue;
            }
            // Each input names one file or folder: a pattern must match exactly one.
            auto found = expand_path_pattern(s, v->origin, errors);
            if (found.size() > 1)
                errors.push_back(v->origin + ": the pattern '" + shown(s) + "' matches " + std::to_string(found.size()) +
                                 " paths (" + some_paths(found) + "); each input must name one file or folder");
            else if (found.size() == 1) {
                std::string why = not_regular(v->origin, found[0], true);
                if (!why.empty()) errors.push_back(why);
                else cfg.inputs.push_back(found[0]);
            }
        }
        input_pattern_failed = errors.size() > errors_before;
    }
    if (auto v = get("replay")) {
        if (v->value.empty()) errors.push_back(v->origin + ": empty value (allowed: a capture file, .msmcap)");
        cfg.replay = v->value;
        if (!v->value.empty()) {
            // Several captures (one per process of a run) are replayed one after another.
            cfg.replays = expand_path_pattern(v->value, v->origin, errors);
            if (cfg.replays.size() == 1) cfg.replay = cfg.replays[0];
            // A folder is said by the capture reader ("not a msmemscope capture").
            for (auto& r : cfg.replays) {
                std::string why = not_regular(v->origin, r, false, true);
                if (!why.empty()) errors.push_back(why);
            }
        }
    }
    if (auto v = get("merge")) {
        // --merge (merge.h): folders of runs (or process folders) to combine.
        for (auto& f : split_list(v->value)) cfg.merge.push_back(trim(f));
        if (cfg.merge.empty()) errors.push_back(v->origin + ": empty value (give --merge=<folder>[,<folder>...])");
        if (cfg.compare || get("analyze") || get("replay") || !cfg.program.empty())
            errors.push_back(v->origin + ": --merge runs alone (no program, --compare, --analyze or --replay)");
        if (!get("output")) cfg.output.clear();  // merge_main: memscopeDumpResults/merge_<ts>
    }
    if (auto v = get("serve-session")) {
        if (v->value.empty()) errors.push_back(v->origin + ": empty value (allowed: a session folder)");
        cfg.serve_session = v->value;
    }
    if (auto v = get("python-api")) {
        if (!get("analyze")) errors.push_back(v->origin + ": only with --analyze (the Python package's analyze())");
        cfg.offline_api = true;
    }
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
        WatchSpec w;
        std::string why = parse_watch(v->value, w);
        if (!why.empty())
            errors.push_back(v->origin + ": invalid value '" + shown(v->value) + "': " + why + " (allowed: " +
                             kWatchAllowed + how_to_set(api, "watch", "op1:0,op2") + " or " +
                             how_to_set(api, "watch", ",op2") + ")");
        else
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
        auto items = split_list(v->value);
        bool none = !cfg.analyze && std::find(items.begin(), items.end(), "none") != items.end();
        if (none && items.size() > 1)
            cfg.warnings.push_back(v->origin + ": 'none' mixed with other analysis types; no analysis is run");
        unsigned long long n_scratch = 0;
        for (auto& item : items) {
            if (none) break;
            std::string name = item, arg;
            size_t colon = item.find(':');
            if (colon != std::string::npos) {
                name = item.substr(0, colon);
                arg = item.substr(colon + 1);
            }
            const PluginInfo* p = find_plugin(catalog, name, MSMS_KIND_ANALYZER);
            if (!p) {
                std::string guess = did_you_mean(name, analyzers);
                errors.push_back(v->origin + ": unknown analyzer '" + shown(name) + "'" +
                                 (guess.empty() ? "" : "; did you mean '" + guess + "'?") + " (available: " +
                                 (analyzers.empty() ? std::string("none found") : join(analyzers, ", ")) +
                                 (cfg.analyze ? "" : ", or none") + ")");
                continue;
            }
            if (colon != std::string::npos) {
                // msMemScope's own analyses take no ':' argument except oom[:K] (a bad K warns and
                // keeps the default there); other analyzers: "name:value" sets their first option.
                bool upstream_name = name == "leaks" || name == "decompose" || name == "inefficient";
                if (upstream_name || p->options.empty()) {
                    errors.push_back(v->origin + ": analyzer '" + name + "' takes no ':' argument (" +
                                     (upstream_name ? std::string("only oom[:K], K 1..1000; other options: ")
                                                    : std::string("options: ")) +
                                     (api ? "msmemscope.config(plugin_options={\"" + name + "\": {KEY: VALUE}})"
                                          : "--plugin-option=" + name + ".KEY=VALUE") + ")");
                    continue;
                }
                if (name != "oom") {
                    given[name][p->options[0].name] = arg;  // checked against the schema below
                } else if (const PluginInfo::Option& k = p->options[0];
                           !parse_uint(arg, n_scratch) || static_cast<long long>(n_scratch) < k.min ||
                           static_cast<long long>(n_scratch) > k.max) {
                    cfg.warnings.push_back(v->origin + ": invalid OOM top-K value '" + shown(arg) + "' (allowed: " +
                                           std::to_string(k.min) + ".." + std::to_string(k.max) + "); using the default " +
                                           (k.has_default ? k.default_value : std::string("value")));
                } else if (!given[name].count(k.name)) {
                    given[name][k.name] = arg;
                }
            }
            if (std::find(cfg.analyzers.begin(), cfg.analyzers.end(), name) == cfg.analyzers.end())
                cfg.analyzers.push_back(name);
        }
    } else {
        // Default analysis: leaks, when that analyzer is installed.
        cfg.analyzers.clear();
        if (find_plugin(catalog, "leaks", MSMS_KIND_ANALYZER)) cfg.analyzers.push_back("leaks");
    }

    // Leak suppressions (issue #19 item 7): files the leaks analyzer reads,
    // checked here so that a wrong path stops the run before it starts.
    if (auto v = get("suppress")) {
        std::vector<std::string> files;
        for (auto& f : split_list(v->value)) {
            struct stat st;
            if (stat(f.c_str(), &st) != 0) {
                errors.push_back(v->origin + ": '" + shown(f) + "': " + strerror(errno));
                continue;
            }
            if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
                errors.push_back(not_regular(v->origin, f, false));
                continue;
            }
            if (!S_ISREG(st.st_mode) || access(f.c_str(), R_OK) != 0) {
                errors.push_back(v->origin + ": '" + shown(f) + "' is not a readable file");
                continue;
            }
            char* abs = realpath(f.c_str(), nullptr);
            files.push_back(abs ? abs : f);
            free(abs);
        }
        if (files.empty() && split_list(v->value).empty())
            errors.push_back(v->origin + ": empty value (allowed: a suppression file)");
        if (!find_plugin(catalog, "leaks", MSMS_KIND_ANALYZER))
            errors.push_back(v->origin + ": the leaks analyzer was not found, so suppressions cannot apply");
        else if (!files.empty() && !given["leaks"].count("suppress"))
            given["leaks"]["suppress"] = join(files, ",");
    }
    if (auto v = get("default-suppressions")) {
        bool b;
        if (!parse_bool(trim(v->value), b)) errors.push_back(bad_value(v->origin, v->value, "true, false"));
        else if (find_plugin(catalog, "leaks", MSMS_KIND_ANALYZER) && !given["leaks"].count("default_suppressions"))
            given["leaks"]["default_suppressions"] = b ? "true" : "false";
    }
    for (const char* key : {"suppress", "default-suppressions"})
        if (auto v = get(key); v && std::find(cfg.analyzers.begin(), cfg.analyzers.end(), "leaks") == cfg.analyzers.end())
            cfg.warnings.push_back(v->origin + ": the leaks analysis is not selected, so leak suppressions have no "
                                   "effect (select it with " + how_to_set(api, "analysis", "leaks") + ")");

    // Sinks: the data format first, then --sinks.
    auto sinks = names_of_kind(catalog, MSMS_KIND_SINK);
    cfg.sinks.clear();
    if (!find_plugin(catalog, cfg.data_format, MSMS_KIND_SINK))
        errors.push_back((get("data-format") ? get("data-format")->origin : std::string("--data-format")) +
                         ": the '" + cfg.data_format + "' sink plugin was not found (available sinks: " +
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

    // --aggregate keeps no per-event rows: the sinks that write one per
    // event are off (said once each); the trace stops growing sooner.
    if (cfg.aggregate && !cfg.analyze && !cfg.compare) {
        for (const char* per_event : {"csv", "db"}) {
            auto it = std::find(cfg.sinks.begin(), cfg.sinks.end(), per_event);
            if (it == cfg.sinks.end()) continue;
            cfg.sinks.erase(it);
            cfg.warnings.push_back(std::string(api ? "aggregate" : "--aggregate") + ": the " + per_event +
                                   " sink is off (it writes a row per event); the summary, the analyses' reports "
                                   "and the html and trace sinks work in this mode");
        }
        if (std::find(cfg.sinks.begin(), cfg.sinks.end(), "trace") != cfg.sinks.end() &&
            !given["trace"].count("max_events"))
            if (const PluginInfo* p = find_plugin(catalog, "trace", MSMS_KIND_SINK))
                for (auto& o : p->options)
                    if (o.name == "max_events") given["trace"]["max_events"] = "100000";
    }

    // Implied events (COMPAT §1): from what the chosen analyzers declare, and
    // alloc <-> free, access -> alloc,free. When --events was given, one line
    // says what was added and why (the additions are collected, not written).
    {
        std::set<std::string> listed = cfg.events;
        // added event -> the analyzers that need it, and the events listed that need it
        std::map<std::string, std::pair<std::vector<std::string>, std::vector<std::string>>> why;
        for (auto& name : cfg.analyzers)
            if (auto p = find_plugin(catalog, name, MSMS_KIND_ANALYZER))
                for (auto& e : p->events)
                    if (!listed.count(e)) {
                        cfg.events.insert(e);
                        auto& r = why[e].first;
                        if (std::find(r.begin(), r.end(), name) == r.end()) r.push_back(name);
                    }
        if (cfg.events.count("alloc") || cfg.events.count("free") || cfg.events.count("access")) {
            for (std::string e : {"alloc", "free"}) {
                if (cfg.events.insert(e).second)
                    why[e].second.push_back(listed.count("access") ? "access" : e == "free" ? "alloc" : "free");
            }
        }
        auto v = get("events");
        std::vector<std::string> added;
        std::vector<std::pair<std::string, std::vector<std::string>>> by_reason;  // "for ..." -> events
        for (auto& [e, needs] : why) {
            // the analyzers as one value, as the user would set it: --analysis=leaks,oom / analysis="leaks,oom"
            std::vector<std::string> reasons;
            if (!needs.first.empty()) {
                std::string names = join(needs.first, ",");
                reasons.push_back(api ? "analysis=\"" + names + "\"" : "--analysis=" + names);
            }
            reasons.insert(reasons.end(), needs.second.begin(), needs.second.end());
            std::string r = join(reasons, ", ");
            auto it = std::find_if(by_reason.begin(), by_reason.end(), [&](auto& x) { return x.first == r; });
            if (it == by_reason.end()) by_reason.push_back({r, {e}});
            else it->second.push_back(e);
        }
        for (auto& [r, evs] : by_reason) added.push_back(join(evs, ", ") + " (for " + r + ")");
        if (v && !added.empty())
            cfg.warnings.push_back(set_as(api, v->origin, shown(v->value)) + ": also collecting " + join(added, ", ") +
                                   "; only the events listed are written");
        // Operators' tensor reads and writes (every input and output of every
        // operator: most ACCESS rows, and over a third of a PyTorch loop's
        // time) are collected when access was asked for (listed, so
        // written) or an analyzer other than decompose declares it.
        // Decompose's access is its owner tags (ACCESS UNKNOWN, Attr
        // owner): it never reads an operator's accesses, and access it
        // implied is not written.
        cfg.op_access = listed.count("access") != 0;
        for (auto& name : cfg.analyzers)
            if (auto p = find_plugin(catalog, name, MSMS_KIND_ANALYZER))
                if (name != "decompose" && std::count(p->events.begin(), p->events.end(), "access")) cfg.op_access = true;
    }

    // What is written (--events as given; msMemScope's Dump::ShouldDumpEvent):
    // sinks that declare a "write_events" option get it unless it was set.
    {
        std::vector<std::string> w;
        for (auto& e : cfg.written_events)
            if (e != "traceback") w.push_back(e);
        for (auto& name : cfg.sinks) {
            const PluginInfo* p = find_plugin(catalog, name, MSMS_KIND_SINK);
            if (!p || given[name].count("write_events")) continue;
            for (auto& o : p->options)
                if (o.name == "write_events") given[name]["write_events"] = w.empty() ? "none" : join(w, ",");
        }
    }

    // Plugin options: validated against each plugin's schema.
    cfg.plugin_options.clear();
    for (auto& [pname, opts] : given) {
        const PluginInfo* p = nullptr;
        for (auto& q : catalog)
            if (q.name == pname) p = &q;
        auto oit = raw.plugin_option_origin.find(pname);
        std::string origin = oit != raw.plugin_option_origin.end() ? oit->second : api ? "analysis" : "--analysis";
        if (!p) {
            std::vector<std::string> all;
            for (auto& q : catalog) all.push_back(q.name);
            std::string guess = did_you_mean(pname, all);
            errors.push_back(origin + ": options for unknown plugin '" + pname + "'" +
                             (guess.empty() ? "" : "; did you mean '" + guess + "'?"));
            continue;
        }
        validate_plugin_options(*p, opts, origin, cfg.plugin_options[pname], errors);
        if (p->kind == MSMS_KIND_ANALYZER)
            for (auto& [key, value] : opts) cfg.analyzer_options_given[pname].insert(key);
    }
    for (auto& p : catalog) {
        if (cfg.plugin_options.count(p.name)) continue;
        std::map<std::string, std::string> filled;
        std::vector<std::string> ignored;
        validate_plugin_options(p, {}, "defaults", filled, ignored);
        cfg.plugin_options[p.name] = filled;
    }

    choose_collectors(catalog, cfg);

    // --watch turns the watch analyzer on (it writes watch_dump).
    if (cfg.watch && !cfg.analyze && find_plugin(catalog, "watch", MSMS_KIND_ANALYZER) &&
        std::find(cfg.analyzers.begin(), cfg.analyzers.end(), "watch") == cfg.analyzers.end())
        cfg.analyzers.push_back("watch");

    // Options given for a plugin this run does not use have no effect: say so.
    for (auto& [pname, opts] : raw.plugin_options) {
        auto in = [&](const std::vector<std::string>& v) { return std::find(v.begin(), v.end(), pname) != v.end(); };
        auto oit = raw.plugin_option_origin.find(pname);
        std::string origin = oit != raw.plugin_option_origin.end() ? oit->second
                             : api ? "plugin_options" : "--plugin-option";
        for (auto& p : catalog) {
            if (p.name != pname) continue;
            if (p.kind == MSMS_KIND_ANALYZER && !in(cfg.analyzers))
                cfg.warnings.push_back(origin + ": analyzer '" + pname + "' is not selected, so its options have no "
                                       "effect (select it with " + how_to_set(api, "analysis", pname) + ")");
            else if (p.kind == MSMS_KIND_SINK && !in(cfg.sinks))
                cfg.warnings.push_back(origin + ": sink '" + pname + "' is not selected, so its options have no "
                                       "effect (select it with " + how_to_set(api, "sinks", pname) + " or " +
                                       how_to_set(api, "format", pname) + ")");
            else if (p.kind == MSMS_KIND_COLLECTOR && !in(cfg.collectors) && !cfg.analyze && !cfg.compare)
                cfg.warnings.push_back(origin + ": collector '" + pname + "' does not run for " +
                                       set_as(api, api ? "device" : "--device", join(cfg.devices, ",")) +
                                       ", so its options have no effect");
        }
    }

    if (input_pattern_failed) {
        // said above, per pattern
    } else if (cfg.compare) {
        if (cfg.inputs.size() != 2)
            errors.push_back("--input: --compare needs exactly two inputs, --input=<base>,<compare>");
    } else if (cfg.analyze) {
        if (cfg.inputs.size() != 1)
            errors.push_back("--input: --analyze needs exactly one input, --input=<dump.csv|dump.db|folder|capture>");
    } else if (get("input")) {
        errors.push_back("--input: only valid together with --compare");
    }
    // --analyze runs no sink (its findings go back into the input and to
    // the console): views asked for beside it would not appear, unsaid.
    if (cfg.analyze)
        for (const char* key : {"sinks", "data-format"})
            if (auto v = get(key))
                cfg.warnings.push_back(v->origin + ": not used with --analyze, which writes its results into the input "
                                                   "file and on the console (a capture's --replay writes the views)");
    if (cfg.compare && cfg.inputs.size() == 2)
        for (auto& in : cfg.inputs) {
            struct stat st;
            if (stat(in.c_str(), &st) != 0)
                errors.push_back(get("input")->origin + ": '" + shown(in) + "' does not exist");
        }
    validate_live_options(get("live"), get("live-http"), cfg, errors);  // --live, --live-http
    validate_attach_options(get("attach"), get("attach-for"), get("attach-steps"), cfg, errors);  // --attach
    if (!cfg.compare && !cfg.analyze && !get("replay") && !get("serve-session") && !get("merge") && cfg.program.empty() &&
        !raw.list_plugins && !get("attach"))
        errors.push_back("no program given (usage: msmemscope [options] -- <prog> [args], or see --help)");
    return errors.size() == before;
}

}  // namespace msms
