// Host side of the channel: reads one process's capture file while it is
// being written (or after), decodes records and hands them out in timestamp
// order across the process's threads.
#pragma once

#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

#include "../common/capture_format.h"
#include "tick_clock.h"

namespace msms {

struct RawEvent {
    uint64_t ts = 0;  // monotonic ns of the target (capture clock ticks until popped)
    uint32_t tid = 0;
    uint16_t gen = 0;    // reader's poll generation that decoded it (low bits)
    uint16_t flags = 0;  // CaptureReader's own marks until popped
    uint16_t kind = 0, type = 0;
    uint16_t dev_kind = 0;
    int16_t dev_id = -1;
    uint64_t ptr = 0, size = 0, aux0 = 0, aux1 = 0;
    uint64_t name_id = 0, attrs_id = 0, cstack = 0, pystack = 0;
};

// A thread's decoded events waiting for delivery: a ring that grows by
// doubling and never shrinks (a std::deque allocated and freed a 512-byte
// block every five events, on the host's busiest path).
class EventRing {
public:
    bool empty() const { return count_ == 0; }
    size_t size() const { return count_; }
    RawEvent& front() { return buf_[head_]; }
    RawEvent& back() { return buf_[(head_ + count_ - 1) & (buf_.size() - 1)]; }
    void pop_front() {
        head_ = (head_ + 1) & (buf_.size() - 1);
        --count_;
    }
    void push_back(const RawEvent& e) {
        if (count_ == buf_.size()) grow();
        buf_[(head_ + count_) & (buf_.size() - 1)] = e;
        ++count_;
    }

private:
    void grow() {
        std::vector<RawEvent> bigger(buf_.empty() ? 64 : buf_.size() * 2);
        for (size_t i = 0; i < count_; ++i) bigger[i] = buf_[(head_ + i) & (buf_.size() - 1)];
        buf_.swap(bigger);
        head_ = 0;
    }
    std::vector<RawEvent> buf_;  // size: 0 or a power of two
    size_t head_ = 0, count_ = 0;
};

struct StackDef {
    uint8_t kind = 0;  // 0 C addresses, 1 Python string ids
    std::vector<uint64_t> frames;
    // Python: every frame's string was read (strings are never dropped, so
    // it stays so; resolvable() then skips the frames' lookups).
    mutable bool strings_known = false;
};

struct ModuleDef {
    uint64_t base = 0;    // load bias
    uint64_t extent = 0;  // end of the highest PT_LOAD, relative to base
    uint64_t path_id = 0;
    uint64_t ts = 0;
};

class CaptureReader {
public:
    CaptureReader();
    ~CaptureReader();
    CaptureReader(const CaptureReader&) = delete;
    CaptureReader& operator=(const CaptureReader&) = delete;

    // Opens and checks the header. The error names the file and the problem.
    bool open(const std::string& path, std::string& error);
    // Decodes what was published since the last call. Returns records decoded.
    size_t poll();
    // The live-capture step: reads the clock, makes every in-flight write of
    // the target visible (membarrier, see capture_format.h), polls, and
    // returns the watermark below which events may be popped in final order
    // (UINT64_MAX once the writer is gone; now - window_ns when the target
    // could not register for membarrier). `decoded` gets poll()'s result.
    // barrier_every_ns > 0: a barrier at most that often; between them the
    // watermark stays at the last barrier's clock (still exact: see
    // capture_format.h), so events come that much later and the target's
    // CPUs get that many fewer interrupts.
    uint64_t poll_ordered(uint64_t window_ns, size_t& decoded, uint64_t barrier_every_ns = 0);
    // Barriers issued so far (membarrier calls that succeeded).
    uint64_t barriers() const { return barriers_; }
    // True once the writing process is gone (its lock was released).
    bool writer_gone();
    // Next event in timestamp order whose ts <= watermark.
    bool pop(RawEvent& out, uint64_t watermark);
    bool empty() const { return heap_.empty(); }

    const std::string* string(uint64_t id) const;
    const StackDef* stack(uint64_t id) const;
    const std::vector<ModuleDef>& modules() const { return modules_; }

