// Drives one target process's capture through its pipeline: reads the
// capture while the process runs, orders events, filters by the chosen
// devices, and writes that process's output folder.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "capture_reader.h"
#include "config.h"
#include "pipeline.h"
#include "process_rank.h"
#include "progress.h"
#include "registry.h"
#include "util/output_dir.h"

namespace msms {

// A SYSTEM row of this name is a warning of the msmemscope package inside
// the profiled process, its text the row's Attr as it is: the package inside
// a process msmemscope --attach joined (bindings/msmemscope/_attach.py) says
// its failures this way, since that process's stderr is the program's, not
// the console of the user who attached. The host takes the row (it is no
// row of the outputs), logs the text and warns of it in the summary.
constexpr const char* kProgramWarningEventName = "msmemscope.warning";

// What the worker knew beside the rest of ProcessSummary when it wrote
// summary.json (process_summary_json.h); the session writes it again from
// them when it learns more at its end (an exec's next image came late).
struct SummaryFacts {
    uint32_t ppid = 0;
    std::string rank;        // valid_rank() of the process, "" if none
    uint64_t steps = 0;
    uint64_t wall_start_ns = 0;
    bool exec_replaced = false;
    bool leaks_ran = false;  // the leaks analyzer ran to its end
    bool inefficient_ran = false;  // the inefficient analyzer ran to its end
    // The program the CLI started ended without an end record (SIGKILL):
    // its wait status as the CLI reaped it (program_status.h), else -1.
    int wait_status = -1;
    // The plugins that failed or were left out (Pipeline::failures), those
    // failing in a sink's finish() included: summary.json is written after
    // every sink has finished, so it names what the sinks' own files cannot.
    struct PluginFailure {
        std::string plugin, kind, what;
    };
    std::vector<PluginFailure> plugin_failures;
};

struct ProcessSummary {
    uint32_t pid = 0;
    uint32_t ppid = 0;  // the parent when the capture began (getppid() in the agent)
    std::string command;
    std::string output_dir;
    uint64_t events = 0, dropped = 0, stragglers = 0, corrupt = 0;
    uint64_t trace_marks = 0;  // of the events, START_TRACE and STOP_TRACE rows (Pipeline::trace_marks)
    // --steps: the shadow rows written as a selected step starts (step_gap.h),
    // not among `events`: the host's, not the program's
    uint64_t steps_shadow_rows = 0;
    bool ended_normally = false;
    bool agent_disabled = false;
    uint32_t end_kind = 0;    // capture::EndKind as the agent saw it
    int32_t end_code = 0;     // status or signal number
    bool end_corrupt = false; // the header's end record fails its checksum (format 4.2): not trusted
    std::string exec_path;    // EndKind::Exec: the program it exec'ed without the agent
    // --live: how it ended in the words of the live view's last screen and
    // snapshot as the worker wrote them ("" when it wrote none). The session
    // puts them right once it knows more (Session::settle_live_ended).
    std::string live_ended;
    // The oom_kill count of a memory cgroup the process was seen in grew
    // while it ran (read from /proc/<pid>/cgroup while it lives).
    bool oom_kill_seen = false;
    uint32_t capture_index = 0;  // n of <pid>.<n>.msmcap: > 0 after exec (or a reused pid)
    uint64_t start_ticks = 0;    // the process's start time (capture format 4.4; 0: not known)
    uint32_t forked_from = 0;    // the capture was opened by the fork handler in a child of this pid (4.1)
    bool exact_order = false;    // membarrier ordering (no reorder window)
    bool replaced_by_exec = false;  // set by the session: a later capture has this pid
    // Profiled by --attach, and the image exec'ed: an attach does not follow
    // an exec (the new image has no agent), its capture ends there.
    bool attach_exec = false;
    // Set by the session at the run's end: its worker took a new command
    // line of the pid for an exec that the agent did not record, and no
    // later capture of the pid came (the new image did not load the agent).
    bool exec_unfollowed = false;
    // A child forked from a profiled process (same program and command, no
    // exec) that ended with _exit(): what it still held went with it, as
    // with exec, so nothing is "still allocated at exit" (issue #27 item 8).
    bool exit_after_fork = false;
    // The leak analysis ran for it (its report without leak lines: none found).
    bool leaks_ran = false;
    // How it ended, in the words of the summary line ("exited with code 0",
    // ...): set by the session, which also knows the program's wait status.
    std::string ended;
    std::string damage;          // first damaged place in the capture, "" if none
    std::string error;  // a capture that could not be read
    // msmemscope was interrupted (Ctrl-C) before this capture was read to
    // its end: `error` says so, and the process may still be running.
    bool interrupted = false;
    std::map<std::string, Pipeline::DeviceTotals> totals;
    std::vector<std::string> report;
    std::vector<std::string> plugin_errors;
    // Why this process's output is incomplete (disk full, a limit, damage, a
    // sink that failed): each one makes the CLI exit with 70.
    std::vector<std::string> incomplete;
    // An analyzer was dropped (crashed, threw): the CLI exits with 71.
    bool plugin_dropped = false;
    std::vector<std::string> warnings;  // printed once on stderr
    // Its plugins' warnings about their setup and those of the end
    // (Pipeline::setup_warnings): the session names the processes that said
    // each text.
    std::vector<std::string> setup_warnings;
    // Its rank (process_rank.h: the environment's, else torch.distributed's),
    // "" when none.
    std::string rank;
    // The name the process folder had while the process ran, when its rank
    // came late (from torch.distributed) and the folder was renamed to carry
    // it once every plugin was done with it; "" otherwise.
    std::string renamed_from;
    // Its log below output_dir ("msmemscope_logs/msmemscope_<ts>.log"), ""
    // before it was made: the session appends the end-of-run report to it.
    std::string log_file;
    SummaryFacts facts;  // what summary.json was written from
};

class ProcessRun {
public:
    ProcessRun(const Config& cfg, const Registry& registry, std::string capture_path);
    // Runs to the end of the stream (the writer gone and everything read).
    void run();
    // Called once from run(): with "" as soon as the pipeline runs (plugins
    // loaded, sinks open), or with the reason it could not start.
    void on_started(std::function<void(const std::string& error)> fn) { started_ = std::move(fn); }
    const ProcessSummary& summary() const { return summary_; }
    // Where this run reports its progress (progress.h); nullptr: nowhere.
    void set_progress(progress::Slot* slot) { progress_ = slot; }
    // Whether this capture is an image after an exec of the process of the
    // pid's previous capture, as the session knows from the start times of
    // both (same_process). Not set (a replay): any capture after the first
    // that the fork handler did not open (continues).
    void set_follows_exec(bool follows) { follows_exec_ = follows ? 1 : 0; }
    bool follows_exec() const {
        return follows_exec_ < 0 ? summary_.capture_index > 0 && summary_.forked_from == 0 : follows_exec_ == 1;
    }
    // Milliseconds of reorder window: events are delivered once they are this
    // old, so that records of all threads can be merged in time order.
    static constexpr uint64_t kWindowNs = 50'000'000;
    // The shortest time between two polls of a live capture (each one
    // interrupts the target's CPUs: see run_stream). A poll costs the host
    // ~0.1 ms of CPU in a VM (the membarrier's IPIs, fstat, flock): at 2 ms
    // apart that was ~5% of the host's CPU under a PyTorch loop (issue #30);
    // 10 ms is 1-2 chunks of a 150 k events/s program, far below the
    // capture budget (capture_disk.h).
    static constexpr std::chrono::milliseconds kMinPollInterval{10};
    // The longest a live poll goes on from the last barrier. Each barrier
    // is an interrupt on every CPU that runs the target (in a VM an exit to
    // the hypervisor there): ~100 a second at one per poll, issue #30.
    // Events reach the pipeline up to this much later; their order stays
    // exact.
    static constexpr uint64_t kBarrierEveryNs = 50'000'000;

private:
    // supervisor.cpp runs run() in a worker process and hands the worker's
    // summary (and, when no worker got far enough, the start-up error) back.
    friend void run_supervised(ProcessRun& run);
    void run_stream();
    // pid, ppid, command and capture_index from the capture's header and
    // name; false (and `error`) when the header cannot be read.
    bool identify(CaptureReader& reader, std::string& error);
    void notify_started(const std::string& error);
    // This process as an error names it to the run's user: its capture
    // file on the command line; in a Python API session, whose capture is
    // the session's internal file, the process's output folder when there
    // is one, else "process PID".
    std::string named_for_user(const std::string& output_dir) const;
    // A rank row of the Python collector (process_rank.h): noted, not delivered.
    bool take_rank(const RawEvent& e);
    // The rank known now, handed to the pipeline (named with the pid on the
    // console) and to the run's record of ranks (run_processes.h).
    void name_rank(Pipeline& pipeline) const;
    // A kProgramWarningEventName row: said in the log now and in the
    // summary's warnings, not delivered.
    bool take_program_warning(const RawEvent& e, spdlog::logger& log);
    bool keep(const RawEvent& e) const;
    void convert(const RawEvent& e, Record& r, class Symbolizer& sym);
    // msmemscope_{pid}_{ts}_{backend}[_rank{rank}][_exec{n}]
    std::string folder_name(const std::string& ts, const std::string& rank) const;
    // A rank learned late (not in the folder's name): once every plugin is
    // done with the folder, it is renamed to carry it (never over another
    // entry), and the summary's mentions of it follow.
    void name_folder_by_rank(const std::string& ts, spdlog::logger& log);
    // config.json's text: the run's configuration; a replay's says what
    // the capture holds where the replay's own options cannot: the
    // program it recorded (its command line) and the call stacks its
    // events carry (python and c: the frames of the deepest one).
    std::string config_json() const;
    // A replay: the call stacks of an event it delivers.
    void note_stacks(const RawEvent& e);
    // Rewrites config.json at the end: "dropped": {plugin: why} when a
    // selected plugin did not run to the end; a replay's call stacks, now
    // all read. "" or why it could not.
    std::string rewrite_config_json();
    bool replaced_by_exec(bool capture_only) const;
    bool forked_without_exec() const;
    int follows_exec_ = -1;

