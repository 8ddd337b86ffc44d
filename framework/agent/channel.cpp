// The capture file writer. No locks on the common path: a thread owns a
// chunk; only taking a chunk beyond the mapped end takes a (rare) spinlock.
// A thread writes its chunks in its staging slot and copies each full one to
// its place in the file (capture_format.h, "Staging"); without a slot (none
// could be mapped, or MSMEMSCOPE_CAPTURE_STAGING=0) it writes the chunk in place.
#include "channel.h"
#include "options.h"
#include "stacks.h"

#include <errno.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <fcntl.h>
#include <pthread.h>
#include <linux/membarrier.h>
#include <sys/file.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace msms::agent {

// Read by the inline fast paths in channel.h.
__thread Tls t_tls __attribute__((tls_model("initial-exec"))) = {0, nullptr};
std::atomic<capture::CaptureHeader*> g_header{nullptr};
std::atomic<uint32_t> g_generation{1};
std::atomic<bool> g_disabled{false};
bool g_clock_tsc = false;
std::atomic<uint64_t> g_next_calibration{UINT64_MAX};

namespace {

using capture::CaptureHeader;
using capture::ChunkHeader;

// The capture's descriptor, moved out of the program's way (a high number,
// capture_fd()); g_path/g_dev/g_ino name the file it must refer to: a
// program that closes its descriptors (a daemon's close_range(3, ~0)) gets
// the capture re-opened by path (issue #29 item 5).
std::atomic<int> g_fd{-1};
char g_path[4200];
dev_t g_dev = 0;
ino_t g_ino = 0;
std::atomic_flag g_fd_lock = ATOMIC_FLAG_INIT;
std::atomic<bool> g_fd_lost{false};  // re-opening failed: collection is off
std::atomic<uint8_t*> g_segments[capture::kMaxSegments];
// Sealed chunks per segment: a segment whose chunks are all sealed is never
// written again and is unmapped (the program keeps its address space).
std::atomic<uint32_t> g_seg_sealed[capture::kMaxSegments];
std::atomic_flag g_grow_lock = ATOMIC_FLAG_INIT;
std::atomic<uint64_t> g_next_string_id{1};
std::atomic<uint32_t> g_next_lane{1};  // lanes: see ChunkHeader::tid in capture_format.h
std::atomic<uint32_t> g_live_writers{0};  // threads holding a writer (each may hold a chunk)
// chunks_released when a budget wait last gave up (the host made no
// progress): no new wait until the host releases more.
std::atomic<uint64_t> g_budget_gave_up{UINT64_MAX};
std::atomic<bool> g_closed{false};
// The capture's descriptor is not touched once the stream is closed: the
// Python package closes it after msms_agent_detach (so that the host sees
// the stream end) and the number may then name another file of the
// program's. Everything that uses g_fd after the stream opened (growth,
// mapping a slot or a segment, copying a chunk to its place) holds a
// FileUse; channel_close sets g_files_closed, then waits for the users in
// flight. (Sequentially consistent on both sides: either the user sees the
// flag or the closer sees the user.)
std::atomic<bool> g_files_closed{false};
std::atomic<int> g_file_users{0};
struct FileUse {
    bool ok;
    FileUse() {
        g_file_users.fetch_add(1);
        ok = !g_files_closed.load();
    }
    ~FileUse() { g_file_users.fetch_sub(1); }
};
pthread_key_t g_thread_key;
pthread_once_t g_key_once = PTHREAD_ONCE_INIT;

constexpr int kMadvPopulateWrite = 23;  // MADV_POPULATE_WRITE (Linux 5.14); glibc 2.36 lacks the name
constexpr uint64_t kSegmentBytes = capture::kChunksPerSegment * capture::kChunkSize;

// Chunks of exited threads, handed to the next thread that needs one (a
// program that runs thousands of short threads would otherwise seal one
// mostly empty 64 KiB chunk per thread). Guarded by g_handon_lock.
struct HandedOn {
    ChunkHeader* chunk;
    uint64_t index;
    uint8_t* cur;
    uint64_t last_ts, last_ptr;
    capture::StageHeader* stage;  // the staging slot the chunk is in (nullptr: written in place)
    uint64_t stage_index;
};
constexpr int kHandOnSlots = 64;
constexpr size_t kHandOnMinRoom = 8192;  // a chunk with less room left is sealed
HandedOn g_handon[kHandOnSlots];
int g_handon_n = 0;
std::atomic_flag g_handon_lock = ATOMIC_FLAG_INIT;

// Staging slots (capture_format.h): every slot mapped in this stream, and
// the ones no thread holds now (a new thread takes one of those first).
// Guarded by g_stage_lock (taken when a thread starts or exits).
struct StageSlot {
    capture::StageHeader* hdr;
    uint64_t index;
};
constexpr int kMaxStages = 4096;
StageSlot g_stage_all[kMaxStages];
int g_stage_n = 0;
StageSlot g_stage_free[kMaxStages];
int g_stage_free_n = 0;
std::atomic_flag g_stage_lock = ATOMIC_FLAG_INIT;
bool g_staging = true;  // MSMEMSCOPE_CAPTURE_STAGING=0: every chunk written in place

void lock(std::atomic_flag& f) {
    while (f.test_and_set(std::memory_order_acquire)) {
        struct timespec ts = {0, 1000};
        nanosleep(&ts, nullptr);
    }
}

void write_stderr(const char* a, const char* b = "") {
    ssize_t r = write(2, a, strlen(a));
    r = write(2, b, strlen(b));
    r = write(2, "\n", 1);
    (void)r;
}

// The lowest number the capture's descriptor is moved to: high, away from
// the numbers a program opens and closes itself, but well inside its
// descriptor limit (the program keeps all but one of its descriptors).
int high_fd_floor() {
    struct rlimit rl;
    rlim_t lim = 1024;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) lim = rl.rlim_cur;
    if (lim > 1100) return 1000;
    return lim > 96 ? static_cast<int>(lim) - 64 : 3;
}

// fd moved to a high number (close-on-exec); fd itself when that fails.
int move_high(int fd) {
    int hi = fcntl(fd, F_DUPFD_CLOEXEC, high_fd_floor());
    if (hi < 0) return fd;
    close(fd);
    return hi;
}

bool is_capture(int fd) {
    struct stat st;
    return fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == g_dev && st.st_ino == g_ino;
}

