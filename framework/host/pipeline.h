// One process's pipeline: pool accounting (allocation ids, running totals),
// then every analyzer, then every sink, in timestamp order, with IDs that
// increase with time. Also the host API that plugins call back into.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <msmemscope/abi.h>

#include "config.h"
#include "pool_key.h"
#include "record.h"
#include "util/addr_map.h"
#include "registry.h"

namespace spdlog {
class logger;
}

namespace msms {

namespace live {
class LiveState;
}
class SinkLanes;
struct SinkItem;

struct RunContext {
    uint32_t pid = 0;
    std::string output_dir;   // this process's folder
    int output_dir_fd = -1;   // its descriptor (opened without following links; ProcessRun owns it)
    std::string timestamp;    // YYYYmmddHHMMSS
    std::string config_json;
    std::string command_line;
    std::shared_ptr<spdlog::logger> log;  // may be null
};

class Pipeline {
public:
    Pipeline(const Config& cfg, const Registry& registry);
    ~Pipeline();
    Pipeline(const Pipeline&) = delete;
    Pipeline& operator=(const Pipeline&) = delete;

    // Creates the analyzers and sinks of the config (a plugin that fails to
    // create is reported and left out) and begins them, sinks first.
    void start(const RunContext& run);
    // One event, in timestamp order.
    void feed(Record& r);
    // Ends the stream: analyzers finish (they may still emit), then sinks.
    void finish();
    // Before finish(): the image was replaced by exec (or ended by _exit
    // after fork), every live block is released (to the analyzers too, so
    // none is a leak; Attr image_ended:true, so that decompose keeps them as
    // live when the image ended).
    void release_all_by_exec();

    struct DeviceTotals {
        int64_t used = 0, peak = 0;
        // The imports' heap (framework/agent/import_fold.h): its MALLOC
        // rows, and the most blocks and bytes one of them stood for.
        uint64_t import_rows = 0, import_blocks = 0, import_bytes = 0;
    };
    uint64_t events() const { return events_; }
    // Of them, the START_TRACE and STOP_TRACE rows (each agent's own start
    // row, the Python API's start()/stop()): a profile of nothing else
    // recorded nothing.
    uint64_t trace_marks() const { return trace_marks_; }
    const std::map<std::string, DeviceTotals>& device_totals() const { return device_totals_; }
    const std::vector<std::string>& report_lines() const { return report_; }
    const std::vector<std::string>& plugin_errors() const { return plugin_errors_; }
    // Every plugin of this run that failed or was left out, in the order
    // they failed, those failing in a sink's finish() included: what the
    // host's own files written after the sinks (summary.json) name.
    struct Failure {
        std::string plugin, kind, what;
    };
    std::vector<Failure> failures() const;
    // The end of a sink's failure message when it failed in its finish():
    // what it wrote cannot name its own failure (the console and the log do).
    static constexpr const char* kOwnOutputIncomplete = "; its output is incomplete and does not say so";
    // Errors plugins reported through the host API (host.error, log level 2):
    // one line per plugin, its first message and how many more (the run's
    // output is not what the plugin meant to write: the CLI exits with 70).
    std::vector<std::string> reported_errors() const;
    uint64_t last_timestamp() const { return last_ts_; }
    // Disable pool accounting (input already carries allocation ids and totals).
    void set_accounting(bool on) { accounting_ = on; }
    // A plugin out of memory (MSMS_ERR_OUT_OF_MEMORY) ends the pipeline with
    // std::bad_alloc out of start/feed/finish, once the plugin's call has
    // returned, instead of dropping it (offline: the host is out of memory
    // too, and says so in one line).
    void set_out_of_memory_fatal(bool on) { oom_fatal_ = on; }

