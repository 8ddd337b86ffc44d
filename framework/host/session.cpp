#include "session.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <tuple>

#include <spdlog/logger.h>

#include "api_words.h"
#include "capture_reader.h"
#include "console_notes.h"
#include "device_check.h"
#include "launcher.h"
#include "process_summary_json.h"
#include "program_status.h"
#include "run_processes.h"
#include "said_once.h"
#include "stale_sessions.h"
#include "supervisor.h"
#include "util/file_trust.h"
#include "util/json.h"
#include "util/output_dir.h"
#include "util/text.h"
#include "warning_out.h"

namespace fs = std::filesystem;

namespace msms {
namespace {

// The program's pid while it runs; 0 once it has ended (cleared before it is
// reaped, so a signal is never sent to a pid that may have been reused).
volatile sig_atomic_t g_forward_pid = 0;
// Set while the program is being started: a signal that reaches another of
// the host's threads before its pid is known waits here and is forwarded
// once it is (the program may already run; abandoning would lose it).
volatile sig_atomic_t g_launching = 0;
volatile sig_atomic_t g_pending_stop = 0;

// SIGINT, SIGTERM and SIGHUP to the CLI (DESIGN §9): while the program runs
// they are forwarded to it (a SIGINT typed at the terminal reached the
// program's process group already: not sent twice); once it has ended, the
// tool stops writing and says what is incomplete (supervisor::abandon).
void on_stop_signal(int sig, siginfo_t* info, void*) {
    pid_t pid = static_cast<pid_t>(g_forward_pid);
    if (pid > 0) {
        // Ended but not reaped yet (run_program's loop reaps it, and may
        // not have run since): the signal is the tool's, not lost on a
        // zombie. WNOWAIT: the loop still reaps it. A system call only
        // (async-signal-safe); errno is the interrupted code's.
        int saved = errno;
        siginfo_t si{};
        if (waitid(P_PID, static_cast<id_t>(pid), &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid) pid = 0;
        errno = saved;
    }
    if (sig == SIGINT && info && info->si_code == SI_KERNEL && (pid > 0 || g_launching)) return;
    if (pid > 0) {
        kill(pid, sig);
        return;
    }
    if (g_launching) {
        g_pending_stop = sig;
        return;
    }
    supervisor::abandon(sig);
}


// on_stop_signal for SIGINT, SIGTERM and SIGHUP while it lives (or until
// restore()); the dispositions before it come back after.
class StopSignals {
public:
    StopSignals() {
        struct sigaction on{};
        on.sa_sigaction = on_stop_signal;
        on.sa_flags = SA_SIGINFO | SA_RESTART;
        sigemptyset(&on.sa_mask);
        for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &on, &old_[i]);
    }
    StopSignals(const StopSignals&) = delete;
    StopSignals& operator=(const StopSignals&) = delete;
    ~StopSignals() { restore(); }
    void restore() {
        if (restored_) return;
        restored_ = true;
        for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &old_[i], nullptr);
    }

private:
    static constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGHUP};
    struct sigaction old_[3] {};
    bool restored_ = false;
};

// The agent options that let a program the CLI leaves behind know that
// nobody reads its capture any more (channel.cpp, reader_gone): the CLI's pid
// and its pid namespace.
std::string host_identity() {
    std::string s = ";host_pid=" + std::to_string(getpid());
    struct stat ns{};
    if (stat("/proc/self/ns/pid", &ns) == 0) s += ";host_pidns=" + std::to_string(static_cast<uint64_t>(ns.st_ino));
    return s;
}

// The host runs at a lower priority than the profiled program (set after the
// program was started, so it does not inherit it): where cores are scarce the
// program keeps its speed and the host catches up when it waits or ends —
// nothing is lost, the capture file holds what the host has not read yet.
// Threads created afterwards (one per profiled process) inherit it.
// As root, outputs go only into a folder no other user can write or own
// (DESIGN §9 "only our own files"): such a user could swap a process folder
// for a link at its predictable name while the run writes.
// (A Python API session's program set it as config()'s output: api_words.h.)
bool output_refused(const Config& cfg) {
    const std::string& output = cfg.output;
    std::string why = unsafe_output_reason(output);
    if (why.empty()) return false;
    std::cerr << "msmemscope: error: " << said(cfg, "--output") << ": '" << output
              << "' is not safe for a run as root: " << why << "; give a folder that only root can write\n";
    return true;
}

void yield_to_target() {
    errno = 0;
    int cur = getpriority(PRIO_PROCESS, 0);
    if (errno == 0 && cur < 10) setpriority(PRIO_PROCESS, 0, 10);
}

enum class CaptureState { NotReady, Ready, Abandoned };

// The agent takes its lock, then sizes the file, then writes the header with
// the magic last. A file without the magic is not ready yet — or abandoned,
// when its writer (the lock holder) is already gone.
CaptureState capture_state(const std::string& path) {
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return CaptureState::NotReady;
    char magic[sizeof(capture::kMagic)] = {};
    bool has_magic = pread(fd, magic, sizeof(magic), 0) == static_cast<ssize_t>(sizeof(magic)) &&
                     memcmp(magic, capture::kMagic, sizeof(magic)) == 0;
    CaptureState st = CaptureState::Ready;
    if (!has_magic) {
        st = CaptureState::NotReady;
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
            // Re-check: the header may have been completed just before exit.
            has_magic = pread(fd, magic, sizeof(magic), 0) == static_cast<ssize_t>(sizeof(magic)) &&
                        memcmp(magic, capture::kMagic, sizeof(magic)) == 0;
            st = has_magic ? CaptureState::Ready : CaptureState::Abandoned;
            flock(fd, LOCK_UN);
        }
    }
    close(fd);
    return st;
}

// A ready capture's parent and environment's rank (its header's), for
// run_processes::note; 0 and "" when the header cannot be read.
void header_parent_and_rank(const std::string& path, uint32_t& ppid, std::string& rank) {
    ppid = 0;
    rank.clear();
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    char text[sizeof(capture::CaptureHeader::rank)] = {};
    if (pread(fd, &ppid, sizeof(ppid), offsetof(capture::CaptureHeader, ppid)) != static_cast<ssize_t>(sizeof(ppid)))
        ppid = 0;
    if (pread(fd, text, sizeof(text), offsetof(capture::CaptureHeader, rank)) == static_cast<ssize_t>(sizeof(text)))
        rank = valid_rank(std::string(text, strnlen(text, sizeof(text))));
    close(fd);
}

