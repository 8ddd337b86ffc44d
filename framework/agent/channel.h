// Target side of the channel: the mmap'ed capture file and the per-thread
// writers. Internal to the agent (collectors use sdk/include/msmemscope/agent.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "../common/capture_format.h"

namespace msms::agent {

// Per-thread writer state. Lives in an mmap'ed page (never in the hooked
// heap); the initial-exec TLS slot only holds a pointer and the guard so that
// the agent can also be dlopen'ed (Python mode) without exhausting static TLS.
struct ThreadWriter {
    capture::ChunkHeader* chunk;
    uint8_t* cur;
    uint8_t* end;
    uint64_t last_ts;
    uint64_t last_ptr;
    uint32_t tid;
    uint32_t generation;  // channel generation this writer belongs to
    static constexpr uint32_t kCacheSize = 512;
    uint64_t string_hash[kCacheSize];
    uint64_t string_id[kCacheSize];
};

struct Tls {
    int depth;             // reentrancy guard
    ThreadWriter* writer;  // nullptr until the thread first records
};

Tls& tls();

// Opens <dir>/<pid>.<n>.msmcap and starts writing into it.
int channel_open(const char* session_dir);
// Writes the end record, publishes the state and closes the mapping.
void channel_close(int exit_code);
// After fork in the child: forget the parent's stream (do not touch it).
void channel_forget_after_fork();
bool channel_is_open();
uint64_t now_ns();

// Returns the writer of this thread with at least `need` bytes free in its
// chunk, or nullptr (event dropped and counted).
ThreadWriter* writer_for(size_t need);
// Publishes what was written up to p.
inline void commit(ThreadWriter* w, uint8_t* p) {
    w->cur = p;
    w->chunk->used.store(static_cast<uint32_t>(p - reinterpret_cast<uint8_t*>(w->chunk + 1)),
                         std::memory_order_release);
}
// Interns a string into this thread's stream, returns its id (0 on failure).
uint64_t intern(ThreadWriter*& w, const char* s, size_t len);
// A fresh id for an interned string or stack.
uint64_t next_string_id();
void count_drop();
// Turn collection off for good and say so once on stderr.
void disable(const char* why);

}  // namespace msms::agent