    // Plugin progress (ABI 1.2 host API `progress`): each report of a
    // plugin, and `ended` once its finish() has returned (the status line
    // forgets it then). Called on the pipeline's thread.
    struct Progress {
        std::string plugin;  // type name
        std::string what;    // the plugin's phrase; "" = "writing <plugin>"
        uint64_t done = 0, total = 0;
        uint32_t unit = MSMS_PROGRESS_BYTES;
        bool estimate = false;
        bool ended = false;
    };
    void on_progress(std::function<void(const Progress&)> f) { progress_ = std::move(f); }
    // --live / --live-http (live/live_state.h): the view is kept from every
    // event after accounting, the findings and the plugins' log lines, until
    // the analyzers have finished (not the end's shadow FREEs).
    void set_live(live::LiveState* l) { live_view_ = l; }
    // Whether a block is live at ptr in the pool, as the pipeline counts it
    // (virt: the pool of mappings, collector Attr virtual:true): --steps asks
    // about the blocks the events it drops free (step_gap.h).
    bool holds_block(uint16_t dev_kind, int16_t dev_id, uint16_t type, bool virt, uint64_t ptr) const;
    // A run of several processes (a DataLoader's workers) heard each
    // plugin's warnings about its setup once per process. With this on, the
    // plugins' warnings said before events flow (in create and begin: the
    // same words in every process) reach the console at once from the first
    // process of the run to say them (said_once.h), and only the log from
    // the others; setup_warnings() hands them to the session, which names at
    // the end the processes that said each text. The warnings of the end
    // (said from finish() on: what this process's events held, counts,
    // operators that never ran in it) are said so too, a text that several
    // processes say alike once (a DataLoader's 4 workers and their trainer
    // said the same line 5 times), named as the console names processes
    // (run_processes.h): it may be this process's alone. Warnings about the
    // events before the end stay said as found.
    void set_group_setup_warnings(bool on) { group_setup_warnings_ = on; }
    // The rank the console names with the pid in a warning about the events
    // once the console names processes (run_processes.h): the
    // environment's from the start, a late one (process_rank.h) once
    // torch.distributed has said it. "" for none.
    void set_rank(const std::string& rank);
    std::vector<std::string> setup_warnings() const;
    // Each sink on a thread of its own (sink_lanes.h; on unless set off
    // before start()). Off: every sink is called on the pipeline's thread.
    void set_sink_threads(bool on) { sink_threads_ = on; }
    // The pipeline's thread waits for more events: what the sinks' threads
    // were not handed yet goes to them now.
    void idle();
    // The sinks' threads end now, dropping what they were not handed yet
    // (the pipeline's owner calls it before the stack texts it lent go:
    // an exception out of feed()); finish() ends them normally.
    void stop_sinks();
    // After finish(): the sinks' threads end and every plugin instance is
    // destroyed; no plugin code runs after it (nor at ~Pipeline), so that
    // its owner may rename the process folder (ProcessRun: a rank learned
    // late). The totals, report lines and errors stay.
    void destroy_plugins();

private:
    struct Instance {
        std::string name;
        const msms_plugin_descriptor* d = nullptr;
        void* obj = nullptr;
        bool alive = true;
        uint32_t slot = 0;  // supervisor's number of this instance (crash reports)
        std::shared_ptr<void> keep_library;
    };
    struct LiveBlock {
        uint64_t allocation_id;
        uint64_t size;
    };
    using PoolKey = msms::PoolKey;  // pool_key.h