// The capture's descriptor, checked: when the program closed it (or the
// number now names a file of its own), the capture is opened again by path
// (a new descriptor, high again); the stream goes on, nothing is lost. -1
// when that cannot be done: collection is turned off with the cause named.
// Called once per chunk operation (growth, a mapping, a chunk's copy),
// never per record.
int capture_fd() {
    int fd = g_fd.load(std::memory_order_acquire);
    if (__builtin_expect(is_capture(fd), 1)) return fd;
    if (g_fd_lost.load(std::memory_order_relaxed)) return -1;
    lock(g_fd_lock);
    fd = g_fd.load(std::memory_order_acquire);
    if (!is_capture(fd) && !g_fd_lost.load(std::memory_order_relaxed)) {
        int old = fd;
        int nfd = open(g_path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
        int err = errno;
        if (nfd >= 0 && !is_capture(nfd)) {
            close(nfd);  // another file under the capture's name: never written
            nfd = -1;
            err = ESTALE;
        }
        if (nfd >= 0) {
            // (The old number is not closed: it is the program's now. The
            // lock stays with the first open, which the header's mapping
            // keeps alive.)
            g_fd.store(move_high(nfd), std::memory_order_release);
        } else {
            g_fd_lost.store(true);
            char why[256];
            snprintf(why, sizeof(why),
                     "the program closed msmemscope's capture descriptor %d and the capture cannot be opened again (%s)",
                     old, strerror(err));
            disable(capture::DisabledReason::Other, why);
            // The host may never have seen the capture (renamed, removed):
            // it learns the cause from the session folder (70).
            char dir[sizeof(g_path)];
            snprintf(dir, sizeof(dir), "%s", g_path);
            if (char* slash = strrchr(dir, '/')) {
                *slash = 0;
                note_unrecorded(dir, why);
            }
        }
    }
    fd = g_fd_lost.load() ? -1 : g_fd.load(std::memory_order_acquire);
    g_fd_lock.clear(std::memory_order_release);
    return fd;
}

// The largest file this process may write (RLIMIT_FSIZE, ulimit -f).
uint64_t file_size_limit() {
    struct rlimit rl;
    if (getrlimit(RLIMIT_FSIZE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return UINT64_MAX;
    return static_cast<uint64_t>(rl.rlim_cur);
}

// Backs [off, off + len) of the capture with real blocks (a sparse page that
// cannot be backed later would raise SIGBUS inside the user's program).
// Returns 0 or an errno. The capture is sized within RLIMIT_FSIZE beforehand;
// should the kernel still raise SIGXFSZ for this call (the limit lowered
// meanwhile), it is blocked here and taken back: the program never gets a
// SIGXFSZ on the agent's account.
int reserve(off_t off, off_t len) {
    sigset_t xfsz, old, before, after;
    sigemptyset(&xfsz);
    sigaddset(&xfsz, SIGXFSZ);
    pthread_sigmask(SIG_BLOCK, &xfsz, &old);
    sigpending(&before);
    int fd = capture_fd();
    int rc = fd < 0 ? EBADF : posix_fallocate(fd, off, len);
    if (rc == EOPNOTSUPP || rc == EINVAL) rc = ftruncate(fd, off + len) ? errno : 0;
    if (!sigismember(&before, SIGXFSZ) && sigpending(&after) == 0 && sigismember(&after, SIGXFSZ)) {
        struct timespec zero = {0, 0};
        sigtimedwait(&xfsz, nullptr, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return rc;
}

// Backs more chunks within the file-size limit; on a full disk, as many as
// fit. The file grows as needed (see below), never past a segment's end.
// Caller holds g_grow_lock. Returns None on success, else why not.
capture::DisabledReason grow(CaptureHeader* h) {
    uint64_t mapped = h->chunks_mapped.load(std::memory_order_relaxed);
    uint64_t seg = mapped / capture::kChunksPerSegment;
    if (seg >= capture::kMaxSegments) return capture::DisabledReason::FileSize;
    // Disk is reserved a few chunks at a time (the host may release read
    // chunks meanwhile: a long run's file holds only what is unread), and
    // starting small: each step backs as many chunks as are backed already
    // (at least one, at most kReserveChunks), so a short run's capture is a
    // chunk per thread (issue #19 item 6).
    uint64_t step = mapped < 1 ? 1 : (mapped < capture::kReserveChunks ? mapped : capture::kReserveChunks);
    uint64_t target = (seg + 1) * capture::kChunksPerSegment;
    if (target > mapped + step) target = mapped + step;
    uint64_t limit = file_size_limit();
    uint64_t max_chunks = limit > capture::kHeaderSize ? (limit - capture::kHeaderSize) / capture::kChunkSize : 0;
    if (target > max_chunks) target = max_chunks;
    if (target <= mapped) return capture::DisabledReason::FileSize;
    for (;;) {
        int rc = reserve(static_cast<off_t>(capture::chunk_offset(mapped)),
                         static_cast<off_t>((target - mapped) * capture::kChunkSize));
        if (rc == 0) break;
        if (rc == EFBIG) return capture::DisabledReason::FileSize;
        if (rc == EBADF && g_fd_lost.load()) return capture::DisabledReason::Other;
        if (rc != ENOSPC && rc != EDQUOT) return capture::DisabledReason::Other;
        if (target - mapped == 1) return capture::DisabledReason::NoSpace;
        target = mapped + (target - mapped) / 2;  // what is left of the disk
    }
    // Published only now that the file holds the chunks (a failed or
    // partial reservation publishes nothing): the host compares the file's
    // size with this count, reading the count first (capture_reader.cpp).
    h->chunks_mapped.store(target, std::memory_order_release);
    return capture::DisabledReason::None;
}

// A chunk written in place (no staging slot): its segment is mapped when
// first needed (the whole segment's address range; pages past the end of the
// file are never touched, only backed chunks are handed out).
ChunkHeader* chunk_at(uint64_t index, capture::DisabledReason& why) {
    uint64_t seg = index / capture::kChunksPerSegment;
    uint8_t* base = g_segments[seg].load(std::memory_order_acquire);
    if (!base) {
        off_t off = static_cast<off_t>(capture::kHeaderSize + seg * kSegmentBytes);
        int fd = capture_fd();
        void* p = fd < 0 ? MAP_FAILED : mmap(nullptr, kSegmentBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off);
        if (p == MAP_FAILED) {
            why = errno == ENOMEM ? capture::DisabledReason::AddressSpace : capture::DisabledReason::Other;
            return nullptr;
        }
        uint8_t* expected = nullptr;
        if (g_segments[seg].compare_exchange_strong(expected, static_cast<uint8_t*>(p), std::memory_order_acq_rel)) {
            base = static_cast<uint8_t*>(p);
        } else {
            munmap(p, kSegmentBytes);
            base = expected;
        }
    }
    return reinterpret_cast<ChunkHeader*>(base + (index % capture::kChunksPerSegment) * capture::kChunkSize);
}

// With a capture budget (options().capture_budget: every live capture that is
// not saved; host/capture_disk.h): waits while
// the chunks taken and not yet released by the host exceed the budget plus
// the chunks threads hold now (which the host cannot release). Bounded: the
// wait ends when the host releases no chunk for 2 s (10 s while it has not
// started reading: start-up), and no further wait starts until it releases
// one again; the program is slowed to the host's pace, never stopped.
// Nobody will read this capture any more: its file was removed (the host
// stopped waiting for a program it left running: Ctrl-C) or the host is gone
// (killed). Then the program goes on unrecorded instead of filling the disk
// with a capture that a removed file holds until the program ends.
bool reader_gone() {
    int saved = errno;
    bool gone = false;
    struct stat st;
    int fd = g_fd.load(std::memory_order_acquire);
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_nlink == 0) gone = true;
    // The CLI's pid means it only in the CLI's pid namespace.
    uint32_t host = options().host_pid;
    if (!gone && host > 0 && options().host_pidns != 0 && stat("/proc/self/ns/pid", &st) == 0 &&
        static_cast<uint64_t>(st.st_ino) == options().host_pidns && kill(static_cast<pid_t>(host), 0) != 0 &&
        errno == ESRCH)
        gone = true;
    errno = saved;
    return gone;
}

// Asked every kReaderCheckChunks chunks taken (a few system calls per 4 MiB).
constexpr uint64_t kReaderCheckChunks = 64;

// false: the reader is gone (reader_gone), checked while waiting.
bool wait_for_host(CaptureHeader* h) {
    uint64_t budget = options().capture_budget;
    if (budget == 0) return true;
    // Chunks the host cannot release: the ones threads hold, and the
    // staging slots (never released while the process runs).
    budget += g_live_writers.load(std::memory_order_relaxed) + static_cast<uint64_t>(__atomic_load_n(&g_handon_n, __ATOMIC_RELAXED)) +
              static_cast<uint64_t>(__atomic_load_n(&g_stage_n, __ATOMIC_RELAXED));
    uint64_t released = h->chunks_released.load(std::memory_order_acquire);
    if (h->chunks_taken.load(std::memory_order_relaxed) < released + budget) return true;
    if (g_budget_gave_up.load(std::memory_order_relaxed) == released) return !reader_gone();
    uint64_t last = released;
    int idle = 0;
    while (h->chunks_taken.load(std::memory_order_relaxed) >= released + budget) {
        h->waits.fetch_add(1, std::memory_order_relaxed);
        struct timespec ts = {0, 100000L};
        nanosleep(&ts, nullptr);
        released = h->chunks_released.load(std::memory_order_acquire);
        if (released != last) {
            last = released;
            idle = 0;
        } else if (++idle >= (h->host_polls.load(std::memory_order_relaxed) ? 20000 : 100000)) {
            g_budget_gave_up.store(released, std::memory_order_relaxed);
            return !reader_gone();
        } else if (idle % 1000 == 0 && reader_gone()) {  // every 0.1 s
            return false;
        }
    }
    return true;
}

// Takes a fresh chunk index, backed by the file; waits with bounded back-off
// while another thread grows the file or the disk is full; false (and why)
// when no space can be had.
bool take_index(CaptureHeader* h, uint64_t& index, capture::DisabledReason& why) {
    if (!wait_for_host(h)) {
        why = capture::DisabledReason::NoReader;
        return false;
    }
    index = h->chunks_taken.fetch_add(1, std::memory_order_relaxed);
    if (index % kReaderCheckChunks == kReaderCheckChunks - 1 && reader_gone()) {
        why = capture::DisabledReason::NoReader;
        return false;
    }
    why = capture::DisabledReason::NoSpace;
    for (int attempt = 0; attempt < 200; ++attempt) {
        if (index < h->chunks_mapped.load(std::memory_order_acquire)) return true;
        if (!g_grow_lock.test_and_set(std::memory_order_acquire)) {
            why = capture::DisabledReason::None;
            while (why == capture::DisabledReason::None && index >= h->chunks_mapped.load(std::memory_order_acquire))
                why = grow(h);
            g_grow_lock.clear(std::memory_order_release);
            if (why == capture::DisabledReason::None) return true;
            // A limit does not go away by waiting; a full disk may.
            if (why != capture::DisabledReason::NoSpace) return false;
        }
        h->waits.fetch_add(1, std::memory_order_relaxed);
        struct timespec ts = {0, attempt < 100 ? 10000L : 1000000L};
        nanosleep(&ts, nullptr);
    }
    return false;
}

// Counts a sealed chunk in its segment; unmaps the segment (if chunks were
// written in place there) once every chunk of it is sealed.
void count_sealed(uint64_t index) {
    uint64_t seg = index / capture::kChunksPerSegment;
    if (seg < capture::kMaxSegments &&
        g_seg_sealed[seg].fetch_add(1, std::memory_order_acq_rel) + 1 == capture::kChunksPerSegment) {
        uint8_t* base = g_segments[seg].exchange(nullptr);
        if (base) munmap(base, kSegmentBytes);
    }
}

// Publishes the checksum of a chunk written in place and seals it.
void seal_chunk(ChunkHeader* c, uint64_t index) {
    uint32_t used = c->used.load(std::memory_order_relaxed);
    if (used > capture::kChunkPayload) used = capture::kChunkPayload;
    c->checksum = capture::chunk_sum(c, c->tid, used);
    c->sealed.store(1, std::memory_order_release);
    count_sealed(index);
}

// The bytes of a sealed chunk's header, as pwrite puts them in the file.
struct RawChunkHeader {
    uint32_t magic, tid, used, sealed;
    uint64_t pending, checksum;
};
static_assert(sizeof(RawChunkHeader) == sizeof(ChunkHeader) && offsetof(RawChunkHeader, checksum) == offsetof(ChunkHeader, checksum),
              "RawChunkHeader is ChunkHeader's layout");

// Writes all of iov at off (short writes and signals continue); errno or 0.
// A write past a file-size limit the program lowered after the chunk was
// reserved (setrlimit(RLIMIT_FSIZE) mid-run) fails with EFBIG; its SIGXFSZ
// is blocked and taken back as in reserve(): never the program's death.
int pwrite_all(struct iovec* iov, int n, off_t off) {
    int fd = capture_fd();
    if (fd < 0) return EBADF;
    while (n > 0) {
        sigset_t xfsz, old, before, after;
        sigemptyset(&xfsz);
        sigaddset(&xfsz, SIGXFSZ);
        pthread_sigmask(SIG_BLOCK, &xfsz, &old);
        sigpending(&before);
        ssize_t r = pwritev(fd, iov, n, off);
        int e = errno;
        if (!sigismember(&before, SIGXFSZ) && sigpending(&after) == 0 && sigismember(&after, SIGXFSZ)) {
            struct timespec zero = {0, 0};
            sigtimedwait(&xfsz, nullptr, &zero);
        }
        pthread_sigmask(SIG_SETMASK, &old, nullptr);
        if (r < 0) {
            if (e == EINTR) continue;
            return e;
        }
        if (r == 0) return EIO;
        off += r;
        while (n > 0 && static_cast<size_t>(r) >= iov->iov_len) {
            r -= static_cast<ssize_t>(iov->iov_len);
            ++iov;
            --n;
        }
        if (n > 0) {
            iov->iov_base = static_cast<char*>(iov->iov_base) + r;
            iov->iov_len -= static_cast<size_t>(r);
        }
    }
    return 0;
}

// Copies the chunk staged in slot s to its place `index` in the file, sealed
// (its records and header first, its magic last: the host sees either no
// chunk there or the whole one), then frees the slot (target 0). On a write
// error the records stay in the slot, where the host reads them, and
// collection is turned off.
void flush_stage(capture::StageHeader* s, uint64_t index) {
    FileUse use;
    if (!use.ok) return;  // the stream is closed: the chunk stays in its slot, where the host reads it
    uint32_t used = s->used.load(std::memory_order_relaxed);
    if (used > capture::kChunkPayload) used = capture::kChunkPayload;
    RawChunkHeader raw{capture::kChunkMagic, s->tid, used, 1, 0,
                       capture::chunk_sum(reinterpret_cast<const ChunkHeader*>(s), s->tid, used)};
    off_t off = static_cast<off_t>(capture::chunk_offset(index));
    struct iovec body[2] = {{reinterpret_cast<char*>(&raw) + sizeof(raw.magic), sizeof(raw) - sizeof(raw.magic)},
                            {s + 1, used}};
    struct iovec magic[1] = {{&raw.magic, sizeof(raw.magic)}};
    int e = pwrite_all(body, 2, off + static_cast<off_t>(sizeof(raw.magic)));
    if (e == 0) e = pwrite_all(magic, 1, off);
    if (e != 0) {
        disable(e == ENOSPC || e == EDQUOT ? capture::DisabledReason::NoSpace
                : e == EFBIG                   ? capture::DisabledReason::FileSize
                                               : capture::DisabledReason::Other,
                e == EFBIG ? "the capture file reached the file-size limit (ulimit -f)"
                           : "the capture file cannot be written");
        return;
    }
    s->target.store(0, std::memory_order_release);
    count_sealed(index);
}

// A chunk is staged when it is written in its thread's staging slot.
inline bool staged(const ThreadWriter* w) {
    return w->stage && w->chunk == reinterpret_cast<ChunkHeader*>(w->stage);
}

void seal(ThreadWriter* w) {
    if (w && w->chunk) {
        if (staged(w)) flush_stage(w->stage, w->chunk_index);
        else seal_chunk(w->chunk, w->chunk_index);
        w->chunk = nullptr;
    }
}

// Gives w's staging slot back for the next thread that needs one.
// (A slot that still stages a chunk, one that could not be copied to its
// place, is kept out of the pool: the host reads the chunk there.)
void stage_release(ThreadWriter* w) {
    if (!w->stage) return;
    if (w->stage->target.load(std::memory_order_relaxed) == 0) {
        lock(g_stage_lock);
        if (g_stage_free_n < kMaxStages) g_stage_free[g_stage_free_n++] = StageSlot{w->stage, w->stage_index};
        g_stage_lock.clear(std::memory_order_release);
    }
    w->stage = nullptr;
}

// w's staging slot: one a thread gave back, else a new one (a fresh chunk
// index, mapped and faulted in once). nullptr when none can be had: the
// thread writes its chunks in place.
capture::StageHeader* stage_for(ThreadWriter* w, CaptureHeader* h) {
    if (w->stage) return w->stage;
    if (!g_staging) return nullptr;
    lock(g_stage_lock);
    bool reuse = g_stage_free_n > 0;
    StageSlot slot{};
    if (reuse) slot = g_stage_free[--g_stage_free_n];
    bool room = g_stage_n < kMaxStages;
    g_stage_lock.clear(std::memory_order_release);
    if (!reuse) {
        if (!room) return nullptr;
        capture::DisabledReason why;
        if (!take_index(h, slot.index, why)) return nullptr;  // the in-place path says why
        int fd = capture_fd();
        void* p = fd < 0 ? MAP_FAILED
                         : mmap(nullptr, capture::kChunkSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                                static_cast<off_t>(capture::chunk_offset(slot.index)));
        if (p == MAP_FAILED) return nullptr;  // the index stays unused: all zero, skipped by the host
        madvise(p, capture::kChunkSize, kMadvPopulateWrite);
        slot.hdr = static_cast<capture::StageHeader*>(p);
        slot.hdr->magic.store(capture::kStageMagic, std::memory_order_release);
        lock(g_stage_lock);
        if (g_stage_n < kMaxStages) g_stage_all[g_stage_n++] = slot;
        g_stage_lock.clear(std::memory_order_release);
    }
    w->stage = slot.hdr;
    w->stage_index = slot.index;
    return slot.hdr;
}

// Takes over a chunk an exited thread left with room in it; false if none.
bool adopt(ThreadWriter* w) {
    lock(g_handon_lock);
    bool got = g_handon_n > 0;
    HandedOn e{};
    if (got) e = g_handon[--g_handon_n];
    g_handon_lock.clear(std::memory_order_release);
    if (!got) return false;
    if (e.stage) {
        // The chunk comes with the staging slot it is in.
        stage_release(w);
        w->stage = e.stage;
        w->stage_index = e.stage_index;
    }
    w->chunk = e.chunk;
    w->chunk_index = e.index;
    w->cur = e.cur;
    w->end = reinterpret_cast<uint8_t*>(e.chunk) + capture::kChunkSize;
    w->last_ts = e.last_ts;  // the chunk's delta base goes on
    w->last_ptr = e.last_ptr;
    if (w->last_abs < e.last_ts) w->last_abs = e.last_ts;
    uint8_t* p = w->cur;
    *p++ = capture::kThread;
    p = capture::put_varint(p, w->tid);
    commit(w, p);
    return true;
}

void thread_exit(void* p) {
    // Runs at thread exit: hand the chunk on to the next new thread when it
    // has room left, else seal it so the host knows it is complete.
    t_tls.depth++;
    auto* w = static_cast<ThreadWriter*>(p);
    if (w && w->chunk && w->generation == g_generation.load(std::memory_order_relaxed)) {
        bool handed = false;
        if (!g_closed.load() && static_cast<size_t>(w->end - w->cur) >= kHandOnMinRoom) {
            lock(g_handon_lock);
            if (g_handon_n < kHandOnSlots) {
                bool st = staged(w);
                g_handon[g_handon_n++] = HandedOn{w->chunk, w->chunk_index, w->cur, w->last_ts, w->last_ptr,
                                                  st ? w->stage : nullptr, st ? w->stage_index : 0};
                handed = true;
                if (st) w->stage = nullptr;
            }
            g_handon_lock.clear(std::memory_order_release);
        }
        if (handed) w->chunk = nullptr;
        else seal(w);
    }
    if (w && w->generation == g_generation.load(std::memory_order_relaxed)) stage_release(w);
    t_tls.writer = nullptr;
    if (w) {
        g_live_writers.fetch_sub(1, std::memory_order_relaxed);
        munmap(w, sizeof(ThreadWriter));
    }
}

void make_key() { pthread_key_create(&g_thread_key, thread_exit); }

ThreadWriter* new_writer() {
    void* p = mmap(nullptr, sizeof(ThreadWriter), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    auto* w = static_cast<ThreadWriter*>(p);  // zero-filled
    w->tid = static_cast<uint32_t>(syscall(SYS_gettid));
    w->lane = g_next_lane.fetch_add(1, std::memory_order_relaxed);
    w->generation = g_generation.load(std::memory_order_relaxed);
    w->last_abs = read_clock();
    pthread_once(&g_key_once, make_key);
    pthread_setspecific(g_thread_key, w);
    g_live_writers.fetch_add(1, std::memory_order_relaxed);
    return w;
}

const char* reason_text(capture::DisabledReason r) {
    switch (r) {
    case capture::DisabledReason::NoSpace: return "no space left on the disk for the capture file";
    case capture::DisabledReason::FileSize: return "the capture file reached the file-size limit (ulimit -f)";
    case capture::DisabledReason::AddressSpace:
        return "no address space left to map the capture file (ulimit -v)";
    case capture::DisabledReason::NoReader:
        return "msmemscope is gone (nobody will read the capture); the program goes on unrecorded";
    default: return "the capture file cannot grow";
    }
}

// ---- the capture's clock (capture_format.h) ----------------------------
// The first calibration pair (tick, ns) and the current measure of ns per
// tick (from that pair to the latest one: the agent's own conversions only
// serve Python call durations; the host converts from the pairs).
uint64_t g_cal_tick0 = 0, g_cal_ns0 = 0;
std::atomic<double> g_ns_per_tick{1.0};
std::atomic<uint64_t> g_calibration_step{0};  // ticks to the next pair
constexpr uint64_t kFirstCalibrationNs = 200000;  // 200 us, doubling
constexpr uint64_t kMaxCalibrationNs = 50000000;  // to 50 ms

// The CPU's TSC ticks at a constant rate whatever the frequency and sleep
// states (CPUID 0x80000007 EDX bit 8, "invariant TSC"); MSMEMSCOPE_CLOCK=monotonic
// keeps CLOCK_MONOTONIC.
bool tsc_usable() {
    const char* e = getenv("MSMEMSCOPE_CLOCK");
    if (e && strcmp(e, "monotonic") == 0) return false;
#if defined(__x86_64__) || defined(__i386__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u) return false;
    if (!__get_cpuid(0x80000007u, &a, &b, &c, &d)) return false;
    return (d & (1u << 8)) != 0;
#else
    return false;
#endif
}

// A (tick, ns) pair: CLOCK_MONOTONIC read between two TSC reads, the
// tightest of a few tries; the tick is the middle of the two.
void clock_pair(uint64_t& tick, uint64_t& ns) {
#if defined(__x86_64__) || defined(__i386__)
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 4; ++i) {
        _mm_lfence();
        uint64_t a = __rdtsc();
        _mm_lfence();
        uint64_t n = now_ns();
        _mm_lfence();
        uint64_t b = __rdtsc();
        if (b >= a && b - a < best) {
            best = b - a;
            tick = a + (b - a) / 2;
            ns = n;
        }
    }
    if (best == UINT64_MAX) {
        tick = __rdtsc();
        ns = now_ns();
    }
#else
    tick = ns = now_ns();
#endif
}

// Chooses the clock for a stream about to open and takes its first pair
// (tick0 at ns0; ns per tick measured over ~50 us). False: CLOCK_MONOTONIC.
bool clock_start(uint64_t& tick0, uint64_t& ns0, double& ns_per_tick) {
    g_clock_tsc = false;
    g_next_calibration.store(UINT64_MAX, std::memory_order_relaxed);
    if (!tsc_usable()) return false;
    clock_pair(tick0, ns0);
    uint64_t t1 = 0, n1 = 0;
    for (int i = 0; i < 1000000; ++i) {
        clock_pair(t1, n1);
        if (n1 < ns0 || n1 - ns0 >= 50000) break;
    }
    if (t1 <= tick0 || n1 <= ns0) return false;  // a TSC that does not tick
    ns_per_tick = static_cast<double>(n1 - ns0) / static_cast<double>(t1 - tick0);
    if (!(ns_per_tick > 1e-3 && ns_per_tick < 1e3)) return false;
    g_cal_tick0 = tick0;
    g_cal_ns0 = ns0;
    g_ns_per_tick.store(ns_per_tick, std::memory_order_relaxed);
    uint64_t step = static_cast<uint64_t>(kFirstCalibrationNs / ns_per_tick);
    g_calibration_step.store(step, std::memory_order_relaxed);
    g_clock_tsc = true;
    g_next_calibration.store(t1 + step, std::memory_order_relaxed);
    return true;
}

// The end record's checksum (format 4.2), after end_kind and end_code.
void seal_end(CaptureHeader* h) {
    h->end_sum.store(capture::end_record_sum(h->pid, h->end_kind.load(std::memory_order_relaxed),
                                             h->end_code.load(std::memory_order_relaxed), h->exec_path),
                     std::memory_order_release);
}

}  // namespace

void calibrate(ThreadWriter* w, uint64_t ts) {
    uint64_t due = g_next_calibration.load(std::memory_order_relaxed);
    if (ts < due || static_cast<size_t>(w->end - w->cur) < capture::kMaxFixedRecord + capture::kMaxClockRecord) return;
    // One thread writes the pair; the others go on.
    uint64_t step = g_calibration_step.load(std::memory_order_relaxed);
    double rate = g_ns_per_tick.load(std::memory_order_relaxed);
    uint64_t next_step = step * 2;
    if (static_cast<double>(next_step) * rate > kMaxCalibrationNs) next_step = step;
    if (!g_next_calibration.compare_exchange_strong(due, ts + next_step, std::memory_order_relaxed)) return;
    g_calibration_step.store(next_step, std::memory_order_relaxed);
    uint64_t tick, ns;
    clock_pair(tick, ns);
    if (tick < ts) tick = ts;
    if (tick > g_cal_tick0 && ns > g_cal_ns0)
        g_ns_per_tick.store(static_cast<double>(ns - g_cal_ns0) / static_cast<double>(tick - g_cal_tick0),
                            std::memory_order_relaxed);
    uint8_t* p = w->cur;
    *p++ = capture::kClock;
    p = capture::put_varint(p, ts - w->last_ts);
    w->last_ts = ts;
    p = capture::put_varint(p, tick - ts);
    p = capture::put_varint(p, ns);
    w->cur = p;
}

uint64_t clock_to_ns(uint64_t ts) {
    if (!g_clock_tsc) return ts;
    double d = static_cast<double>(static_cast<int64_t>(ts - g_cal_tick0)) * g_ns_per_tick.load(std::memory_order_relaxed);
    return g_cal_ns0 + static_cast<uint64_t>(static_cast<int64_t>(d));
}


bool channel_is_open() { return g_header.load(std::memory_order_acquire) != nullptr; }

uint64_t next_string_id() { return g_next_string_id.fetch_add(1, std::memory_order_relaxed); }

void count_drop() {
    CaptureHeader* h = g_header.load(std::memory_order_relaxed);
    if (h) h->dropped.fetch_add(1, std::memory_order_relaxed);
}

void disable(capture::DisabledReason reason, const char* why) {
    bool expected = false;
    if (g_disabled.compare_exchange_strong(expected, true)) {
        CaptureHeader* h = g_header.load(std::memory_order_relaxed);
        if (h) h->disabled_reason.store(static_cast<uint32_t>(reason), std::memory_order_relaxed);
        write_stderr("[msmemscope] warning: collection turned off: ", why);
    }
}

ThreadWriter* writer_for_slow(size_t need) {
    CaptureHeader* h = g_header.load(std::memory_order_acquire);
    if (!h || g_disabled.load(std::memory_order_relaxed)) return nullptr;
    // A record racing the end of the stream (collection is off by then)
    // takes no new chunk: its file may be closed already.
    FileUse use;
    if (!use.ok) return nullptr;
    ThreadWriter* w = t_tls.writer;
    if (__builtin_expect(w == nullptr, 0)) {
        w = new_writer();
        if (!w) return nullptr;
        t_tls.writer = w;
    } else if (__builtin_expect(w->generation != g_generation.load(std::memory_order_relaxed), 0)) {
        // Stream reopened (after fork): start clean, forget interned strings.
        uint32_t tid = static_cast<uint32_t>(syscall(SYS_gettid));
        memset(w, 0, sizeof(*w));
        w->tid = tid;
        w->lane = g_next_lane.fetch_add(1, std::memory_order_relaxed);
        w->generation = g_generation.load(std::memory_order_relaxed);
        w->last_abs = read_clock();
    }
    if (w->chunk == nullptr && adopt(w) && w->cur + need <= w->end) return w;
    if (__builtin_expect(w->chunk == nullptr || w->cur + need > w->end, 0)) {
        if (need > capture::kChunkPayload) return nullptr;
        seal(w);
        if (g_disabled.load(std::memory_order_relaxed)) return nullptr;  // the chunk could not be written
        capture::StageHeader* st = stage_for(w, h);
        uint64_t index = 0;
        capture::DisabledReason why;
        ChunkHeader* c = take_index(h, index, why) ? (st ? reinterpret_cast<ChunkHeader*>(st) : chunk_at(index, why)) : nullptr;
        if (!c) {
            disable(why, reason_text(why));
            return nullptr;
        }
        if (st) {
            // The slot stages chunk `index` from now on: its lane and fill
            // level first, then the target (release), as the host reads them.
            st->tid = w->lane;
            st->used.store(0, std::memory_order_relaxed);
            st->pending.store(0, std::memory_order_relaxed);
            st->target.store(index + 1, std::memory_order_release);
        } else {
            // One call instead of sixteen page faults while the chunk fills
            // (a no-op on kernels without MADV_POPULATE_WRITE).
            madvise(c, capture::kChunkSize, kMadvPopulateWrite);
            c->tid = w->lane;
            c->used.store(0, std::memory_order_relaxed);
            c->sealed.store(0, std::memory_order_relaxed);
            c->pending.store(0, std::memory_order_relaxed);
            c->magic.store(capture::kChunkMagic, std::memory_order_release);
        }
        w->chunk = c;
        w->chunk_index = index;
        w->cur = reinterpret_cast<uint8_t*>(c + 1);
        w->end = reinterpret_cast<uint8_t*>(c) + capture::kChunkSize;
        w->last_ts = 0;
        w->last_ptr = 0;
        // Every chunk names its thread first (the lane is not a thread id).
        uint8_t* p = w->cur;
        *p++ = capture::kThread;
        p = capture::put_varint(p, w->tid);
        commit(w, p);
        if (w->cur + need > w->end) return nullptr;
    }
    return w;
}

uint64_t intern(ThreadWriter*& w, const char* s, size_t len) {
    uint64_t hash = 1469598103934665603ull;
    for (size_t i = 0; i < len; ++i) hash = (hash ^ static_cast<uint8_t>(s[i])) * 1099511628211ull;
    hash |= 1;  // 0 marks an empty slot
    uint32_t slot = static_cast<uint32_t>(hash >> 40) % ThreadWriter::kCacheSize;
    if (w->string_hash[slot] == hash) return w->string_id[slot];
    // Process-wide: a string another thread defined keeps its id (stacks.h).
    int64_t claim = -1;
    if (uint64_t known = shared_find(hash, claim)) {
        w->string_hash[slot] = hash;
        w->string_id[slot] = known;
        return known;
    }
    if (len > 4096) len = 4096;
    ThreadWriter* ww = writer_for(1 + 20 + len);
    if (!ww) {
        shared_publish(claim, 0);
        return 0;
    }
    w = ww;
    uint64_t id = next_string_id();
    uint8_t* p = w->cur;
    *p++ = capture::kString;
    p = capture::put_varint(p, id);
    p = capture::put_varint(p, len);
    memcpy(p, s, len);
    p += len;
    commit(w, p);
    shared_publish(claim, id);
    w->string_hash[slot] = hash;
    w->string_id[slot] = id;
    return id;
}

static void fill_cmdline(CaptureHeader* h) {
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, h->cmdline, sizeof(h->cmdline) - 1);
        if (n < 0) n = 0;
        h->cmdline[n] = 0;
        close(fd);
    }
    ssize_t n = readlink("/proc/self/exe", h->exe, sizeof(h->exe) - 1);
    h->exe[n > 0 ? n : 0] = 0;
    const char* rank = getenv("RANK");
    if (!rank) rank = getenv("LOCAL_RANK");
    if (rank) strncpy(h->rank, rank, sizeof(h->rank) - 1);
    h->rank[sizeof(h->rank) - 1] = 0;
    h->cmdline[sizeof(h->cmdline) - 1] = 0;
    h->exe[sizeof(h->exe) - 1] = 0;
}

// The process's start time, field 22 of /proc/self/stat (0: not known).
static uint64_t start_ticks() {
    char text[1024];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, text, sizeof(text) - 1);
    close(fd);
    if (n <= 0) return 0;
    text[n] = 0;
    const char* p = strrchr(text, ')');  // the command may hold spaces and parentheses
    if (!p) return 0;
    ++p;
    for (int field = 2; field < 22; ++field) {  // p is at the space before field 3, ...
        while (*p == ' ') ++p;
        if (field < 21)
            while (*p && *p != ' ') ++p;
    }
    uint64_t v = 0;
    for (; *p >= '0' && *p <= '9'; ++p) v = v * 10 + static_cast<uint64_t>(*p - '0');
    return v;
}

