// One status line on stderr while a run goes on (issue #19 item 3): events so
// far, their rate, memory in use per device and pool, and the phases: the
// program running, its capture read after it ended (how much of it), stacks
// symbolized (done / total), and what each plugin that reports progress
// (plugin ABI 1.2, msms_host_api.progress) is doing: "writing csv 1.2 GiB /
// 2.4 GiB". Drawn only when stderr is a terminal and --quiet was not given;
// otherwise nothing is written.
//
// The pipelines run in worker processes (supervisor.h): each ProcessRun has a
// slot in a page shared with the main process (mapped before any worker is
// forked), which the worker fills and the main process's printer reads.
//
// MSMEMSCOPE_PROGRESS_SYNC=1 (for tests): every state a worker reports is
// drawn before the worker goes on (it waits for the printer, at most 2 s),
// and the line starts at once instead of after a second; so a test sees each
// step of every phase, whatever the machine's speed.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace msms {
namespace progress {

enum class Phase : uint32_t { Idle = 0, Running = 1, Draining = 2, Writing = 3, Done = 4 };

struct Slot {
    static constexpr int kPools = 4;
    static constexpr int kTasks = 8;
    std::atomic<uint32_t> in_use{0};
    std::atomic<uint32_t> phase{0};
    std::atomic<uint32_t> seq{0};     // odd while the fields below are being written
    std::atomic<uint64_t> posted{0};  // sync mode: states reported ...
    std::atomic<uint64_t> drawn{0};   // ... and drawn
    uint64_t events;
    uint64_t stacks;        // stacks symbolized so far
    uint64_t stacks_total;  // stacks the program defined so far; 0 = not known
    uint64_t chunks_read, chunks_total;  // the capture read so far
    struct Pool {
        char label[24];
        int64_t used;
    } pools[kPools];
    // A plugin's own work (ABI 1.2 progress); plugin[0] == 0: a free entry.
    struct Task {
        char plugin[64];
        char what[72];
        uint64_t done, total;
        uint32_t unit;  // MSMS_PROGRESS_BYTES / _ITEMS
        uint32_t estimate;
    } tasks[kTasks];
    char output_dir[1024];
};

// What a run has done so far (worker side).
struct State {
    Phase phase = Phase::Idle;
    uint64_t events = 0;
    uint64_t stacks = 0, stacks_total = 0;
    uint64_t chunks_read = 0, chunks_total = 0;
    std::map<std::string, int64_t> used;  // live bytes per "device/POOL"
};

// A plugin's report (Pipeline::Progress, without the pipeline's types).
struct TaskReport {
    std::string plugin, what;
    uint64_t done = 0, total = 0;
    uint32_t unit = 0;  // MSMS_PROGRESS_BYTES / _ITEMS
    bool estimate = false;
};

// Main process, before any run starts: maps the shared page (enabled: draw
// the line at all). Returns whether progress is on.
bool init(bool enabled);
bool enabled();
// A slot for one ProcessRun (nullptr when progress is off or all are taken).
Slot* acquire();
void release(Slot* s);

// Worker side (any process). A run (or its re-run after a plugin crashed)
// starts: its folder, and no plugin's work from an earlier attempt.
void start_run(Slot* s, const std::string& output_dir);
void update(Slot* s, const State& state);
// A plugin's report replaces its previous one; task_ended forgets it.
void task(Slot* s, const TaskReport& t);
void task_ended(Slot* s, const std::string& plugin);

// One process's view, as the printer reads it from a slot.
struct View {
    Phase phase = Phase::Idle;
    State state;
    std::vector<TaskReport> tasks;
    std::string output_dir;
};

// The printer: redraws the line every 250 ms (sync mode: on every change)
// from the slots in use; stop() clears it (before the summary is printed).
class Printer {
public:
    void start();
    void stop();
    ~Printer() { stop(); }
    // The line for the given processes (for tests): rate in events per
    // second; out_bytes: bytes in the output folders (shown while writing
    // when no plugin reports its own progress).
    static std::string line(const std::vector<View>& runs, double rate, uint64_t out_bytes, size_t width);

private:
    std::thread thread_;
    std::atomic<bool> stop_{false};
};

}  // namespace progress
}  // namespace msms
