// --config: a YAML profile read into raw values (the command line wins).
#include "config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include "options.h"
#include "util/text.h"

namespace msms {
using namespace cfgopt;

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

}  // namespace msms
