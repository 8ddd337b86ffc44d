// A profiling session: the folder where targets create their captures, the
// watcher that starts a ProcessRun for each new one, and the end of the
// session (every profiled process gone and every capture read).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <ostream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "config.h"
#include "process_run.h"
#include "progress.h"
#include "registry.h"

namespace msms {

// One line of a process's end-of-run report: on stdout, or a warning or an
// error on stderr; its log keeps it at the matching level, in the same words.
struct ReportLine {
    enum Kind { Out, Warning, Error } kind;
    std::string text;  // without "msmemscope: warning: " / "error: "
    // A warning that says why the run failed (the missing driver when
    // nothing was collected): on stderr with -q too, and so in the log.
    bool shown_always = false;
    // When it was said, for a line said before the log is written to (the
    // epoch: now).
    std::chrono::system_clock::time_point when{};
};

class Session {
public:
    Session(const Config& cfg, const Registry& registry);
    ~Session();

    // Runs cfg.program under the profiler; returns its exit code (128+N
    // when a signal killed it), or 2 when it could not be started.
    int run_program();
    // Serves captures created in `dir` (Python mode) until `parent` exits.
    int serve(const std::string& dir, pid_t parent);
    // --attach=PID: profiles a running process until the detach (attach.h).
    int attach(pid_t pid);
    // Re-runs analyzers and sinks on a saved capture.
    int replay(const std::string& capture);
    // --replay of several captures, before the first is replayed: their
    // processes and the ranks their environments had, as a run notes them
    // (run_processes.h), so that the console names the processes of a
    // replay as it named them in the run. (One after another, the first
    // capture would be replayed before the second was noted.)
    void note_replayed_processes(const std::vector<std::string>& captures);

    // Prints the summary (the tool's own errors on stderr); returns 0 when
    // every output is complete, 70 when one is not, 71 when a plugin was
    // dropped but every other output is complete.
    int print_summary(std::ostream& out) const;
    // Lines about the run as a whole, said after the report (the missing
    // driver, nothing collected, the table of processes and its index.html):
    // printed as the report's are, and appended to every process's log.
    // There is no log of the run itself (each log is a process folder's,
    // msmemscope_logs/msmemscope_{ts}.log, as msMemScope's), and a reader of
    // one process's log (one rank's, collected from CI) must learn from it
    // that the run failed, or why nothing was recorded.
    void say_about_the_run(const std::vector<ReportLine>& lines, std::ostream& out) const;
    const std::vector<ProcessSummary>& summaries() const { return summaries_; }
    std::string root_status() const { return root_status_; }
    // How a process ended, as the summary line and the table of processes
    // say it ("exited with code 0", "killed by signal 9 (SIGKILL)", ...).
    std::string how_ended(const ProcessSummary& s) const;

private:
    // One process's part of the summary, as print_summary prints it and its
    // log repeats it; `said` puts the text in the user's words (api_words.h);
    // `status` becomes 70 or 71 as print_summary says.
    std::vector<ReportLine> report_lines(const ProcessSummary& s,
                                         const std::function<std::string(const std::string&)>& said,
                                         int& status) const;
    void scan();
    void join_all();
    // An image whose exec kept the agent, and whose next image made its
    // capture only after the worker had stopped waiting for it (a loaded
    // machine, a new program slow to start): the worker's summary.json said
    // "without the agent". Written again as soon as both the worker's end
    // and the next capture are known (show_continued), else here at the end.
    void rewrite_continued_exec(ProcessSummary& s);
    std::string write_continued_summary(const ProcessSummary& s) const;
    std::string write_summary_again(const ProcessSummary& s) const;  // "" once written, else why not
    // --live: the view's last screen and snapshot (live.txt, live.json) of
    // an image say how it ended as the session knows it now, not as its
    // worker knew it (an exec's next image waited for, or come late).
    void settle_live_ended(const ProcessSummary& s) const;
    // An exec whose next image came after its worker stopped waiting for
    // it: the image's summary.json said the new program did not load the
    // agent, and its --live view "waiting for the new program's agent",
    // until the run ended, while the new image recorded. Both now say what
    // any exec continued in a next capture says, as soon as both are known,
    // whichever comes first: its worker's end (image_done, on that worker's
    // thread) or the next capture seen (next_capture_seen, scan()).
    void image_done(const ProcessSummary& s);
    // of a capture <pid>.<index>.msmcap, what its header says of its process
    void next_capture_seen(uint32_t pid, uint32_t index, const CaptureIdentity& id);
    void show_continued(const ProcessSummary& s);  // under awaited_mu_
    void dispose_capture(const ProcessRun& run, const std::string& capture);
    bool all_done();
    // The agent and the selected collectors' target libraries; a collector
    // whose library is missing or refused is left out (collector_dropped_).
    std::string agent_library_paths(std::vector<std::string>& out, std::string& error);
    // A line of the run as a whole said on the console while the run goes on
    // (a process's log is written by its worker, not by this thread): printed
    // now ("msmemscope: warning: TEXT" on warning_out(), "msmemscope: error:
    // TEXT" on stderr) and kept in said_during_run_ for every process's log.
    void say_during_run(ReportLine::Kind kind, const std::string& text);

    const Config& cfg_;
    const Registry& registry_;
    std::string dir_;
    bool own_dir_ = false;
    bool collector_dropped_ = false;  // a collector ran without its target library: exit 71
    std::set<std::string> seen_;
    struct Running {
        std::unique_ptr<ProcessRun> run;
        std::thread thread;
        std::string capture;
        progress::Slot* progress = nullptr;
    };
    std::vector<Running> running_;
    std::vector<ProcessSummary> summaries_;
    void say_setup_warnings() const;
    pid_t root_pid_ = -1;
    pid_t ready_pid_ = -1;  // --serve-session: the process whose lines go on cfg.ready_fd
    std::string root_status_;
    // What the console was told while the run went on, of the run as a whole
    // (the wait for what the program left running): each process's log gets
    // it, at the time said, before its report.
    std::vector<ReportLine> said_during_run_;
    // (image_done, next_capture_seen) Keyed by (pid, capture index).
    std::mutex awaited_mu_;
    std::map<std::pair<uint32_t, uint32_t>, ProcessSummary> awaited_images_;  // summary.json (and view) not yet "continued"
    std::map<std::pair<uint32_t, uint32_t>, CaptureIdentity> captures_seen_;  // (continues)
    std::map<std::string, std::string> live_shown_;  // process folder -> the end its view says now
    std::set<std::string> continued_written_;  // process folders whose summary.json says "continued" already
};

}  // namespace msms
