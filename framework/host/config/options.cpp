#include "options.h"

#include <algorithm>

namespace msms {
namespace cfgopt {

const std::vector<OptionDef>& options() {
    static const std::vector<OptionDef> table = {
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
    return table;
}

const char* const kDeviceAllowed = "npu, npu:{0..31}, cpu, cuda, cuda:{0..31}";
const char* const kEventsAllowed = "alloc, free, launch, access, traceback";

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

}  // namespace cfgopt

const std::vector<std::string>& option_names() {
    static const std::vector<std::string> names = [] {
        std::vector<std::string> v;
        for (auto& o : cfgopt::options()) v.push_back(o.name);
        return v;
    }();
    return names;
}

bool option_takes_value(const std::string& name) {
    for (auto& o : cfgopt::options())
        if (name == o.name) return o.takes_value;
    return false;
}

}  // namespace msms