// Watch staging (issue #29, plugins/analyzers/watch/README.md): the target
// stages full-content dumps in the session folder under names carrying a
// random per-session token; the watch analyzer moves only such files, and
// learns folder and token from these host-only variables, set in live runs
// (never in --replay or --analyze: host_process_setup clears them).
std::string new_watch_token() {
    unsigned char b[16];
    size_t got = 0;
    while (got < sizeof(b)) {
        ssize_t n = getrandom(b + got, sizeof(b) - got, 0);
        if (n <= 0) {
            if (n < 0 && errno == EINTR) continue;
            return "";
        }
        got += static_cast<size_t>(n);
    }
    static const char* hex = "0123456789abcdef";
    std::string t;
    for (unsigned char c : b) {
        t += hex[c >> 4];
        t += hex[c & 15];
    }
    return t;
}

bool valid_watch_token(const char* t) {
    if (!t || strlen(t) != 32) return false;
    for (const char* c = t; *c; ++c)
        if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f'))) return false;
    return true;
}

void publish_watch_staging(const std::string& dir, const std::string& token) {
    if (!valid_watch_token(token.c_str())) return;
    setenv("MSMEMSCOPE_HOST_WATCH_STAGING", fs::absolute(dir).string().c_str(), 1);
    setenv("MSMEMSCOPE_HOST_WATCH_TOKEN", token.c_str(), 1);
}

}  // namespace

Session::Session(const Config& cfg, const Registry& registry) : cfg_(cfg), registry_(registry) {
    said_once::begin_run();  // before the first worker is forked: the page is shared
    run_processes::begin_run();  // (the same)
}

Session::~Session() {
    join_all();
    if (own_dir_ && !dir_.empty()) {
        std::error_code ec;
        fs::remove_all(dir_, ec);
    }
}

// <dir>/unrecorded_<pid>.<n>: a process whose agent could not open its
// capture left its reason and command line (agent: note_unrecorded). One
// error line and exit 70 (issue #29 item 5). "" when not such a file.
static std::string unrecorded_error(const std::string& path) {
    std::string name = fs::path(path).filename().string();
    if (name.rfind("unrecorded_", 0) != 0) return "";
    std::string pid = name.substr(11, name.find('.') == std::string::npos ? std::string::npos : name.find('.') - 11);
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) return "";
    int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return "";
    struct stat st;
    char buf[2048];
    ssize_t n = 0;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid()) n = read(fd, buf, sizeof(buf));
    else n = -1;
    close(fd);
    if (n < 0) return "";
    std::string text(buf, static_cast<size_t>(n));
    for (auto& c : text)
        if (static_cast<unsigned char>(c) < 0x20 && c != '\n') c = '?';
    size_t nl = text.find('\n');
    std::string why = nl == std::string::npos ? text : text.substr(0, nl);
    std::string command = nl == std::string::npos ? "" : text.substr(nl + 1);
    if (why.empty()) why = "its capture could not be opened";
    return "pid " + pid + " (" + (command.empty() ? "?" : command) + ") was not recorded: " + why;
}

void Session::scan() {
    std::error_code ec;
    std::vector<std::string> found;
    for (auto& e : fs::directory_iterator(dir_, ec)) {
        std::string p = e.path().string();
        if (p.size() > 7 && p.compare(p.size() - 7, 7, ".msmcap") == 0 && !seen_.count(p)) found.push_back(p);
        if (e.path().filename().string().rfind("unrecorded_", 0) == 0 && !seen_.count(p)) {
            seen_.insert(p);
            if (std::string why = unrecorded_error(p); !why.empty()) {
                ProcessSummary s;
                s.error = why;
                summaries_.push_back(s);
            }
        }
    }
    // Only captures our agents made: regular files (not links) of our user.
    found.erase(std::remove_if(found.begin(), found.end(),
                               [&](const std::string& p) {
                                   struct stat st;
                                   bool ours = lstat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
                                               st.st_uid == geteuid();
                                   if (!ours) {
                                       seen_.insert(p);
                                       warning_out() << "msmemscope: warning: " << p
                                                     << ": ignored (not a capture file of this user)\n";
                                   }
                                   return !ours;
                               }),
                found.end());
    std::sort(found.begin(), found.end());
    for (auto& p : found) {
        // The header is written right after the file is created; a file whose
        // header is not complete yet is picked up at the next scan.
        switch (capture_state(p)) {
        case CaptureState::NotReady:
            continue;
        case CaptureState::Abandoned: {
            seen_.insert(p);
            ProcessSummary s;
            s.error = p + ": the process ended before its capture was set up";
            summaries_.push_back(s);
            continue;
        }
        case CaptureState::Ready:
            break;
        }
        seen_.insert(p);
        bool follows = false;  // an image after an exec (set_follows_exec)
        if (uint32_t pid = 0, index = 0; capture_name_parts(p, pid, index)) {
            CaptureIdentity id = capture_identity(p);
            follows = index > 0 && id.forked_from == 0;
            {
                std::lock_guard<std::mutex> l(awaited_mu_);
                if (auto before = captures_seen_.find({pid, index - 1}); follows && before != captures_seen_.end())
                    follows = continues(before->second.start_ticks, id);
            }
            next_capture_seen(pid, index, id);
            // before the worker is forked, so that it names its process
            // from its first warning on when another one came first
            uint32_t ppid = 0;
            std::string rank;
            header_parent_and_rank(p, ppid, rank);
            run_processes::note(pid, ppid, rank);
        }
        Running r;
        r.capture = p;
        r.run = std::make_unique<ProcessRun>(cfg_, registry_, p);
        ProcessRun* raw = r.run.get();
        raw->set_follows_exec(follows);
        r.progress = progress::acquire();  // before the worker is forked: the page is shared
        raw->set_progress(r.progress);
        // Python mode: the lines of the ready pipe, for the capture of the
        // process that started this host (its parent) only: no other
        // process reads them, and they would fill the pipe.
        std::string name = fs::path(p).filename().string();
        int ready_fd = cfg_.ready_fd >= 0 && std::strtoul(name.c_str(), nullptr, 10) == static_cast<unsigned long>(ready_pid_)
                           ? cfg_.ready_fd
                           : -1;
        auto say = [ready_fd](std::string line) {
            std::replace(line.begin(), line.end(), '\n', ' ');
            line += '\n';
            ssize_t n = write(ready_fd, line.data(), line.size());  // one write: lines never interleave
            (void)n;
        };
        if (ready_fd >= 0) {
            // start() waits for this line before it returns, so the host's
            // own start-up does not run beside the first measured work, and
            // a host that cannot serve is reported there.
            raw->on_started([say, name, raw](const std::string& error) {
                // "serving NAME\tFOLDER": the process folder as it is named now
                say(error.empty() ? "serving " + name + "\t" + raw->summary().output_dir
                                  : "failed " + name + ": " + error);
            });
        }
        std::string capture = p;
        r.thread = std::thread([this, raw, capture, ready_fd, say, name] {
            // In a supervised worker: a plugin that crashes is re-run
            // without (supervisor.h); the capture is disposed of after.
            run_supervised(*raw);
            image_done(raw->summary());
            // "finished NAME\tFOLDER": every file written, the folder as it is
            // named at the end (a rank learned late renames it), which
            // msmemscope.finish() returns
            if (ready_fd >= 0) say("finished " + name + "\t" + raw->summary().output_dir);
            dispose_capture(*raw, capture);
        });
        running_.push_back(std::move(r));
    }
}

