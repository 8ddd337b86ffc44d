// The effective configuration of a run: every option of spec/COMPAT.md §1
// plus ours, from YAML (--config) and the command line (which wins), all
// validated before anything starts. Errors name the option (or YAML file,
// line and key) and the allowed values.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace msms {

// What the config needs to know of the plugins that were found.
struct PluginInfo {
    std::string name;
    int kind = 0;  // msms_plugin_kind
    std::vector<std::string> events;  // needs (analyzers, sinks) / produces (collectors)
    std::vector<std::string> devices; // collectors
    struct Option {
        std::string name;
        int type = 0;
        std::string default_value;
        bool has_default = false;
        std::string allowed;
        long long min = 0, max = 0;
        std::string description;
    };
    std::vector<Option> options;
};
using Catalog = std::vector<PluginInfo>;

struct WatchSpec {
    std::string start;  // empty: from the beginning
    long long out_index = -1;  // start:N (or start:outN): only output N; -1 = all outputs
    std::string end;
    bool full_content = false;
    std::string text;           // normalised for the target: "start[:outN],end[,full-content]"
};

struct Config {
    std::vector<long long> steps;
    // --step-on: "module:qualname" each (validate.cpp normalises module.function).
    std::vector<std::string> step_on;
    // --offline-memory (MiB; 0: half the machine's or the cgroup's memory):
    // the memory budget of --analyze and --compare.
    unsigned long long offline_memory_mib = 0;
    // --plugin-time-budget (seconds; 0: none): one plugin call, and finish().
    unsigned plugin_call_budget_s = 60;
    unsigned plugin_finish_budget_s = 600;
    std::vector<std::string> devices{"npu"};
    bool devices_given = false;      // --device (or YAML/Python device) was set
    int level = 0;                   // 0 op, 1 kernel (1 whenever kernel is among the levels)
    unsigned levels = 1;             // bit 0: op, bit 1: kernel (--level=op,kernel: both)
    bool level_given = false;        // --level (or YAML/Python level) was set (--compare: upstream's rule)
    std::set<std::string> events{"alloc", "free", "launch"};          // collected
    std::set<std::string> written_events{"alloc", "free", "launch"};  // written (--events as given)
    // With access collected: also every operator's tensor reads and writes
    // (false when access is there only for decompose's owner tags; validate.cpp).
    bool op_access = true;
    int c_depth = 0, py_depth = 0;   // 0: off
    bool c_stack = false, py_stack = false;
    std::string collect_mode = "immediate";
    std::vector<std::string> analyzers{"leaks"};
    std::string data_format = "csv";
    std::vector<std::string> sinks;  // all sinks, data format first
    std::optional<WatchSpec> watch;
    std::string output = "memscopeDumpResults";
    std::string log_level = "info";  // debug, info, warn, error
    bool compare = false;
    bool analyze = false;            // --analyze: offline analysis of --input
    std::vector<std::string> inputs;
    std::vector<std::string> merge;  // --merge: run folders to combine (merge.h); output "" = default
    bool follow_fork = true;
    std::string replay;              // replay a saved capture instead of running (as given)
    std::vector<std::string> replays;  // the captures it names (a pattern may match several)
    bool save_capture = false;       // keep the raw .msmcap next to the output
    bool aggregate = false;          // --aggregate: no per-event rows (csv/db off), capture released as read
    std::string serve_session;       // Python mode: serve this session folder
    bool offline_api = false;        // --python-api: an --analyze run for msmemscope.analyze() (api_words.h)
    int parent_pid = 0;              // ... until this process exits
    int ready_fd = -1;               // ... and say on it when a capture is served
    std::vector<std::string> plugin_search_paths;
    std::map<std::string, std::map<std::string, std::string>> plugin_options;
    // The options each analyzer was given (--plugin-option, YAML, config()'s
    // plugin_options, "name:value" in --analysis): plugin_options also holds
    // every default. A command line that repeats the analysis passes these.
    std::map<std::string, std::set<std::string>> analyzer_options_given;
    std::vector<std::string> collectors;  // resolved at validation
    std::vector<std::string> program;
    std::vector<std::string> warnings;  // to print as "msmemscope: warning: ..." before the run
    // --attach=PID (attach.h): profile this running process; detach after
    // attach_for_s seconds / attach_steps steps (0: at Ctrl-C or its end).
    int attach_pid = 0;
    unsigned attach_for_s = 0;
    unsigned attach_steps = 0;
    // --live / --live-http (live/live_view.h): the host's worker writes
    // live.json and live.txt into each process folder every second; the CLI
    // shows them on the terminal and/or serves them on http://ADDRESS:PORT/.
    bool live = false;
    bool live_http = false;
    std::string live_http_address = "127.0.0.1";  // an IP literal (validated)
    unsigned live_http_port = 0;                  // 0: any free port
    std::string live_session;  // set by the CLI: the token this run's live.json files carry