int channel_open(const char* session_dir, uint32_t forked_from) {
    if (channel_is_open()) return EALREADY;
    // Every name below is relative to the session folder, opened once without
    // following a link (#29 item 4): a folder swapped meanwhile is never
    // written through. (g_path keeps the path for a re-open by name.)
    int dfd = open(session_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) return errno;
    struct DirFd {
        int fd;
        ~DirFd() { close(fd); }
    } dir_guard{dfd};
    char name[64], part_name[80];
    // The file is set up under a ".part" name (locked, header complete) and
    // only then renamed to its .msmcap name: the host never sees a capture
    // whose lock is not yet held or whose header is not yet written.
    char path[4096], part[4200];
    int fd = -1;
    pid_t pid = getpid();
    for (int n = 0; n < 1000 && fd < 0; ++n) {
        snprintf(name, sizeof(name), "%d.%d.msmcap", static_cast<int>(pid), n);
        snprintf(path, sizeof(path), "%s/%s", session_dir, name);
        struct stat seen;
        if (fstatat(dfd, name, &seen, AT_SYMLINK_NOFOLLOW) == 0) continue;  // an earlier image of this pid (exec)
        snprintf(part_name, sizeof(part_name), "%s.part", name);
        snprintf(part, sizeof(part), "%s.part", path);
        fd = openat(dfd, part_name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 && errno != EEXIST) return errno;
    }
    if (fd < 0) return EEXIST;
    // Held until this process dies: the host sees the stream is complete when
    // it can take the lock.
    if (flock(fd, LOCK_EX) != 0) {
        int e = errno;
        close(fd);
        return e;
    }
    // Within the file-size limit (ulimit -f) or not at all: growing past it
    // would send SIGXFSZ to the program.
    if (file_size_limit() < capture::kHeaderSize + capture::kChunkSize) {
        close(fd);
        unlinkat(dfd, part_name, 0);
        return EFBIG;
    }
    // Out of the program's way (capture_fd()): a high number, and the file
    // it must name, to be re-opened by path should the program close it.
    fd = move_high(fd);
    struct stat fst;
    if (fstat(fd, &fst) != 0) {
        int e = errno;
        close(fd);
        unlinkat(dfd, part_name, 0);
        return e;
    }
    g_dev = fst.st_dev;
    g_ino = fst.st_ino;
    snprintf(g_path, sizeof(g_path), "%s", part);
    g_fd_lost.store(false);
    g_fd = fd;
    if (int e = reserve(0, capture::kHeaderSize); e != 0) {
        close(fd);
        unlinkat(dfd, part_name, 0);
        g_fd = -1;
        return e;
    }
    void* p = mmap(nullptr, capture::kHeaderSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        close(fd);
        unlinkat(dfd, part_name, 0);
        g_fd = -1;
        return e;
    }
    auto* h = static_cast<CaptureHeader*>(p);
    h->format_major = capture::kFormatMajor;
    h->format_minor = capture::kFormatMinor;
    h->header_size = capture::kHeaderSize;
    h->chunk_size = capture::kChunkSize;
    h->pid = static_cast<uint32_t>(pid);
    // A forked child's parent is the process it was forked from, which may
    // have ended already (getppid() would then name a subreaper: the CLI).
    h->ppid = forked_from ? forked_from : static_cast<uint32_t>(getppid());
    h->forked_from = forked_from;
    struct timespec rt, mt;
    clock_gettime(CLOCK_REALTIME, &rt);
    clock_gettime(CLOCK_MONOTONIC, &mt);
    h->wall_start_ns = static_cast<uint64_t>(rt.tv_sec) * 1000000000ull + rt.tv_nsec;
    h->mono_start_ns = static_cast<uint64_t>(mt.tv_sec) * 1000000000ull + mt.tv_nsec;
    // The capture's clock: the TSC where it is invariant. The wall clock's
    // offset stays the one read above (wall_start_ns - mono_start_ns).
    uint64_t tick0 = 0, ns0 = 0;
    double ns_per_tick = 0;
    if (clock_start(tick0, ns0, ns_per_tick)) {
        h->clock = capture::kClockTsc;
        h->wall_start_ns += ns0 - h->mono_start_ns;
        h->mono_start_ns = ns0;
        h->tsc_start = tick0;
        h->ns_per_tick_q32 = static_cast<uint64_t>(ns_per_tick * 4294967296.0);
    }
    fill_cmdline(h);
    h->start_ticks = start_ticks();
    // Exact cross-thread ordering (capture_format.h): the host may issue
    // global expedited barriers that reach this process.
    h->ordering = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0 ? 1 : 0;
    h->fixed_sum = capture::fixed_sum(h);
    for (auto& s : g_segments) s.store(nullptr, std::memory_order_relaxed);
    for (auto& n : g_seg_sealed) n.store(0, std::memory_order_relaxed);
    g_handon_n = 0;
    g_stage_n = 0;
    g_stage_free_n = 0;
    const char* staging = getenv("MSMEMSCOPE_CAPTURE_STAGING");
    g_staging = !(staging && strcmp(staging, "0") == 0);
    g_budget_gave_up.store(UINT64_MAX, std::memory_order_relaxed);
    g_next_lane.store(1, std::memory_order_relaxed);
    g_next_string_id.store(1, std::memory_order_relaxed);
    g_generation.fetch_add(1, std::memory_order_relaxed);
    memcpy(h->magic, capture::kMagic, sizeof(h->magic));  // last: marks the header valid
    std::atomic_thread_fence(std::memory_order_release);
    if (renameat(dfd, part_name, dfd, name) != 0) {
        int e = errno;
        munmap(p, capture::kHeaderSize);
        unlinkat(dfd, part_name, 0);
        close(fd);
        g_fd = -1;
        return e;
    }
    snprintf(g_path, sizeof(g_path), "%s", path);
    g_header.store(h, std::memory_order_release);
    return 0;
}