// After the leak analysis's report of an image whose exec the agent did not
// see (end_unrecorded): it took the end for an exit.
const char kUnrecordedExecLeaks[] =
    "leaks: not judged at its end: it was replaced by an exec that the agent did not record (a later capture of "
    "this pid followed), and what it held then, reported above as still allocated at exit, went with the exec";

const char kEndCorrupt[] = "end record corrupt (it fails its checksum: how the process ended is not known)";

// How a profiled process ended, from what its agent recorded (the CLI knows
// the exact status only of the process it started).
static std::string describe_end(const ProcessSummary& s) {
    if (s.replaced_by_exec) return "replaced by exec (continued in the next capture of this pid)";
    if (std::string words = unrecorded_exec_words(s); !words.empty()) return words;
    if (s.end_corrupt) return kEndCorrupt;
    switch (static_cast<capture::EndKind>(s.end_kind)) {
    case capture::EndKind::Exit: return "exited with code " + std::to_string(s.end_code);
    case capture::EndKind::QuickExit:
        return "exited with code " + std::to_string(s.end_code) + (s.exit_after_fork ? " (_exit after fork)" : " (_exit)");
    case capture::EndKind::Signal: return killed_by_signal(s.end_code);
    case capture::EndKind::Returned: return kEndStatusUnknown;
    default: break;
    }
    if (s.ended_normally) return "detached";
    if (s.oom_kill_seen) return "killed by the OOM killer (SIGKILL)";
    return "ended without an end record (killed by SIGKILL or the OOM killer)";
}

// How it ended, in one wording for the summary line and the table of
// processes: the program the CLI started by its wait status, every other
// process by what its agent recorded.
std::string Session::how_ended(const ProcessSummary& s) const {
    std::string how;
    std::string unrecorded = unrecorded_exec_words(s);
    if (s.pid != static_cast<uint32_t>(root_pid_) || root_status_.empty() || s.replaced_by_exec) how = describe_end(s);
    else if (unrecorded.empty()) how = root_status_;
    else if (s.attach_exec) how = unrecorded;  // it goes on running
    else how = unrecorded + "; then " + root_status_;  // the wait status is the new image's
    // SIGKILL while a memory cgroup it was in counted an OOM kill.
    if (s.oom_kill_seen && how == "killed by signal 9 (SIGKILL)") how = "killed by the OOM killer (SIGKILL)";
    return how;
}

// As soon as a process's capture has been read to its end, its space goes
// (truncated to nothing): a launcher that runs thousands of processes holds
// the disk of the ones alive, not of all it ever ran. The empty file keeps
// its name until the session ends, so that a later image of the same pid
// (after exec) takes the next number instead of a name already read. With
// --save-capture the capture moves into the output folder at the end.
void Session::dispose_capture(const ProcessRun& run, const std::string& capture) {
    (void)run;
    if (cfg_.save_capture || !own_dir_) return;
    int fd = open(capture.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return;
    // Only once its writer is gone (it holds the lock for its whole life): a
    // run that stopped early (e.g. no output folder) must not pull the file
    // from under a live process (SIGBUS). Otherwise the file goes with the
    // session folder.
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
        if (ftruncate(fd, 0) != 0) {
            // Nothing lost: the file goes with the session folder.
        }
        flock(fd, LOCK_UN);
    }
    close(fd);
}

