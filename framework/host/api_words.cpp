#include "api_words.h"

#include <cctype>
#include <cstring>

#include "config.h"

namespace msms {

namespace {

// Command-line option -> config() key (bindings/msmemscope/_session.py KEYS).
struct Key {
    const char* option;
    const char* key;
};
const Key kKeys[] = {
    {"device", "device"},
    {"level", "level"},
    {"events", "events"},
    {"call-stack", "call_stack"},
    {"analysis", "analysis"},
    {"watch", "watch"},
    {"data-format", "data_format"},
    {"format", "format"},
    {"output", "output"},
    {"output-path", "output_path"},
    {"sinks", "sinks"},
    {"steps", "steps"},
    {"collect-mode", "collect_mode"},
    {"log-level", "log_level"},
    {"aggregate", "aggregate"},
    {"suppress", "suppress"},
    {"default-suppressions", "default_suppressions"},
    {"plugin-time-budget", "plugin_time_budget"},
    {"plugin-option", "plugin_options"},
    {"plugin-path", "plugin_path"},
};


bool name_char(char c) { return std::islower(static_cast<unsigned char>(c)) || c == '-'; }

// Where an option's value ends in a sentence: at a blank, a closing
// bracket, ';', a quote, or a ':' or ',' that ends a clause (followed by a
// blank or the end: "--events=alloc: also ...", "--steps=1,2 (...)").
bool value_ends(const std::string& t, size_t i) {
    char c = t[i];
    if (std::isspace(static_cast<unsigned char>(c)) || c == ')' || c == ']' || c == ';' || c == '"' || c == '\'') return true;
    if ((c == ':' || c == ',' || c == '.') && (i + 1 == t.size() || std::isspace(static_cast<unsigned char>(t[i + 1]))))
        return true;
    return false;
}

}  // namespace

std::string said(const Config& cfg, const std::string& text) {
    return !cfg.serve_session.empty() || cfg.offline_api ? api_words(text) : text;
}

const char* api_key(const std::string& option) {
    for (auto& k : kKeys)
        if (option == k.option) return k.key;
    return nullptr;
}

std::string api_words(const std::string& t) {
    std::string out;
    out.reserve(t.size());
    size_t i = 0;
    while (i < t.size()) {
        bool starts = t.compare(i, 2, "--") == 0 && (i == 0 || !(std::isalnum(static_cast<unsigned char>(t[i - 1])) ||
                                                                t[i - 1] == '-' || t[i - 1] == '_'));
        if (!starts) {
            out += t[i++];
            continue;
        }
        size_t j = i + 2;
        while (j < t.size() && name_char(t[j])) ++j;
        const char* key = api_key(t.substr(i + 2, j - i - 2));
        if (!key) {
            out.append(t, i, j - i);
            i = j;
            continue;
        }
        if (j < t.size() && t[j] == '=') {
            size_t v = j + 1, e = v;
            while (e < t.size() && !value_ends(t, e)) ++e;
            std::string value = t.substr(v, e - v);
            size_t eq = value.find('=');
            if (std::strcmp(key, "plugin_options") == 0 && eq != std::string::npos)
                out += std::string(key) + "={\"" + value.substr(0, eq) + "\": \"" + value.substr(eq + 1) + "\"}";
            else
                out += std::string(key) + "=\"" + value + "\"";
            i = e;
        } else {
            out += std::string("'") + key + "'";  // as config()'s own messages name a key
            i = j;
        }
    }
    return out;
}

}  // namespace msms
