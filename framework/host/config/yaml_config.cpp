// --config: a YAML profile read into raw values (the command line wins).
// Keys are the long option names ('-' or '_'; msMemScope's aliases too) plus
// `plugins: {search_paths, options}`. Every relative path in a profile
// (output, input, replay, plugins.search_paths) is relative to the folder of
// the YAML file, so a profile means the same from any working directory.
// Limits: the file at most 1 MiB (bytes read; a FIFO, device or other
// non-regular file is refused before it is read); duplicate keys are errors; unknown keys are
// reported (the first 20, then a count); echoed values are cut at 80 characters.
#include "config.h"

#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include "options.h"
#include "util/text.h"

namespace msms {
using namespace cfgopt;

namespace {

constexpr long long kMaxYamlBytes = 1 << 20;
constexpr size_t kMaxUnknownKeys = 20;

// Settings a profile may hold (not help, version, the shortcuts, internal ones).
bool yaml_setting(const OptionDef& o) {
    std::string n = o.name;
    if (o.group == kInternal) return false;
    return o.takes_value ? n != "config" && n != "plugin-option" && n != "plugin-path" && n != "describe-plugin"
                         : n == "compare" || n == "aggregate";
}

// Keys whose values are paths (relative to the YAML file's folder).
bool path_setting(const std::string& setting) {
    return setting == "output" || setting == "input" || setting == "replay" || setting == "suppress";
}

struct Loader {
    const std::string& path;
    std::string dir;  // the YAML file's folder, with a trailing '/', or "" for the working directory
    RawConfig& raw;
    std::vector<std::string>& errors;
    size_t unknown = 0;
    bool ok = true;

    std::string line_of(const YAML::Node& n) const { return path + ":" + std::to_string(n.Mark().line + 1); }

    void error(const std::string& e) {
        errors.push_back(e);
        ok = false;
    }

    void unknown_key(const std::string& e) {
        ok = false;
        if (++unknown <= kMaxUnknownKeys) errors.push_back(e);
    }

    std::string resolve(const std::string& p) const { return p.empty() || p[0] == '/' ? p : dir + p; }

    // Duplicate keys in one mapping (yaml-cpp keeps both): an error naming the key path.
    void check_duplicates(const YAML::Node& map, const std::string& prefix) {
        std::map<std::string, int> seen;
        for (auto it : map) {
            if (!it.first.IsScalar()) continue;
            std::string k = canonical(it.first.Scalar());
            int line = it.first.Mark().line + 1;
            auto [pos, fresh] = seen.emplace(k, line);
            if (!fresh) {
                error(path + ":" + std::to_string(line) + ": duplicate key '" + shown(prefix + it.first.Scalar()) +
                      "' (first given at line " + std::to_string(pos->second) + ")");
            }
        }
    }

