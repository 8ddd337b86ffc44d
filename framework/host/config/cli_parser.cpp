// The command line, read the way msMemScope's getopt_long parser reads it:
// our options are recognised anywhere before "--" (also after the program
// name: the argument list is permuted), long options may be shortened to an
// unambiguous prefix, short options may be grouped (-vq) and take their value
// attached or as the next word (-o DIR, -oDIR), a repeated option keeps its
// last value, and everything after "--" belongs to the program. Values are
// kept raw here and checked by validate().
#include "config.h"

#include <sys/stat.h>

#include <algorithm>

#include "options.h"
#include "util/text.h"

namespace msms {
using namespace cfgopt;

namespace {

const char* const kPutAfterDashes =
    "; put the program's own options after '--' (msmemscope [options] -- <prog> [args])";

// Resolves a long option name (exact, or an unambiguous prefix). On failure
// sets why (without the option itself) and returns nullptr.
const OptionDef* resolve_long(const std::string& name, std::string& why) {
    if (const OptionDef* o = find_option(name)) return o;
    std::vector<const OptionDef*> all, up;
    auto add = [](std::vector<const OptionDef*>& v, const OptionDef& o) {
        for (auto* p : v)
            if (p->setting() == o.setting() && p->takes_value == o.takes_value) return;  // an alias of one seen
        v.push_back(&o);
    };
    for (auto& o : options()) {
        if (o.group == kInternal || std::string(o.name).rfind(name, 0) != 0) continue;
        add(all, o);
        if (o.upstream) add(up, o);
    }
    if (all.size() == 1) return all[0];
    // A prefix that is unambiguous among msMemScope's own options means what it means there.
    if (up.size() == 1) return up[0];
    if (all.empty()) {
        std::vector<std::string> names;
        for (auto& o : options())
            if (o.group != kInternal) names.push_back(o.name);
        std::string guess = did_you_mean(name, names);
        why = guess.empty() ? "" : "; did you mean '--" + guess + "'?";
        return nullptr;
    }
    // Ambiguous among msMemScope's own options: named as it names them
    // (options of ours that share the prefix do not change its message).
    std::vector<std::string> names;
    for (auto* o : up.size() > 1 ? up : all) names.push_back(std::string("--") + o->name);
    std::sort(names.begin(), names.end());
    why = " is ambiguous (could be " + join(names, ", ") + ")";
    return nullptr;
}

const OptionDef* find_short(char c) {
    for (auto& o : options())
        if (o.short_name == c) return &o;
    return nullptr;
}

}  // namespace

bool parse_command_line(int argc, const char* const* argv, RawConfig& raw, std::vector<std::string>& errors) {
    size_t before = errors.size();
    bool explicit_log_level = false;
    // Records one option; `origin` is what the user typed ("--format", "-o").
    auto take = [&](const OptionDef& o, const std::string& origin, const std::string& value) {
        std::string n = o.name;
        if (n == "help") raw.help = true;
        else if (n == "version") raw.version = true;
        else if (n == "list-plugins") raw.list_plugins = true;
        else if (n == "describe-plugin") raw.describe_plugin = value;
        else if (n == "verbose" || n == "debug") raw.verbose = true;
        else if (n == "quiet") raw.quiet = true;
        else if (n == "plugin-option") {
            size_t dot = value.find('.'), eq = value.find('=');
            if (dot == std::string::npos || eq == std::string::npos || dot > eq || dot == 0 || eq == dot + 1) {
                errors.push_back(origin + ": invalid value '" + shown(value) + "' (allowed: NAME.KEY=VALUE)");
                return;
            }
            std::string plugin = value.substr(0, dot);
            raw.plugin_options[plugin][value.substr(dot + 1, eq - dot - 1)] = value.substr(eq + 1);
            raw.plugin_option_origin[plugin] = origin;
        } else if (n == "plugin-path") {
            struct stat st;
            if (value.empty()) errors.push_back(origin + ": empty value (allowed: a folder with plugins)");
            else if (stat(value.c_str(), &st) != 0) errors.push_back(origin + ": '" + shown(value) + "' does not exist");
            else if (!S_ISDIR(st.st_mode)) errors.push_back(origin + ": '" + shown(value) + "' is not a folder");
            else raw.search_paths.push_back(value);
        } else if (n == "config") {
            if (value.empty()) errors.push_back(origin + ": empty value (allowed: a YAML file)");
            raw.config_file = value;
            raw.config_origin = origin;
        } else if (!o.takes_value) {
            raw.values[o.setting()] = RawValue{"true", origin};  // --compare
        } else {
            if (o.setting() == "log-level") explicit_log_level = true;
            raw.values[o.setting()] = RawValue{value, origin};  // a repeated option keeps the last value
        }
    };

    std::vector<std::string> program;
    int i = 1;
    for (; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--") {
            ++i;
            break;
        }
        if (a.size() > 2 && a.compare(0, 2, "--") == 0) {
            std::string name = a.substr(2), value;
            bool has_value = false;
            size_t eq = name.find('=');
            if (eq != std::string::npos) {
                value = name.substr(eq + 1);
                name = name.substr(0, eq);
                has_value = true;
            }
            std::string why;
            const OptionDef* o = resolve_long(name, why);
            if (!o) {
                bool ambiguous = why.rfind(" is ambiguous", 0) == 0;
                if (!ambiguous && !program.empty() && !why.empty())  // "; did you mean ...?" -> " (did you mean ...?)"
                    why = " (" + why.substr(2) + ")";
                errors.push_back((ambiguous ? "option '--" + name + "'" + why : "unknown option '--" + name + "'" + why) +
                                 (program.empty() ? "" : kPutAfterDashes));
                continue;
            }
            std::string origin = std::string("--") + o->name;
            if (!o->takes_value) {
                if (has_value) errors.push_back(origin + ": takes no value");
                else take(*o, origin, "");
                continue;
            }
            if (!has_value) {
                if (i + 1 >= argc) {
                    errors.push_back(origin + ": missing value");
                    continue;
                }
                value = argv[++i];
            }
            take(*o, origin, value);
            continue;
        }
        if (a.size() > 1 && a[0] == '-') {
            // A group of short options: -vq, -o DIR, -oDIR.
            for (size_t k = 1; k < a.size(); ++k) {
                const OptionDef* o = find_short(a[k]);
                std::string origin = std::string("-") + a[k];
                if (!o) {
                    errors.push_back("unknown option '" + origin + "'" +
                                     (a.size() > 2 ? " (in '" + shown(a) + "')" : std::string()) +
                                     (program.empty() ? " (see --help)" : kPutAfterDashes));
                    break;  // the rest of this word is not ours to guess at
                }
                if (!o->takes_value) {
                    take(*o, origin, "");
                    continue;
                }
                std::string value;
                if (k + 1 < a.size()) {
                    value = a.substr(k + 1);
                } else if (i + 1 < argc) {
                    value = argv[++i];
                } else {
                    errors.push_back(origin + ": missing value");
                    break;
                }
                take(*o, origin, value);
                break;
            }
            continue;
        }
        program.push_back(a);  // the program and its words, in order, with our options taken out
    }
    for (; i < argc; ++i) program.push_back(argv[i]);
    raw.program = program;
    // The log-level shortcuts: an explicit --log-level wins; otherwise the
    // most verbose of them (-v/--verbose/--debug over -q/--quiet).
    if (!explicit_log_level) {
        if (raw.verbose) raw.values["log-level"] = RawValue{"debug", "--verbose"};
        else if (raw.quiet) raw.values["log-level"] = RawValue{"error", "--quiet"};
    }
    return errors.size() == before;
}

}  // namespace msms
