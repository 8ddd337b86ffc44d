// The sizes of the blocks import_fold.cpp folds, by address: a direct map
// with a 16-bit slot for each 16 bytes of the address space below 2^47
// (the granule of every allocator's blocks on x86-64 and AArch64), made in
// 2 MiB stretches (a 256 KiB leaf, mmap'ed on first use, never the hooked
// heap) as blocks come. A slot holds the size + 1 of the block that starts
// there, or kLarge, whose exact size is in a live_blocks::Table of its own
// (blocks of 64 KiB and more: few), or 0. Remembering and forgetting a
// block reads and writes one slot beside those of the blocks allocated
// just before and after it: no hashing, no locked instruction, no probing
// however many blocks came and went (~2 M during `import torch`; the
// hashed table it replaces took a cache miss on each, ~0.13 s). The brk
// heap's leaves share huge-page stretches (fold_map.cpp).
//
// Lock-free. A block's address is live once at a time, and its free
// happens after its allocation returned (the allocator orders them, on one
// thread or two), so a slot needs no stronger ordering than relaxed; only
// the stretches are published with a compare-and-swap. Addresses that are
// not 16-byte aligned or not below 2^47 are not held (the caller writes
// such a block another way).
#pragma once

#include <atomic>
#include <cstdint>

#include "live_blocks.h"

namespace msms::agent::fold_map {

class Map {
public:
    constexpr Map() = default;
    Map(const Map&) = delete;
    Map& operator=(const Map&) = delete;

    // Remembers a block; false: not held (its address, no memory for its
    // stretch, or a full table of large blocks).
    bool put(uint64_t ptr, uint64_t size);
    // Forgets a block: true, with its size in *size, when it was held.
    bool take(uint64_t ptr, uint64_t* size);
    // Forgets every block at once, without giving their slots' memory back
    // (import_fold.cpp's map of an ancestor too many forks back, reused).
    void abandon();
    // Whether a block is held at ptr now (tests).
    bool holds(uint64_t ptr) const;
    // The memory of ptr's stretch of slots, nullptr when none was made (tests).
    const void* leaf_memory(uint64_t ptr) const { return leaf(ptr, false); }

    static constexpr int kGranuleBits = 4;   // 16 bytes a slot
    static constexpr int kLeafBits = 17;     // 2 MiB a leaf
    static constexpr int kMidBits = 13;      // 16 GiB a middle table
    static constexpr int kTopBits = 13;      // 128 TiB: 2^47
    static constexpr uint16_t kLarge = 0xFFFF;

private:
    using Slot = std::atomic<uint16_t>;
    using Mid = std::atomic<Slot*>;
    Slot* leaf(uint64_t ptr, bool create) const;
    mutable std::atomic<Mid*> top_[1 << kTopBits] = {};
    live_blocks::Table large_;
};

}  // namespace msms::agent::fold_map