    bool scalar_or_list(const YAML::Node& n, const std::string& where, std::string& out, bool& is_list) {
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
                    error(where + ": list items must be plain values");
                    return false;
                }
                items.push_back(it.Scalar());
            }
            out = join(items, ",");
            return true;
        }
        error(where + ": expected a value or a list of values");
        return false;
    }

    void plugins(const YAML::Node& p, const std::string& where) {
        if (!p.IsMap()) {
            error(where + ": expected a mapping with search_paths and options");
            return;
        }
        check_duplicates(p, "plugins.");
        for (auto pit : p) {
            std::string pk = canonical(pit.first.Scalar());
            std::string pwhere = line_of(pit.first) + ": plugins." + pit.first.Scalar();
            if (pk == "search-paths") {
                std::string v;
                bool is_list;
                if (!scalar_or_list(pit.second, pwhere, v, is_list)) continue;
                for (auto& s : split_list(v)) {
                    std::string full = resolve(s);
                    struct stat st;
                    if (stat(full.c_str(), &st) != 0)
                        error(pwhere + ": '" + shown(full) + "' does not exist (relative paths are relative to the "
                                       "YAML file's folder)");
                    else if (!S_ISDIR(st.st_mode))
                        error(pwhere + ": '" + shown(full) + "' is not a folder");
                    else
                        raw.search_paths.push_back(full);
                }
            } else if (pk == "options") {
                if (!pit.second.IsMap()) {
                    error(pwhere + ": expected a mapping of plugin names to their options");
                    continue;
                }
                check_duplicates(pit.second, "plugins.options.");
                for (auto plug : pit.second) {
                    std::string pname = plug.first.Scalar();
                    std::string owhere = line_of(plug.first) + ": plugins.options." + pname;
                    if (!plug.second.IsMap()) {
                        error(owhere + ": expected a mapping of option names to values");
                        continue;
                    }
                    check_duplicates(plug.second, "plugins.options." + pname + ".");
                    for (auto kv : plug.second) {
                        std::string v;
                        bool is_list;
                        if (!scalar_or_list(kv.second, owhere + "." + kv.first.Scalar(), v, is_list)) continue;
                        if (!raw.plugin_options[pname].count(kv.first.Scalar()))
                            raw.plugin_options[pname][kv.first.Scalar()] = v;
                    }
                    if (!raw.plugin_option_origin.count(pname)) raw.plugin_option_origin[pname] = owhere;
                }
            } else {
                std::string guess = did_you_mean(pk, {"search-paths", "options"});
                unknown_key(pwhere + ": unknown key" + (guess.empty() ? std::string() : "; did you mean '" + guess + "'?") +
                            " (allowed: search_paths, options)");
            }
        }
    }

    void top(const YAML::Node& root) {
        std::vector<std::string> keys;  // for "did you mean"
        for (auto& o : options())
            if (yaml_setting(o)) {
                std::string u = o.name;
                std::replace(u.begin(), u.end(), '-', '_');
                keys.push_back(u);
            }
        keys.push_back("plugins");
        check_duplicates(root, "");  // reported; the rest is still checked
        for (auto it : root) {
            std::string key = it.first.IsScalar() ? it.first.Scalar() : std::string("?");
            std::string canon = canonical(key);
            std::string where = line_of(it.first) + ": " + key;
            if (canon == "plugins") {
                plugins(it.second, where);
                continue;
            }
            const OptionDef* o = find_option(canon);
            if (!o || !yaml_setting(*o)) {
                std::string guess = did_you_mean(key, keys);
                unknown_key(line_of(it.first) + ": unknown key '" + shown(key) + "'" +
                            (guess.empty() ? std::string() : "; did you mean '" + guess + "'?"));
                continue;
            }
            std::string v;
            bool is_list = false;
            if (!scalar_or_list(it.second, where, v, is_list)) continue;
            std::string setting = o->setting();
            if (path_setting(setting)) {
                std::vector<std::string> parts;
                for (auto& s : split_list(v)) parts.push_back(resolve(s));
                if (!parts.empty()) v = join(parts, ",");
                if (setting != "output")
                    for (auto& s : parts) {
                        struct stat st;
                        // A pattern (replay: run/*/capture_*.msmcap) is expanded and checked at validation.
                        if (stat(s.c_str(), &st) != 0 && s.find_first_of("*?[") == std::string::npos)
                            error(where + ": '" + shown(s) + "' does not exist (relative paths are relative to the "
                                          "YAML file's folder)");
                    }
            }
            if (!raw.values.count(setting)) raw.values[setting] = RawValue{v, where, is_list};
        }
    }
};

}  // namespace

bool load_yaml(const std::string& path, RawConfig& raw, std::vector<std::string>& errors) {
    const std::string& origin = raw.config_origin;
    struct stat st;
    if (path.empty()) {
        errors.push_back(origin + ": empty value (allowed: a YAML file)");
        return false;
    }
    if (stat(path.c_str(), &st) != 0) {
        errors.push_back(escape_controls(path) + ": cannot read the file");
        return false;
    }
    if (S_ISDIR(st.st_mode)) {
        errors.push_back(origin + ": '" + shown(path) + "' is a folder, not a YAML file");
        return false;
    }
    // Opened without blocking (a FIFO would wait for a writer) and read only
    // when it is a regular file; the 1 MiB limit holds for the bytes read,
    // not for what the file's size says.
    std::string why;
    int fd = open_regular_file(path, why);
    if (fd < 0) {
        errors.push_back(origin + ": " + why);
        return false;
    }
    std::string text;
    int got = fstat(fd, &st) == 0 && st.st_size > kMaxYamlBytes
                  ? 0
                  : read_at_most(fd, static_cast<size_t>(kMaxYamlBytes), text);
    int read_errno = errno;
    close(fd);
    if (got == 0) {
        std::string size = st.st_size > kMaxYamlBytes ? std::to_string(st.st_size) + " bytes"
                                                      : "more than " + std::to_string(kMaxYamlBytes) + " bytes read";
        errors.push_back(origin + ": '" + shown(path) + "' is larger than 1 MiB (" + size +
                         "); a profile is a short list of options");
        return false;
    }
    if (got < 0) {
        errors.push_back(escape_controls(path) + ": cannot read the file: " + strerror(read_errno));
        return false;
    }
    YAML::Node root;
    try {
        root = YAML::Load(text);
    } catch (const YAML::Exception& e) {
        errors.push_back(escape_controls(path) + ":" + std::to_string(e.mark.line + 1) + ": invalid YAML: " + e.msg);
        return false;
    } catch (const std::exception& e) {
        errors.push_back(escape_controls(path) + ": cannot read the file: " + e.what());
        return false;
    }
    if (root.IsNull()) return true;
    if (!root.IsMap()) {
        errors.push_back(path + ": the top level must be a mapping of option names to values");
        return false;
    }
    size_t slash = path.rfind('/');
    Loader l{path, slash == std::string::npos ? std::string() : path.substr(0, slash + 1), raw, errors};
    l.top(root);
    if (l.unknown > kMaxUnknownKeys)
        errors.push_back(path + ": and " + std::to_string(l.unknown - kMaxUnknownKeys) + " more unknown keys");
    return l.ok;
}

}  // namespace msms