    const Config& cfg_;
    const Registry& registry_;
    std::string capture_path_;
    CaptureReader reader_;
    ProcessSummary summary_;
    std::function<void(const std::string&)> started_;
    std::string log_error_;  // the first failure to write the log
    progress::Slot* progress_ = nullptr;
    // --output and this process's folder in it (dir_name_), opened without
    // following links: every file of the run is created relative to dir_fd_.
    Fd root_fd_, dir_fd_;
    std::string dir_name_;
    // A replay: the frames of the deepest Python and C stacks delivered
    // (C: not the CPython start-up stacks taken without C stacks asked for).
    size_t replay_py_depth_ = 0, replay_c_depth_ = 0;
    ProcessRank rank_{""};
};

// The image was replaced by exec (its new image recorded or not, attached
// or not): its memory went with it, nothing it held leaked.
bool replaced_by_exec(const ProcessSummary& s);
// A capture file's name, <dir>/<pid>.<n>.msmcap (n > 0: the images after
// an exec of that pid): false when the name is not of that form.
bool capture_name_parts(const std::string& path, uint32_t& pid, uint32_t& index);
// What a capture's header says of the process it records: its start time
// (CaptureHeader::start_ticks; 0: not known, e.g. a capture before format
// 4.4 or a header not complete) and the pid it was forked from (0: it began
// with exec, or not known).
struct CaptureIdentity {
    uint64_t start_ticks = 0;
    uint32_t forked_from = 0;
};
CaptureIdentity capture_identity(const std::string& path);
// Whether two captures of one pid, by their start times, can be one
// process (its exec): an exec keeps the start time; a pid given to another
// process (pid reuse, e.g. after a SIGKILL) comes with another one (in
// clock ticks: 10 ms). Either not known: they can.
inline bool same_process(uint64_t start_ticks_a, uint64_t start_ticks_b) {
    return start_ticks_a == 0 || start_ticks_b == 0 || start_ticks_a == start_ticks_b;
}
// Whether a later capture of a pid is the image after an exec of the
// process an earlier capture recorded: the same process, and not a capture
// that the fork handler opened (a forked child's first image, exactly).
inline bool continues(uint64_t earlier_start_ticks, const CaptureIdentity& later) {
    return later.forked_from == 0 && same_process(earlier_start_ticks, later.start_ticks);
}
// How an image that exec'ed and whose new image is not recorded ended, in
// the words of its summary line and summary.json: an attach's exec, or
// EndKind::Exec (the agent saw the exec) when no capture of the new image
// followed. "" for any other end.
std::string unrecorded_exec_words(const ProcessSummary& s);
// An image whose capture ended without an end record, whose worker did not
// take it for an exec (no next capture of its pid within its wait, the same
// command line): killed by SIGKILL or the OOM killer, or replaced by an exec
// that the agent did not see (a raw syscall(SYS_execve), a static program
// that exec'ed in turn). A later capture of the pid says it was the exec.
bool end_unrecorded(const ProcessSummary& s);
// --live: an image whose exec kept the agent, and whose next image had not
// made its capture when its worker stopped waiting for it. That image may
// load the agent yet (late, on a loaded machine) or never (a static
// program): the live view says it is waited for, not that it runs without
// the agent, until the session sees its capture (Session::show_continued)
// or the run ends.
std::string awaited_exec_words(const ProcessSummary& s);
// EndKind::Returned in the words of the summary line and summary.json: the
// stream ended before the process had an exit status (the Python API's
// session closes in the interpreter's atexit, which must wait for the host).
extern const char kEndStatusUnknown[];

// A process's log (msmemscope_logs/*.log) written to `fd`, which it owns,
// at the level --log-level asks of the log file.
std::shared_ptr<spdlog::logger> make_process_log(int fd, const Config& cfg);
// Writes into `log` what the console said before it was opened
// (console_notes.h), at the times said: stdout's lines at every level, as
// the report (the console printed them whatever the level), warnings and
// errors through the log's level, as warning_out() let them through.
void log_console_notes(spdlog::logger& log);
// Local time as YYYYmmddHHMMSS.
std::string timestamp_string(uint64_t wall_ns);
// Creates a folder and its parents; "" on success, else the reason.
std::string make_dirs(const std::string& path);
// Creates a fresh folder `path` (never one that exists already: then
// path_2, path_3, ...); its parents must exist. Returns the folder or "" with
// the reason in `error`.
std::string make_fresh_dir(const std::string& path, std::string& error);
// A RANK value that may name a folder: 1-9 digits; else "".
std::string valid_rank(const std::string& rank);

}  // namespace msms
