// The live view's state (issue #31 items 3-4): kept by the host's pipeline
// in the worker that runs it (pipeline.h set_live), from the events after
// pool accounting, the analyzers' findings and the leak analysis's step
// warnings, and the pipeline's own pool totals (the console's figures).
// Every second ProcessRun writes snapshot() as live.json and screen() as
// live.txt into the process folder (temporary file + rename through the
// folder's descriptor); the CLI's main process shows them (live_view.h).
// The program never waits for any of it: this runs in the host's worker.
//
// State is bounded: live blocks (as the pipeline's), distinct sites, the
// last kSteps step ends, the last kWarnings step warnings, kLeakRows leak
// findings.
#pragma once

#include <msmemscope/abi.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace msms {
namespace live {

// A pool's figures as the pipeline keeps them ("cpu/HOST" -> used, peak).
struct PoolFigures {
    int64_t used = 0, peak = 0;
};
using Totals = std::map<std::string, PoolFigures>;

struct StepEnd {
    uint64_t step = 0;
    int64_t live = 0;    // bytes live in every pool at the step's end
    int64_t growth = 0;  // against the step end before it (0 for the first)
};

struct SiteRow {
    std::string site;      // C frame outside the allocator, else the top Python frame, else "(no stack) POOL"
    std::string python;    // the innermost Python line of the block's stack ("" if none)
    std::string op;        // the operator running when it was allocated ("" if none)
    std::string device;    // "cpu/HOST"
    int64_t live_bytes = 0;
    uint64_t live_blocks = 0;
};

class LiveState {
public:
    static constexpr size_t kSteps = 10;
    static constexpr size_t kTopSites = 10;
    static constexpr size_t kWarnings = 10;
    static constexpr size_t kLeakRows = 10;

    // totals: the pipeline's pool figures now (called at step ends and snapshots).
    LiveState(std::string session, uint32_t pid, std::string command, std::function<Totals()> totals);

    void on_event(const msms_event& ev);
    void on_finding(std::string_view table, const msms_kv* cols, uint32_t n);
    // A plugin's log line: the leak analysis's step warnings are its suspects
    // as it finds them.
    void on_log(const std::string& plugin, int level, const std::string& msg);
    // A plugin failed (or was left out) while the program runs: its figures
    // stop changing, and the view says why, in the HTML report's words
    // (failure_banner). Kept in the order they came.
    void on_plugin_failure(const std::string& plugin, const std::string& kind, const std::string& what);
    // The leak analysis does not run in this session, and why ("--analysis
    // does not list leaks"): the view says so instead of "none found".
    void set_leaks_off(std::string why) { leaks_off_ = std::move(why); }
    // How the program ended, in summary.json's words ("exited with code 0",
    // "killed by signal 11 (SIGSEGV)"), for the last screen.
    void set_ended(std::string how) { ended_ = std::move(how); }

    // live.json: one process's view.
    std::string snapshot(uint64_t wall_ns, bool finished) const;
    // live.txt: the same as a terminal screen (at most ~40 lines).
    std::string screen(uint64_t wall_ns, bool finished) const;

    std::vector<SiteRow> top_sites(size_t n = kTopSites) const;
    const std::deque<StepEnd>& steps() const { return steps_; }
    uint64_t current_step() const { return step_; }

private:
    struct Site {
        std::string site, python, op, device;
        int64_t live_bytes = 0;
        uint64_t live_blocks = 0;
    };
    struct Block {
        uint64_t size;
        uint32_t site;
        bool taken = false;
        uint32_t blocks = 1;  // the blocks it stands for (the imports' heap: its Attr blocks)  // a HOST block whose memory a framework block took: counted there (each byte once)
    };
    void step_ended(uint64_t step);
    uint32_t site_of(const msms_event& ev);
    uint32_t site_by_text(const msms_event& ev, const std::string& op);
    int64_t all_live() const;

