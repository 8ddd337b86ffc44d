#include "offline/offline.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <unordered_map>
#include <vector>

#include <spdlog/logger.h>

#include "api_words.h"
#include "console_notes.h"
#include "offline/dump_reader.h"
#include "offline/memory_budget.h"
#include "pipeline.h"
#include "process_run.h"
#include "session.h"
#include "shadow.h"
#include "supervisor.h"
#include "util/output_dir.h"
#include "warning_out.h"
#include "util/text.h"

namespace fs = std::filesystem;

namespace msms {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The numbers of a list "[3, 4]" (what lies between `open` and `close`).
std::vector<long long> step_list(const std::string& text, size_t open, size_t close) {
    std::vector<long long> steps;
    for (size_t i = open + 1; i < close;) {
        if (text[i] < '0' || text[i] > '9') {
            ++i;
            continue;
        }
        size_t j = i;
        while (j < close && text[j] >= '0' && text[j] <= '9') ++j;
        steps.push_back(std::strtoll(text.substr(i, j - i).c_str(), nullptr, 10));
        i = j;
    }
    return steps;
}

// The --steps a dump of ours was recorded with; empty when the run
// collected every step (or for an upstream dump). `source` says where it
// was read: the dump's own START_TRACE row (Attr steps:[3, 4], which the
// host adds under --steps, so a dump copied anywhere still says it), or,
// for a dump of an earlier build, its run's config.json
// (<run>/device_<d>/dump/<dump file> -> <run>/config.json).
// Such a dump holds only the selected steps' events, then a FREE (Attr
// shadow:true) for every block still live when collection ended: a block
// the program freed in a later step looks live at the end.
std::vector<long long> recorded_steps(const std::string& dump, std::string& source) {
    {
        RowScanner rows;
        DumpRow row;
        std::string error;
        if (rows.open(dump, error)) {
            // START_TRACE is among the first rows of a dump of ours
            for (int i = 0; i < 10000 && rows.next(row, error) == 1; ++i) {
                if (row.rec.ev.kind != MSMS_EV_SYSTEM || row.rec.ev.type != MSMS_T_START_TRACE) continue;
                for (auto& [k, v] : row.rec.attrs)
                    if (k == "steps" && v.size() > 2 && v.front() == '[' && v.back() == ']') {
                        source = "its START_TRACE row says so";
                        return step_list(v, 0, v.size() - 1);
                    }
                break;
            }
        }
    }
    std::vector<long long> steps;
    fs::path dir = fs::path(dump).parent_path();
    if (dir.filename() != "dump" || dir.parent_path().filename().string().rfind("device_", 0) != 0) return steps;
    std::string config_path = (dir.parent_path().parent_path() / "config.json").string();
    int fd = ::open(config_path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return steps;
    struct stat st;
    std::string text;
    bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && read_at_most(fd, 1u << 20, text) > 0;
    ::close(fd);
    if (!ok) return steps;
    // Our own config.json: "steps": [3, 4] (Config::to_json).
    size_t k = text.find("\"steps\"");
    size_t open = k == std::string::npos ? k : text.find('[', k);
    size_t close = open == std::string::npos ? open : text.find(']', open);
    if (close == std::string::npos) return steps;
    source = config_path;
    return step_list(text, open, close);
}

// A word of a command line as a shell reads it: quoted when it holds
// anything but letters, digits and a few safe marks.
std::string shell_word(const std::string& w) {
    bool plain = !w.empty() && std::all_of(w.begin(), w.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("_./=,:@%+-", c);
    });
    if (plain) return w;
    std::string out = "'";
    for (char c : w) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

// The log of the process folder `run` (<run>/msmemscope_logs/msmemscope_<ts>.log,
// the one log there), opened to append without following links; -1 when
// `run` is no process folder of ours (whose log it would be is not known).
int run_log(const fs::path& run_dir) {
    std::string why;
    Fd run = open_output_root(run_dir.string(), why);
    Fd logs(run ? files::open_dir(run.get(), "msmemscope_logs", false, why) : -1);
    if (!logs) return -1;
    std::vector<std::string> names;
    std::error_code ec;
    for (auto& e : fs::directory_iterator(run_dir / "msmemscope_logs", ec)) {
        std::string name = e.path().filename().string();
        if (name.rfind("msmemscope_", 0) == 0 && ends_with(name, ".log")) names.push_back(name);
    }
    if (names.size() != 1) return -1;
    int fd = openat(logs.get(), names[0].c_str(), O_WRONLY | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
        ::close(fd);
        return -1;
    }
    return fd;
}

// The log of the run that recorded `dump` (<run>/device_<d>/dump/<file> ->
// run_log(<run>)); -1 when the dump is not in such a folder (an upstream
// dump, or one copied elsewhere).
int recording_log(const std::string& dump) {
    fs::path dir = fs::path(dump).parent_path();
    if (dir.filename() != "dump" || dir.parent_path().filename().string().rfind("device_", 0) != 0) return -1;
    return run_log(dir.parent_path().parent_path());
}

// The logs an analysis of `input` appends to (AnalysisSay): those of the
// runs that recorded its dumps, each once; for a process folder that holds
// no dump (the analysis stops at it), the folder's own log.
std::vector<int> input_logs(const std::string& input) {
    std::string err;
    std::vector<std::string> dumps = dump_files(input, err);
    std::vector<int> fds;
    if (dumps.empty()) {
        std::error_code ec;
        if (fs::is_directory(input, ec))
            if (int fd = run_log(input); fd >= 0) fds.push_back(fd);
        return fds;
    }
    std::vector<std::pair<dev_t, ino_t>> seen;
    for (auto& dump : dumps) {
        int fd = recording_log(dump);
        if (fd < 0) continue;
        struct stat st;
        fstat(fd, &st);
        if (std::find(seen.begin(), seen.end(), std::make_pair(st.st_dev, st.st_ino)) != seen.end()) {
            ::close(fd);  // a run of several devices: one log
            continue;
        }
        seen.emplace_back(st.st_dev, st.st_ino);
        fds.push_back(fd);
    }
    return fds;
}

// What an analysis of one dump tells the user: printed, and appended to the
// log of the run that recorded the dump (recording_log), as each line is
// said. The results are written back into that run's dump, so its log is
// where a reader of the run learns of them; --analyze makes no log of its
// own (its --output holds only what analyzers write, and goes when empty).
// A dump outside a run folder has no log: the console says it all. The log
// keeps what the console showed: stdout's lines, warnings unless -q, errors.
class AnalysisSay {
public:
    AnalysisSay(const Config& cfg, const std::string& dump) {
        int fd = recording_log(dump);
        if (fd < 0) return;
        log_ = make_process_log(fd, cfg);
        log_->set_error_handler([](const std::string&) {});  // the log is the run's: its errors are not this one's
        log_->set_level(spdlog::level::info);
    }
    void out(const std::string& line) {
        std::cout << line << "\n";
        if (log_) log_->info(line);
    }
    void warning(const std::string& text) {
        warning_out() << "msmemscope: warning: " << text << "\n";
        if (log_ && warnings_shown()) log_->warn(text);
    }
    void error(const std::string& text) {
        std::cerr << "msmemscope: error: " << text << "\n";
        if (log_) log_->error(text);
    }

private:
    std::shared_ptr<spdlog::logger> log_;
};

// The --plugin-option words that give the analyzers the options this run
// was given (config()'s plugin_options and the call's keywords, for the
// Python API), as validated: without them the command below would run the
// analysis with the defaults and give another answer.
std::string given_options_words(const Config& cfg) {
    std::string words;
    for (auto& name : cfg.analyzers) {
        auto given = cfg.analyzer_options_given.find(name);
        auto values = cfg.plugin_options.find(name);
        if (given == cfg.analyzer_options_given.end() || values == cfg.plugin_options.end()) continue;
        for (auto& key : given->second) {
            auto value = values->second.find(key);
            if (value != values->second.end())
                words += " " + shell_word("--plugin-option=" + name + "." + key + "=" + value->second);
        }
    }
    return words;
}

// The command line that runs this analysis with a memory budget of its own:
// the plugin folders it found its analyzers in and the options it gave them.
std::string budget_command(const Config& cfg, const std::string& path) {
    std::string cmd = "msmemscope " + shell_word("--analyze=" + join(cfg.analyzers, ",")) + " " +
                      shell_word("--input=" + path);
    for (auto& p : cfg.plugin_search_paths) cmd += " " + shell_word("--plugin-path=" + p);
    return cmd + given_options_words(cfg) + " --offline-memory=<MiB>";
}

// side_dir: a private folder the caller made (and removes, also when a
// supervised worker running this crashed) for the write-back sink's results.
// The rows are streamed in time order (DumpStream): what stays in memory is
// what the analyzers keep (live blocks, per-step figures) and the results.
int analyze_stream(const Config& cfg, const Registry& registry, const std::string& path, const std::string& side_dir,
                   int output_fd) {
    size_t budget = offline_budget(cfg.offline_memory_mib);
    MemoryGuard guard(budget, budget_setter(cfg, path));
    DumpStream stream({path}, sort_memory(budget));
    AnalysisSay say(cfg, path);
    std::string err;
    if (!stream.open(err)) {
        say.error("--input: " + err);
        return 2;
    }
    DumpRow row;
    int more = stream.next(row, err);
    if (more < 0) {
        say.error("--input: " + err);
        return 70;
    }

    Config c = cfg;
    c.sinks.clear();
    // A dump recorded with --steps: the analyzers see the run's --steps in
    // the configuration, as they did in the run (the leak analysis turns
    // itself off: what is live at the end of such a dump was not left at
    // the program's exit).
    std::string source;
    if (auto steps = recorded_steps(path, source); !steps.empty()) {
        c.steps = steps;
        std::string list;
        for (size_t i = 0; i < steps.size(); ++i) list += (i ? "," : "") + std::to_string(steps[i]);
        if (std::find(cfg.analyzers.begin(), cfg.analyzers.end(), "leaks") != cfg.analyzers.end())
            say.warning("--analyze: " + escape_controls(path) + said(cfg, " was recorded with --steps=" + list) +
                        " (" + escape_controls(source) +
                        "): it holds only those steps' events, and a block freed in a later step looks live at its "
                        "end; the leak analysis is off for it, as it was in the run");
    }
    std::string side;
    if (!side_dir.empty() && registry.find("offline_writeback", MSMS_KIND_SINK)) {
        side = side_dir + "/results.tsv";
        c.sinks.push_back("offline_writeback");
        c.plugin_options["offline_writeback"]["out"] = side;
    }
    RunContext run;
    run.pid = more > 0 ? row.rec.ev.pid : 0;
    run.output_dir = cfg.output;
    run.output_dir_fd = output_fd;
    run.timestamp = timestamp_string(static_cast<uint64_t>(time(nullptr)) * 1000000000ull);
    run.config_json = c.to_json();
    run.command_line = "msmemscope --analyze " + path;

    Pipeline pipeline(c, registry);
    // The rows carry their own IDs, allocation ids and totals: keep them, so
    // that analyzers report the file's IDs.
    pipeline.set_accounting(false);
    pipeline.set_out_of_memory_fatal(true);  // said below in one line (analyze_file), not as a dropped plugin
    pipeline.start(run);
    size_t fed = 0;
    // Shadow FREEs (shadow.h) of a process are held until a later MALLOC or
    // FREE of it shows they were real (an address reused unseen, the
    // imports' heap written anew). Those still held at the end close the
    // blocks live when collection ended: the online analyzers never saw
    // them and judged those blocks live (leaks, decompose's Live), and so
    // does this.
    std::unordered_map<uint32_t, std::vector<DumpRow>> held;
    auto feed = [&](DumpRow& r) {
        r.rec.ev.id = r.file_id;
        pipeline.feed(r.rec);
        return guard.check(++fed, err);
    };
    size_t accesses = 0;
    while (more > 0) {
        accesses += row.rec.ev.kind == MSMS_EV_ACCESS;
        bool memory = row.rec.ev.kind == MSMS_EV_MALLOC || row.rec.ev.kind == MSMS_EV_FREE;
        bool ok = true;
        // (the image ended with the block, exec or _exit after fork: the run's
        // analyzers had that release, and so do these)
        if (memory && row.rec.ev.kind == MSMS_EV_FREE && is_shadow(row.rec) && !is_image_ended_free(row.rec)) {
            held[row.rec.ev.pid].push_back(row);
        } else {
            if (memory) {
                auto h = held.find(row.rec.ev.pid);
                if (h != held.end()) {
                    for (auto& r : h->second) ok = ok && feed(r);
                    held.erase(h);
                }
            }
            ok = ok && feed(row);
        }
        if (!ok) {
            say.error("--analyze: " + path + ": " + err + "; nothing was written back");
            return 70;
        }
        more = stream.next(row, err);
    }
    if (more < 0) {
        say.error("--input: " + err);
        return 70;
    }
    held.clear();
    pipeline.finish();
    // The inefficient analysis judges accesses: a dump recorded without them
    // (--events without access, the default) gives it nothing to judge.
    if (accesses == 0 && std::find(cfg.analyzers.begin(), cfg.analyzers.end(), "inefficient") != cfg.analyzers.end())
        say.warning("--analyze: " + escape_controls(path) +
                    said(cfg, " has no ACCESS rows (it was recorded without access in --events)") +
                    ": the inefficient analysis, which judges accesses, had nothing to judge");

    say.out("msmemscope: analysed " + path + " (" + std::to_string(stream.rows()) + " rows) with " +
            join(cfg.analyzers, ", "));
    for (auto& line : pipeline.report_lines()) say.out(said(cfg, line));
    // Each failure was said on stderr when it happened (Pipeline::
    // plugin_failed): the exit status as for a run, 71 for a dropped
    // analyzer, 70 for the write-back sink (its results are lost).
    int code = 0;
    for (auto& e : pipeline.plugin_errors())
        code = std::max(code, e.rfind("plugin 'offline_writeback'", 0) == 0 ? 70 : 71);
    // A plugin's host.error: what it meant to write is not all there (70).
    for (auto& e : pipeline.reported_errors()) {
        say.error("--analyze: " + path + ": output incomplete: " + e);
        code = 70;
    }

    if (!side.empty()) {
        // The results by row ID; which process's row each ID is comes from
        // one more pass over the file. Upstream's files can hold several
        // processes, each numbering its rows from 1: an ID that names rows
        // of more than one is not written back (which row the result is
        // about is not known).
        std::unordered_map<uint64_t, std::vector<std::pair<std::string, std::string>>> results;
        std::ifstream in(side);
        std::string line;
        while (std::getline(in, line)) {
            size_t t1 = line.find('\t'), t2 = t1 == std::string::npos ? t1 : line.find('\t', t1 + 1);
            if (t2 == std::string::npos) continue;
            unsigned long long id = 0;
            if (!parse_uint(line.substr(0, t1), id)) continue;
            results[id].emplace_back(line.substr(t1 + 1, t2 - t1 - 1), line.substr(t2 + 1));
        }
        in.close();
        std::error_code ec;
        fs::remove(side, ec);
        struct Owner {
            uint32_t pid = 0;
            bool shared = false;
        };
        std::unordered_map<uint64_t, Owner> owner;
        if (!results.empty()) {
            RowScanner scan;
            if (!scan.open(path, err)) {
                say.error(err);
                return 70;
            }
            int rc;
            while ((rc = scan.next(row, err)) > 0) {
                if (!results.count(row.file_id)) continue;
                auto [it, added] = owner.emplace(row.file_id, Owner{row.rec.ev.pid, false});
                if (!added && it->second.pid != row.rec.ev.pid) it->second.shared = true;
            }
            if (rc < 0) {
                say.error(err);
                return 70;
            }
        }
        std::vector<AttrPatch> patches;
        size_t ambiguous = 0;
        for (auto& [id, list] : results) {
            auto it = owner.find(id);
            if (it == owner.end()) continue;  // an event an analyzer emitted: not in the file
            if (it->second.shared) {
                ambiguous += list.size();
                continue;
            }
            // One result per row and key: its last value. (The inefficient
            // analyzer annotates a block again when it finds a second kind,
            // "early_allocation" then "early_allocation,late_deallocation":
            // one block, one result.)
            size_t first = patches.size();
            for (auto& [k, v] : list) {
                auto same = std::find_if(patches.begin() + static_cast<long>(first), patches.end(),
                                         [&](const AttrPatch& p) { return p.key == k; });
                if (same != patches.end()) same->value = v;
                else patches.push_back(AttrPatch{id, it->second.pid, k, v});
            }
        }
        results.clear();
        if (ambiguous)
            say.warning(std::to_string(ambiguous) + " result(s) not written back into " + path +
                        ": the ID of their row is also the ID of another process's row in the file");
        if (!patches.empty()) {
            if (!patch_dump(path, patches, err)) {
                say.error(err);
                return 70;
            }
            say.out("msmemscope: wrote " + std::to_string(patches.size()) + " result(s) back into " + path);
        }
    }
    return code;
}

// The out-of-memory line, said as the analysis's other errors are: also into
// the log of the run that recorded the dump. The analysis's memory went with
// the unwinding, so the log can be opened; should that fail all the same,
// the console still gets the line (AnalysisSay prints before it logs, and
// throws, if at all, only while opening the log).
void say_out_of_memory(const Config& cfg, const std::string& path, const std::string& line) {
    try {
        AnalysisSay(cfg, path).error(line);
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "msmemscope: error: %s\n", line.c_str());
    }
}

// Out of memory (an allocation failed: a cgroup or `ulimit -v`) is said in
// one line, not left to a kill without a word.
int analyze_file(const Config& cfg, const Registry& registry, const std::string& path, const std::string& side_dir,
                 int output_fd) {
    try {
        return analyze_stream(cfg, registry, path, side_dir, output_fd);
    } catch (const std::bad_alloc&) {
        // (the command line's option with what it does; the Python API's
        // text is a sentence of its own)
        std::string setter = budget_setter(cfg, path);
        std::string hint = cfg.offline_api ? setter : setter + " sets the budget";
        std::string line = "--analyze: " + path + ": out of memory (an allocation failed after " +
                           mib_text(resident_bytes()) + " in use; " + hint + "); nothing was written back";
        say_out_of_memory(cfg, path, line);
        return 70;
    }
}
}  // namespace

