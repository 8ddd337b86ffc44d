// One status line on stderr while a run goes on (issue #19 item 3): events so
// far, their rate, memory in use per device and pool, and the phase (the
// program running, stacks symbolized, the capture read after the program
// ended, outputs written). Drawn only when stderr is a terminal and --quiet
// was not given; otherwise nothing is written.
//
// The pipelines run in worker processes (supervisor.h): each ProcessRun has a
// slot in a page shared with the main process (mapped before any worker is
// forked), which the worker fills and the main process's printer reads.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <thread>

namespace msms {
namespace progress {

enum class Phase : uint32_t { Idle = 0, Running = 1, Draining = 2, Writing = 3, Done = 4 };

struct Slot {
    static constexpr int kPools = 4;
    std::atomic<uint32_t> in_use{0};
    std::atomic<uint32_t> phase{0};
    std::atomic<uint64_t> events{0};
    std::atomic<uint64_t> stacks{0};  // stacks symbolized so far
    std::atomic<uint32_t> seq{0};     // odd while pools/output_dir are being written
    struct Pool {
        char label[24];
        int64_t used;
    } pools[kPools];
    char output_dir[1024];
};

// Main process, before any run starts: maps the shared page (enabled: draw
// the line at all). Returns whether progress is on.
bool init(bool enabled);
bool enabled();
// A slot for one ProcessRun (nullptr when progress is off or all are taken).
Slot* acquire();
void release(Slot* s);

// Worker side (any process): what the run has done so far.
void set_output_dir(Slot* s, const std::string& dir);
void update(Slot* s, Phase phase, uint64_t events, uint64_t stacks, const std::map<std::string, int64_t>& used);

// The printer: redraws the line every 250 ms from the slots in use; stop()
// clears it (before the summary is printed).
class Printer {
public:
    void start();
    void stop();
    ~Printer() { stop(); }
    // The line for the given state (for tests): rate in events per second.
    static std::string line(uint64_t events, double rate, const std::map<std::string, int64_t>& used,
                            const std::string& phase, size_t width);

private:
    std::thread thread_;
    std::atomic<bool> stop_{false};
};

}  // namespace progress
}  // namespace msms