    std::string session_, command_;
    uint32_t pid_;
    std::function<Totals()> totals_;
    uint64_t events_ = 0;
    // steps (analyzers/common StepTracker's rule: SYSTEM STEP, or mstx "step start" ranges)
    enum class StepSource { None, Python, Mstx } step_source_ = StepSource::None;
    uint64_t step_ = 0, mstx_count_ = 0, range_id_ = 0;
    bool in_range_ = false;
    std::deque<StepEnd> steps_;
    bool have_prev_ = false;
    int64_t prev_live_ = 0;
    // sites and live blocks (by allocation id)
    std::vector<Site> sites_;
    std::unordered_map<std::string, uint32_t> site_index_;
    // (stack ids, pool, device, operator) -> site: the stack texts are
    // parsed once per distinct stack, not per event
    struct FastKey {
        uint64_t c, py;
        uint64_t where;  // type | device kind << 16 | device id << 32 | op << 48 (op index, bounded)
        bool operator==(const FastKey& o) const { return c == o.c && py == o.py && where == o.where; }
    };
    struct FastHash {
        size_t operator()(const FastKey& k) const { return k.c * 1000003u ^ k.py * 9176u ^ k.where; }
    };
    std::unordered_map<FastKey, uint32_t, FastHash> fast_;
    std::unordered_map<std::string, uint32_t> op_ids_;
    std::unordered_map<uint64_t, Block> blocks_;
    std::unordered_map<uint64_t, uint64_t> host_at_;  // live HOST blocks: hash(device, ptr) -> allocation id
    std::unordered_map<uint64_t, std::vector<std::string>> open_ops_;  // (pid<<32|tid) -> operators
    // leak suspects
    std::deque<std::string> warnings_;
    uint64_t warnings_total_ = 0;
    // The leak analysis's findings grouped as its report groups them: by
    // kind, device, pool and site (the operator and the program's Python line
    // when the finding names them, else its site or first stack frame), bytes
    // and blocks summed; the kLeakRows largest are shown. At most kLeakGroups
    // groups are kept; findings past them count in the totals only.
    struct LeakRow {
        std::string kind, device, pool, where, op;
        uint64_t size = 0, count = 0;
    };
    static constexpr size_t kLeakGroups = 4096;
    std::vector<LeakRow> leak_rows_;
    std::unordered_map<std::string, size_t> leak_row_index_;
    uint64_t leak_unlisted_blocks_ = 0, leak_unlisted_bytes_ = 0;
    std::vector<const LeakRow*> largest_leak_rows() const;
    uint64_t leak_findings_ = 0, leak_bytes_ = 0, leak_blocks_ = 0;
    bool leaks_done_ = false;
    struct PluginFailure {
        std::string plugin, kind, what;
    };
    std::vector<PluginFailure> failures_;
    std::string leaks_off_;
    std::string ended_;
};

// "Plugin 'x' (analyzer) failed: WHAT. This page is without what it would
// have added." -- the HTML report's banner (plugins/sinks/html), word for
// word, so the live view and the report name a failure alike.
std::string failure_banner(const std::string& plugin, const std::string& kind, const std::string& what);

// Writes text as dir_fd/name through a temporary file and a rename (the
// temporary O_EXCL|O_NOFOLLOW, 0600); "" or why not.
std::string write_atomic(int dir_fd, const char* name, const std::string& text);
// A regular file of the folder dir_fd, never through a link, at most 16 MiB;
// false when absent or not such a file.
bool read_file_in(int dir_fd, const char* name, std::string& out);

// msmemscope was interrupted (Ctrl-C) while the worker that writes live.json
// and live.txt still ran, and the worker is gone: they said "running" for
// good. Rewrites them, when they do, to say the view is not finished:
// "interrupted": true in live.json, "[not finished: msmemscope was
// interrupted]" on live.txt's first line. Called by the CLI's supervisor.
void mark_interrupted(int dir_fd);

// "1.5 MiB" as the console's summary writes bytes.

}  // namespace live
}  // namespace msms
