#include "supervisor.h"

#include "api_words.h"

#include "live/live_state.h"

#include "oom_watch.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <new>
#include <set>

#include "process_run.h"
#include "run_processes.h"

namespace fs = std::filesystem;

namespace msms {

const char* plugin_call_name(PluginCall c) {
    switch (c) {
    case PluginCall::Create: return "create";
    case PluginCall::Begin: return "begin";
    case PluginCall::OnEvent: return "on_event";
    case PluginCall::OnAnnotation: return "on_annotation";
    case PluginCall::OnFinding: return "on_finding";
    case PluginCall::Finish: return "finish";
    case PluginCall::Destroy: return "destroy";
    default: return "an unknown callback";
    }
}

namespace supervisor {

constexpr uint32_t kMaxSlots = 256;
constexpr size_t kNameSize = 72;

struct WorkerPage {
    // A cache line per lane: each thread writes its own at every plugin call
    // (sharing one was 7% of a replay's samples with three sinks' threads).
    struct alignas(64) Lane {
        std::atomic<uint64_t> current{0};
        std::atomic<uint64_t> calls{0};
    };
    Lane lanes[kLanes];
    std::atomic<int32_t> faulted{-1};  // the lane of the thread that faulted first
    std::atomic<uint32_t> started{0};
    std::atomic<uint32_t> slots{0};
    std::atomic<uint32_t> released{0};
    char names[kMaxSlots][kNameSize];
    char output_dir[4096];
    // The process the worker reads and its rank known now (name_process):
    // the line after a crash names them as the worker's lines do.
    std::atomic<uint32_t> pid{0};
    char rank[16];
};

WorkerPage* g_page = nullptr;
thread_local std::atomic<uint64_t>* t_current = nullptr;
thread_local std::atomic<uint64_t>* t_calls = nullptr;
namespace {
thread_local int t_lane = -1;

// A fault in a thread: its lane goes into the page, then the signal does
// what it would have done (SA_RESETHAND: the default action, raised again
// as the handler returns).
void on_fault(int sig) {
    if (g_page && t_lane >= 0) {
        int32_t none = -1;
        g_page->faulted.compare_exchange_strong(none, t_lane);
    }
    raise(sig);
}

void catch_faults() {
    struct sigaction sa{};
    sa.sa_handler = on_fault;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) sigaction(sig, &sa, nullptr);
}
}  // namespace

void enter_lane(unsigned lane) {
    if (!g_page || lane >= kLanes) {
        t_current = nullptr;
        t_calls = nullptr;
        t_lane = -1;
        return;
    }
    t_lane = static_cast<int>(lane);
    t_current = &g_page->lanes[lane].current;
    t_calls = &g_page->lanes[lane].calls;
}

namespace {
std::set<std::string> g_excluded;   // in a worker
std::vector<std::string> g_notes;   // in a worker
std::mutex g_reap_mu;
std::condition_variable g_reap_cv;
std::set<pid_t> g_workers;
std::map<pid_t, int> g_reaped;
// The workers alive, for abandon() in a signal handler: a fixed table of
// atomics (no lock, no allocation there).
constexpr size_t kMaxLive = 1024;
std::atomic<pid_t> g_live[kMaxLive];
std::atomic<int> g_abandon_sig{0};

void live_add(pid_t pid) {
    for (auto& slot : g_live) {
        pid_t empty = 0;
        if (slot.compare_exchange_strong(empty, pid)) break;
    }
    // abandon() may have run between the fork and the line above.
    if (g_abandon_sig.load()) kill(pid, SIGKILL);
}

void live_remove(pid_t pid) {
    for (auto& slot : g_live) {
        pid_t p = pid;
        if (slot.compare_exchange_strong(p, 0)) break;
    }
}
}  // namespace

namespace {
TimeBudget g_budget;
}
void set_time_budget(TimeBudget b) { g_budget = b; }
TimeBudget time_budget() { return g_budget; }

void abandon(int sig) noexcept {
    g_abandon_sig.store(sig);
    for (auto& slot : g_live) {
        pid_t p = slot.load();
        if (p > 0) kill(p, SIGKILL);
    }
}

int abandoned() noexcept { return g_abandon_sig.load(); }

bool excluded(const std::string& name) { return g_excluded.count(name) != 0; }
const std::vector<std::string>& exclusion_notes() { return g_notes; }

std::string exclusion_reason(const std::string& name) {
    // notes read "plugin 'NAME' HOW in CALL; the outputs were re-run without it"
    const std::string head = "plugin '" + name + "' ";
    for (const std::string& n : g_notes)
        if (n.compare(0, head.size(), head) == 0) return n.substr(head.size(), n.find("; ", head.size()) - head.size());
    return "";
}

uint32_t register_plugin(const std::string& name) {
    if (!g_page) return 0;
    uint32_t n = g_page->slots.load(std::memory_order_relaxed);
    if (n >= kMaxSlots) return 0;
    snprintf(g_page->names[n], kNameSize, "%s", name.c_str());
    g_page->slots.store(n + 1, std::memory_order_release);
    return n + 1;
}

void name_process(uint32_t pid, const std::string& rank) {
    if (!g_page) return;
    snprintf(g_page->rank, sizeof(g_page->rank), "%s", rank.c_str());
    g_page->pid.store(pid, std::memory_order_release);
}

void writing_into(const std::string& output_dir) {
    if (g_page) snprintf(g_page->output_dir, sizeof(g_page->output_dir), "%s", output_dir.c_str());
}

void pipeline_started() {
    if (g_page) g_page->started.store(1, std::memory_order_release);
}

void capture_released() {
    if (g_page) g_page->released.store(1, std::memory_order_release);
}

namespace {
int g_host_err = -1;    // in a worker whose fd 2 went to the plugin log: the tool's stderr
int g_log_dir = -1;     // the process folder, for drop_empty_plugin_log()
int g_log_fd = -1;
}  // namespace

std::string redirect_plugin_output(const std::string& dir, int dir_fd) {
    if (!g_page || g_log_fd >= 0) return "";
    // The process folder's own descriptor when given (issue #29 item 4).
    int dfd = dir_fd >= 0 ? fcntl(dir_fd, F_DUPFD_CLOEXEC, 3) : open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) return dir + ": " + strerror(errno);
    int fd = openat(dfd, kPluginLogName, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        std::string why = dir + "/" + kPluginLogName + ": " + strerror(errno);
        close(dfd);
        return why;
    }
    std::cout.flush();
    std::cerr.flush();
    fflush(nullptr);
    int err = fcntl(2, F_DUPFD_CLOEXEC, 3);
    if (err < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) {
        std::string why = std::string("cannot move the plugins' stdout and stderr: ") + strerror(errno);
        if (err >= 0) {
            dup2(err, 2);
            close(err);
        }
        unlinkat(dfd, kPluginLogName, 0);
        close(fd);
        close(dfd);
        return why;
    }
    g_host_err = err;
    g_log_dir = dfd;
    g_log_fd = fd;
    return "";
}