void Session::join_all() {
    for (auto& r : running_) {
        if (r.thread.joinable()) r.thread.join();
        progress::release(r.progress);
        summaries_.push_back(r.run->summary());
        std::error_code ec;
        if (cfg_.save_capture && !r.run->summary().output_dir.empty()) {
            // Into the process folder through descriptors (#29 item 4): the
            // folder opened below --output without following a link (one
            // swapped for a link is left alone), the capture renamed there,
            // or copied into a new file created O_EXCL|O_NOFOLLOW.
            std::string why;
            Fd root = open_output_root(cfg_.output, why);
            Fd dir(root ? files::open_dir(root.get(), fs::path(r.run->summary().output_dir).filename().string(), false, why)
                        : -1);
            std::string name = "capture_" + std::to_string(r.run->summary().pid) + ".msmcap";
            if (dir && renameat(AT_FDCWD, r.capture.c_str(), dir.get(), name.c_str()) != 0) {
                int in = open(r.capture.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                int out = in < 0 ? -1 : files::create(dir.get(), "capture.msmcap", why, 0600);
                char buf[1 << 16];
                for (ssize_t n; out >= 0 && (n = read(in, buf, sizeof buf)) > 0;)
                    if (!files::write_all(out, std::string_view(buf, static_cast<size_t>(n)))) break;
                if (out >= 0) close(out);
                if (in >= 0) close(in);
            }
        }
        if (own_dir_) fs::remove(r.capture, ec);
    }
    running_.clear();
    for (auto& a : summaries_)
        for (auto& b : summaries_)
            if (a.pid == b.pid && b.capture_index == a.capture_index + 1 && !a.output_dir.empty() && !a.replaced_by_exec &&
                continues(a.start_ticks, {b.start_ticks, b.forked_from})) {
                if (end_unrecorded(a) && a.facts.leaks_ran && judged_at_exit(a.report))
                    a.report.push_back(kUnrecordedExecLeaks);
                a.replaced_by_exec = true;
                rewrite_continued_exec(a);
            }
    // Its worker took a new command line of the pid for an exec the agent did
    // not record, and wrote "continued in the next capture of this pid"; no
    // later capture of the pid came: the new image did not load the agent.
    for (auto& a : summaries_) {
        if (a.replaced_by_exec || !a.facts.exec_replaced || a.output_dir.empty() ||
            a.end_kind != static_cast<uint32_t>(capture::EndKind::Unknown))
            continue;
        a.facts.exec_replaced = false;
        a.exec_unfollowed = true;
        if (std::string why = write_summary_again(a); !why.empty())
            a.incomplete.push_back(a.output_dir + "/summary.json: cannot write it again (no later capture of its pid "
                                   "came): " + why + "; it says the exec was continued in the next capture");
    }
    std::lock_guard<std::mutex> l(awaited_mu_);  // (no worker's thread is left; live_shown_ is read under it all the same)
    for (auto& s : summaries_) {
        s.ended = how_ended(s);
        if (auto shown = live_shown_.find(s.output_dir); shown != live_shown_.end()) s.live_ended = shown->second;
        settle_live_ended(s);
    }
    std::stable_sort(summaries_.begin(), summaries_.end(), [&](const ProcessSummary& a, const ProcessSummary& b) {
        if ((a.pid == static_cast<uint32_t>(root_pid_)) != (b.pid == static_cast<uint32_t>(root_pid_)))
            return a.pid == static_cast<uint32_t>(root_pid_);
        return a.pid < b.pid;
    });
}

// An exec the agent noted (its memory was released as an exec's already, so
// only the words were wrong), or an end it did not record (end_unrecorded:
// an exec it did not see, once the next image records; what the image held
// was judged as at an exit, which summary.json then no longer counts).
// summary.json must have been written the first time (else the summary says
// why not).
static bool summary_awaits_next_image(const ProcessSummary& s) {
    if (s.output_dir.empty() || s.facts.exec_replaced ||
        (s.end_kind != static_cast<uint32_t>(capture::EndKind::Exec) && !end_unrecorded(s)))
        return false;
    std::string file = s.output_dir + "/summary.json";
    for (auto& line : s.incomplete)
        if (line.rfind(file + ":", 0) == 0) return false;
    return true;
}

// The image as the run's end says it once its next image has recorded
// (join_all: replaced_by_exec, then rewrite_continued_exec's exec_replaced).
static ProcessSummary continued_in_next_capture(const ProcessSummary& s) {
    ProcessSummary continued = s;
    continued.replaced_by_exec = true;
    continued.facts.exec_replaced = true;
    return continued;
}

// The image's summary.json as an exec continued in the next capture says it
// ("" once written, else why not).
std::string Session::write_continued_summary(const ProcessSummary& s) const {
    return write_summary_again(continued_in_next_capture(s));
}

std::string Session::write_summary_again(const ProcessSummary& s) const {
    std::string why;
    Fd root = open_output_root(cfg_.output, why);
    Fd dir(root ? files::open_dir(root.get(), fs::path(s.output_dir).filename().string(), false, why) : -1);
    if (dir && files::replace(dir.get(), "summary.json", process_summary_json(s, s.facts), why)) return "";
    return why.empty() ? "cannot open its folder" : why;
}

void Session::rewrite_continued_exec(ProcessSummary& s) {
    if (!summary_awaits_next_image(s)) return;
    s.facts.exec_replaced = true;
    {
        std::lock_guard<std::mutex> l(awaited_mu_);
        if (continued_written_.count(s.output_dir)) return;  // as soon as the next capture was seen (show_continued)
    }
    if (std::string why = write_continued_summary(s); !why.empty())
        s.incomplete.push_back(s.output_dir + "/summary.json: cannot write it again (its next image's capture came "
                               "late): " + why + "; it says the exec went on without the agent");
}

// The end a process folder's live view says (its last screen, live.txt, and
// snapshot, live.json) put in other words; the CLI's view shows them at its
// next read.
static void replace_live_ended(const std::string& output, const std::string& output_dir, const std::string& was,
                               const std::string& now) {
    std::string why;
    Fd root = open_output_root(output, why);
    Fd dir(root ? files::open_dir(root.get(), fs::path(output_dir).filename().string(), false, why) : -1);
    if (!dir) return;  // a view's words: summary.json is what counts
    for (auto [name, from, to] : {std::tuple<const char*, std::string, std::string>{"live.txt", was, now},
                                  {"live.json", Json(was).dump(), Json(now).dump()}}) {
        int fd = openat(dir.get(), name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) continue;
        std::string text;
        char buf[1 << 16];
        for (ssize_t n; text.size() < (1u << 22) && (n = read(fd, buf, sizeof buf)) > 0;) text.append(buf, size_t(n));
        close(fd);
        if (size_t at = text.find(from); at != std::string::npos) {
            text.replace(at, from.size(), to);
            files::replace(dir.get(), name, text, why);  // a view's words: summary.json is what counts
        }
    }
}

void Session::settle_live_ended(const ProcessSummary& s) const {
    if (s.live_ended.empty() || s.output_dir.empty()) return;
    std::string now = ended_text(s, s.facts);
    if (now != s.live_ended) replace_live_ended(cfg_.output, s.output_dir, s.live_ended, now);
}

void Session::image_done(const ProcessSummary& s) {
    if (!summary_awaits_next_image(s)) return;
    std::lock_guard<std::mutex> l(awaited_mu_);
    auto next = captures_seen_.find({s.pid, s.capture_index + 1});
    if (next == captures_seen_.end()) awaited_images_[{s.pid, s.capture_index}] = s;
    else if (continues(s.start_ticks, next->second)) show_continued(s);
    // (else another process that was given its pid: it ended there)
}

void Session::next_capture_seen(uint32_t pid, uint32_t index, const CaptureIdentity& id) {
    std::lock_guard<std::mutex> l(awaited_mu_);
    captures_seen_[{pid, index}] = id;
    if (index == 0) return;  // a process's first image follows no exec
    auto earlier = awaited_images_.find({pid, index - 1});
    if (earlier == awaited_images_.end()) return;
    if (!continues(earlier->second.start_ticks, id)) {  // the pid reused, not an exec
        awaited_images_.erase(earlier);
        return;
    }
    show_continued(earlier->second);
    awaited_images_.erase(earlier);
}

void Session::show_continued(const ProcessSummary& s) {
    // summary.json now, for whoever reads it while the run goes on; a
    // failure is said at the end, when join_all writes it again.
    if (write_continued_summary(s).empty()) continued_written_.insert(s.output_dir);
    if (s.live_ended.empty() || s.live_ended != awaited_exec_words(s)) return;  // no view waits
    const ProcessSummary continued = continued_in_next_capture(s);
    std::string now = ended_text(continued, continued.facts);
    replace_live_ended(cfg_.output, s.output_dir, s.live_ended, now);
    live_shown_[s.output_dir] = now;
}

std::string Session::agent_library_paths(std::vector<std::string>& out, std::string& error) {
    std::string agent = Registry::agent_dir() + "/libmsmemscope_agent.so";
    if (access(agent.c_str(), R_OK) != 0) {
        error = "the agent library is missing: " + agent;
        return "";
    }
    if (std::string why = untrusted_reason(agent); !why.empty()) {
        error = "the agent library " + agent + " is refused: " + why;
        return "";
    }
    out.push_back(agent);
    for (auto& name : cfg_.collectors) {
        const LoadedPlugin* p = registry_.find(name, MSMS_KIND_COLLECTOR);
        if (!p || !p->descriptor->agent_library) continue;
        fs::path plugin_dir = fs::path(p->path).parent_path();
        std::string lib = p->descriptor->agent_library;
        std::vector<fs::path> candidates{plugin_dir / lib, plugin_dir.parent_path() / "agent" / lib, plugin_dir / "agent" / lib};
        // A collector whose target library is missing or refused costs only
        // itself, as a plugin that cannot be loaded: the run goes on without
        // it and ends with status 71.
        std::string why;
        bool found = false;
        for (auto& c : candidates) {
            if (access(c.c_str(), R_OK) != 0) continue;
            found = true;
            if (std::string untrusted = untrusted_reason(c.string()); !untrusted.empty())
                why = "its target library " + c.string() + " is refused: " + untrusted;
            else
                out.push_back(fs::absolute(c).lexically_normal().string());
            break;
        }
        if (!found) why = "its target library " + lib + " was not found next to " + p->path;
        if (!why.empty()) {
            // (said before any process's log opens: each of them repeats it)
            say_error("collector '" + name + "': " + why + "; running without it");
            collector_dropped_ = true;
        }
    }
    return "";
}

// The processes other than the tool's own workers whose parent is this host
// (the program's orphans, re-parented here): "pid N (command)", ... A worker
// being killed (a plugin over its time budget) has no executable left to
// compare: workers are known by pid.
static std::string left_behind() {
    std::string out;
    std::error_code ec;
    std::string me = std::to_string(getpid());
    for (auto& e : fs::directory_iterator("/proc", ec)) {
        std::string pid = e.path().filename().string();
        if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
        std::ifstream stat(e.path() / "stat");
        std::string line;
        std::getline(stat, line);
        size_t close = line.rfind(')');
        if (close == std::string::npos) continue;
        std::istringstream rest(line.substr(close + 1));
        std::string state, ppid;
        rest >> state >> ppid;
        if (ppid != me || state == "Z" || supervisor::is_worker(static_cast<pid_t>(std::stol(pid)))) continue;
        std::ifstream cmd(e.path() / "cmdline");
        std::string args((std::istreambuf_iterator<char>(cmd)), std::istreambuf_iterator<char>());
        while (!args.empty() && args.back() == '\0') args.pop_back();
        for (char& c : args)
            if (c == '\0') c = ' ';
            else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
        if (args.size() > 200) args = args.substr(0, 200) + "...";
        out += (out.empty() ? "" : ", ") + std::string("pid ") + pid + " (" + args + ")";
    }
    return out;
}

int Session::run_program() {
    // Profiled processes that outlive their parents are re-parented to us,
    // so we know when the whole tree is gone. Not with --follow-fork=false:
    // nothing but the program is profiled, and a daemon it leaves behind is
    // not waited for.
    if (cfg_.follow_fork) prctl(PR_SET_CHILD_SUBREAPER, 1);
    std::string err;
    std::string prog = resolve_program(cfg_.program[0], err);
    if (prog.empty()) {
        std::cerr << "msmemscope: error: " << err << "\n";
        return 2;
    }
    std::vector<std::string> preload;
    agent_library_paths(preload, err);
    if (!err.empty()) {
        std::cerr << "msmemscope: error: " << err << "\n";
        return 2;
    }
    if (std::string why = make_dirs(cfg_.output); !why.empty()) {
        std::cerr << "msmemscope: error: --output: cannot create or write '" << cfg_.output << "': " << why << "\n";
        return 2;
    }
    if (output_refused(cfg_)) return 2;
    // Session folders of earlier runs whose host was killed (stale_sessions.h).
    remove_stale_sessions(cfg_.output);
    // A fresh folder only this user can enter (mkdtemp: 0700, a new name
    // each run): nothing planted beforehand is ever read as a capture.
    std::string tmpl = cfg_.output + "/.msmemscope_session_XXXXXX";
    if (!mkdtemp(tmpl.data())) {
        std::cerr << "msmemscope: error: --output: cannot create a session folder in '" << cfg_.output
                  << "': " << strerror(errno) << "\n";
        return 2;
    }
    dir_ = tmpl;
    own_dir_ = true;
    if (std::string why = write_session_owner(dir_); !why.empty()) {
        std::cerr << "msmemscope: error: --output: " << why << "\n";
        return 2;
    }
    LaunchSpec spec;
    spec.argv = cfg_.program;
    spec.argv[0] = prog;
    spec.preload = preload;
    std::string watch_token = new_watch_token();
    spec.env = {{"MSMEMSCOPE_SESSION", fs::absolute(dir_).string()},
                {"MSMEMSCOPE_WATCH_TOKEN", watch_token},
                {"MSMEMSCOPE_AGENT_OPTS", cfg_.agent_options() + host_identity()},
                {"MSMEMSCOPE_HOME", fs::path(Registry::agent_dir()).parent_path().parent_path().string()}};
    // Blocked until the program's pid is known to the handler.
    sigset_t stop_set, old_mask;
    sigemptyset(&stop_set);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stop_set, sig);
    pthread_sigmask(SIG_BLOCK, &stop_set, &old_mask);
    StopSignals stop_signals;
    auto restore = [&] {
        g_forward_pid = 0;
        g_launching = 0;
        g_pending_stop = 0;
        stop_signals.restore();
        pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    };
    spec.child_mask = &old_mask;  // the program starts with the caller's mask
    g_launching = 1;
    program_status::setup();  // before the first worker is forked
    pid_t pid = launch(spec, err);
    if (pid < 0) {
        restore();
        std::cerr << "msmemscope: error: " << err << "\n";
        return 2;
    }
    root_pid_ = pid;
    program_status::started(pid);
    g_forward_pid = pid;
    g_launching = 0;
    if (int sig = g_pending_stop) {
        g_pending_stop = 0;
        kill(pid, sig);
    }
    pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    publish_watch_staging(dir_, watch_token);  // after the launch: not in the program's environment
    yield_to_target();

    int root_code = 0;
    bool root_reaped = false, said_waiting = false;
    auto root_end = std::chrono::steady_clock::now();
    for (;;) {
        // Which child ended, without reaping it yet: the program's pid stops
        // being a forwarding target before it can be reused.
        siginfo_t si{};
        if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0) {
            if (errno == EINTR) continue;
            break;  // ECHILD: every child has been reaped
        }
        if (si.si_pid == 0) {
            // The program has ended but processes it left behind (a daemon)
            // run on: said once, after 2 s, with what stops the wait.
            if (root_reaped && !said_waiting &&
                std::chrono::steady_clock::now() - root_end > std::chrono::seconds(2)) {
                std::string left = left_behind();
                if (!left.empty()) {
                    said_waiting = true;
                    std::string waiting = "msmemscope: the program has ended; waiting for what it left running "
                                          "(profiled, --follow-fork): " + left +
                                          "; end them, or press Ctrl-C (SIGINT/SIGTERM to pid " +
                                          std::to_string(getpid()) +
                                          ") to stop waiting (they go on unrecorded; their outputs are left incomplete)";
                    // One write: the workers' threads print their own lines meanwhile.
                    supervisor::host_stderr(waiting + "\n");
                    // (shown with -q too: so kept at every level)
                    said_during_run_.push_back(
                        {ReportLine::Out, waiting, true, std::chrono::system_clock::now()});
                }
            }
            // Ctrl-C once the program has ended: stop waiting for them.
            if (root_reaped && supervisor::abandoned()) break;
            scan();
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
            continue;
        }
        if (si.si_pid == root_pid_) g_forward_pid = 0;
        int st = 0;
        pid_t w = waitpid(si.si_pid, &st, WNOHANG);
        if (w == root_pid_) {
            root_code = exit_code_of(st);
            root_status_ = describe_status(st);
            program_status::reaped(w, st);  // for summary.json (a worker may wait for it)
            root_reaped = true;
            root_end = std::chrono::steady_clock::now();
        } else if (w > 0) {
            supervisor::reaped(w, st);  // a pipeline worker (supervisor.h): its supervisor has the status now
        }
        // w <= 0: a worker's supervisor thread reaped it first (wait_worker)
    }
    scan();  // captures created just before the last exit
    join_all();
    restore();
    return root_code;
}

