// OwnerLedger: the live and peak bytes of framework-pool owners (PTA, ATB,
// MINDSPORE...), each block counted under the owner it ended with, for its
// whole life.
//
// A block's owner often comes after its MALLOC: a gradient is made inside an
// operator (ops@aten) and tagged "gradient" once backward() is done; the
// weights made before start() are tagged at the first step. The block's
// MALLOC row is annotated with the last owner, and `--analyze` of the dump
// counts the block there from its MALLOC on. Counting it under each owner
// while it held that owner gave the run's own table another peak than its
// rows and its `--analyze` (twice the ops@aten peak on a training script).
//
// So the owners' figures lag behind the events: each acquire and release is
// kept as a 4-byte entry and applied (committed) only when it leaves a window
// of the last `window` entries, or at the end, with the owner the block has
// then. A relabel of a block whose acquire is still in the window is exact;
// one whose acquire has been committed moves the bytes from the commit point
// on (the old owner keeps what it showed before it): only a block relabelled
// more than a window of framework events after its MALLOC is counted split.
//
// Driver pools' owners (HOST, CANN@...) never change and are not kept here.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

namespace msms_an {

struct OwnerFigures {
    int64_t live = 0, peak = 0;
    uint64_t allocations = 0;
};

class OwnerLedger {
public:
    // 1 M entries: about half a million framework blocks made and freed
    // (hundreds of training steps; a tag comes within one), 4 MiB of
    // entries and at most 16 MiB of slots.
    static constexpr size_t kDefaultWindow = size_t(1) << 20;

    // figures(owner) gives the figures an owner index is counted in.
    explicit OwnerLedger(std::function<OwnerFigures&(uint32_t)> figures, size_t window = kDefaultWindow)
        : figures_(std::move(figures)), window_(std::max<size_t>(window, 1)) {}

    // A block of `size` bytes under `owner`; the handle names it from now on.
    uint32_t open(uint64_t size, uint32_t owner) {
        uint32_t h;
        if (!free_.empty()) {
            h = free_.back();
            free_.pop_back();
        } else {
            h = static_cast<uint32_t>(slots_.size());
            slots_.emplace_back();
        }
        slots_[h] = Slot{size, owner, 2, false};  // the block live + its acquire entry
        push(h);
        return h;
    }
    // The block is freed (the handle is not used by the caller again).
    void close(uint32_t h) { push(h | kRelease); }  // the live reference becomes the release entry's

    // The block's owner is now `owner`.
    void relabel(uint32_t h, uint32_t owner) {
        Slot& s = slots_[h];
        if (s.owner == owner) return;
        if (s.acquired) {
            // counted already: the bytes and the allocation move from here on
            OwnerFigures& from = figures_(s.owner);
            from.live -= static_cast<int64_t>(s.size);
            if (from.allocations) --from.allocations;
            OwnerFigures& to = figures_(owner);
            to.live += static_cast<int64_t>(s.size);
            to.peak = std::max(to.peak, to.live);
            ++to.allocations;
        }
        s.owner = owner;
    }

    // Commits every entry (at the end).
    void flush() {
        while (!entries_.empty()) commit_oldest();
    }

    size_t pending() const { return entries_.size(); }

private:
    static constexpr uint32_t kRelease = 0x80000000u;
    struct Slot {
        uint64_t size = 0;
        uint32_t owner = 0;
        uint8_t refs = 0;       // pending entries + 1 while the block is live
        bool acquired = false;  // its acquire is committed
    };

    void push(uint32_t entry) {
        entries_.push_back(entry);
        if (entries_.size() > window_) commit_oldest();
    }
    void commit_oldest() {
        uint32_t e = entries_.front();
        entries_.pop_front();
        uint32_t h = e & ~kRelease;
        Slot& s = slots_[h];
        OwnerFigures& f = figures_(s.owner);
        if (e & kRelease) {
            f.live -= static_cast<int64_t>(s.size);
        } else {
            f.live += static_cast<int64_t>(s.size);
            f.peak = std::max(f.peak, f.live);
            ++f.allocations;
            s.acquired = true;
        }
        if (--s.refs == 0) free_.push_back(h);
    }

    std::function<OwnerFigures&(uint32_t)> figures_;
    size_t window_;
    std::deque<uint32_t> entries_;
    std::vector<Slot> slots_;
    std::vector<uint32_t> free_;
};

}  // namespace msms_an