void host_stderr(const std::string& text) {
    if (g_host_err < 0) {
        std::cerr << text;
        std::cerr.flush();
        return;
    }
    size_t off = 0;
    while (off < text.size()) {
        ssize_t n = write(g_host_err, text.data() + off, text.size() - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        off += static_cast<size_t>(n);
    }
}

void drop_empty_plugin_log() {
    if (g_log_fd < 0) return;
    std::cout.flush();
    std::cerr.flush();
    fflush(nullptr);
    struct stat st{};
    if (fstat(g_log_fd, &st) == 0 && st.st_size == 0) unlinkat(g_log_dir, kPluginLogName, 0);
}

bool is_worker(pid_t pid) {
    std::lock_guard<std::mutex> lk(g_reap_mu);
    return g_workers.count(pid) != 0;
}

bool reaped(pid_t pid, int status) {
    std::lock_guard<std::mutex> lk(g_reap_mu);
    if (!g_workers.count(pid)) return false;
    g_reaped[pid] = status;
    g_reap_cv.notify_all();
    return true;
}

}  // namespace supervisor

namespace {

using supervisor::WorkerPage;

// ---- the summary through the pipe: fixed order, length-prefixed strings.
struct Writer {
    std::string out;
    void u(uint64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof(v)); }
    void s(const std::string& v) {
        u(v.size());
        out += v;
    }
};