int Session::serve(const std::string& dir, pid_t parent) {
    // The Python package made this folder (mkdtemp): it must be a folder of
    // this user that nobody else can write into.
    struct stat st;
    if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
        std::cerr << "msmemscope: error: --serve-session: '" << dir << "' is not a folder\n";
        return 2;
    }
    if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH))) {
        std::cerr << "msmemscope: error: --serve-session: '" << dir
                  << "' must belong to this user and not be writable by others\n";
        return 2;
    }
    if (output_refused(cfg_)) return 2;
    dir_ = dir;
    own_dir_ = true;
    ready_pid_ = getppid();  // the Python process that started this host, which reads the ready pipe
    // This host owns the folder from now on (a later run removes it if this
    // host is killed); the package's start() never judged it before.
    write_session_owner(dir_);
    // The Python package made the token with the folder and gave it to us.
    if (const char* t = getenv("MSMEMSCOPE_WATCH_TOKEN"); valid_watch_token(t)) publish_watch_staging(dir_, t);
    signal(SIGINT, SIG_IGN);
    if (cfg_.ready_fd >= 0) {
        // Nobody may be reading any more (the Python process reads until its
        // own line): a write must neither block nor kill the host.
        signal(SIGPIPE, SIG_IGN);
        fcntl(cfg_.ready_fd, F_SETFL, fcntl(cfg_.ready_fd, F_GETFL) | O_NONBLOCK);
        fcntl(cfg_.ready_fd, F_SETFD, FD_CLOEXEC);
        // A requested device whose driver the loader does not find: start()
        // says so before the program's work (the end's report says it again
        // if nothing of that device was recorded). "nodriver LIB\tTEXT": the
        // package leaves it out when LIB is already loaded in the process.
        for (auto& [lib, text] : drivers_missing_now(cfg_)) {
            std::string line = "nodriver " + lib + "\t" + text + "\n";
            ssize_t n = write(cfg_.ready_fd, line.data(), line.size());  // before any "serving" line
            (void)n;
        }
    }
    yield_to_target();
    while (kill(parent, 0) == 0 || errno == EPERM) {
        scan();
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    scan();
    join_all();
    return 0;
}