    // false: a FREE of a block never seen allocated (not written; shadow.h)
    bool account(Record& r);
    // The name a collector gave its own pool type (abi.h msms_is_custom_pool).
    void note_custom_pool(uint16_t type, const std::vector<std::pair<std::string, std::string>>& attrs);
    // first_consumer: 0 = analyzers and sinks, SIZE_MAX = the sinks only;
    // image_ended: the frees say the image ended with the blocks (shadow.h).
    void shadow_frees_at_end(size_t first_consumer = SIZE_MAX, bool image_ended = false);
    // An unseen free may then be of a block made while collection was off.
    bool collection_was_off() const;
    uint64_t framework_block_at(uint16_t dev_kind, int16_t dev_id, uint64_t ptr) const;
    // To the analyzers [first_analyzer, end_analyzer), then (to_sinks) every sink.
    void dispatch(Record& r, size_t first_analyzer, size_t end_analyzer = SIZE_MAX, bool to_sinks = true);
    void build_views(Record& r);
    // rc: the plugin's status (MSMS_ERR_OUT_OF_MEMORY: see set_out_of_memory_fatal);
    // in_finish: a sink failed in its finish(), past the point where it could
    // be told of failures, so its own output is incomplete without saying so.
    void plugin_failed(Instance& inst, const std::string& what, int rc, bool sink_in_finish = false);
    // A sink's finish() returned an error.
    void sink_finish_failed(Instance& s, const msms_error& err, int rc);
    void throw_if_out_of_memory();
    // "what: <the plugin's message>" (ABI 1.1 last_error), or just what.
    std::string with_reason(const Instance& inst, const std::string& what) const;
    // said_for_the_run: a setup warning said once for all the processes
    // (said_once.h), which names no process.
    void log(int level, const std::string& msg, bool said_for_the_run = false);
    // "[pid 4242, rank 1] " before a warning or an error on the console
    // once the console names processes (run_processes.h); "" before that.
    // Notes that this process has a line to say.
    std::string process_named() const;
    // On sink i's thread: one item, and its finish().
    void sink_item(size_t i, const SinkItem& it);
    void sink_finish(size_t i);

    // Each plugin instance gets its own host API struct, so that a callback
    // knows which plugin called (progress is per plugin).
    struct HostApi {
        msms_host_api api{};
        Pipeline* pipeline = nullptr;
        std::string plugin;
    };
    static Pipeline* of(void* h) { return static_cast<HostApi*>(h)->pipeline; }

    // host API trampolines
    static int api_progress(void* h, const msms_progress* p);
    static void api_log(void* h, int level, msms_str m);
    static int api_add_attr(void* h, msms_str k, msms_str v);
    static void apply_added(Record& r);  // an analyzer's add_attr entries, once its on_event returned
    static int api_annotate(void* h, uint64_t id, msms_str k, msms_str v);
    static int api_emit(void* h, const msms_event* ev);
    static int api_add_finding(void* h, msms_str table, const msms_kv* cols, uint32_t n);
    void finding_to_sinks(msms_str table, const msms_kv* cols, uint32_t n);
    static void api_report(void* h, msms_str line);

    const Config& cfg_;
    const Registry& registry_;
    RunContext run_;
    std::vector<std::unique_ptr<HostApi>> apis_;  // stable addresses: plugins keep them
    std::function<void(const Progress&)> progress_;
    live::LiveState* live_view_ = nullptr;
    std::vector<Instance> analyzers_, sinks_;
    bool sink_threads_ = true;
    bool lone_sink_thread_ = false;  // MSMEMSCOPE_SINK_THREADS=1
    int host_cpus_ = 1;              // CPUs the host may run on
    std::unique_ptr<SinkLanes> lanes_;
    // What the sinks' threads share with the pipeline's: plugin errors, the
    // log's error counts, progress, report lines.
    mutable std::mutex api_mu_;
    mutable std::mutex rank_mu_;  // rank_: set by the run's thread, read by the sinks' threads
    std::string rank_;
    std::vector<std::vector<std::string>> sink_reports_;  // per sink, in the report after the analyzers' in sink order
    // Plugins of this run that failed, or that the supervisor left out after
    // they crashed in an earlier pass: told to the sinks at the end
    // (tell_sinks_of_failures), so that a view does not present a stopped
    // analysis's results as whole; told to the live view as they happen.
    static constexpr std::string_view kFailureTable = "plugin_failure";
    std::vector<Failure> failures_;
    void tell_sinks_of_failures();
    // Failures that came after tell_sinks_of_failures (a sink failing on its
    // own thread, or in its finish()): sink i hears of them just before its
    // own finish(), so a sink finishing after another one failed still names
    // it. failures_told_[i]: how many of failures_ sink i was told of.
    std::vector<size_t> failures_told_;
    void tell_sink_of_later_failures(size_t i);
    void failure_to_sink(Instance& s, const Failure& f);
    // The live view hears of failures on the pipeline's thread (it is not
    // thread-safe), at the next event or wait: live_told_ of failures_ so far.
    std::atomic<size_t> failure_count_{0};
    size_t live_told_ = 0;
    void tell_live_of_failures();
    bool group_setup_warnings_ = false;
    std::atomic<bool> events_flowing_{false};  // from the end of start() on (finish() included)
    std::atomic<bool> finishing_{false};       // from the start of finish() on
    std::vector<std::string> setup_warnings_;  // in the order said, each text once
    bool accounting_ = true;
    bool oom_fatal_ = false;
    std::atomic<bool> oom_pending_{false};
    size_t oom_analyzer_ = SIZE_MAX;  // live runs: the oom analyzer, which writes OOM_TRIGGER rows
    bool finished_ = false;