struct Reader {
    const std::string& in;
    size_t pos = 0;
    bool ok = true;
    uint64_t u() {
        uint64_t v = 0;
        if (pos + sizeof(v) > in.size()) {
            ok = false;
            return 0;
        }
        memcpy(&v, in.data() + pos, sizeof(v));
        pos += sizeof(v);
        return v;
    }
    std::string s() {
        uint64_t n = u();
        if (!ok || pos + n > in.size()) {
            ok = false;
            return "";
        }
        std::string v = in.substr(pos, n);
        pos += n;
        return v;
    }
};

// Every field of ProcessSummary crosses the pipe. A new field must be added
// to encode() and decode() (the size check below is there to say so).
static_assert(sizeof(ProcessSummary) == 696,
              "ProcessSummary changed: add the new field to encode()/decode() in supervisor.cpp, then update this size");

std::string encode(const ProcessSummary& s) {
    Writer w;
    w.u(s.pid);
    w.u(s.ppid);
    w.s(s.command);
    w.s(s.output_dir);
    w.u(s.events);
    w.u(s.trace_marks);
    w.u(s.steps_shadow_rows);
    w.u(s.dropped);
    w.u(s.stragglers);
    w.u(s.corrupt);
    w.u(s.ended_normally);
    w.u(s.agent_disabled);
    w.u(s.end_kind);
    w.u(static_cast<uint32_t>(s.end_code));
    w.u(s.end_corrupt);
    w.s(s.exec_path);
    w.u(s.oom_kill_seen);
    w.u(s.capture_index);
    w.u(s.start_ticks);
    w.u(s.forked_from);
    w.u(s.exact_order);
    w.u(s.replaced_by_exec);
    w.s(s.live_ended);
    w.u(s.attach_exec);
    w.u(s.exec_unfollowed);
    w.u(s.exit_after_fork);
    w.u(s.leaks_ran);
    w.u(s.interrupted);
    w.s(s.ended);
    w.s(s.damage);
    w.s(s.error);
    w.u(s.totals.size());
    for (auto& [k, t] : s.totals) {
        w.s(k);
        w.u(static_cast<uint64_t>(t.used));
        w.u(static_cast<uint64_t>(t.peak));
        w.u(t.import_rows);
        w.u(t.import_blocks);
        w.u(t.import_bytes);
    }
    w.u(s.report.size());
    for (auto& l : s.report) w.s(l);
    w.u(s.plugin_errors.size());
    for (auto& l : s.plugin_errors) w.s(l);
    w.u(s.incomplete.size());
    for (auto& l : s.incomplete) w.s(l);
    w.u(s.plugin_dropped);
    w.u(s.warnings.size());
    for (auto& l : s.warnings) w.s(l);
    w.u(s.setup_warnings.size());
    for (auto& l : s.setup_warnings) w.s(l);
    w.s(s.rank);
    w.s(s.renamed_from);
    w.s(s.log_file);
    const SummaryFacts& f = s.facts;
    w.u(f.ppid);
    w.s(f.rank);
    w.u(f.steps);
    w.u(f.wall_start_ns);
    w.u(f.exec_replaced);
    w.u(f.leaks_ran);
    w.u(f.inefficient_ran);
    w.u(static_cast<uint32_t>(f.wait_status));
    w.u(f.plugin_failures.size());
    for (auto& pf : f.plugin_failures) {
        w.s(pf.plugin);
        w.s(pf.kind);
        w.s(pf.what);
    }
    w.s("end");
    return w.out;
}

