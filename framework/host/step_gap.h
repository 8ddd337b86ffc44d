// --steps drops the events of the steps not selected (step_filter.h), so the
// pipeline would not know the blocks made before a selected step (weights,
// optimizer state, a tensor kept across steps) nor the frees of its own
// blocks that happened in between: its pools' figures would count only the
// blocks allocated within the selected steps. StepGap remembers what the
// dropped memory events did to the pipeline's picture and, when a selected
// step starts, hands the shadow rows (shadow.h) that make it true again:
//  * a FREE with Attr shadow:true for each block the pipeline holds live
//    that was freed (or whose address was allocated again) unseen;
//  * a MALLOC with Attr shadow:true, no stacks, for each block allocated
//    unseen and still live, with the extras its MALLOC carried and Attr
//    allocated_at, the time its MALLOC happened (the analyses tell its step
//    from that by their own numbering: the STEP rows are all kept). A block
//    whose MALLOC was itself a shadow of the agent's (there when collection
//    started: time not known) has none.
// The FREEs come first (an address freed and allocated again in between is
// the old block's FREE, then the new one's MALLOC), each group in the order
// its events happened, so allocation_ids grow with the MALLOCs' order as
// everywhere else (the agent's emit_shadow_mallocs does the same for a
// stop()/start() gap). The host does this bookkeeping: the agent's hot path
// is unchanged.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pool_key.h"
#include "record.h"

namespace msms {

class StepGap {
public:
    // The pipeline's answer: whether it holds a live block at ptr in the
    // pool (a mapping's pool when virt: collector Attr virtual:true).
    using Holds = std::function<bool(uint16_t dev_kind, int16_t dev_id, uint16_t type, bool virt, uint64_t ptr)>;
    explicit StepGap(Holds holds) : holds_(std::move(holds)) {}

    // An event the filter dropped (only MALLOC and FREE matter).
    void dropped(const Record& r);
    // Whether the pipeline's picture differs from the program's.
    bool pending() const { return !freed_.empty() || !made_.empty(); }
    // The shadow rows that make it true again at time ts, FREEs then
    // MALLOCs; afterwards nothing is pending.
    std::vector<Record> catch_up(uint64_t ts, uint32_t pid);

private:
    using Pool = PoolKey;  // pool_key.h
    struct Made {  // a block allocated in a dropped step, still live
        uint64_t size;
        uint64_t order;   // when its MALLOC came among the dropped events
        uint32_t extras;  // index into extras_ (0: none)
        uint64_t at;      // when it was allocated (its MALLOC's time; 0: not known)
    };
    void dropped_malloc(const Record& r);
    void dropped_free(const Record& r);
    // The pipeline's block at (pool, ptr) was released unseen: its FREE is due.
    void pipeline_block_gone(const Pool& pool, uint64_t ptr);
    // The MALLOC's collector extras (owner, virtual...), each distinct list
    // kept once: the same few lists repeat over thousands of blocks.
    uint32_t extras_of(const Record& r);

    Holds holds_;
    uint64_t order_ = 0;
    std::map<Pool, std::unordered_map<uint64_t, Made>> made_;
    // The pipeline's blocks freed unseen, by pool and address -> order.
    std::map<std::pair<Pool, uint64_t>, uint64_t> freed_;
    std::vector<std::vector<std::pair<std::string, std::string>>> extras_{{}};
    std::map<std::vector<std::pair<std::string, std::string>>, uint32_t> extras_index_;
};

}  // namespace msms
