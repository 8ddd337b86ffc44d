// The sinks on threads of their own (issue #30). On a PyTorch training loop
// the pipeline's one thread needed the program's whole run and more for
// decoding, accounting, the analyzers and then every sink's rows, so most of
// the sinks' work was left for after the program had ended. Now the
// pipeline's thread copies what a sink is handed (an event with the text it
// points to, an analyzer's annotation or finding) into a batch, in the order
// the sinks would have been called, and each sink takes the batches on its
// own thread (a lane): sinks work beside the analyzers and beside each
// other.
//
// What a sink sees is unchanged: the same calls in the same order, one
// thread per sink, the pointers of a call valid during that call. A lane
// that falls behind holds up the pipeline's thread (at most kMaxQueued
// batches per lane), so the copies stay bounded.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <msmemscope/abi.h>

namespace msms {

// One call a sink is handed.
struct SinkItem {
    enum Kind : uint8_t { Event, Annotation, Finding };
    Kind kind = Event;
    msms_event ev{};             // Event: its strings and attributes point into the batch
    uint64_t id = 0;             // Annotation: the row
    msms_str key{}, value{};     // Annotation; Finding: key is the table
    const msms_kv* cols = nullptr;  // Finding
    uint32_t n = 0;
};

// Blocks for the batches' bytes, used again once a batch is done: fresh
// memory for every batch was a page fault per 4 KiB copied (a fifth more
// system time on a replay of 450 MB of rows).
class BlockPool {
public:
    static constexpr size_t kBlock = 1 << 20;
    std::unique_ptr<char[]> get();
    void put(std::vector<std::unique_ptr<char[]>>& blocks);  // kBlock-sized ones only

private:
    std::mutex mu_;
    std::vector<std::unique_ptr<char[]>> spare_;
};

// Items and the bytes they point to (blocks that never move).
class SinkBatch {
public:
    explicit SinkBatch(BlockPool& pool) : pool_(pool) {}
    ~SinkBatch() { pool_.put(blocks_); }
    SinkBatch(const SinkBatch&) = delete;
    SinkBatch& operator=(const SinkBatch&) = delete;
    std::vector<SinkItem> items;
    msms_str copy(msms_str s);
    const msms_kv* copy(const msms_kv* kv, uint32_t n);
    // The event's name, stacks and attributes, copied: ev points at the copies.
    void copy_texts(msms_event& ev, bool keep_py = false, bool keep_c = false);
    size_t bytes() const { return bytes_; }

private:
    char* take(size_t n, size_t align);
    BlockPool& pool_;
    std::vector<std::unique_ptr<char[]>> blocks_;  // kBlock each
    std::vector<std::unique_ptr<char[]>> large_;   // one text larger than a block
    char* at_ = nullptr;
    size_t left_ = 0;
    size_t bytes_ = 0;
};

class SinkLanes {
public:
    struct Lane {
        // Called on the lane's thread for each item, in order.
        std::function<void(const SinkItem&)> handle;
        // Called on the lane's thread once every item was handled (finish()).
        std::function<void()> finish;
    };
    // One thread per lane, lane i entering supervisor lane first_lane + i.
    SinkLanes(std::vector<Lane> lanes, unsigned first_lane);
    // Stops the threads; what is still queued is dropped (no finish).
    ~SinkLanes();
    SinkLanes(const SinkLanes&) = delete;
    SinkLanes& operator=(const SinkLanes&) = delete;

    // keep_py / keep_c: the event's Python / C stack text outlives every
    // lane's use of it (the symbolizer's cache, which the pipeline's owner
    // keeps until the lanes have ended): handed as it is, not copied.
    void event(const msms_event& ev, bool keep_py = false, bool keep_c = false);
    void annotation(uint64_t id, msms_str key, msms_str value);
    void finding(msms_str table, const msms_kv* cols, uint32_t n);
    // Hands the batch being filled to the lanes (it is also handed once
    // full): the pipeline's thread calls it when it waits for more events.
    void publish();
    // publish(), then each lane handles what it was handed and finishes,
    // the finishes one after another in lane order (a sink failing in its
    // finish is told to the sinks after it); returns when every lane has.
    void finish();
    // For tests, which must see the order of the finishes without timing:
    // `waits` is called on a lane's thread (under the lanes' lock, so it may
    // not call into this object) each time the lane is about to wait for
    // the lanes before it to finish, with its index.
    void watch_finish_turns(std::function<void(size_t lane)> waits);

    static constexpr size_t kBatchItems = 4096;
    static constexpr size_t kBatchBytes = 1 << 20;
    static constexpr size_t kMaxQueued = 4;

private:
    struct State {
        Lane lane;
        std::deque<std::shared_ptr<const SinkBatch>> queue;
        size_t index = 0;  // in lanes_
        bool finishing = false, stopping = false, done = false;
        std::thread thread;
    };
    void run(State& s, unsigned supervisor_lane);
    SinkBatch& batch();

    std::vector<std::unique_ptr<State>> lanes_;
    BlockPool pool_;  // before filling_: a batch gives its blocks back to it
    std::unique_ptr<SinkBatch> filling_;
    std::mutex mu_;
    std::condition_variable work_, room_;
    std::function<void(size_t)> finish_turn_waits_;  // (under mu_) watch_finish_turns
};

}  // namespace msms