bool decode(const std::string& in, ProcessSummary& s) {
    Reader r{in};
    s.pid = static_cast<uint32_t>(r.u());
    s.ppid = static_cast<uint32_t>(r.u());
    s.command = r.s();
    s.output_dir = r.s();
    s.events = r.u();
    s.trace_marks = r.u();
    s.steps_shadow_rows = r.u();
    s.dropped = r.u();
    s.stragglers = r.u();
    s.corrupt = r.u();
    s.ended_normally = r.u() != 0;
    s.agent_disabled = r.u() != 0;
    s.end_kind = static_cast<uint32_t>(r.u());
    s.end_code = static_cast<int32_t>(static_cast<uint32_t>(r.u()));
    s.end_corrupt = r.u() != 0;
    s.exec_path = r.s();
    s.oom_kill_seen = r.u() != 0;
    s.capture_index = static_cast<uint32_t>(r.u());
    s.start_ticks = r.u();
    s.forked_from = static_cast<uint32_t>(r.u());
    s.exact_order = r.u() != 0;
    s.replaced_by_exec = r.u() != 0;
    s.live_ended = r.s();
    s.attach_exec = r.u() != 0;
    s.exec_unfollowed = r.u() != 0;
    s.exit_after_fork = r.u() != 0;
    s.leaks_ran = r.u() != 0;
    s.interrupted = r.u() != 0;
    s.ended = r.s();
    s.damage = r.s();
    s.error = r.s();
    s.totals.clear();
    for (uint64_t n = r.u(); r.ok && n > 0; --n) {
        std::string k = r.s();
        Pipeline::DeviceTotals t;
        t.used = static_cast<int64_t>(r.u());
        t.peak = static_cast<int64_t>(r.u());
        t.import_rows = r.u();
        t.import_blocks = r.u();
        t.import_bytes = r.u();
        s.totals[k] = t;
    }
    s.report.clear();
    for (uint64_t n = r.u(); r.ok && n > 0; --n) s.report.push_back(r.s());
    s.plugin_errors.clear();
    for (uint64_t n = r.u(); r.ok && n > 0; --n) s.plugin_errors.push_back(r.s());
    s.incomplete.clear();
    for (uint64_t n = r.u(); r.ok && n > 0; --n) s.incomplete.push_back(r.s());
    s.plugin_dropped = r.u() != 0;
    s.warnings.clear();
    for (uint64_t n = r.u(); r.ok && n > 0; --n) s.warnings.push_back(r.s());
    s.setup_warnings.clear();
    for (uint64_t n = r.u(); r.ok && n > 0; --n) s.setup_warnings.push_back(r.s());
    s.rank = r.s();
    s.renamed_from = r.s();
    s.log_file = r.s();
    SummaryFacts& f = s.facts;
    f.ppid = static_cast<uint32_t>(r.u());
    f.rank = r.s();
    f.steps = r.u();
    f.wall_start_ns = r.u();
    f.exec_replaced = r.u() != 0;
    f.leaks_ran = r.u() != 0;
    f.inefficient_ran = r.u() != 0;
    f.wait_status = static_cast<int32_t>(static_cast<uint32_t>(r.u()));
    f.plugin_failures.clear();
    for (uint64_t n = r.u(); r.ok && n > 0; --n) {
        SummaryFacts::PluginFailure pf;
        pf.plugin = r.s();
        pf.kind = r.s();
        pf.what = r.s();
        f.plugin_failures.push_back(std::move(pf));
    }
    return r.s() == "end" && r.ok && r.pos == in.size();
}

std::string signal_text(int sig) {
    const char* n = sigabbrev_np(sig);
    return n ? std::string("SIG") + n : "signal " + std::to_string(sig);
}

int wait_worker(pid_t pid) {
    int status = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, 0);
        if (w == pid) {
            std::lock_guard<std::mutex> lk(supervisor::g_reap_mu);
            supervisor::g_workers.erase(pid);
            supervisor::live_remove(pid);
            return status;
        }
        if (w < 0 && errno == EINTR) continue;
        break;  // ECHILD: the session's waitpid(-1) took it (supervisor::reaped)
    }
    std::unique_lock<std::mutex> lk(supervisor::g_reap_mu);
    supervisor::g_reap_cv.wait(lk, [&] { return supervisor::g_reaped.count(pid) != 0; });
    status = supervisor::g_reaped[pid];
    supervisor::g_reaped.erase(pid);
    supervisor::g_workers.erase(pid);
    supervisor::live_remove(pid);
    return status;
}

