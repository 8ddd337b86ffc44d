// The capture format (.msmcap): what the agent writes and the host reads.
// Header-only and dependency-free so that the agent (libc only) and the host
// share one definition. Versioned: the host refuses a different major.
//
// File layout
//   [0, kHeaderSize)              CaptureHeader
//   [kHeaderSize + i*kChunkSize)  chunk i: ChunkHeader + records
// A thread owns one chunk at a time (taken with an atomic counter), writes
// records into it and publishes its fill level with a release store, so the
// host can read while the program runs and nothing is lost if it dies.
//
// Records: one tag byte, then LEB128 varints (the compact heap records of
// format 3 pack their fields instead: see kPacked). Timestamps are deltas
// from the previous record of the same chunk (the first one is absolute).
//
// The capture's clock (format 3, CaptureHeader::clock): kClockMonotonic
// timestamps are CLOCK_MONOTONIC ns (as in format 2); kClockTsc timestamps
// are ticks of the CPU's invariant time-stamp counter (one rdtsc per record
// instead of a clock_gettime: on a kvm-clock VM the clock read was the
// largest part of the hot path, issue #18 item 6). The host converts ticks to
// CLOCK_MONOTONIC ns when it delivers an event (framework/host/tick_clock.h):
// the header holds a first (tick, ns) pair and the agent's first measure of
// ns per tick; kClock records add (tick, ns) pairs along the stream, every
// 200 us at first, then at doubling intervals up to every 50 ms, so the
// conversion follows the clock's own rate (NTP slewing included).
//
// Integrity (format 2): the header's fixed part (who wrote it: pid, times,
// rank, command) carries a checksum written before the magic, and each chunk
// gets the checksum of its records when it is sealed, so a damaged capture is
// reported, never misread. Text fields are always NUL-terminated within their
// size. A chunk whose thread exits is handed to the next new thread (a kThread
// record names the new writer) instead of being sealed mostly empty.
//
// Staging (format 4): a thread does not write its records into the chunk's
// own place in the file. It writes them into a staging slot: a chunk-sized
// slot of the file (header magic kStageMagic) that it maps once and reuses
// for every chunk it fills, and when the chunk is full it copies the records
// to the chunk's place with pwrite (the chunk's header last). Writing into
// freshly mapped pages cost a page fault per 4 KiB, several microseconds each
// on a virtual machine, and the largest part of the hot path (issue #18
// item 6); the kernel's copy costs about a microsecond per page and the
// staging pages stay mapped. A staging slot's header is a ChunkHeader whose
// last field names the chunk it stages (StageHeader): while it does, the
// chunk's records are read from the slot (the host copies what was published
// and then checks that the slot still stages that chunk, as a sequence lock);
// once the chunk is copied to its place the slot is reset (target 0, then
// the next chunk). A process that dies leaves its last chunks in their slots,
// complete up to their published fill level. Chunk indices keep their meaning
// (taken in order from chunks_taken): a staging slot is one index, taken when
// a thread first needs one; the slots of exited threads are reused.
//
// Exact ordering across threads (no reorder window): while a thread is
// between reading the clock and publishing its record it keeps
// ChunkHeader::pending non-zero (its previous timestamp + 1, a lower bound of
// the one in flight). The host reads the clock (T), issues
// membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) (the agent registered for it,
// header.ordering = 1), then reads every thread's pending word, then the
// records. Any clock read that is not yet published either happened after the
// barrier (so its timestamp is >= T) or its pending store is visible; so
// every event below min(T, pending - 1) is already readable and can be
// delivered in final order. That bound holds for every later read too (a
// mark visible after the barrier stays so until its record is published), so
// the host may poll again without a barrier and deliver up to
// min(T of its last barrier, pending - 1): it barriers every 50 ms, not at
// every poll (each barrier is an interrupt on the target's CPUs). The hot
// path pays two plain stores, the host one system call per barrier. Without
// membarrier the host falls back to a time window and counts late events
// ("stragglers").
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace msms::capture {

constexpr char kMagic[8] = {'M', 'S', 'M', 'S', 'C', 'A', 'P', '\0'};
constexpr uint32_t kFormatMajor = 4;
// Minor 1: CaptureHeader::forked_from. Minor 2: CaptureHeader::end_sum (the
// end record's checksum; captures of minor 0 and 1 have none and are read as
// before, their end record trusted as it is). Minor 3: EndKind::Exec for every
// exec, end_code kExecKeepsAgent when the new environment preloads the agent
// (minor 2 noted only the others). Minor 4: CaptureHeader::start_ticks (the
// process's start time: an exec keeps it, another process given the same pid
// has its own). Minor 5: kStack kind 4 (a HOST block's allocator caller: in
// the cstack field of a heap record of a run with Python stacks and no C
// ones; older hosts would read it as a C stack).
constexpr uint32_t kFormatMinor = 5;
// The oldest major this build still reads (format 2: ns timestamps, varint
// heap records only; read as a format 3 capture with kClockMonotonic; format
// 3: no staging slots, read as format 4).
constexpr uint32_t kFormatMajorOldest = 2;

// CaptureHeader::clock.
enum ClockKind : uint32_t {
    kClockMonotonic = 0,  // timestamps are CLOCK_MONOTONIC ns (format 2: always)
    kClockTsc = 1,        // timestamps are TSC ticks (converted by the host)
};
constexpr uint32_t kHeaderSize = 4096;
constexpr uint32_t kChunkSize = 64 * 1024;
constexpr uint32_t kChunkMagic = 0x4B4E4843;  // "CHNK"
constexpr uint32_t kStageMagic = 0x45475453;  // "STGE": a staging slot (format 4)
constexpr uint64_t kChunksPerSegment = 512;   // mapped 32 MiB of address space at a time
constexpr uint64_t kReserveChunks = 32;       // disk reserved (fallocate) 2 MiB at a time
constexpr uint64_t kMaxSegments = 8192;       // 256 GiB per process

enum class State : uint32_t { Running = 0, Finished = 1 };

// How the process ended, as far as the agent could see it.
enum class EndKind : uint32_t {
    Unknown = 0,  // no end seen: SIGKILL, OOM kill, exec, or still running
    Exit = 1,     // exit() / return from main: end_code = status
    QuickExit = 2,  // _exit() / _Exit(): end_code = status
    Signal = 3,   // a fatal signal: end_code = signal number
    Returned = 4, // the stream ended before the exit status was known (the
                  // Python API's session, closed by its atexit handler; a
                  // msms_agent_detach): end_code 0, not a status
    Exec = 5,     // (format 4.2) about to exec CaptureHeader::exec_path; end_code
                  // kExecDropsAgent: with an environment that does not preload
                  // the agent (env -i), so the new image is not recorded;
                  // (format 4.3) kExecKeepsAgent: with one that does (the new
                  // image's capture follows unless it does not load the agent,
                  // a static or set-user-ID program). Undone when the exec fails.
};
// EndKind::Exec's end_code.
constexpr int32_t kExecDropsAgent = 0;
constexpr int32_t kExecKeepsAgent = 1;

// Why the agent turned collection off (CaptureHeader::disabled_reason).
enum class DisabledReason : uint32_t {
    None = 0,
    NoSpace = 1,       // the disk (or quota) is full
    FileSize = 2,      // the file-size limit (ulimit -f, RLIMIT_FSIZE)
    AddressSpace = 3,  // no address space to map the capture (ulimit -v)
    Other = 4,
    NoReader = 5,      // nobody will read it: msmemscope is gone, or the capture was removed
};

struct CaptureHeader {
    char magic[8];
    uint32_t format_major;
    uint32_t format_minor;
    uint32_t header_size;
    uint32_t chunk_size;
    // ---- fixed part: written once before the magic, covered by fixed_sum
    uint32_t pid;
    uint32_t ppid;
    uint64_t wall_start_ns;  // CLOCK_REALTIME at start
    uint64_t mono_start_ns;  // CLOCK_MONOTONIC at the same moment
    uint32_t ordering;       // 1: membarrier protocol available (see top)
    uint32_t clock;          // ClockKind (format 3; zero, i.e. monotonic, in format 2)
    char rank[32];          // RANK / LOCAL_RANK of the process, when set (NUL-terminated)
    char cmdline[1024];     // NUL-separated argv, truncated (ends with a NUL)
    char exe[512];          // NUL-terminated
    uint64_t fixed_sum;     // checksum(pid .. exe)
    // ---- live part: updated while the process runs
    std::atomic<uint64_t> chunks_taken;   // chunk indices handed out
    std::atomic<uint64_t> chunks_mapped;  // chunks backed by the file
    std::atomic<uint32_t> state;          // State
    std::atomic<uint32_t> disabled_reason;  // DisabledReason: the agent turned itself off
    std::atomic<uint64_t> dropped;        // events that could not be recorded
    std::atomic<uint64_t> waits;          // back-off waits when space ran out
    int32_t exit_code;                    // from exit(), when known
    std::atomic<uint32_t> end_kind;       // EndKind
    std::atomic<int32_t> end_code;        // status or signal number
    // Call stacks the agent defined (kStack records written) so far: the
    // total the host's "symbolizing N / M stacks" counts towards. Was a
    // reserved 0 before: captures of older agents say 0 (= not known).
    std::atomic<uint32_t> stacks_defined;
    // ---- written by the host that releases the capture (zero otherwise;
    // appended in format 2.0: readers that do not know them never look)
    // Chunks the host has read and released (punched out of the file:
    // fallocate PUNCH_HOLE, the file keeps its size). With a capture budget
    // (agent option capture_budget=N: 96 with --aggregate, else the host's
    // kept part + unread lead, capture_disk.h) the agent waits while
    // more than N chunks beyond its threads' current ones are unreleased, so
    // the file's disk use stays bounded whatever the number of events.
    std::atomic<uint64_t> chunks_released;
    // 1 once any chunk was released: the capture cannot be replayed whole.
    std::atomic<uint32_t> released_any;
    uint32_t reserved2;
    std::atomic<uint64_t> host_polls;  // the releasing host's polls: non-zero once it reads
    // ---- format 3: the clock's first calibration (kClockTsc only, zero
    // otherwise); written before the magic, covered by fixed_sum.
    uint64_t tsc_start;         // the TSC at mono_start_ns
    uint64_t ns_per_tick_q32;   // the agent's first measure of ns per tick, times 2^32
    // ---- format 4.1: written before the magic, covered by fixed_sum (zero,
    // and not summed, in older captures). The pid this process was forked
    // from without exec: the agent's fork handler opened this capture in the
    // child (0: the process began with exec, or was attached to). Recorded
    // here so that "_exit after fork" does not depend on the parent's capture
    // still being there when the child ends.
    uint32_t forked_from;
    uint32_t reserved3;
    // ---- format 4.2: the end record's checksum, end_record_sum(pid,
    // end_kind, end_code), stored by the agent after it sets those two (0:
    // no end recorded). A header whose end fails it was edited or damaged:
    // the host says "end record corrupt" and does not trust it.
    std::atomic<uint64_t> end_sum;
    // EndKind::Exec: the program given to exec (NUL-terminated, truncated).
    char exec_path[256];
    // ---- format 4.4: written before the magic, covered by fixed_sum (zero,
    // and not summed, in older captures). The process's start time, field 22
    // of /proc/self/stat (clock ticks after boot) when the capture began (0:
    // not known). An exec keeps it: two captures of one pid with different
    // start times are two processes (the pid was reused), not an exec.
    uint64_t start_ticks;
};
static_assert(sizeof(CaptureHeader) <= kHeaderSize, "header too large");
constexpr size_t kFixedBegin = offsetof(CaptureHeader, pid);
constexpr size_t kFixedEnd = offsetof(CaptureHeader, fixed_sum);
constexpr size_t kClockBegin = offsetof(CaptureHeader, tsc_start);
constexpr size_t kClockEnd = offsetof(CaptureHeader, ns_per_tick_q32) + sizeof(uint64_t);
constexpr size_t kForkBegin = offsetof(CaptureHeader, forked_from);
constexpr size_t kStartTicks = offsetof(CaptureHeader, start_ticks);
// Whether a header has the fields of format 4.2 (end_sum).
inline bool has_end_sum(const CaptureHeader* h) {
    return h->format_major > 4 || (h->format_major == 4 && h->format_minor >= 2);
}
// Whether a header has the fields of format 4.4 (start_ticks).
inline bool has_start_ticks(const CaptureHeader* h) {
    return h->format_major > 4 || (h->format_major == 4 && h->format_minor >= 4);
}
// Whether a header has the fields of format 4.1 (forked_from).
inline bool has_forked_from(const CaptureHeader* h) {
    return h->format_major > 4 || (h->format_major == 4 && h->format_minor >= 1);
}

// A chunk belongs to a lane: the chunks one writer took, in order, and the
// chunk it handed on at exit, written by later threads one after the other.
// Records in a lane are in time order; a lane is never written by two
// threads at once. Each chunk starts with a kThread record (the writer's
// thread id); a kThread record further on marks a hand-on.
struct ChunkHeader {
    std::atomic<uint32_t> magic;  // set last (release) when the chunk is set up
    uint32_t tid;                 // the lane (unique per writer; not a thread id)
    std::atomic<uint32_t> used;    // bytes of records published
    std::atomic<uint32_t> sealed;  // 1: the thread moved on, no more writes
    std::atomic<uint64_t> pending; // non-zero: a record is in flight whose
                                   // timestamp is >= pending - 1
    uint64_t checksum;  // chunk_sum(): written before sealed is set
};
constexpr uint32_t kChunkPayload = kChunkSize - sizeof(ChunkHeader);

// A staging slot's header (format 4, see "Staging" above): a ChunkHeader
// whose fields say the same of the chunk being staged (tid: its lane; used,
// pending: as for a chunk), but whose last field names that chunk.
struct StageHeader {
    std::atomic<uint32_t> magic;   // kStageMagic
    uint32_t tid;                  // lane of the chunk staged now
    std::atomic<uint32_t> used;    // bytes of its records published
    std::atomic<uint32_t> sealed;  // always 0
    std::atomic<uint64_t> pending; // as ChunkHeader::pending
    std::atomic<uint64_t> target;  // index + 1 of the chunk staged; 0: none
};
static_assert(sizeof(StageHeader) == sizeof(ChunkHeader) && offsetof(StageHeader, used) == offsetof(ChunkHeader, used) &&
                  offsetof(StageHeader, pending) == offsetof(ChunkHeader, pending) &&
                  offsetof(StageHeader, target) == offsetof(ChunkHeader, checksum),
              "a staging slot's header is laid out as a chunk's");

inline uint64_t chunk_offset(uint64_t index) { return kHeaderSize + index * kChunkSize; }

// Record tags.
enum Tag : uint8_t {
    kPad = 0,          // rest of chunk unused
    kHeapMalloc = 1,   // ts, ptr(zigzag delta), size
    kHeapFree = 2,     // ts, ptr(zigzag delta)
    kHeapMallocS = 3,  // ts, ptr, size, cstack, pystack
    kHeapFreeS = 4,    // ts, ptr, cstack, pystack
    kGeneric = 5,      // ts, kind, type, devkind, devid(zigzag), ptr, size,
                       // aux0, aux1, name, attrs, cstack, pystack
                       // (MALLOC and FREE: aux1 = the pool's bytes after
                       // the event + 1, its row's `total`; 0: not given)
    kString = 6,       // id, len, bytes
    kStack = 7,        // id, kind(0 c,1 py,2 c of a CPython process's start-up, 3 c of a
                       // block the dynamic loader allocated, 4 the native code that
                       // called the allocator for a HOST block of a run with Python
                       // stacks and no C ones: its return address, then operator
                       // new's caller when that is it (format 4.5); 2, 3 and 4 taken
                       // without C stacks asked for: symbolized without source lines),
                       // n, frames (c: addresses; py: string ids)
    kModule = 8,       // ts, load bias, extent (end of the highest PT_LOAD), path string id
    kEnd = 9,          // ts, exit code (zigzag): the process finished normally
    kThreadName = 10,  // string id
    kPyCall = 11,      // ts, ts - start, name: a returning Python call (PY_TRACE
                       // PY_CALL, device NA, aux0 = start)
    kThread = 12,      // tid: the records that follow are this thread's (the
                       // chunk was handed on when its thread exited)
    kClock = 13,       // ts, mid - ts, ns (format 3, kClockTsc): the clock read
                       // CLOCK_MONOTONIC ns `ns` at tick `mid` (its order in
                       // the stream is ts, as for any record)
    // Format 3: a tag byte with the high bit set is a compact heap record
    // whose fields are packed little-endian in as many bytes as they need
    // (no varint loops on the hot path, and one store per field):
    //   tag = kPacked | kPackedMalloc? | (ts bytes - 1) << 3 | (ptr bytes - 1)
    //   [malloc: one byte, size bytes - 1] ts delta, zigzag ptr delta[, size]
    kPacked = 0x80,
    kPackedMalloc = 0x40,
};

// Bytes a packed field needs (1..8).
inline uint32_t packed_len(uint64_t v) { return static_cast<uint32_t>((71 - __builtin_clzll(v | 1)) >> 3); }
constexpr size_t kMaxPackedRecord = 2 + 3 * 8;
constexpr size_t kMaxClockRecord = 1 + 3 * 10;

// A 64-bit checksum (four independent multiply-xor lanes: a 64 KiB chunk costs
// a few microseconds when it is sealed). Not cryptographic: it finds damage.
inline uint64_t checksum(const void* data, size_t n, uint64_t seed) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
    uint64_t h[4] = {seed ^ 0x243F6A8885A308D3ull, seed ^ 0x13198A2E03707344ull, seed ^ 0xA4093822299F31D0ull,
                     seed ^ 0x082EFA98EC4E6C89ull};
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        for (int l = 0; l < 4; ++l) {
            uint64_t w;
            memcpy(&w, p + i + 8 * l, 8);
            h[l] = (h[l] ^ w) * kMul;
            h[l] ^= h[l] >> 31;
        }
    }
    uint64_t tail = 0;
    for (size_t k = 0; i < n; ++i, ++k) tail ^= static_cast<uint64_t>(p[i]) << (8 * (k & 7)) ^ (k << 56);
    uint64_t r = (h[0] ^ (h[1] * 3) ^ (h[2] * 5) ^ (h[3] * 7) ^ tail ^ n) * kMul;
    return r ^ (r >> 29);
}
// The checksum of a sealed chunk: its thread and fill level, then its records.
inline uint64_t chunk_sum(const ChunkHeader* c, uint32_t tid, uint32_t used) {
    return checksum(c + 1, used, (static_cast<uint64_t>(tid) << 32) | used);
}
// Format 4.2: the end record's checksum (never 0: 0 means none written),
// over pid, end_kind, end_code and, for EndKind::Exec, exec_path.
inline uint64_t end_record_sum(uint32_t pid, uint32_t end_kind, int32_t end_code, const char* exec_path) {
    uint32_t v[3] = {pid, end_kind, static_cast<uint32_t>(end_code)};
    uint64_t seed = 0x454e445245434f52ull;  // "ENDRECOR"
    if (end_kind == static_cast<uint32_t>(EndKind::Exec)) seed ^= checksum(exec_path, strnlen(exec_path, 256), seed);
    return checksum(v, sizeof(v), seed) | 1;
}
// Format 2: the fixed part; format 3: also the clock's calibration.
inline uint64_t fixed_sum(const CaptureHeader* h) {
    uint64_t seed = h->format_major;
    if (h->format_major >= 3)
        seed ^= checksum(reinterpret_cast<const char*>(h) + kClockBegin, kClockEnd - kClockBegin, h->format_major);
    if (has_forked_from(h))
        seed ^= checksum(reinterpret_cast<const char*>(h) + kForkBegin, sizeof(uint32_t), h->format_minor);
    if (has_start_ticks(h))
        seed ^= checksum(reinterpret_cast<const char*>(h) + kStartTicks, sizeof(uint64_t), h->format_minor);
    return checksum(reinterpret_cast<const char*>(h) + kFixedBegin, kFixedEnd - kFixedBegin, seed);
}

inline uint8_t* put_varint(uint8_t* p, uint64_t v) {
    while (v >= 0x80) {
        *p++ = static_cast<uint8_t>(v) | 0x80;
        v >>= 7;
    }
    *p++ = static_cast<uint8_t>(v);
    return p;
}
inline uint64_t zigzag(int64_t v) { return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63); }
inline int64_t unzigzag(uint64_t v) { return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1); }

// Returns false on truncated input.
inline bool get_varint(const uint8_t*& p, const uint8_t* end, uint64_t& out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (p >= end) return false;
        uint8_t b = *p++;
        v |= static_cast<uint64_t>(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            out = v;
            return true;
        }
    }
    return false;
}

constexpr size_t kMaxFixedRecord = 1 + 10 * 13;  // tag + 13 varints

}  // namespace msms::capture