    const std::string& path() const { return path_; }
    uint32_t pid() const { return header_copy_.pid; }
    uint32_t ppid() const { return header_copy_.ppid; }
    // The pid this process was forked from without exec (0: not known, or it
    // began with exec; captures before format 4.1 never say).
    uint32_t forked_from() const {
        return capture::has_forked_from(&header_copy_) ? header_copy_.forked_from : 0;
    }
    // The process's start time (/proc/PID/stat field 22; 0: not known, as in
    // captures before format 4.4).
    uint64_t start_ticks() const {
        return capture::has_start_ticks(&header_copy_) ? header_copy_.start_ticks : 0;
    }
    int64_t wall_offset() const { return static_cast<int64_t>(header_copy_.wall_start_ns - header_copy_.mono_start_ns); }
    uint64_t wall_start() const { return header_copy_.wall_start_ns; }
    // NUL-terminated within the field (format 2), read bounded all the same.
    std::string rank() const { return std::string(header_copy_.rank, strnlen(header_copy_.rank, sizeof(header_copy_.rank))); }
    std::string exe() const { return std::string(header_copy_.exe, strnlen(header_copy_.exe, sizeof(header_copy_.exe))); }
    std::vector<std::string> cmdline() const;
    bool ended_normally() const { return saw_end_; }
    // The writing process was seen gone by a poll (its records may still be
    // being read).
    bool writer_seen_gone() const { return writer_seen_gone_; }
    // How the process ended (capture::EndKind) and its status or signal.
    uint32_t end_kind() const;
    int32_t end_code() const;
    // Format 4.2: the header's end record fails its checksum (then
    // end_kind() and end_code() say nothing is known).
    bool end_corrupt() const;
    // EndKind::Exec: the program the process exec'ed without the agent.
    std::string exec_path() const;
    bool exact_order() const { return header_copy_.ordering != 0; }
    // The capture's clock (capture_format.h): TSC ticks converted to ns on delivery.
    bool tsc_clock() const { return clock_.is_tsc(); }
    // Set when open() saw damage it can read around; "" otherwise.
    const std::string& first_corruption() const { return first_corruption_; }
    int64_t end_exit_code() const { return end_code_; }
    uint64_t dropped() const;
    bool agent_disabled() const;
    uint32_t disabled_reason() const;  // capture::DisabledReason
    uint64_t stragglers() const { return stragglers_; }
    uint64_t corrupt_records() const { return corrupt_; }
    uint64_t events_decoded() const { return decoded_; }
    // For the progress line: chunks read to their end and chunks the
    // writer took so far; stacks the agent defined so far (0: not known).
    // (A staging slot holds no chunk of its own: counted as read once seen.)
    uint64_t chunks_read() const { return chunks_read_ + stages_.size(); }
    uint64_t chunks_total() const;
    uint64_t stacks_defined() const;
    // Releases every chunk once it has been read: punched out of the file
    // (its disk blocks freed; the file keeps its size) and counted in the
    // header's chunks_released, which a capture budget waits on. The first
    // retain_bytes of read chunks are kept (so that a crashed plugin's
    // outputs can be re-run from the whole capture) and released together
    // once more was read. Only for a live session's own capture: never for
    // a capture the user keeps (--save-capture) or gave (--replay).
    // Returns "" or why not (then nothing is released).
    std::string enable_release(uint64_t retain_bytes);
    // True once a chunk was released: the capture no longer holds the whole stream.
    bool released_any() const { return released_any_; }
    uint64_t chunks_released() const { return released_; }
    // Why part of the capture could not be read at all (e.g. no address
    // space to map it under ulimit -v); "" when everything was readable.
    const std::string& read_error() const { return read_error_; }

private:
    // A chunk is read in its lane (ChunkHeader::tid, capture_format.h); the
    // thread of its records comes from kThread records (cur_tid).
    struct ChunkState {
        ChunkState(uint64_t i, uint32_t lane) : index(i), tid(lane) {}
        uint64_t index;
        uint32_t tid;  // the lane
        uint32_t cur_tid = 0;
        uint32_t read = 0;
        uint64_t last_ts = 0;   // delta decoding state (starts at 0 per chunk)
        uint64_t last_ptr = 0;
        uint32_t limit = 0;     // bytes published as of the last poll
        bool final = false;     // sealed (or writer gone) as of the last poll
        bool checked = false;   // the seal's checksum was verified
        // Staged (capture_format.h, "Staging"): the chunk's records are in
        // the staging slot `stage`; what it published is copied into
        // `copy` (read from there) until it is in its place.
        uint64_t stage = kNotStaged;
        std::unique_ptr<uint8_t[]> copy;
    };
    static constexpr uint64_t kNotStaged = UINT64_MAX;
    // A staging slot and the last chunk seen staged in it (index + 1).
    struct StageSlot {
        uint64_t index;
        uint64_t last_target = 0;
    };
    const uint8_t* chunk_ptr(uint64_t index);
    // Sorts what poll() found into the per-thread chunk lists.
    void classify(uint64_t idx, std::vector<ChunkState>& found, std::vector<uint64_t>& zeros);
    void scan_stages(size_t from, uint64_t taken, std::vector<ChunkState>& found, std::vector<uint64_t>& zeros);
    // Copies what a staged chunk published since the last poll; false when
    // the chunk is no longer staged (then it is read from its place).
    bool snapshot_staged(ChunkState& c);
    // Decodes c from c.read up to `limit`, stopping after max_events events.
    void decode(ChunkState& c, const uint8_t* payload, uint32_t limit, size_t max_events);
    // Decodes thread tid's published records until its queue holds
    // kQueueTarget events or nothing published is left. Keeping every queue
    // non-empty while its thread has published data is what makes the merge
    // exact; decoding no further than that keeps the host's memory bounded
    // (a replay never holds the whole capture).
    void fill(uint32_t tid);
    static constexpr size_t kQueueTarget = 4096;
    // RawEvent::flags while queued.
    static constexpr uint16_t kCalibration = 1;        // a kClock pair: aux0 tick, aux1 ns
    static constexpr uint16_t kStartFromDuration = 2;  // kPyCall: aux0 is the duration (ns)
    bool resolvable(const RawEvent& e) const;
    void note_corruption(uint64_t chunk, uint64_t offset, const char* what);
    void push(const RawEvent& e);
    // Notes that chunk `index` was read to its end (or skipped): a segment
    // whose chunks are all done is unmapped.
    void chunk_done(uint64_t index);
    void release(uint64_t index);