    // "events=...;call_stack=...;..." for the agent in the target.
    std::string agent_options() const;
    std::string to_json() const;
    // The run folder suffix: ascend (whenever an npu is collected, as msMemScope), cuda or cpu.
    std::string backend() const;
    bool wants_device_kind(const std::string& kind) const;
    // Log thresholds (0 debug, 1 info, 2 warn, 3 error): the run's log file
    // gets log_level and up; stderr gets warnings and up (everything with debug).
    int log_file_threshold() const;
    int stderr_threshold() const;
};

// One raw setting before validation, with where it came from.
struct RawValue {
    std::string value;
    std::string origin;  // "--device" or "profile.yaml:3: device"
    bool is_list = false;
};

struct RawConfig {
    std::map<std::string, RawValue> values;  // canonical key (with '-')
    std::vector<std::string> search_paths;
    std::map<std::string, std::map<std::string, std::string>> plugin_options;
    std::map<std::string, std::string> plugin_option_origin;
    std::vector<std::string> program;
    std::string config_file;
    std::string config_origin = "--config";
    bool help = false, version = false, list_plugins = false;
    bool verbose = false, quiet = false;  // -v/--verbose/--debug, -q/--quiet (with --list-plugins: options too)
    std::string describe_plugin;          // --describe-plugin=NAME
    std::vector<std::string> warnings;
};

// The long option names (canonical, with '-') and whether each takes a value.
const std::vector<std::string>& option_names();
bool option_takes_value(const std::string& name);

// Splits argv into our options (anywhere before "--", as getopt_long with
// permutation) and the program. Appends errors; returns false on any.
bool parse_command_line(int argc, const char* const* argv, RawConfig& raw, std::vector<std::string>& errors);
// Loads --config YAML into raw (CLI values already in raw win).
bool load_yaml(const std::string& path, RawConfig& raw, std::vector<std::string>& errors);
// Validates everything. Catalog: the plugins found (for analyzer/sink names,
// implied events and plugin options).
bool validate(const RawConfig& raw, const Catalog& catalog, Config& out, std::vector<std::string>& errors);
// A path value that is a shell pattern (bash does not expand globs inside an
// "--opt=value" word, so `--replay=run1/msmemscope_*/capture_*.msmcap` arrives
// as typed): expanded here with glob(3), sorted. A value without pattern
// characters, or one naming an existing file, is kept as it is. No match is
// an error naming the pattern (after `origin`); the caller decides what
// several matches mean.
std::vector<std::string> expand_path_pattern(const std::string& value, const std::string& origin,
                                             std::vector<std::string>& errors);

// The collectors a configuration uses: every one that serves one of its
// devices' kinds and produces one of its events (validate calls it; so does
// a replay that takes the capture's devices after validation).
void choose_collectors(const Catalog& catalog, Config& cfg);

// --live and --live-http (framework/host/live/live_option.cpp); either may be null.
void validate_live_options(const RawValue* live, const RawValue* http, Config& cfg, std::vector<std::string>& errors);

// --attach, --attach-for, --attach-steps (framework/host/attach.cpp); any may be null.
void validate_attach_options(const RawValue* attach, const RawValue* attach_for, const RawValue* attach_steps,
                             Config& cfg, std::vector<std::string>& errors);

// Validates one plugin's options against its schema, filling defaults.
bool validate_plugin_options(const PluginInfo& plugin, const std::map<std::string, std::string>& given,
                             const std::string& origin, std::map<std::string, std::string>& out,
                             std::vector<std::string>& errors);

std::string help_text();

}  // namespace msms
