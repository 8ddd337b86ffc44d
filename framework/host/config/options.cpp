#include "options.h"

#include <algorithm>

#include "util/text.h"

namespace msms {
namespace cfgopt {

const std::vector<OptionDef>& options() {
    static const std::vector<OptionDef> table = {
        // General (msMemScope's names and short options)
        {"help", 'h', false, nullptr, kGeneral, true, "", "show this help and exit"},
        {"version", 'V', false, nullptr, kGeneral, true, "", "show the version and exit"},
        {"verbose", 'v', false, nullptr, kGeneral, true, "", "same as --log-level=debug"},
        {"quiet", 'q', false, nullptr, kGeneral, true, "", "same as --log-level=error"},
        {"debug", 0, false, nullptr, kGeneral, true, "", "same as --log-level=debug"},
        {"config", 0, true, nullptr, kGeneral, false, "<FILE>",
         "YAML profile; keys are the long option names ('-' or '_'), the command line wins"},
        // Collection
        {"level", 0, true, nullptr, kCollection, true, "<LEVEL>",
         "op, kernel or both (op,kernel); 0 = op, 1 = kernel [default: op]"},
        {"events", 0, true, nullptr, kCollection, true, "<EVENT>",
         "events written: alloc, free, launch, access, traceback or none [default: alloc,free,launch]; "
         "alloc/free (and what the analyses need) are collected whenever any of them is"},
        {"steps", 0, true, nullptr, kCollection, true, "<STEP>",
         "step ids to collect, at most 5, each 1..4294967295, e.g. --steps=1,2,3 [default: all steps]"},
        {"step-on", 0, true, nullptr, kCollection, false, "<FUNC>",
         "Python functions whose every return ends a step, for programs that never call optimizer.step() or "
         "msmemscope.step() (an inference loop): module:function or module:Class.method (module.function also), "
         "several comma-separated, e.g. --step-on=__main__:generate_token [default: optimizer steps]"},
        {"call-stack", 0, true, nullptr, kCollection, true, "<TYPE>[:<DEPTH>]",
         "python, c, each with an optional :depth 0..1000 (default 50), e.g. c:20,python:10"},
        {"collect-mode", 0, true, nullptr, kCollection, true, "<MODE>",
         "immediate (from program start) or deferred (between msmemscope.start()/stop()) [default: immediate]"},
        {"device", 0, true, nullptr, kCollection, true, "<DEVICE>",
         "npu, npu:{0..31}, cpu, cuda, cuda:{0..31}; several allowed [default: npu]"},
        {"follow-fork", 0, true, nullptr, kCollection, false, "<BOOL>",
         "true: profile child processes too; false: only the program started [default: true]"},
        {"attach", 0, true, nullptr, kCollection, false, "<PID>",
         "profile a process that is already running (yours; root: any) instead of starting a program: the agent "
         "goes in through gdb, collection starts now and ends at Ctrl-C, --attach-for or --attach-steps; the "
         "process goes on running"},
        {"attach-for", 0, true, nullptr, kCollection, false, "<SECONDS>",
         "with --attach: detach after this many seconds (1..31536000)"},
        {"attach-steps", 0, true, nullptr, kCollection, false, "<N>",
         "with --attach: detach once N steps have ended since the attach (1..1000000)"},
        // Analysis
        {"analysis", 0, true, nullptr, kAnalysis, true, "<TYPE>",
         "leaks, decompose, inefficient, oom[:K] (K 1..1000, default 10; outside it, as msMemScope: a warning "
         "and 10), other installed analyzers, or none [default: leaks]"},
        {"compare", 0, false, nullptr, kAnalysis, true, "",
         "compare two runs offline: --compare --input-path=<base>,<compare>; an operator is credited with what "
         "it allocated between its start and end, or with --level given (--level=op), as msMemScope: with the "
         "first PTA/MINDSPORE row after its end"},
        {"watch", 0, true, nullptr, kAnalysis, true, "<CONFIG>",
         "[start[:N]],end[,full-content]: watch the outputs of op start (only output N) until op end"},
        {"analyze", 0, true, nullptr, kAnalysis, false, "<TYPE>",
         "offline: run these analyzers on --input-path instead of a program, e.g. "
         "--analyze=inefficient --input-path=memscope_dump_x.csv (results are written back into the file)"},
        {"suppress", 0, true, nullptr, kAnalysis, false, "<FILE>",
         "leak suppressions: one pattern per line (a function, file or library substring; 'leak:' prefix, "
         "'*', '^' and '$' as in heaptrack/LSan; '#' comments); matching sites leave the leak report "
         "(several files: a,b)"},
        {"default-suppressions", 0, true, nullptr, kAnalysis, false, "<BOOL>",
         "false: report the interpreter's and torch's own one-time set-up allocations too [default: true]"},
        {"merge", 0, true, nullptr, kAnalysis, false, "<DIR>",
         "combine runs of several nodes: --merge=<folder>[,<folder>...] reads each msmemscope_*/summary.json and "
         "writes one cross-rank table (merge.csv, merge_imbalance.csv, merge.db, index.html) into --output "
         "[default: memscopeDumpResults/merge_<ts>]"},
        {"replay", 0, true, nullptr, kAnalysis, false, "<FILE>",
         "re-run analyzers and sinks on a saved capture (.msmcap) instead of a program"},
        // Input / output
        {"input-path", 'i', true, "input", kInputOutput, true, "<DIR>",
         "with --compare: the base and compare dump files or folders; with --analyze: the dump file (.csv/.db), "
         "folder or capture (.msmcap) to analyse"},
        {"input", 0, true, "input", kHidden, true, "", ""},
        {"output-path", 'o', true, "output", kInputOutput, true, "<DIR>",
         "output root, at most 4096 characters [default: memscopeDumpResults]"},
        {"output", 0, true, "output", kHidden, true, "", ""},
        {"format", 0, true, "data-format", kInputOutput, true, "<FORMAT>", "csv or db (SQLite) [default: csv]"},
        {"data-format", 0, true, "data-format", kHidden, true, "", ""},
        {"sinks", 0, true, nullptr, kInputOutput, false, "<SINK>", "further output sinks by name, e.g. trace,html"},
        {"aggregate", 0, false, nullptr, kInputOutput, false, "",
         "long runs: keep no per-event rows, only what the analyses and reports need (summary, findings, html, "
         "trace); the capture is released as it is read, so disk and memory stay bounded by live blocks and "
         "allocation sites; the csv and db sinks are off"},
        {"live", 0, false, nullptr, kInputOutput, false, "",
         "show the run's memory on the terminal while it goes on, refreshed every second (like top): live and "
         "peak bytes per device and pool, growth per step, the top allocation sites by live bytes, the leak "
         "analysis's suspects; plain lines when standard output is not a terminal"},
        {"live-http", 0, true, nullptr, kInputOutput, false, "<[ADDRESS:]PORT>",
         "serve the same live view as a web page that updates itself, on http://ADDRESS:PORT/ while the run "
         "goes on (PORT 0: any free port); ADDRESS an IP address or localhost [default address: 127.0.0.1]"},
        {"save-capture", 0, true, nullptr, kInputOutput, false, "<BOOL>",
         "true: keep the raw capture (.msmcap) in each process folder (about 6 bytes per event without stacks, all "
         "of it on disk until the run ends) [default: false: what the host has read is released as it goes, and the "
         "capture holds at most 64 MiB kept for a crash re-run plus 256 MiB not yet read]"},
        {"offline-memory", 0, true, nullptr, kInputOutput, false, "<MIB>",
         "with --analyze or --compare: the memory budget in MiB (16..4194304); the input is streamed, so "
         "what counts is what it keeps live (blocks, operators, per-step figures), not its rows; over it, the "
         "run ends with an error (exit 70) [default: half the machine's memory or of the cgroup's limit]"},
        // Other
        {"log-level", 0, true, nullptr, kOther, true, "<LEVEL>", "debug, info, warning (or warn), error [default: info]"},
        // Plugins
        {"plugin-time-budget", 0, true, nullptr, kPlugins, false, "<SECONDS>[,<FINISH_SECONDS>]",
         "how long one plugin call (on_event, begin ...) and its finish() may take; a plugin over it is killed "
         "and treated as crashed (the outputs are re-run without it); 0: no limit [default: 60,600]"},
        {"list-plugins", 0, false, nullptr, kPlugins, false, "",
         "print every plugin found (name, kind, version, path) and why any was refused; with --verbose, "
         "each plugin's options (type, default, range, help) too"},
        {"describe-plugin", 0, true, nullptr, kPlugins, false, "<NAME>",
         "print plugin NAME's kind, version, path, events and options (type, default, range, help)"},
        {"plugin-option", 0, true, nullptr, kPlugins, false, "<NAME.KEY=VALUE>",
         "an option of plugin NAME (repeatable)"},
        {"plugin-path", 0, true, nullptr, kPlugins, false, "<DIR>", "one more folder to search for plugins (repeatable)"},
        // Internal (the Python package), exact names only
        {"serve-session", 0, true, nullptr, kInternal, false, "<DIR>",
         "(internal, used by the Python package) serve the captures created in this folder"},
        {"parent-pid", 0, true, nullptr, kInternal, false, "<PID>",
         "(internal) with --serve-session: stop when this process has exited"},
        {"ready-fd", 0, true, nullptr, kInternal, false, "<FD>",
         "(internal) with --serve-session: write 'serving <capture>' to this descriptor once each capture's "
         "pipeline runs"},
        {"python-api", 0, false, nullptr, kInternal, false, "",
         "(internal) with --analyze: run for the Python package's offline functions (msmemscope.analyze()): "
         "messages name msmemscope.config()'s keys"},
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
    return origin + ": invalid value '" + shown(value) + "' (allowed: " + allowed + ")";
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

const OptionDef* find_option(const std::string& name) {
    for (auto& o : options())
        if (name == o.name) return &o;
    return nullptr;
}

std::string shown(const std::string& value) {
    // Control characters (an escape sequence, a newline) are shown escaped,
    // never sent to the terminal as they are.
    if (value.size() <= 80) return escape_controls(value);
    size_t cut = 80;
    while (cut > 0 && (static_cast<unsigned char>(value[cut]) & 0xC0) == 0x80) --cut;  // whole UTF-8 characters
    return escape_controls(value.substr(0, cut)) + "\xE2\x80\xA6";
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
