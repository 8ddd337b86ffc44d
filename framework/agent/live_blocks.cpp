#include "live_blocks.h"

#include <sys/mman.h>

#include <cstddef>

namespace msms::agent::live_blocks {
namespace {

// Slot keys: 0 empty, 1 tombstone, 2 being written; else the block's key
// (address | pool type << 57).
constexpr uint64_t kEmpty = 0, kTomb = 1, kBusy = 2;
constexpr int kTypeShift = 57;
constexpr uint64_t kPtrLimit = 1ull << kTypeShift;
// The value: size (42 bits), device kind (4 bits), device id (12 bits,
// signed), tag (6 bits).
constexpr uint64_t kSizeMask = (1ull << 42) - 1;
constexpr int kKindShift = 42, kDevShift = 46, kTagShift = 58;
static_assert(kMaxTag < (1u << (64 - kTagShift)), "the tag fits its bits");

constexpr int kLevelBits[Table::kLevels] = {16, 18, 20, 22};  // 1 MiB .. 64 MiB of address space
constexpr unsigned kWays = 4;  // slots per bucket: 64 bytes

// The key's two buckets' first slots: high bits of two multiplicative hashes
// (their low bits depend only on the key's low bits, zero for aligned blocks).
inline void buckets_of(uint64_t key, int bits, uint64_t& a, uint64_t& b) {
    const int bucket_bits = bits - 2;
    const uint64_t mask = (uint64_t{1} << bucket_bits) - 1;
    // The first by address (blocks allocated one after another, and freed
    // soon, are in neighbouring cache lines and pages), the second hashed.
    a = ((key >> 5) & mask) * kWays;
    key ^= key >> 29;
    b = ((key * 0xC2B2AE3D27D4EB4Full) >> (64 - bucket_bits)) * kWays;
}

inline bool too_full(int64_t held, int bits) { return held >= (int64_t{7} << bits) / 8; }

inline uint64_t key_of(uint16_t type, uint64_t ptr) { return ptr | (static_cast<uint64_t>(type) << kTypeShift); }

Table g_off;

}  // namespace

Table::Slot* Table::level(int i, bool create) {
    Slot* s = levels_[i].load(std::memory_order_acquire);
    if (s || !create) return s;
    size_t bytes = sizeof(Slot) << kLevelBits[i];
    static_assert(sizeof(Slot) * kWays == 64, "a bucket is a cache line");
    void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return nullptr;
    Slot* expected = nullptr;
    if (levels_[i].compare_exchange_strong(expected, static_cast<Slot*>(m), std::memory_order_acq_rel)) {
        int top = top_.load(std::memory_order_relaxed);
        while (top < i && !top_.compare_exchange_weak(top, i, std::memory_order_release, std::memory_order_relaxed)) {
        }
        return static_cast<Slot*>(m);
    }
    munmap(m, bytes);  // another thread made it first
    return expected;
}

bool Table::note_alloc(uint16_t type, uint16_t dev_kind, int16_t dev_id, uint64_t ptr, uint64_t size,
                       bool count_overflow, uint8_t tag) {
    // A block the slots cannot hold exactly is not kept with a wrong address
    // or size (its shadow MALLOC would count the wrong bytes): it is lost,
    // and the warning at the next start says how many were.
    if (ptr <= kBusy || ptr >= kPtrLimit || type >= 128 || size > kSizeMask) {
        if (count_overflow) overflow_.fetch_add(1, std::memory_order_relaxed);
        return false;
    }
    const uint64_t key = key_of(type, ptr);
    const uint64_t val = size | (static_cast<uint64_t>(dev_kind & 0xF) << kKindShift) |
                         (static_cast<uint64_t>(static_cast<uint16_t>(dev_id) & 0xFFF) << kDevShift) |
                         (static_cast<uint64_t>(tag > kMaxTag ? 0 : tag) << kTagShift);
    for (int l = 0; l < kLevels; ++l) {
        if (l + 1 < kLevels && too_full(held_[l].load(std::memory_order_relaxed), kLevelBits[l])) continue;
        Slot* t = level(l, true);
        if (!t) break;
        uint64_t first[2];
        buckets_of(key, kLevelBits[l], first[0], first[1]);
        for (unsigned i = 0; i < 2 * kWays; ++i) {
            Slot& s = t[first[i / kWays] + i % kWays];
            uint64_t k = s.key.load(std::memory_order_relaxed);
            while (k == kEmpty || k == kTomb) {
                if (s.key.compare_exchange_weak(k, kBusy, std::memory_order_acquire, std::memory_order_relaxed)) {
                    s.val.store(val, std::memory_order_relaxed);
                    s.key.store(key, std::memory_order_release);
                    held_[l].fetch_add(1, std::memory_order_relaxed);
                    return true;
                }
            }
        }
    }
    if (count_overflow) overflow_.fetch_add(1, std::memory_order_relaxed);
    return false;
}

bool Table::note_free(uint16_t type, uint64_t ptr, uint64_t* size) {
    if (ptr <= kBusy || ptr >= kPtrLimit || type >= 128) return false;
    const uint64_t key = key_of(type, ptr);
    for (int l = top_.load(std::memory_order_acquire); l >= 0; --l) {
        Slot* t = level(l, false);
        if (!t || held_[l].load(std::memory_order_relaxed) == 0) continue;
        uint64_t first[2];
        buckets_of(key, kLevelBits[l], first[0], first[1]);
        for (unsigned i = 0; i < 2 * kWays; ++i) {
            Slot& s = t[first[i / kWays] + i % kWays];
            uint64_t k = s.key.load(std::memory_order_acquire);
            if (k == key) {
                // Only this thread frees this block; a drain may take the
                // slot at the same time (then the block was written).
                const uint64_t v = s.val.load(std::memory_order_relaxed);
                if (!s.key.compare_exchange_strong(k, kTomb, std::memory_order_acq_rel, std::memory_order_relaxed))
                    return false;
                held_[l].fetch_sub(1, std::memory_order_relaxed);
                if (size) *size = v & kSizeMask;
                return true;
            }
        }
    }
    return false;
}

uint64_t Table::drain(void (*fn)(const Block&, void*), void* ctx) {
    for (int l = 0; l < kLevels; ++l) {
        Slot* t = level(l, false);
        if (!t) break;
        const size_t n = size_t{1} << kLevelBits[l];
        for (size_t i = 0; i < n; ++i) {
            uint64_t k = t[i].key.load(std::memory_order_relaxed);
            // A busy slot is an insert in flight (a thread that saw collection
            // off a moment ago): it stays for the next drain.
            while (k != kEmpty && k != kBusy &&
                   !t[i].key.compare_exchange_weak(k, kEmpty, std::memory_order_acquire, std::memory_order_relaxed)) {
            }
            if (k <= kBusy) continue;  // empty, busy, or a tombstone now emptied
            held_[l].fetch_sub(1, std::memory_order_relaxed);
            uint64_t v = t[i].val.load(std::memory_order_relaxed);
            Block b;
            b.ptr = k & (kPtrLimit - 1);
            b.type = static_cast<uint16_t>(k >> kTypeShift);
            b.size = v & kSizeMask;
            b.dev_kind = static_cast<uint16_t>((v >> kKindShift) & 0xF);
            // 12 bits, sign-extended
            b.dev_id = static_cast<int16_t>(static_cast<int16_t>(static_cast<uint16_t>((v >> kDevShift) << 4)) >> 4);
            b.tag = static_cast<uint8_t>(v >> kTagShift);
            fn(b, ctx);
        }
    }
    return overflow_.exchange(0, std::memory_order_relaxed);
}

uint64_t Table::size() const {
    uint64_t n = 0;
    for (int l = 0; l < kLevels; ++l) {
        Slot* t = levels_[l].load(std::memory_order_acquire);
        if (!t) break;
        for (size_t i = 0; i < (size_t{1} << kLevelBits[l]); ++i)
            if (t[i].key.load(std::memory_order_relaxed) > kBusy) ++n;
    }
    return n;
}

bool note_alloc(uint16_t type, uint16_t dev_kind, int16_t dev_id, uint64_t ptr, uint64_t size, bool count_overflow,
                uint8_t tag) {
    return g_off.note_alloc(type, dev_kind, dev_id, ptr, size, count_overflow, tag);
}
bool note_free(uint16_t type, uint64_t ptr) { return g_off.note_free(type, ptr); }
uint64_t drain(void (*fn)(const Block&, void*), void* ctx) { return g_off.drain(fn, ctx); }
uint64_t size() { return g_off.size(); }
void count_lost() { g_off.count_lost(); }

}  // namespace msms::agent::live_blocks
