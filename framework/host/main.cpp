// msmemscope: the command line. Parses and validates everything first, then
// runs the program (or a replay, or a comparison) and prints a summary.
#include <errno.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <sstream>

#include "compare.h"
#include "compare_log.h"
#include "offline/interrupted.h"
#include "config.h"
#include "console_notes.h"
#include "api_words.h"
#include "device_check.h"
#include "live/live_view.h"
#include "merge.h"
#include "progress.h"
#include "run_index.h"
#include "offline/offline.h"
#include "plugin_cli.h"
#include "registry.h"
#include "replay_devices.h"
#include "session.h"
#include "supervisor.h"
#include "util/host_process.h"
#include "util/text.h"
#include "warning_out.h"

#ifndef MSMEMSCOPE_VERSION
#define MSMEMSCOPE_VERSION "0.0.0"
#endif

using namespace msms;

namespace {

void warn(const std::vector<std::string>& warnings) {
    for (auto& w : warnings) say_warning(w);
}

std::string fs_timestamp() {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return timestamp_string(static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec));
}

// --analyze left with no analyzer stops before its options are validated:
// what was said (the refusal, the plugins refused before it) goes into the logs
// the analysis of its input would have appended to, at the log's level. An
// input given as a pattern names them once expanded, as validate() would:
// one match is the input; none, or several (which the analysis refuses
// without reading any run), name no run whose log it is.
void log_said_before_refused_analysis(const RawConfig& raw) {
    auto input = raw.values.find("input");
    if (input == raw.values.end()) return;
    Config levels;
    if (auto level = raw.values.find("log-level"); level != raw.values.end())
        levels.log_level = trim(level->second.value);
    for (auto& in : split_list(input->second.value)) {
        std::vector<std::string> unsaid;  // (validate's errors: not reached, not said)
        auto found = expand_path_pattern(in, input->second.origin, unsaid);
        if (found.size() == 1) log_said_before_analysis(found[0], levels);
    }
}

int fail(const std::vector<std::string>& errors) {
    for (auto& e : errors) std::cerr << "msmemscope: error: " << e << "\n";
    return 2;
}

// ulimit -n too low for the tool (the hard limit below what it needs, so
// host_process_setup could not raise its own): the program runs as it
// would without msmemscope, nothing is recorded, and the run says why (70).
int run_unprofiled(const std::vector<std::string>& program, unsigned long limit) {
    std::vector<char*> argv;
    for (auto& a : program) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = fork();
    if (pid == 0) {
        host_process_restore_for_child();
        execvp(argv[0], argv.data());
        _exit(127);
    }
    int status = 0;
    if (pid > 0)
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
    std::cerr << "msmemscope: error: the open-file limit (ulimit -n " << limit
              << ") leaves msmemscope too few descriptors to profile (it needs 16); the program "
              << (pid > 0 ? "ran without being recorded" : "could not be started") << "\n";
    return 70;
}

