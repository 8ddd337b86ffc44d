// The blocks allocated while collection is off (--collect-mode=deferred
// before start(), or after stop()): when collection starts, each one still
// live is written as a MALLOC with Attr shadow:true (upstream's shadow
// events, COMPAT §8), so that its later FREE pairs with a MALLOC and the
// leak report knows it.
//
// Memory hooks report here only while collection is off (msms_agent_enter()
// returned 0); the collecting hot path never touches this table.
//
// Lock-free: open addressing with tombstones, a bounded probe and up to
// kLevels tables of growing size, mmap'ed on first use (never the hooked
// heap). A slot goes empty -> busy -> key -> tombstone -> busy -> key ...
// and back to empty only when drained, so a lookup stops at the first empty
// slot. An address is live at most once per pool, which is all the table
// relies on. When every level is full around a key the block is counted as
// lost (overflow) and reported at start.
#pragma once

#include <cstdint>

namespace msms::agent::live_blocks {

struct Block {
    uint64_t ptr, size;
    uint16_t type, dev_kind;
    int16_t dev_id;
};

// Remembers a block (false: not remembered: a full table, or an address or
// type the table cannot hold; counted as lost unless count_overflow is
// false, for a caller that writes the block another way).
bool note_alloc(uint16_t type, uint16_t dev_kind, int16_t dev_id, uint64_t ptr, uint64_t size,
                bool count_overflow = true);
// Forgets a block (false: it was not in the table).
bool note_free(uint16_t type, uint64_t ptr);
// Calls fn for every block held and empties the table. Returns how many
// blocks could not be remembered since the last drain.
uint64_t drain(void (*fn)(const Block&, void*), void* ctx);
// Blocks held now (tests).
uint64_t size();

}  // namespace msms::agent::live_blocks