void channel_close(int code, capture::EndKind kind) {
    CaptureHeader* h = g_header.load(std::memory_order_acquire);
    if (!h) return;
    // A vfork child shares our memory but is another process: not ours to end.
    if (h->pid != static_cast<uint32_t>(getpid())) return;
    if (g_closed.exchange(true)) return;
    ThreadWriter* w = writer_for(1 + 20);
    if (w) {
        uint64_t ts = stamp(w);
        uint8_t* p = w->cur;
        *p++ = capture::kEnd;
        p = capture::put_varint(p, ts - w->last_ts);
        w->last_ts = ts;
        p = capture::put_varint(p, capture::zigzag(code));
        commit(w, p);
        seal(w);
    }
    // Chunks of exited threads waiting for a new one: nobody else will write them.
    lock(g_handon_lock);
    for (int i = 0; i < g_handon_n; ++i) {
        if (g_handon[i].stage) flush_stage(g_handon[i].stage, g_handon[i].index);
        else seal_chunk(g_handon[i].chunk, g_handon[i].index);
    }
    g_handon_n = 0;
    g_handon_lock.clear(std::memory_order_release);
    h->exit_code = code;
    uint32_t unknown = static_cast<uint32_t>(capture::EndKind::Unknown);
    if (h->end_kind.compare_exchange_strong(unknown, static_cast<uint32_t>(kind)))
        h->end_code.store(code, std::memory_order_relaxed);
    seal_end(h);
    h->state.store(static_cast<uint32_t>(capture::State::Finished), std::memory_order_release);
    // From here on g_fd is not used (see FileUse); a user in flight (a
    // chunk copy takes microseconds) is waited for, boundedly.
    g_files_closed.store(true);
    for (uint64_t give_up = now_ns() + 2000000000ull; g_file_users.load() != 0 && now_ns() < give_up;) {
        struct timespec ts = {0, 10000L};
        nanosleep(&ts, nullptr);
    }
    // Mappings stay: other threads may still be inside a hook. The lock goes
    // with the process.
}

