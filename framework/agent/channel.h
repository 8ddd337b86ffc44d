// Target side of the channel: the mmap'ed capture file and the per-thread
// writers. Internal to the agent (collectors use sdk/include/msmemscope/agent.h).
#pragma once

#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include <cstddef>
#include <cstdint>
#include <atomic>

#include "../common/capture_format.h"

namespace msms::agent {

// Per-thread writer state. Lives in an mmap'ed page (never in the hooked
// heap); the initial-exec TLS slot only holds a pointer and the guard so that
// the agent can also be dlopen'ed (Python mode) without exhausting static TLS.
struct ThreadWriter {
    capture::ChunkHeader* chunk;  // the chunk written now: its staging slot's header when staged
    uint64_t chunk_index;
    capture::StageHeader* stage;  // this thread's staging slot (capture_format.h), nullptr: none
    uint64_t stage_index;
    uint8_t* cur;
    uint8_t* end;
    uint64_t last_ts;   // delta base of the current chunk (0 at its start)
    uint64_t last_ptr;
    uint64_t last_abs;  // this thread's last timestamp (absolute)
    uintptr_t stack_lo, stack_hi;  // the thread's stack (C stacks only)
    uint32_t tid;
    uint32_t lane;        // ChunkHeader::tid of the chunks this writer takes (unique per writer)
    uint32_t generation;  // channel generation this writer belongs to
    static constexpr uint32_t kCacheSize = 512;
    uint64_t string_hash[kCacheSize];
    uint64_t string_id[kCacheSize];
    // The last Python stack this thread interned (capture_py_stack): most
    // allocations repeat it, and comparing its frames is cheaper than
    // hashing them. py_last_n 0: none.
    static constexpr uint32_t kPyLast = 32;
    uint32_t py_last_n;
    uint64_t py_last_id;
    uint64_t py_last_token;  // the provider's name for py_last (0: none; see msms_stack_provider_named)
    uint64_t py_last[kPyLast];
    // The last allocator's caller stack this thread interned
    // (capture_caller_stack): a loop allocates from the same caller.
    // caller_last_n 0: none.
    uint32_t caller_last_n;
    uint64_t caller_last_id;
    uint64_t caller_last[2];
};

struct Tls {
    int depth;             // reentrancy guard
    ThreadWriter* writer;  // nullptr until the thread first records
};

// Channel state shared with the inline fast paths below (channel.cpp).
extern __thread Tls t_tls __attribute__((tls_model("initial-exec")));
extern std::atomic<capture::CaptureHeader*> g_header;
extern std::atomic<uint32_t> g_generation;
extern std::atomic<bool> g_disabled;
// The capture's clock (capture_format.h): true when records are stamped
// with the TSC (set before the stream opens, constant while it is open).
extern bool g_clock_tsc;
// The tick (or ns) at which the next calibration pair is due; UINT64_MAX
// when the clock needs none (CLOCK_MONOTONIC).
extern std::atomic<uint64_t> g_next_calibration;

inline Tls& tls() { return t_tls; }

// Opens <dir>/<pid>.<n>.msmcap and starts writing into it. forked_from: the
// parent's pid when called in a child after fork (CaptureHeader::forked_from).
int channel_open(const char* session_dir, uint32_t forked_from = 0);
// Writes the end record and publishes how the process ended (once; later
// calls do nothing). The mappings stay.
void channel_close(int code, capture::EndKind kind);
// This process cannot be recorded (its capture could not be opened): leaves
// <dir>/unrecorded_<pid>.<n> holding `why` and the command line, which the
// host reports (msmemscope: error: pid N (...) was not recorded: why; exit 70).
void note_unrecorded(const char* session_dir, const char* why);
// Async-signal-safe: notes a fatal signal in the header (no record).
void channel_note_signal(int sig);
// The process is about to exec `path`, with an environment that preloads
// the agent or not: the end record says so (EndKind::Exec, format 4.2; the
// end code capture::kExecKeepsAgent or kExecDropsAgent, 4.3).
// channel_exec_failed() takes it back when the exec returned.
void channel_note_exec(const char* path, bool keeps_agent);
void channel_exec_failed();
// Header of the open stream (nullptr when none).
capture::CaptureHeader* channel_header();
// After fork in the child: forget the parent's stream (do not touch it).
void channel_forget_after_fork();
bool channel_is_open();

// Returns the writer of this thread with at least `need` bytes free in its
// chunk, or nullptr (event dropped and counted).
ThreadWriter* writer_for_slow(size_t need);
// The same; inline for the usual case (an open stream, this thread's writer
// current and room left in its chunk), which every record takes.
inline ThreadWriter* writer_for(size_t need) {
    ThreadWriter* w = t_tls.writer;
    if (__builtin_expect(g_header.load(std::memory_order_acquire) != nullptr && w != nullptr &&
                             !g_disabled.load(std::memory_order_relaxed) &&
                             w->generation == g_generation.load(std::memory_order_relaxed) && w->chunk != nullptr &&
                             w->cur + need <= w->end,
                         1))
        return w;
    return writer_for_slow(need);
}
// CLOCK_MONOTONIC, ns (msms_agent_now, and the capture's clock where the
// TSC is not used); inline: a call through the PLT per read showed in profiles.
inline uint64_t now_ns() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}
// The capture's clock: TSC ticks or CLOCK_MONOTONIC ns (capture_format.h).
// A plain rdtsc: the ordering protocol needs no fence here (an interrupt,
// the host's membarrier IPI included, re-executes a not yet retired read).
inline uint64_t read_clock() {
#if defined(__x86_64__) || defined(__i386__)
    if (__builtin_expect(g_clock_tsc, 1)) return __rdtsc();
#endif
    return now_ns();
}
// Writes a kClock record at w->cur (published with the record that follows)
// when one is due and the chunk has room; channel.cpp.
void calibrate(ThreadWriter* w, uint64_t ts);
// The capture clock's value ts as CLOCK_MONOTONIC ns, as the agent
// measures it now (the host's conversion is the reference; this one serves
// the Python call records' durations).
uint64_t clock_to_ns(uint64_t ts);
// Takes the timestamp of the record about to be written into w's chunk (call
// it after the last writer_for() of the record, and write the record at
// w->cur after it): marks the record in flight first, so the host never
// delivers a later event ahead of it (see the ordering protocol in
// capture_format.h).
inline uint64_t stamp(ThreadWriter* w) {
    w->chunk->pending.store(w->last_abs + 1, std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    uint64_t ts = read_clock();
    if (__builtin_expect(ts < w->last_abs, 0)) ts = w->last_abs;  // never backwards per thread
    w->last_abs = ts;
    if (__builtin_expect(ts >= g_next_calibration.load(std::memory_order_relaxed), 0)) calibrate(w, ts);
    return ts;
}
// Publishes what was written up to p.
inline void commit(ThreadWriter* w, uint8_t* p) {
    w->cur = p;
    w->chunk->used.store(static_cast<uint32_t>(p - reinterpret_cast<uint8_t*>(w->chunk + 1)),
                         std::memory_order_release);
    w->chunk->pending.store(0, std::memory_order_release);
}
// Interns a string into this thread's stream, returns its id (0 on failure).
uint64_t intern(ThreadWriter*& w, const char* s, size_t len);
// A fresh id for an interned string or stack.
uint64_t next_string_id();
// Counts one event that could not be written (every entry point that gives
// up on an event calls it once).
void count_drop();
// Turn collection off for good and say so once on stderr.
void disable(capture::DisabledReason reason, const char* why);

}  // namespace msms::agent