    // current event (for add_attr)
    Record* current_ = nullptr;
    std::vector<msms_kv> kv_;
    struct AttrSpan {
        size_t key_off, key_len, value_off, value_len;
    };
    std::string attr_text_;
    std::vector<AttrSpan> attr_spans_;
    size_t current_analyzer_ = 0;
    std::deque<std::pair<Record, size_t>> emitted_;  // event, first analyzer to see it
    std::vector<Record> shadow_before_;  // shadow FREEs due before the current event
    uint64_t unseen_frees_ = 0;
    // Those of device pools ("0/HAL": a driver block made before the hooks
    // went in, e.g. before the first msmemscope.start() without the CLI),
    // said in a warning at the end: the device's figures leave them out.
    std::map<std::string, uint64_t> unseen_device_frees_;
    // A STOP_TRACE came (collection_was_off() says the rest), and the pools
    // with an unseen free after collection was off for a while: their blocks
    // may have been made while it was off and not remembered
    // (shadow_frees_at_end).
    bool collection_was_off_ = false;
    std::set<std::string> unseen_after_off_;

    uint64_t next_id_ = 0;
    uint64_t next_alloc_id_ = 0;
    uint64_t events_ = 0;
    uint64_t trace_marks_ = 0;
    uint64_t last_ts_ = 0;
    std::map<PoolKey, AddrMap<LiveBlock>> live_;
    // Live framework-pool blocks per device by start address (ACCESS -> allocation_id).
    std::map<std::pair<uint16_t, int16_t>, std::map<uint64_t, LiveBlock>> by_addr_;
    std::map<PoolKey, int64_t> pool_used_;
    std::map<std::pair<uint16_t, int16_t>, int64_t> device_used_;
    int64_t process_used_ = 0;
    std::map<std::string, DeviceTotals> device_totals_;
    // Each byte once (DESIGN §8): host heap blocks whose memory a framework
    // block took (same address; PyTorch's CPU tensors), per device, and
    // their bytes, left out of the console's HOST figures.
    std::map<std::pair<uint16_t, int16_t>, AddrMap<uint64_t>> host_taken_;
    std::map<std::pair<uint16_t, int16_t>, int64_t> host_taken_bytes_;
    DeviceTotals* host_peak_pending_ = nullptr;  // HOST totals whose peak waits for the next event
    uint64_t host_peak_pending_ptr_ = 0;          // the address of the host block that made it wait
    // The maps' entries of the pool the last event was in (found again only
    // when the pool changes: a label built and six lookups per event were a
    // tenth of the host's time on a heap-heavy run). Entries of std::map
    // never move; live_.clear() drops the cache.
    struct PoolSlot {
        PoolKey key{};
        bool valid = false;
        AddrMap<LiveBlock>* live = nullptr;
        int64_t* used = nullptr;
        int64_t* device_used = nullptr;
        AddrMap<uint64_t>* taken = nullptr;
        int64_t* taken_bytes = nullptr;
        DeviceTotals* totals = nullptr;
    };
    PoolSlot slot_;
    PoolSlot& pool_slot(const PoolKey& key, const msms_event& ev);
    void host_totals(const msms_event& ev, const PoolSlot& s, int64_t used);
    std::vector<std::string> report_;
    std::vector<std::string> plugin_errors_;
    struct Reported {
        std::string plugin, first;
        uint64_t count = 0;
    };
    std::vector<Reported> reported_;  // in the order plugins first reported
};

bool is_driver_pool(uint16_t type);

}  // namespace msms