// One pipeline worker: a forked child with a fresh WorkerPage that runs
// `body` (which may write its result into `result_fd`) with the given plugins
// excluded. After it ends: its status, what it wrote, and which plugin call
// (if any) it was in.
struct WorkerEnd {
    int status = 0;
    std::string data;       // what the body wrote into result_fd
    std::string plugin;     // the plugin whose call was running, or empty
    PluginCall call{};
    std::string output_dir;
    uint32_t pid = 0;   // the process it read (0: not known yet)
    std::string rank;   // and its rank then
    bool pipeline_started = false;
    bool released = false;  // the worker released read parts of the capture
    unsigned over_budget_s = 0;  // the watchdog killed it: the budget the call exceeded
    int over_budget_lane = -1;   // and the lane of that call
    bool oom_kill = false;       // its memory cgroup counted an OOM kill while it ran
};

// The watchdog: reads what the worker writes, and once a second looks at the
// plugin call it is in; a call that has not ended within its budget gets the
// worker killed (SIGKILL) and end.over_budget_s set.
void read_watched(int fd, pid_t pid, const WorkerPage* page, WorkerEnd& end) {
    using clock = std::chrono::steady_clock;
    uint64_t seen_calls[supervisor::kLanes];
    clock::time_point since[supervisor::kLanes];
    for (unsigned l = 0; l < supervisor::kLanes; ++l) {
        seen_calls[l] = page->lanes[l].calls.load(std::memory_order_relaxed);
        since[l] = clock::now();
    }
    char buf[65536];
    for (;;) {
        struct pollfd p{fd, POLLIN, 0};
        int r = poll(&p, 1, 1000);
        if (r < 0 && errno == EINTR) continue;
        if (r > 0) {
            ssize_t n = read(fd, buf, sizeof(buf));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) return;
            end.data.append(buf, static_cast<size_t>(n));
        }
        if (end.over_budget_s) continue;  // killed: wait for the end of the pipe
        auto now = clock::now();
        for (unsigned l = 0; l < supervisor::kLanes && !end.over_budget_s; ++l) {
            uint64_t cur = page->lanes[l].current.load(std::memory_order_relaxed);
            uint64_t calls = page->lanes[l].calls.load(std::memory_order_relaxed);
            if (cur == 0 || calls != seen_calls[l]) {
                seen_calls[l] = calls;
                since[l] = now;
                continue;
            }
            supervisor::TimeBudget b = supervisor::time_budget();
            unsigned budget = static_cast<PluginCall>(cur & 0xffffffffu) == PluginCall::Finish ? b.finish_s : b.call_s;
            if (budget && now - since[l] >= std::chrono::seconds(budget)) {
                end.over_budget_s = budget;
                end.over_budget_lane = static_cast<int>(l);
                kill(pid, SIGKILL);
            }
        }
    }
}