int Session::replay(const std::string& capture) {
    // SIGINT, SIGTERM, SIGHUP: stop writing and say what is incomplete
    // (on_stop_signal: no program to forward them to). They ended the
    // replay silently, with a CSV cut mid-row and the program's status.
    StopSignals stop_signals;
    if (supervisor::abandoned()) return 70;  // an earlier capture of --replay=PATTERN was interrupted
    if (std::string why = make_dirs(cfg_.output); !why.empty()) {
        std::cerr << "msmemscope: error: --output: cannot create or write '" << cfg_.output << "': " << why << "\n";
        return 2;
    }
    if (output_refused(cfg_)) return 2;
    ProcessRun run(cfg_, registry_, capture);
    progress::Slot* slot = progress::acquire();
    run.set_progress(slot);
    run_supervised(run);
    progress::release(slot);
    if (!run.summary().error.empty()) {
        std::cerr << "msmemscope: error: --replay: " << run.summary().error << "\n";
        // Not a readable capture (nothing was run): 2; its output failed: 70.
        return run.summary().pid == 0 ? 2 : 70;
    }
    ProcessSummary s = run.summary();
    s.ended = how_ended(s);
    if (cfg_.replays.size() > 1)  // several captures: each message names its own
        for (auto& why : s.incomplete) why = capture + ": " + why;
    summaries_.push_back(s);
    return 0;
}

