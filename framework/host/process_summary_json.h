// summary.json: a small machine-readable summary in each process folder
// (issue #28 item 9) -- pid, rank, command, how the process ended, events,
// peak and final bytes per pool, leaks as the leak analysis reported them,
// the blocks the inefficient analysis marked, steps, the largest allocation sites of that report -- so that runs of
// several nodes can be combined afterwards (`msmemscope --merge`, merge.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <msmemscope/abi.h>

#include "config.h"
#include "process_run.h"

namespace msms {

// Leaked bytes and blocks as the leak analysis reported them (its report's
// lines, exact bytes where they give them): summary.json's "leaks" and the
// run index's "leaked" column. False when the report has none of them.
bool report_leaks(const std::vector<std::string>& report, uint64_t& bytes, uint64_t& blocks);

// Counts the steps of a process as the analyses see them: msmemscope.step()
// / optimizer steps (SYSTEM STEP rows) or mstx "step start" ranges, whichever
// comes first (the other source is then ignored, as the leaks analyzer does).
class StepCounter {
public:
    void feed(const msms_event& ev, const std::string& name) {
        if (ev.kind == MSMS_EV_SYSTEM && ev.type == MSMS_T_STEP) {
            if (source_ != 2) {
                source_ = 1;
                ++steps_;
            }
        } else if (ev.kind == MSMS_EV_MSTX && ev.type == MSMS_T_RANGE_START && source_ != 1 &&
                   (name == "step start" || name == "\"step start\"")) {
            source_ = 2;
            ++steps_;
        }
    }
    uint64_t steps() const { return steps_; }

private:
    int source_ = 0;  // 1: step rows, 2: mstx ranges
    uint64_t steps_ = 0;
};

// Whether the leak analysis's report holds blocks still allocated at exit
// ("Host memory still allocated at exit on device ...", the driver's alike):
// it took the end of the image for an exit.
bool judged_at_exit(const std::vector<std::string>& report);
// How the process ended, in summary.json's words ("ended"."text"), e.g.
// "exited with code 0", "killed by signal 11 (SIGSEGV)".
std::string ended_text(const ProcessSummary& s, const SummaryFacts& f);
// The JSON text (format "msmemscope-process-summary", version 1).
std::string process_summary_json(const ProcessSummary& s, const SummaryFacts& f);
// Writes summary.json, created O_EXCL|O_NOFOLLOW in the folder `dir_fd`
// (issue #29 item 4); "" or why not.
std::string write_process_summary_json_at(int dir_fd, const ProcessSummary& s, const SummaryFacts& f);

}  // namespace msms