// False (errno set, nothing left behind) when no worker could be started.
bool run_worker(const std::vector<std::string>& excluded, const std::vector<std::string>& notes,
                const std::function<int(int result_fd)>& body, WorkerEnd& end) {
    void* mem = mmap(nullptr, sizeof(WorkerPage), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int fds[2] = {-1, -1};
    if (mem == MAP_FAILED || pipe2(fds, O_CLOEXEC) != 0) {
        int e = errno;
        if (mem != MAP_FAILED) munmap(mem, sizeof(WorkerPage));
        errno = e;
        return false;
    }
    auto* page = new (mem) WorkerPage();
    std::cout.flush();
    std::cerr.flush();
    fflush(nullptr);
    pid_t pid;
    pid_t parent = getpid();
    {
        // Held across fork: the session's reaped() waits until the new
        // pid is known to be a worker.
        std::lock_guard<std::mutex> lk(supervisor::g_reap_mu);
        pid = fork();
        if (pid > 0) {
            supervisor::g_workers.insert(pid);
            supervisor::live_add(pid);
        }
    }
    if (pid == 0) {
        // A host that is killed takes its worker with it.
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(70);
        close(fds[0]);
        supervisor::g_page = page;
        supervisor::enter_lane(0);
        supervisor::catch_faults();
        supervisor::g_excluded = std::set<std::string>(excluded.begin(), excluded.end());
        supervisor::g_notes = notes;
        int rc = body(fds[1]);
        std::cout.flush();
        std::cerr.flush();
        fflush(nullptr);
        _exit(rc & 0xff);
    }
    int e = errno;
    close(fds[1]);
    if (pid < 0) {
        close(fds[0]);
        page->~WorkerPage();
        munmap(mem, sizeof(WorkerPage));
        errno = e;
        return false;
    }
    OomWatch oom(static_cast<uint32_t>(pid));
    oom.sample();  // its cgroups (the host's) and their OOM kill counts now
    read_watched(fds[0], pid, page, end);
    close(fds[0]);
    end.status = wait_worker(pid);
    end.oom_kill = WIFSIGNALED(end.status) && WTERMSIG(end.status) == SIGKILL && oom.increased();
    // The call to name: the faulting thread's, the one over its budget, else
    // (a SIGKILL: the OOM killer, a plugin's raise) the pipeline thread's if
    // it was in one, else the first sink thread's that was.
    int lane = page->faulted.load(std::memory_order_acquire);
    if (lane < 0) lane = end.over_budget_lane;
    if (lane < 0) {
        lane = 0;
        for (unsigned l = 0; l < supervisor::kLanes; ++l)
            if (page->lanes[l].current.load(std::memory_order_acquire) != 0) {
                lane = static_cast<int>(l);
                break;
            }
    }
    uint64_t cur = page->lanes[lane].current.load(std::memory_order_acquire);
    uint32_t slot = static_cast<uint32_t>(cur >> 32);
    end.call = static_cast<PluginCall>(cur & 0xffffffffu);
    if (slot > 0 && slot <= page->slots.load(std::memory_order_acquire))
        end.plugin.assign(page->names[slot - 1], strnlen(page->names[slot - 1], supervisor::kNameSize));
    end.output_dir.assign(page->output_dir, strnlen(page->output_dir, sizeof(page->output_dir)));
    end.pid = page->pid.load(std::memory_order_acquire);
    end.rank.assign(page->rank, strnlen(page->rank, sizeof(page->rank)));
    end.pipeline_started = page->started.load(std::memory_order_acquire) != 0;
    end.released = page->released.load(std::memory_order_acquire) != 0;
    page->~WorkerPage();
    munmap(mem, sizeof(WorkerPage));
    return true;
}

std::string over_budget_text(const WorkerEnd& end) {
    return "exceeded its time budget (" + std::to_string(end.over_budget_s) + " s, --plugin-time-budget)";
}

// How a worker killed by a signal ended. SIGKILL is what the OOM killer
// sends: said so, and said for certain when the worker's memory cgroup
// counted an OOM kill while it ran (a plugin that ran out of memory).
std::string crash_text(const WorkerEnd& end) {
    int sig = WTERMSIG(end.status);
    if (sig != SIGKILL) return "crashed (" + signal_text(sig) + ")";
    return end.oom_kill ? "was killed by SIGKILL: out of memory (its memory cgroup's OOM killer)"
                        : "was killed by SIGKILL (out of memory? the OOM killer sends SIGKILL)";
}

// What keeps the whole capture, so that a crashed plugin's outputs can be
// re-run, told to the run's user: the command line's option, or, to a Python
// API session's program (config() has no key for it), how to get it.
std::string keep_capture_hint(const Config& cfg) {
    if (cfg.serve_session.empty()) return "--save-capture=true keeps it";
    return "config() has no key that keeps it; run the script under the command line with --save-capture=true to "
           "keep it";
}

// Whether a worker that ended badly can be re-run without the plugin it was
// in: only when that plugin is known and not excluded already.
bool can_exclude(const WorkerEnd& end, const std::vector<std::string>& excluded, int attempt) {
    return !end.plugin.empty() && std::find(excluded.begin(), excluded.end(), end.plugin) == excluded.end() &&
           attempt < 64;
}

// The log a worker that did not finish had made in its process folder
// ("msmemscope_logs/NAME", as ProcessSummary::log_file), or "" if there is
// not exactly one. Its summary died with it: without the name, what the host
// said during the run (the detach's warnings) and why the outputs are
// incomplete reached the console only (Session::print_summary).
std::string log_left_by_worker(const std::string& output_dir) {
    std::string found;
    int count = 0;
    std::error_code ec;
    for (fs::directory_iterator it(output_dir + "/msmemscope_logs", ec), end; !ec && it != end; it.increment(ec)) {
        std::string name = it->path().filename().string();
        std::error_code ec2;
        if (name.rfind("msmemscope_", 0) != 0 || it->path().extension() != ".log" || !it->is_regular_file(ec2) ||
            it->is_symlink(ec2))
            continue;
        found = "msmemscope_logs/" + name;
        ++count;
    }
    return count == 1 ? found : "";
}

bool write_all(int fd, const std::string& out) {
    size_t off = 0;
    while (off < out.size()) {
        ssize_t n = write(fd, out.data() + off, out.size() - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        off += static_cast<size_t>(n);
    }
    return true;
}

}  // namespace

void run_supervised(ProcessRun& run) {
    if (std::getenv("MSMEMSCOPE_NO_SUPERVISOR")) {
        run.run();
        return;
    }
    std::vector<std::string> excluded, notes;
    bool started_before = false;
    // Told to stop (supervisor::abandon): what this process's outputs lack.
    auto stop_abandoned = [&](const std::string& output_dir) {
        std::string where = output_dir.empty() ? run.named_for_user("") : output_dir;
        // When: a replay has no program; an attached one goes on running
        // (the first signal detached it, this one stopped the writing).
        const char* when = !run.cfg_.replays.empty() || !run.cfg_.replay.empty() ? ""
                           : run.cfg_.attach_pid != 0                            ? " while it finished the outputs of the detached program"
                                                                                  : " after the program had ended";
        run.summary_.error = where + ": not finished: msmemscope was interrupted by " +
                             signal_text(supervisor::abandoned()) + when +
                             "; the outputs of this process are incomplete";
        if (!output_dir.empty()) {
            run.summary_.output_dir = output_dir;
            run.summary_.log_file = log_left_by_worker(output_dir);
            // The worker that would have removed an empty plugins' log is gone.
            int dfd = open(output_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            struct stat st{};
            if (dfd >= 0 && fstatat(dfd, supervisor::kPluginLogName, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
                st.st_size == 0)
                unlinkat(dfd, supervisor::kPluginLogName, 0);
            // --live: the view it wrote said "running"; it is not finished.
            if (dfd >= 0 && !run.cfg_.live_session.empty()) live::mark_interrupted(dfd);
            if (dfd >= 0) close(dfd);
        }
        run.summary_.interrupted = true;
        // Which process it is, for the table and for its earlier image (an
        // exec followed by this capture): the worker that knew is gone.
        if (run.summary_.pid == 0) {
            CaptureReader header;
            std::string unread;
            run.identify(header, unread);
        }
        if (!started_before) run.notify_started(run.summary_.error);
        run.started_ = nullptr;
    };
    for (int attempt = 0;; ++attempt) {
        if (supervisor::abandoned()) return stop_abandoned("");
        WorkerEnd end;
        bool forked = run_worker(excluded, notes, [&](int result_fd) {
            if (started_before) run.on_started({});  // Python has its line already
            run.run();
            supervisor::drop_empty_plugin_log();
            return write_all(result_fd, encode(run.summary())) ? 0 : 3;
        }, end);
        if (!forked) {
            if (attempt == 0) {
                run.run();  // no worker possible: unsupervised, as before
                return;
            }
            run.summary_.error = "cannot start a new pipeline worker: " + std::string(strerror(errno));
            run.notify_started(run.summary_.error);
            return;
        }
        int status = end.status;
        ProcessSummary got;
        bool complete = WIFEXITED(status) && WEXITSTATUS(status) == 0 && decode(end.data, got);
        started_before = started_before || end.pipeline_started;
        if (!complete && supervisor::abandoned()) return stop_abandoned(end.output_dir);

        if (complete) {
            got.plugin_errors.insert(got.plugin_errors.begin(), notes.begin(), notes.end());
            for (auto& n : notes) {
                // The rule of ProcessRun (process_run.cpp): a sink that failed
                // lost output; an analyzer that failed was dropped.
                bool sink = false;
                for (auto& sk : run.cfg_.sinks) sink = sink || n.rfind("plugin '" + sk + "'", 0) == 0;
                if (sink) got.incomplete.push_back(n);
                else got.plugin_dropped = true;
            }
            run.summary_ = std::move(got);
            run.started_ = nullptr;
            return;
        }
        const std::string& name = end.plugin;
        std::string how = end.over_budget_s ? over_budget_text(end)
                          : WIFSIGNALED(status)
                              ? crash_text(end)
                              : "ended the pipeline (exit status " +
                                    std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ")";
        if (!can_exclude(end, excluded, attempt)) {
            std::string what = end.over_budget_s       ? over_budget_text(end)
                               : WIFSIGNALED(status) ? crash_text(end)
                                                     : "ended without a summary (status " + std::to_string(status) + ")";
            run.summary_.error = run.named_for_user(end.output_dir) + ": the pipeline " + what +
                                 (name.empty() ? " outside any plugin" : " in plugin '" + name + "'") +
                                 "; the outputs of this process are incomplete";
            if (!end.output_dir.empty()) {
                run.summary_.output_dir = end.output_dir;
                run.summary_.log_file = log_left_by_worker(end.output_dir);
            }
            if (!started_before) run.notify_started(run.summary_.error);
            run.started_ = nullptr;
            return;
        }
        std::string msg = "plugin '" + name + "' " + how + " in " + plugin_call_name(end.call);
        if (end.released) {
            // The read part of the capture was released (--aggregate, or a
            // capture past MSMEMSCOPE_CAPTURE_KEEP_MIB): nothing to re-run from.
            run.summary_.error = run.named_for_user(end.output_dir) + ": " + msg +
                                 "; the outputs cannot be re-run without it because the capture's read part was "
                                 "already released (" + keep_capture_hint(run.cfg_) +
                                 "); the outputs of this process are incomplete";
            if (!end.output_dir.empty()) {
                run.summary_.output_dir = end.output_dir;
                run.summary_.log_file = log_left_by_worker(end.output_dir);
            }
            if (!started_before) run.notify_started(run.summary_.error);
            run.started_ = nullptr;
            return;
        }
        // (a Python API session's user is told in config()'s words: api_words.h;
        // the process named as its worker's lines are: run_processes.h)
        std::cerr << "msmemscope: error: " << (end.pid ? run_processes::named(end.pid, end.rank) : "")
                  << (run.cfg_.serve_session.empty() ? msg : api_words(msg)) << "; re-running the outputs without it\n";
        notes.push_back(msg + "; the outputs were re-run without it");
        excluded.push_back(name);
        // What the crashed worker wrote goes; the next one writes it afresh.
        const std::string& root = run.cfg_.output;
        const std::string& out_dir = end.output_dir;
        if (!out_dir.empty() && out_dir.size() > root.size() && out_dir.compare(0, root.size(), root) == 0) {
            std::error_code ec;
            fs::remove_all(out_dir, ec);
        }
    }
}

int run_call_supervised(const std::function<int()>& body) {
    if (std::getenv("MSMEMSCOPE_NO_SUPERVISOR")) return body();
    std::vector<std::string> excluded, notes;
    for (int attempt = 0;; ++attempt) {
        WorkerEnd end;
        if (!run_worker(excluded, notes, [&](int) { return body(); }, end)) {
            if (attempt == 0) return body();
            std::cerr << "msmemscope: error: cannot start a new analysis worker: " << strerror(errno) << "\n";
            return 70;
        }
        int status = end.status;
        if (WIFEXITED(status)) {
            int rc = WEXITSTATUS(status);
            return rc == 0 && !excluded.empty() ? 71 : rc;
        }
        std::string how = end.over_budget_s ? over_budget_text(end) : crash_text(end);
        if (!can_exclude(end, excluded, attempt)) {
            std::cerr << "msmemscope: error: the analysis " << how
                      << (end.plugin.empty() ? " outside any plugin" : " in plugin '" + end.plugin + "'")
                      << "; its results are incomplete\n";
            return 70;
        }
        std::string msg = "plugin '" + end.plugin + "' " + how + " in " + plugin_call_name(end.call);
        std::cerr << "msmemscope: error: " << msg << "; re-running the analysis without it\n";
        notes.push_back(msg + "; the analysis was re-run without it");
        excluded.push_back(end.plugin);
    }
}

}  // namespace msms
