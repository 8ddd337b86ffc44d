#include "fold_map.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>

#include <msmemscope/abi.h>

#include "huge_stretch.h"

namespace msms::agent::fold_map {
namespace {

constexpr int kAddrBits = Map::kGranuleBits + Map::kLeafBits + Map::kMidBits + Map::kTopBits;
static_assert(kAddrBits == 47, "the map covers the user half of a 4-level address space");

inline bool mappable(uint64_t ptr) { return ptr != 0 && (ptr & 15) == 0 && ptr < (uint64_t{1} << kAddrBits); }

void* reserve(size_t bytes) {
    void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return m == MAP_FAILED ? nullptr : m;
}

// Leaves of the brk heap (glibc's main arena: one stretch, its blocks side
// by side, so nearly every page of their slots is written) come 8 to a
// huge-page stretch (huge_stretch.h): importing torch fills ~8 MiB of them.
// Other leaves (mmap'ed blocks, other arenas: often one block in 2 MiB)
// keep 4 KiB pages, so a sparse leaf costs the program a page, not 256 KiB.
constexpr size_t kLeafBytes = sizeof(std::atomic<uint16_t>) << Map::kLeafBits;
huge_stretch::Pieces g_dense_leaves(kLeafBytes);

bool in_brk_heap(uint64_t ptr) {
    const auto brk = reinterpret_cast<uintptr_t>(sbrk(0));
    return brk != ~uintptr_t{0} && ptr < brk && brk - ptr <= (uint64_t{64} << 30);
}

}  // namespace

Map::Slot* Map::leaf(uint64_t ptr, bool create) const {
    std::atomic<Mid*>& top = top_[ptr >> (kGranuleBits + kLeafBits + kMidBits)];
    Mid* mid = top.load(std::memory_order_acquire);
    if (!mid) {
        constexpr size_t kMidBytes = sizeof(Mid) << kMidBits;
        if (!create || !(mid = huge_stretch::publish(top, static_cast<Mid*>(reserve(kMidBytes)), kMidBytes)))
            return nullptr;
    }
    Mid& at = mid[(ptr >> (kGranuleBits + kLeafBits)) & ((uint64_t{1} << kMidBits) - 1)];
    Slot* leaf = at.load(std::memory_order_acquire);
    if (!leaf && create) {
        // A dense leaf that lost the race stays an unused piece (rare).
        const bool dense = in_brk_heap(ptr);
        void* made = dense ? g_dense_leaves.take() : reserve(kLeafBytes);
        leaf = huge_stretch::publish(at, static_cast<Slot*>(made), dense ? 0 : kLeafBytes);
    }
    return leaf;
}

bool Map::put(uint64_t ptr, uint64_t size) {
    if (!mappable(ptr)) return false;
    Slot* l = leaf(ptr, true);
    if (!l) return false;
    Slot& s = l[(ptr >> kGranuleBits) & ((uint64_t{1} << kLeafBits) - 1)];
    if (size < kLarge - 1) {
        s.store(static_cast<uint16_t>(size + 1), std::memory_order_relaxed);
        return true;
    }
    if (!large_.note_alloc(MSMS_T_HOST, MSMS_DEV_CPU, -1, ptr, size, /*count_overflow=*/false)) return false;
    s.store(kLarge, std::memory_order_relaxed);
    return true;
}

bool Map::take(uint64_t ptr, uint64_t* size) {
    if (!mappable(ptr)) return false;
    Slot* l = leaf(ptr, false);
    if (!l) return false;
    Slot& s = l[(ptr >> kGranuleBits) & ((uint64_t{1} << kLeafBits) - 1)];
    const uint16_t v = s.load(std::memory_order_relaxed);
    if (v == 0) return false;
    s.store(0, std::memory_order_relaxed);
    if (v != kLarge) {
        *size = v - 1u;
        return true;
    }
    return large_.note_free(MSMS_T_HOST, ptr, size);
}

void Map::abandon() {
    for (auto& t : top_) t.store(nullptr, std::memory_order_relaxed);
    large_.drain([](const live_blocks::Block&, void*) {}, nullptr);
}

bool Map::holds(uint64_t ptr) const {
    if (!mappable(ptr)) return false;
    Slot* l = leaf(ptr, false);
    return l && l[(ptr >> kGranuleBits) & ((uint64_t{1} << kLeafBits) - 1)].load(std::memory_order_relaxed) != 0;
}

}  // namespace msms::agent::fold_map
