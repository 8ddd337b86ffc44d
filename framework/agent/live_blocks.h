// Tables of blocks the agent remembers instead of writing rows for them:
//  * the blocks allocated while collection is off (--collect-mode=deferred
//    before start(), or after stop()): when collection starts, each one still
//    live is written as a MALLOC with Attr shadow:true (upstream's shadow
//    events, COMPAT §8), so that its later FREE pairs with a MALLOC and the
//    leak report knows it (the namespace functions below: one such table);
//  * the large host blocks of Python imports (fold_map.h keeps its own Table).
//
// Memory hooks report to the first only while collection is off
// (msms_agent_enter() returned 0); the collecting hot path never touches it.
//
// Lock-free: up to kLevels tables of growing size, mmap'ed on first use
// (never the hooked heap), each of buckets of four slots (a cache line); a
// key may sit in either of two buckets chosen by its hash, so a lookup reads
// two cache lines per level, however many blocks came and went (linear
// probing with tombstones read up to 32 slots per level once an import had
// churned through a million blocks). A slot goes empty -> busy -> key ->
// tombstone -> busy -> key ... and back to empty only when drained. A level
// that holds seven eighths of its slots takes no new block; lookups start at
// the newest level, where short-lived blocks are. An address is live at
// most once per pool, which is all the table relies on. When both buckets
// of every level are full the block is counted as lost (overflow).
#pragma once

#include <atomic>
#include <cstdint>

namespace msms::agent::live_blocks {

struct Block {
    uint64_t ptr, size;
    uint16_t type, dev_kind;
    int16_t dev_id;
    // The Attr extras of the block's MALLOC, as an index the caller keeps
    // (the agent's table of such texts, off_attrs): 0 none, up to kMaxTag.
    uint8_t tag = 0;
};
constexpr uint8_t kMaxTag = 63;

class Table {
public:
    static constexpr int kLevels = 4;
    constexpr Table() = default;
    Table(const Table&) = delete;
    Table& operator=(const Table&) = delete;

    // Remembers a block (false: not remembered: a full table, or an address,
    // type or size the table cannot hold: address 0-2 or from 2^57, type
    // from 128, size from 4 TiB; counted as lost unless count_overflow is
    // false, for a caller that writes the block another way).
    // A tag over kMaxTag is kept as 0, a device id outside -2048..2047 as
    // its low 12 bits.
    bool note_alloc(uint16_t type, uint16_t dev_kind, int16_t dev_id, uint64_t ptr, uint64_t size,
                    bool count_overflow = true, uint8_t tag = 0);
    // Forgets a block (false: it was not in the table); its size in *size.
    bool note_free(uint16_t type, uint64_t ptr, uint64_t* size = nullptr);
    // Calls fn for every block held and empties the table. Returns how many
    // blocks could not be remembered since the last drain.
    uint64_t drain(void (*fn)(const Block&, void*), void* ctx);
    // Blocks held now (tests).
    uint64_t size() const;
    // A block the caller could not have remembered (counted as lost).
    void count_lost() { overflow_.fetch_add(1, std::memory_order_relaxed); }

private:
    struct Slot {
        std::atomic<uint64_t> key;
        std::atomic<uint64_t> val;
    };
    Slot* level(int i, bool create);
    std::atomic<Slot*> levels_[kLevels] = {};
    std::atomic<int64_t> held_[kLevels] = {};  // keys per level (not tombstones)
    std::atomic<int> top_{-1};                 // the highest level made so far
    std::atomic<uint64_t> overflow_{0};
};

// The table of blocks allocated while collection is off.
bool note_alloc(uint16_t type, uint16_t dev_kind, int16_t dev_id, uint64_t ptr, uint64_t size,
                bool count_overflow = true, uint8_t tag = 0);
bool note_free(uint16_t type, uint64_t ptr);
uint64_t drain(void (*fn)(const Block&, void*), void* ctx);
uint64_t size();
void count_lost();

}  // namespace msms::agent::live_blocks