    int release_fd_ = -1;  // O_RDWR, only when releasing
    capture::CaptureHeader* header_rw_ = nullptr;
    bool releasing_ = false;
    uint64_t retain_left_ = 0;           // bytes still to retain before releasing
    std::vector<uint64_t> retained_;     // read chunks kept so far
    bool released_any_ = false;
    uint64_t released_ = 0;

    std::string path_;
    int fd_ = -1;
    capture::CaptureHeader header_copy_{};
    const capture::CaptureHeader* header_ = nullptr;
    std::vector<const uint8_t*> segments_;  // mapped on first use; nullptr: not (or no longer) mapped
    std::vector<uint32_t> seg_done_;        // chunks done per segment
    uint32_t decoding_lane_ = 0;            // lane of the chunk decode() is reading
    std::string read_error_;
    uint64_t next_chunk_ = 0;             // next chunk index not yet assigned to a thread
    std::vector<uint64_t> uninitialized_; // taken but not set up yet
    std::vector<StageSlot> stages_;       // staging slots seen (format 4)
    std::map<uint32_t, std::deque<ChunkState>> thread_chunks_;
    std::unordered_map<uint32_t, EventRing> queues_;
    EventRing* last_queue_ = nullptr;  // queue_of()'s one-entry cache
    uint32_t last_queue_tid_ = 0;
    EventRing& queue_of(uint32_t tid);
    uint64_t pending_bound_ = UINT64_MAX;  // min in-flight lower bound at the last poll
    uint64_t barrier_at_ = 0;              // the capture clock read just before the last barrier
    uint64_t barriers_ = 0;                // barriers that succeeded (0: barrier_at_ holds none)
    uint64_t poll_gen_ = 0;
    std::string first_corruption_;
    struct HeapItem {
        uint64_t ts;
        uint32_t tid;
        bool operator>(const HeapItem& o) const { return ts != o.ts ? ts > o.ts : tid > o.tid; }
    };
    // A min-heap of the threads with decoded events (std::push_heap et al.
    // with std::greater): pop() replaces the top in place while its thread
    // has more, a no-op for a one-thread program.
    std::vector<HeapItem> heap_;
    void heap_push(const HeapItem& h);
    void heap_pop();
    std::unordered_map<uint64_t, std::string> strings_;
    std::unordered_map<uint64_t, StackDef> stacks_;
    std::vector<ModuleDef> modules_;
    uint64_t last_popped_ = 0;   // capture clock
    uint64_t last_out_ns_ = 0;   // delivered timestamps never go back
    TickClock clock_;
    uint64_t stragglers_ = 0, corrupt_ = 0, decoded_ = 0;
    uint64_t chunks_read_ = 0;
    bool saw_end_ = false;
    bool writer_seen_gone_ = false;
    int64_t end_code_ = 0;
    bool gone_ = false;
};

}  // namespace msms