void Session::note_replayed_processes(const std::vector<std::string>& captures) {
    struct Noted {
        uint64_t started;
        uint32_t pid, ppid;
        std::string rank;
    };
    std::vector<Noted> noted;
    for (auto& capture : captures) {
        CaptureReader reader;
        std::string error;
        if (!reader.open(capture, error)) continue;  // its replay says why
        noted.push_back({reader.wall_start(), reader.pid(), reader.ppid(), valid_rank(reader.rank())});
    }
    // In the order the run saw them (the names sort pids as text): an
    // exec's later image replaces what its earlier one said.
    std::stable_sort(noted.begin(), noted.end(), [](const Noted& a, const Noted& b) { return a.started < b.started; });
    for (auto& n : noted) run_processes::note(n.pid, n.ppid, n.rank);
}

namespace {

// The end's line for a setup warning said by several processes (the first
// of them said it on the console at once): '(the warning above, "TEXT", was
// said by 5 processes: pids 11, 12, 13, 14, 15)', the pids listed up to
// kListed. "" for one process: its warning said it all.
std::string processes_that_said(const std::string& text, const std::vector<uint32_t>& pids) {
    if (pids.size() < 2) return "";
    constexpr size_t kListed = 10;
    std::string list;
    for (size_t i = 0; i < pids.size() && i < kListed; ++i) list += (i ? ", " : "") + std::to_string(pids[i]);
    if (pids.size() > kListed) list += " and " + std::to_string(pids.size() - kListed) + " more";
    return "(the warning above, \"" + text + "\", was said by " + std::to_string(pids.size()) +
           " processes: pids " + list + ")";
}

void print_line(const ReportLine& line, std::ostream& out) {
    if (line.kind == ReportLine::Out)
        out << line.text << "\n";
    else if (line.kind == ReportLine::Warning)
        (line.shown_always ? std::cerr : warning_out()) << "msmemscope: warning: " << line.text << "\n";
    else
        std::cerr << "msmemscope: error: " << line.text << "\n";
}

// What the console showed is what the log keeps. Lines on stdout (the
// report itself) are shown whatever --log-level says, so the log keeps them
// at every level too, as [info]: a log at --log-level=warn lost the report
// the user was told. Warnings and errors go through the log's level, as
// they went through warning_out() on stderr (-q / error: errors only).
bool log_keeps(const ReportLine& line, const Config& cfg) {
    if (line.kind == ReportLine::Out || line.shown_always) return true;
    int level = line.kind == ReportLine::Warning ? 2 : 3;  // Config::log_file_threshold()'s scale
    return level >= cfg.log_file_threshold();
}

// Lines of the report go into the process's log too, for a reader of the
// log alone (logs collected from CI). The log is opened again below the
// process folder without following links (output_dir.h) and appended to;
// one that cannot be opened any more (the folder moved or replaced) leaves
// the console's as the only copy, as does a full disk (the log's errors are
// not reported).
void append_to_log(const ProcessSummary& s, const Config& cfg, const std::vector<ReportLine>& lines) {
    if (s.output_dir.empty() || s.log_file.empty()) return;
    std::string why;
    Fd dir = open_output_root(s.output_dir, why);
    if (!dir) return;
    size_t slash = s.log_file.rfind('/');
    Fd logs(files::open_dir(dir.get(), s.log_file.substr(0, slash), false, why));
    if (!logs) return;
    int fd = openat(logs.get(), s.log_file.substr(slash + 1).c_str(), O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return;
    auto log = make_process_log(fd, cfg);
    log->set_error_handler([](const std::string&) {});
    log->set_level(spdlog::level::info);  // the level is judged by log_keeps
    for (auto& line : lines) {
        if (!log_keeps(line, cfg)) continue;
        auto level = line.kind == ReportLine::Out       ? spdlog::level::info
                     : line.kind == ReportLine::Warning ? spdlog::level::warn
                                                        : spdlog::level::err;
        auto when = line.when == std::chrono::system_clock::time_point{} ? std::chrono::system_clock::now()
                                                                          : line.when;
        log->log(when, spdlog::source_loc{}, level, line.text);
    }
    log->flush();
}

}  // namespace

std::vector<ReportLine> Session::report_lines(const ProcessSummary& s,
                                              const std::function<std::string(const std::string&)>& said,
                                              int& status) const {
    std::vector<ReportLine> lines;
    auto out = [&lines](std::string text) { lines.push_back({ReportLine::Out, std::move(text)}); };
    for (auto& w : s.warnings) lines.push_back({ReportLine::Warning, said(w)});
    if (!s.error.empty()) {
        lines.push_back({ReportLine::Error, (cfg_.replay.empty() ? "" : "--replay: ") + said(s.error)});
        status = 70;
        return lines;
    }
    for (auto& why : s.incomplete) {
        if (cfg_.replay.empty())
            lines.push_back({ReportLine::Error, "pid " + std::to_string(s.pid) + ": output incomplete: " + said(why)});
        else if (cfg_.replays.size() > 1)
            lines.push_back({ReportLine::Error, "--replay: " + why});
        else
            lines.push_back({ReportLine::Error, "--replay: " + cfg_.replay + ": " + why});
        status = 70;
    }
    // (The pipeline said on stderr which plugin was dropped and why.)
    if (s.plugin_dropped && status == 0) status = 71;
    std::string how = s.ended.empty() ? how_ended(s) : s.ended;
    out("msmemscope: pid " + std::to_string(s.pid) + " (" + escape_controls(s.command) + ") " + how);
    out("  output: " + s.output_dir);
    // Its rank came late: what was said of the folder during the run
    // (a plugin's message) named it as it was then.
    if (!s.renamed_from.empty())
        out("  folder: renamed from " + s.renamed_from + " at the end (rank " + s.rank +
            " from torch.distributed, known after the folder was made)");
    std::string counts = "  events: " + std::to_string(s.events) + ", dropped: " + std::to_string(s.dropped);
    if (s.stragglers) counts += ", late: " + std::to_string(s.stragglers);
    if (s.corrupt) counts += ", corrupt records: " + std::to_string(s.corrupt);
    // --steps: the host's own rows, apart from the events the program sent
    if (s.steps_shadow_rows)
        counts += ", --steps shadow rows: " + std::to_string(s.steps_shadow_rows) +
                  " (the blocks allocated or freed in the steps left out, written as a selected step starts)";
    out(counts);
    for (auto& [dev, t] : s.totals) {
        out("  " + dev + ": peak " + human_bytes(t.peak) + ", final " + human_bytes(t.used));
        if (t.import_rows)
            out("  " + dev + ": Python imports left up to " + std::to_string(t.import_blocks) + " block(s), " +
                human_bytes(static_cast<int64_t>(t.import_bytes)) + ", live: written as one block, the imports' heap (" +
                std::to_string(t.import_rows) +
                " MALLOC row(s) as it changed, Attr shadow:true,import:true,blocks), no row of their own "
                "(host_heap.python_imports=fold)");
    }
    // Analyzer reports at column 0, as upstream prints them (its leak
    // report: grep '^======'); each analyzer indents its own details.
    for (auto& line : s.report) out(said(line));
    for (auto& e : s.plugin_errors) out("  error: " + said(e));
    if (s.agent_disabled) out("  warning: the agent turned collection off during the run (see stderr)");
    // What the sinks wrote: every file under the process folder (the
    // sinks are plugins, so the folder is the one list they all share).
    std::vector<std::pair<std::string, uintmax_t>> files;
    std::error_code ec;
    for (fs::recursive_directory_iterator it(s.output_dir, ec), end; !ec && it != end; it.increment(ec)) {
        std::error_code ec2;
        if (!it->is_regular_file(ec2)) continue;
        files.emplace_back(fs::relative(it->path(), s.output_dir, ec2).string(), it->file_size(ec2));
    }
    std::sort(files.begin(), files.end());
    if (!files.empty()) out("  files (in " + s.output_dir + "):");
    const size_t kMaxListed = 30;
    for (size_t i = 0; i < files.size() && i < kMaxListed; ++i) {
        // The log's size is left off: this report (and what is said of the
        // whole run after it) is appended to the log once printed, so a size
        // read now is too small, and one that counted the report would count
        // the line that says it.
        if (files[i].first == s.log_file) {
            out("    " + escape_controls(files[i].first) + " (the log, which this report is appended to)");
            continue;
        }
        out("    " + escape_controls(files[i].first) + " (" + human_bytes(static_cast<int64_t>(files[i].second)) + ")");
    }
    if (files.size() > kMaxListed) out("    ... and " + std::to_string(files.size() - kMaxListed) + " more");
    return lines;
}

void Session::say_during_run(ReportLine::Kind kind, const std::string& text) {
    if (kind == ReportLine::Error) supervisor::host_stderr("msmemscope: error: " + text + "\n");
    else if (warnings_shown()) supervisor::host_stderr("msmemscope: warning: " + text + "\n");
    said_during_run_.push_back({kind, text, false, std::chrono::system_clock::now()});
}

int Session::print_summary(std::ostream& out) const {
    // The tool's own failures go to stderr, one line each; the status says
    // whether every output is complete (70: no; 71: a plugin was dropped).
    int status = 0;
    // A Python API session's user is told in config()'s words (api_words.h).
    const bool api = !cfg_.serve_session.empty();
    auto said = [api](const std::string& text) { return api ? api_words(text) : text; };
    say_setup_warnings();
    for (auto& s : summaries_) {
        std::vector<ReportLine> lines = report_lines(s, said, status);
        for (auto& line : lines) print_line(line, out);
        // The summary's warnings went into the log when they were said.
        lines.erase(std::remove_if(lines.begin(), lines.end(),
                                   [](const ReportLine& l) { return l.kind == ReportLine::Warning; }),
                    lines.end());
        // Before it, what the console said while the run went on (printed then).
        lines.insert(lines.begin(), said_during_run_.begin(), said_during_run_.end());
        append_to_log(s, cfg_, lines);
    }
    // A collector left out for its missing target library (agent_library_paths).
    if (collector_dropped_ && status == 0 && !summaries_.empty()) status = 71;
    return status;
}

// The plugins' warnings about their setup, and those of the end, were said
// once for the run, when the first process said them (said_once.h,
// Pipeline::set_group_setup_warnings): a DataLoader with 4 workers made the
// leak analysis say that --steps turns it off 5 times. A text said by
// several processes is named once more at the end with how many and which
// (each process's log has its own copy, said when it was).
void Session::say_setup_warnings() const {
    std::vector<std::pair<std::string, std::vector<uint32_t>>> texts;  // in the order first said
    for (auto& s : summaries_)
        for (auto& w : s.setup_warnings) {
            auto it = std::find_if(texts.begin(), texts.end(), [&](const auto& t) { return t.first == w; });
            if (it == texts.end()) texts.push_back({w, {s.pid}});
            // (a Python program's runs one after another are one process)
            else if (std::find(it->second.begin(), it->second.end(), s.pid) == it->second.end())
                it->second.push_back(s.pid);
        }
    for (auto& [text, pids] : texts)
        if (std::string line = processes_that_said(text, pids); !line.empty())
            warning_out() << "[msmemscope] warning: " << line << "\n";
}

void Session::say_about_the_run(const std::vector<ReportLine>& lines, std::ostream& out) const {
    if (lines.empty()) return;
    for (auto& line : lines) print_line(line, out);
    for (auto& s : summaries_) append_to_log(s, cfg_, lines);
}

}  // namespace msms
