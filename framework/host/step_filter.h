// --steps=1,2,3: collect only the listed steps (COMPAT §1), applied by the
// host to each process's ordered event stream before the pipeline.
//
// Steps, as upstream numbers them for --steps: the k-th mstx range named
// exactly "step start" is step k (events from its Range_start to its
// Range_end). Without such ranges, msmemscope.step() marks the end of a step:
// events before the first call are step 1, between the calls N and N+1 step
// N+1. SYSTEM events (START/STOP_TRACE, STEP, ACL_INIT...) are always kept so
// that the output still shows the boundaries. Upstream turns the leak and
// driver analyses off when --steps is given (the leaks analyzer does too).
// An allocation that failed for lack of memory (OOM_TRIGGER) is kept in any
// step: a run that ran out of memory outside the selected steps must not
// look like one that did not; failures_outside() names where.
//
// Where the dropping starts and stops, the output is told on the rows
// themselves (selection_change()): the sinks draw those spans as they come,
// and a dump copied anywhere still says them to --analyze, without a second
// copy of the numbering rule in each view.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <msmemscope/abi.h>

namespace msms {

class StepFilter {
public:
    explicit StepFilter(std::vector<long long> steps) : steps_(std::move(steps)) {}
    bool active() const { return !steps_.empty(); }
    // "[3, 4]": the selection, as START_TRACE's Attr `steps` writes it.
    std::string list_text() const;
    // True when the event is to be kept; call for every event in time order.
    bool keep(const msms_event& ev, const std::string& name);
    uint64_t current_step() const { return current_; }
    // Whether the events now belong to a selected step (inside its mstx
    // range, when steps are mstx ranges).
    bool in_selected_step() const { return steps_.empty() || (selected() && (!mstx_ || in_range_)); }
    // Where the failures kept outside the selected steps happened: "step 1",
    // or between mstx ranges "after step 2", one per failure.
    const std::vector<std::string>& failures_outside() const { return failures_outside_; }
    uint64_t dropped() const { return dropped_; }
    // Whether the stream had a step boundary (a STEP row or an mstx "step
    // start" range): without one, every event is step 1.
    bool saw_steps() const { return saw_steps_; }
    // The selected steps the stream never reached, in the order given.
    std::vector<long long> unreached() const;
    // Call after keep() kept a SYSTEM or MSTX row (the rows every sink
    // gets): the value of its Attr step_selected when whether the events
    // belong to a selected step differs from what the last such Attr said;
    // nullptr when it does not. "false": the events after this row are
    // dropped; "true": kept from this row on. Before the first row a run
    // counts as collected, as one without --steps is, so a run whose step 1
    // is not selected says "false" on its first such row.
    const char* selection_change();

private:
    bool selected() const;
    std::vector<long long> steps_;
    bool mstx_ = false, in_range_ = false;
    uint64_t current_ = 1;       // step() numbering until an mstx range is seen
    uint64_t mstx_count_ = 0, range_id_ = 0;
    uint64_t dropped_ = 0;
    bool saw_steps_ = false;
    bool said_selected_ = true;  // what the last Attr step_selected said
    std::vector<std::string> failures_outside_;
};

}  // namespace msms
