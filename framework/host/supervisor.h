// A plugin can crash without costing the run (DESIGN §8). The supervisor runs
// a ProcessRun -- capture reading, the pipeline, every analyzer and sink --
// in a child process (a "worker"). The worker notes in a shared page which
// plugin and which callback it is in. When the worker dies of a signal in a
// plugin, the host names it ("plugin 'x' crashed (SIGSEGV) in on_event;
// re-running the outputs without it"), removes what the worker wrote and runs
// the capture again in a new worker without that plugin: the capture file is
// complete (or still being written, and read live again), so every other
// output ends complete. The worker hands its ProcessSummary back through a
// pipe.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace msms {

class ProcessRun;

// The callback a worker is in, for the crash message.
enum class PluginCall : uint32_t { None = 0, Create, Begin, OnEvent, OnAnnotation, OnFinding, Finish, Destroy };
const char* plugin_call_name(PluginCall c);

namespace supervisor {

// The page a worker shares with its supervisor. Set in the worker only.
struct WorkerPage;
extern WorkerPage* g_page;
// Threads that call plugins, each a lane of the page: the pipeline's thread
// is lane 0, the sinks' threads (sink_lanes.h) lanes 1 and up.
constexpr unsigned kLanes = 8;
// This thread's lane: (slot << 32 | call) of the plugin call in progress, 0
// outside plugins; null in a thread that has no lane (or outside a worker).
extern thread_local std::atomic<uint64_t>* t_current;
// This thread's plugin calls begun so far: the supervisor's watchdog sees a
// call that does not end as `current` set and this count standing still.
extern thread_local std::atomic<uint64_t>* t_calls;
// Makes the calling thread lane `lane` of the worker's page (no-op outside a
// worker; a lane past kLanes is not watched). A thread that faults (SIGSEGV,
// SIGBUS, SIGILL, SIGFPE, SIGABRT) names its lane to the supervisor, so the
// plugin call of that thread is the one reported.
void enter_lane(unsigned lane);

// How long one plugin call may take before its worker is killed and the
// plugin treated as crashed (--plugin-time-budget): finish() has its own.
struct TimeBudget {
    unsigned call_s = 60;
    unsigned finish_s = 600;
};
void set_time_budget(TimeBudget b);
TimeBudget time_budget();

// In a worker: true when the supervisor left this plugin out (it crashed in
// an earlier attempt). Always false outside a worker.
bool excluded(const std::string& name);
// Messages about plugins left out, for the run's log and summary.
const std::vector<std::string>& exclusion_notes();
// Why the plugin was left out, from its note: "crashed (SIGSEGV) in on_event"
// (empty when it was not).
std::string exclusion_reason(const std::string& name);
// Gives an instance a slot number for the crash report (0 outside a worker).
uint32_t register_plugin(const std::string& name);
// The worker reads pid's capture, whose rank is rank ("" for none) now: the
// supervisor's line after a crash names them once the console names
// processes (run_processes.h).
void name_process(uint32_t pid, const std::string& rank);
// The worker writes into output_dir (called before any plugin runs): a
// re-run removes that folder first.
void writing_into(const std::string& output_dir);
// The worker's pipeline has started (plugins created and begun).
void pipeline_started();
// The worker released read parts of the capture (CaptureReader::
// enable_release): a crash from now on cannot be re-run from the capture.
void capture_released();

// Marks the plugin call in progress for as long as it lives (nests: an
// analyzer's annotate() calls the sinks).
class CallScope {
public:
    CallScope(uint32_t slot, PluginCall call) {
        if (t_current) {
            prev_ = t_current->load(std::memory_order_relaxed);
            t_current->store((static_cast<uint64_t>(slot) << 32) | static_cast<uint32_t>(call),
                             std::memory_order_relaxed);
            // one writer per lane (its thread): no locked increment needed
            t_calls->store(t_calls->load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        }
    }
    ~CallScope() {
        if (t_current) t_current->store(prev_, std::memory_order_relaxed);
    }
    CallScope(const CallScope&) = delete;
    CallScope& operator=(const CallScope&) = delete;

private:
    uint64_t prev_ = 0;
};

// Plugin output (issue #29 item 7): in a worker, fd 1 and 2 -- where a
// plugin's printf, std::cout, fprintf(stderr) and write(2) go -- are moved to
// <dir>/msmemscope_plugins.log (created O_EXCL|O_NOFOLLOW in the process
// folder, which the worker made), so that plugins never write into the
// program's stdout/stderr. The host's own messages in the worker go through
// host_stderr(), to the stream the tool was started with. Returns an error
// text (nothing moved) or "". Outside a worker (MSMEMSCOPE_NO_SUPERVISOR)
// nothing is moved: the host's threads share fd 1 and 2.
std::string redirect_plugin_output(const std::string& dir, int dir_fd = -1);
// The name of that file in the process folder.
constexpr const char* kPluginLogName = "msmemscope_plugins.log";
// Writes one message of the host's to its own stderr (one write).
void host_stderr(const std::string& text);
// At the worker's end: the plugin log goes when no plugin wrote into it.
void drop_empty_plugin_log();

// The session reaped one of our workers with waitpid(-1): hand its status to
// the supervisor waiting for it. Returns false when pid is not a worker.
bool reaped(pid_t pid, int status);
// pid is one of our pipeline workers (started and not yet reaped), whatever
// state it is in (one being killed has no command line or executable left).
bool is_worker(pid_t pid);

// The tool was told to stop once the program had ended (SIGINT, SIGTERM or
// SIGHUP, session.cpp): every worker is killed, no new one starts, and each
// process's outputs not finished are reported incomplete (exit 70). Safe in a
// signal handler.
void abandon(int sig) noexcept;
// The signal abandon() was called with; 0 when it was not.
int abandoned() noexcept;

}  // namespace supervisor

// Runs run.run() in a worker process, re-running it without each plugin that
// crashes; afterwards run.summary() is the last worker's summary plus one
// plugin error per crash. Falls back to running in this process when no
// worker can be started (or MSMEMSCOPE_NO_SUPERVISOR is set).
void run_supervised(ProcessRun& run);

// The same supervision for work that is not a ProcessRun (offline --analyze):
// runs body() in a worker whose exit code is returned; when the worker dies
// of a signal in a plugin, names it on stderr and runs body() again without
// that plugin. Returns 71 when a plugin was left out and body() returned 0;
// 70 when the worker died outside any plugin. Runs body() in this process
// when no worker can be started (or MSMEMSCOPE_NO_SUPERVISOR is set).
int run_call_supervised(const std::function<int()>& body);

}  // namespace msms