int run_main(int argc, char** argv) {
    RawConfig raw;
    std::vector<std::string> errors;
    parse_command_line(argc, argv, raw, errors);
    if (raw.help) {
        std::cout << help_text();
        return 0;
    }
    if (raw.version) {
        std::cout << "msmemscope " << MSMEMSCOPE_VERSION << "\n";
        return 0;
    }
    if (!errors.empty()) return fail(errors);
    if (!raw.config_file.empty() && !load_yaml(raw.config_file, raw, errors)) return fail(errors);

    // -q / --log-level=error (the profile's too): errors only on stderr.
    if (auto level = raw.values.find("log-level"); level != raw.values.end())
        set_warnings_shown(trim(level->second.value) != "error");

    Registry registry;
    registry.discover(Registry::search_dirs(raw.search_paths));
    if (raw.list_plugins) {
        print_plugin_list(registry, raw.verbose, std::cout);
        return 0;
    }
    if (!raw.describe_plugin.empty()) {
        std::string why;
        if (!print_plugin_description(registry, raw.describe_plugin, std::cout, why)) return fail({why});
        return 0;
    }
    {
        // Refused plugins in the user's own plugin folders are named by
        // --list-plugins (and by the error when one is selected), not on every run.
        std::vector<std::string> user_dirs = Registry::search_dirs(raw.search_paths);
        user_dirs.erase(user_dirs.begin());  // the installed folder
        for (auto& r : refusals_to_warn(registry, user_dirs, raw.verbose))
            say_warning("plugin " + r.path + " refused: " + r.reason);
    }
    // A selected plugin that was found but cannot be loaded costs only
    // itself: the run goes on without it and ends with status 71.
    bool plugin_dropped = drop_unloadable_selections(raw, registry) > 0;
    // (not "--analyze: empty value" after it: the user gave a value)
    if (plugin_dropped && analyzes_nothing(raw)) {
        log_said_before_refused_analysis(raw);
        return 2;
    }

    Config cfg;
    if (!validate(raw, registry.catalog(), cfg, errors)) return fail(errors);
    supervisor::set_time_budget({cfg.plugin_call_budget_s, cfg.plugin_finish_budget_s});
    if (!cfg.serve_session.empty())  // the Python API's session: config()'s words (api_words.h)
        for (auto& w : cfg.warnings) w = api_words(w);
    warn(cfg.warnings);
    if (geteuid() == 0)
        say_warning("running as root: plugins and agent libraries that a user other than root owns or could write "
                    "(they or a folder above them) are refused; run as an ordinary user where possible");

    if (!cfg.merge.empty()) return merge_main(cfg);  // --merge: runs of several nodes
    if (cfg.compare) {
        say_when_interrupted("msmemscope: --compare: interrupted by %s before it finished; its compare file is "
                             "written only at the end");
        CompareLog log(cfg.output);
        int rc = compare_main(cfg, log);
        log.finish(rc);
        return rc;
    }
    if (cfg.analyze) {
        say_when_interrupted("msmemscope: --analyze: interrupted by %s before it finished; its results are written "
                             "only at its end (the input is rewritten in one step)");
        int rc = offline_main(cfg, registry);
        return rc == 0 && plugin_dropped ? 71 : rc;
    }
    // A replay without --device reproduces the devices recorded in the
    // capture, and the collectors of those devices (validation chose them
    // for the default device: config.json said npu's while the capture
    // came from host_heap).
    if (!cfg.replays.empty() && !cfg.devices_given) {
        std::vector<std::string> devices;
        for (auto& capture : cfg.replays)
            for (auto& d : capture_devices(capture))
                if (std::find(devices.begin(), devices.end(), d) == devices.end()) devices.push_back(d);
        if (!devices.empty()) {
            cfg.devices = devices;
            choose_collectors(registry.catalog(), cfg);
        }
    }
    unsigned long open_files = 0;
    if (!cfg.program.empty() && cfg.serve_session.empty() && cfg.replays.empty() && cfg.attach_pid <= 0 &&
        !host_has_open_files(open_files))
        return run_unprofiled(cfg.program, open_files);
    if (!cfg.program.empty()) export_plugin_settings(raw);
    // --live / --live-http (live/live_view.h): the workers write each
    // process's view; this process shows and serves it. The server binds
    // before the program starts (a taken port is an error, exit 2).
    std::unique_ptr<live::LiveView> live_view;
    if ((cfg.live || cfg.live_http) && cfg.serve_session.empty()) {
        cfg.live_session = live::LiveView::new_session_token();
        live_view = std::make_unique<live::LiveView>(cfg, isatty(STDOUT_FILENO) == 1);
        if (std::string why = live_view->start(std::cerr); !why.empty()) return fail({why});
    }
    // One status line on a terminal while the run goes on (not in the
    // Python mode: the terminal is the Python program's there).
    bool tty = isatty(STDERR_FILENO) == 1;
    const char* term = getenv("TERM");
    progress::Printer printer;
    if (cfg.serve_session.empty() && tty && !raw.quiet && !(term && std::string(term) == "dumb") && !cfg.live &&
        progress::init(true))
        printer.start();
    Session session(cfg, registry);
    int code;
    if (!cfg.serve_session.empty()) {
        code = session.serve(cfg.serve_session, cfg.parent_pid);
    } else if (cfg.attach_pid > 0) {
        code = session.attach(cfg.attach_pid);  // --attach=PID (attach.h)
    } else if (cfg.replays.size() > 1) {
        // A pattern that matched several captures (one per process of a
        // run): each is replayed into its own process folder, in name order.
        // (in each process's log too: said before any of them opened)
        say_out("msmemscope: --replay: " + std::to_string(cfg.replays.size()) + " captures match '" + cfg.replay + "'");
        code = 0;
        session.note_replayed_processes(cfg.replays);  // named on the console as in the run
        for (auto& capture : cfg.replays)
            if (int rc = session.replay(capture); rc && !code) code = rc;
        if (code == 2 && !session.summaries().empty()) code = 70;  // some were replayed, not all
    } else if (!cfg.replay.empty()) {
        code = session.replay(cfg.replay);
    } else {
        code = session.run_program();
    }
    printer.stop();
    if (live_view) live_view->stop();  // the last screen stays; the server stops
    int status = session.print_summary(std::cout);
    // What is said of the run as a whole goes into every process's log too
    // (Session::say_about_the_run).
    std::vector<ReportLine> about_run;
    // Several processes: one combined table and <output>/index.html.
    if (cfg.serve_session.empty()) {
        std::vector<ProcessSummary> runs;
        for (auto& s : session.summaries())
            if (!s.output_dir.empty()) runs.push_back(s);
        if (runs.size() > 1) {
            std::string ts = fs_timestamp();
            std::ostringstream table;
            std::string why = write_run_index(runs, cfg.output, ts, table);
            std::istringstream printed(table.str());
            for (std::string line; std::getline(printed, line);) about_run.push_back({ReportLine::Out, line});
            if (!why.empty()) {
                about_run.push_back({ReportLine::Error, "index: " + why});
                if (!status) status = 70;
            }
        }
    }
    // A requested device whose driver is not on this machine: said once, with
    // the fix; nothing collected at all is not a successful profile (70).
    // The Python API's session (--serve-session) too, in its words: its
    // report is the only place a plain `python3 script.py` is told.
    if (cfg.replay.empty() && code != 2) {
        // Nothing at all: no memory, and no event beyond the START_TRACE and
        // STOP_TRACE rows (each agent's own start row, the API's start() and
        // stop()): marks, launches and Python rows are a profile too.
        bool memory = false;
        for (auto& s : session.summaries())
            memory = memory || !s.totals.empty() || s.events > s.trace_marks;
        std::vector<std::string> hints = missing_driver_hints(cfg, session.summaries());
        bool nothing = !hints.empty() && !memory && !status;
        // A warning, unless it says why the run failed (then shown with -q too).
        for (auto& hint : hints) about_run.push_back({ReportLine::Warning, hint, nothing});
        if (nothing) {
            about_run.push_back({ReportLine::Error, "nothing was collected: no process recorded any memory"});
            status = 70;
        }
    }
    session.say_about_the_run(about_run, std::cout);
    // The program's own status when every output is complete; else 70 (an
    // output is incomplete) or 71 (a plugin was dropped): README "Exit status".
    if (!status && plugin_dropped && !session.summaries().empty()) status = 71;
    return status ? status : code;
}

}  // namespace

int main(int argc, char** argv) {
    host_malloc_huge_pages(argv);
    host_process_setup();
    // No exception leaves the tool unreported: one clear line and 70.
    try {
        int code = run_main(argc, argv);
        std::cout.flush();
        if (!std::cout) {
            std::cerr << "msmemscope: error: cannot write to standard output: " << strerror(errno) << "\n";
            return code ? code : 70;
        }
        return code;
    } catch (const std::bad_alloc&) {
        std::cerr << "msmemscope: error: out of memory (the host reached its memory or address-space limit, "
                     "ulimit -v); the output is incomplete\n";
    } catch (const std::exception& e) {
        std::cerr << "msmemscope: error: " << e.what() << "; the output is incomplete\n";
    } catch (...) {
        std::cerr << "msmemscope: error: unexpected failure; the output is incomplete\n";
    }
    return 70;
}