std::string budget_setter(const Config& cfg, const std::string& path) {
    if (!cfg.offline_api) return "--offline-memory";
    return "the Python API has no keyword for the memory budget; " + budget_command(cfg, path) +
           " runs the analysis with one";
}

void log_said_before_analysis(const std::string& input, const Config& cfg) {
    for (int fd : input_logs(input)) {
        auto log = make_process_log(fd, cfg);
        log->set_error_handler([](const std::string&) {});  // the log is the run's: its errors are not this one's
        log_console_notes(*log);
        log->flush();
    }
}

int offline_main(const Config& cfg, const Registry& registry) {
    const std::string& input = cfg.inputs.front();
    if (ends_with(input, ".msmcap")) {
        Config c = cfg;
        c.replay = input;
        Session session(c, registry);
        int code = session.replay(input);
        int status = session.print_summary(std::cout);
        return code ? code : status;
    }
    // Each return before the dumps are read carries what the console said
    // so far (the run as root, a refused analyzer, the error that stops it)
    // into the logs the analysis would have appended to, as a live run's
    // log starts with them.
    auto stop = [&](int code) {
        log_said_before_analysis(input, cfg);
        return code;
    };
    std::string err;
    auto files = dump_files(input, err);
    if (files.empty()) {
        say_error("--input: " + err);
        return stop(2);
    }
    // The write-back results go through a private folder of our own (a
    // fixed name in the shared temp folder could be a planted link), made
    // here so that it goes even when a worker crashed.
    std::string side_dir;
    if (registry.find("offline_writeback", MSMS_KIND_SINK)) {
        std::string tmpl = (fs::temp_directory_path() / "msmemscope_offline_XXXXXX").string();
        if (!mkdtemp(tmpl.data())) {
            std::ostringstream folder;  // quoted, as a path prints
            folder << fs::temp_directory_path();
            say_error("cannot create a temporary folder in " + folder.str() + ": " + strerror(errno));
            return stop(70);
        }
        side_dir = tmpl;
    }
    // The analyzers' own files (the leak list past leaks.max_lines) go into
    // --output, opened once without following links; made when missing and
    // removed again when nothing was written into it.
    bool made_output = make_output_folder(cfg.output);
    std::string why;
    Fd output_fd = open_output_root(cfg.output, why);
    if (!output_fd) {
        say_error("--output: " + why);
        std::error_code ec;
        if (!side_dir.empty()) fs::remove_all(side_dir, ec);
        return stop(70);
    }
    log_said_before_analysis(input, cfg);
    int code = 0;
    for (auto& f : files) {
        // Supervised: a plugin that crashes costs only itself (issue #17).
        int rc = run_call_supervised([&] { return analyze_file(cfg, registry, f, side_dir, output_fd.get()); });
        if (rc > code) code = rc;
    }
    if (made_output) ::rmdir(cfg.output.c_str());  // only when empty
    if (!side_dir.empty()) {
        std::error_code ec;
        fs::remove_all(side_dir, ec);
    }
    return code;
}

}  // namespace msms
