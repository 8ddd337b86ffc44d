// One plugin's options checked against the schema it declares.
#include "config.h"

#include <algorithm>

#include <msmemscope/abi.h>
#include "options.h"
#include "util/text.h"

namespace msms {
using namespace cfgopt;

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
                errors.push_back(where + ": invalid value '" + shown(v) + "' (allowed: an integer in " +
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
                errors.push_back(where + ": invalid value '" + shown(v) + "' (allowed: true, false)");
                ok = false;
                continue;
            }
            v = b ? "true" : "false";
            break;
        }
        case MSMS_OPT_ENUM:
            if (std::find(choices.begin(), choices.end(), v) == choices.end()) {
                errors.push_back(where + ": invalid value '" + shown(v) + "' (allowed: " + join(choices, ", ") + ")");
                ok = false;
                continue;
            }
            break;
        case MSMS_OPT_LIST:
            if (!choices.empty()) {
                for (auto& item : split_list(v))
                    if (std::find(choices.begin(), choices.end(), item) == choices.end()) {
                        errors.push_back(where + ": invalid item '" + shown(item) + "' (allowed: " + join(choices, ", ") +
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

}  // namespace msms