void note_unrecorded(const char* session_dir, const char* why) {
    if (!session_dir || !*session_dir) return;
    // Written under a temporary name, then linked to its own (exclusively):
    // the host never reads a half-written note.
    // Relative to the session folder opened without following a link (#29 item 4).
    int dfd = open(session_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) return;
    char tmp[64];
    snprintf(tmp, sizeof(tmp), ".unrecorded_%d.part", static_cast<int>(getpid()));
    int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        close(dfd);
        return;
    }
    // "<why>\n<command line>": a few hundred bytes, plain write(2); a
    // file-size limit below that leaves the file short (never a SIGXFSZ
    // for the program: blocked and taken back as in reserve()).
    char buf[1536];
    int len = snprintf(buf, sizeof(buf), "%s\n", why);
    if (len < 0 || len >= static_cast<int>(sizeof(buf))) len = static_cast<int>(sizeof(buf)) - 1;
    int cfd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (cfd >= 0) {
        ssize_t n = read(cfd, buf + len, sizeof(buf) - 1 - static_cast<size_t>(len));
        close(cfd);
        for (ssize_t i = 0; i < n; ++i)
            if (buf[len + i] == 0 || buf[len + i] == '\n') buf[len + i] = ' ';
        if (n > 0) len += static_cast<int>(n);
        while (len > 0 && buf[len - 1] == ' ') --len;
    }
    sigset_t xfsz, old, before, after;
    sigemptyset(&xfsz);
    sigaddset(&xfsz, SIGXFSZ);
    pthread_sigmask(SIG_BLOCK, &xfsz, &old);
    sigpending(&before);
    ssize_t r = write(fd, buf, static_cast<size_t>(len));
    (void)r;
    if (!sigismember(&before, SIGXFSZ) && sigpending(&after) == 0 && sigismember(&after, SIGXFSZ)) {
        struct timespec zero = {0, 0};
        sigtimedwait(&xfsz, nullptr, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    close(fd);
    char name[64];
    for (int n = 0; n < 100; ++n) {
        snprintf(name, sizeof(name), "unrecorded_%d.%d", static_cast<int>(getpid()), n);
        if (linkat(dfd, tmp, dfd, name, 0) == 0 || errno != EEXIST) break;
    }
    unlinkat(dfd, tmp, 0);
    close(dfd);
}

void channel_note_exec(const char* path, bool keeps_agent) {
    CaptureHeader* h = g_header.load(std::memory_order_acquire);
    if (!h || h->pid != static_cast<uint32_t>(getpid())) return;  // a vfork child: not this capture
    uint32_t unknown = static_cast<uint32_t>(capture::EndKind::Unknown);
    snprintf(h->exec_path, sizeof(h->exec_path), "%s", path ? path : "");
    if (h->end_kind.compare_exchange_strong(unknown, static_cast<uint32_t>(capture::EndKind::Exec))) {
        h->end_code.store(keeps_agent ? capture::kExecKeepsAgent : capture::kExecDropsAgent,
                          std::memory_order_release);
        seal_end(h);
    }
}

void channel_exec_failed() {
    CaptureHeader* h = g_header.load(std::memory_order_acquire);
    if (!h || h->pid != static_cast<uint32_t>(getpid())) return;
    uint32_t exec = static_cast<uint32_t>(capture::EndKind::Exec);
    if (h->end_kind.compare_exchange_strong(exec, static_cast<uint32_t>(capture::EndKind::Unknown))) {
        h->end_sum.store(0, std::memory_order_release);
        memset(h->exec_path, 0, sizeof(h->exec_path));
    }
}

void channel_note_signal(int sig) {
    CaptureHeader* h = g_header.load(std::memory_order_acquire);
    if (!h || h->pid != static_cast<uint32_t>(getpid())) return;
    uint32_t unknown = static_cast<uint32_t>(capture::EndKind::Unknown);
    if (h->end_kind.compare_exchange_strong(unknown, static_cast<uint32_t>(capture::EndKind::Signal))) {
        h->end_code.store(sig, std::memory_order_release);
        seal_end(h);
    }
}

CaptureHeader* channel_header() { return g_header.load(std::memory_order_acquire); }

void channel_forget_after_fork() {
    CaptureHeader* h = g_header.load(std::memory_order_relaxed);
    if (!h) return;
    g_header.store(nullptr, std::memory_order_release);
    uint64_t mapped = h->chunks_mapped.load(std::memory_order_relaxed);
    for (uint64_t s = 0; s * capture::kChunksPerSegment < mapped && s < capture::kMaxSegments; ++s) {
        uint8_t* base = g_segments[s].exchange(nullptr);
        if (base) munmap(base, kSegmentBytes);
    }
    munmap(h, capture::kHeaderSize);
    // Close without LOCK_UN: the lock belongs to the parent's open file
    // description, which stays locked while the parent lives.
    // (Only a descriptor that still names the capture: the program may have
    // closed it and reused the number.)
    if (is_capture(g_fd)) close(g_fd);
    g_fd = -1;
    g_fd_lost.store(false);
    g_fd_lock.clear();
    g_closed.store(false);
    g_files_closed.store(false);
    g_file_users.store(0);
    g_handon_n = 0;  // the parent's chunks
    // The parent's staging slots: never written by the child.
    for (int i = 0; i < g_stage_n; ++i) munmap(g_stage_all[i].hdr, capture::kChunkSize);
    g_stage_n = 0;
    g_stage_free_n = 0;
    g_stage_lock.clear();
    g_handon_lock.clear();
    g_grow_lock.clear();
    g_generation.fetch_add(1, std::memory_order_relaxed);
    g_live_writers.store(t_tls.writer ? 1 : 0, std::memory_order_relaxed);  // the one thread left
    if (t_tls.writer) {
        t_tls.writer->chunk = nullptr;
        t_tls.writer->stage = nullptr;
    }
}

}  // namespace msms::agent
