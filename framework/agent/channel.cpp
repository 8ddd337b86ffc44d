// The capture file writer. No locks on the common path: a thread owns a
// chunk; only taking a chunk beyond the mapped end takes a (rare) spinlock.
#include "channel.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <linux/membarrier.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
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

namespace {

using capture::CaptureHeader;
using capture::ChunkHeader;

int g_fd = -1;
std::atomic<uint8_t*> g_segments[capture::kMaxSegments];
std::atomic_flag g_grow_lock = ATOMIC_FLAG_INIT;
std::atomic<uint64_t> g_next_string_id{1};
pthread_key_t g_thread_key;
pthread_once_t g_key_once = PTHREAD_ONCE_INIT;

constexpr int kMadvPopulateWrite = 23;  // MADV_POPULATE_WRITE (Linux 5.14); glibc 2.36 lacks the name
constexpr uint64_t kSegmentBytes = capture::kChunksPerSegment * capture::kChunkSize;

void write_stderr(const char* a, const char* b = "") {
    ssize_t r = write(2, a, strlen(a));
    r = write(2, b, strlen(b));
    r = write(2, "\n", 1);
    (void)r;
}

// Grows the file and maps one more segment. Caller holds g_grow_lock.
bool map_segment(CaptureHeader* h, uint64_t seg) {
    if (seg >= capture::kMaxSegments) return false;
    off_t off = static_cast<off_t>(capture::kHeaderSize + seg * kSegmentBytes);
    // Reserve real blocks now: a sparse page that cannot be backed later
    // would raise SIGBUS inside the user's program.
    int rc = posix_fallocate(g_fd, off, static_cast<off_t>(kSegmentBytes));
    if (rc == EOPNOTSUPP || rc == EINVAL) rc = ftruncate(g_fd, off + static_cast<off_t>(kSegmentBytes)) ? errno : 0;
    if (rc != 0) return false;
    void* p = mmap(nullptr, kSegmentBytes, PROT_READ | PROT_WRITE, MAP_SHARED, g_fd, off);
    if (p == MAP_FAILED) return false;
    g_segments[seg].store(static_cast<uint8_t*>(p), std::memory_order_release);
    h->chunks_mapped.store((seg + 1) * capture::kChunksPerSegment, std::memory_order_release);
    return true;
}

ChunkHeader* chunk_at(uint64_t index) {
    uint8_t* base = g_segments[index / capture::kChunksPerSegment].load(std::memory_order_acquire);
    if (!base) return nullptr;
    return reinterpret_cast<ChunkHeader*>(base + (index % capture::kChunksPerSegment) * capture::kChunkSize);
}

// Takes a fresh chunk; waits with bounded back-off while another thread grows
// the file; returns nullptr when no space can be had.
ChunkHeader* take_chunk(CaptureHeader* h) {
    uint64_t index = h->chunks_taken.fetch_add(1, std::memory_order_relaxed);
    for (int attempt = 0; attempt < 2000; ++attempt) {
        if (index < h->chunks_mapped.load(std::memory_order_acquire)) return chunk_at(index);
        if (!g_grow_lock.test_and_set(std::memory_order_acquire)) {
            bool ok = true;
            while (ok && index >= h->chunks_mapped.load(std::memory_order_acquire)) {
                uint64_t seg = h->chunks_mapped.load(std::memory_order_relaxed) / capture::kChunksPerSegment;
                ok = map_segment(h, seg);
            }
            g_grow_lock.clear(std::memory_order_release);
            if (ok) return chunk_at(index);
            // No space: wait for the disk to free up, a bounded number of times.
        }
        h->waits.fetch_add(1, std::memory_order_relaxed);
        struct timespec ts = {0, attempt < 100 ? 10000L : 1000000L};
        nanosleep(&ts, nullptr);
    }
    return nullptr;
}

void seal(ThreadWriter* w) {
    if (w && w->chunk) {
        w->chunk->sealed.store(1, std::memory_order_release);
        w->chunk = nullptr;
    }
}

void thread_exit(void* p) {
    // Runs at thread exit: seal the chunk so the host knows it is complete.
    t_tls.depth++;
    auto* w = static_cast<ThreadWriter*>(p);
    if (w && w->generation == g_generation.load(std::memory_order_relaxed)) seal(w);
    t_tls.writer = nullptr;
    if (w) munmap(w, sizeof(ThreadWriter));
}

void make_key() { pthread_key_create(&g_thread_key, thread_exit); }

ThreadWriter* new_writer() {
    void* p = mmap(nullptr, sizeof(ThreadWriter), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    auto* w = static_cast<ThreadWriter*>(p);  // zero-filled
    w->tid = static_cast<uint32_t>(syscall(SYS_gettid));
    w->generation = g_generation.load(std::memory_order_relaxed);
    w->last_abs = now_ns();
    pthread_once(&g_key_once, make_key);
    pthread_setspecific(g_thread_key, w);
    return w;
}

}  // namespace


bool channel_is_open() { return g_header.load(std::memory_order_acquire) != nullptr; }

uint64_t next_string_id() { return g_next_string_id.fetch_add(1, std::memory_order_relaxed); }

void count_drop() {
    CaptureHeader* h = g_header.load(std::memory_order_relaxed);
    if (h) h->dropped.fetch_add(1, std::memory_order_relaxed);
}

void disable(const char* why) {
    bool expected = false;
    if (g_disabled.compare_exchange_strong(expected, true)) {
        CaptureHeader* h = g_header.load(std::memory_order_relaxed);
        if (h) h->disabled_reason.store(1, std::memory_order_relaxed);
        write_stderr("[msmemscope] warning: collection turned off: ", why);
    }
}

ThreadWriter* writer_for_slow(size_t need) {
    CaptureHeader* h = g_header.load(std::memory_order_acquire);
    if (!h || g_disabled.load(std::memory_order_relaxed)) return nullptr;
    ThreadWriter* w = t_tls.writer;
    if (__builtin_expect(w == nullptr, 0)) {
        w = new_writer();
        if (!w) {
            count_drop();
            return nullptr;
        }
        t_tls.writer = w;
    } else if (__builtin_expect(w->generation != g_generation.load(std::memory_order_relaxed), 0)) {
        // Stream reopened (after fork): start clean, forget interned strings.
        uint32_t tid = static_cast<uint32_t>(syscall(SYS_gettid));
        memset(w, 0, sizeof(*w));
        w->tid = tid;
        w->generation = g_generation.load(std::memory_order_relaxed);
        w->last_abs = now_ns();
    }
    if (__builtin_expect(w->chunk == nullptr || w->cur + need > w->end, 0)) {
        if (need > capture::kChunkPayload) return nullptr;
        seal(w);
        ChunkHeader* c = take_chunk(h);
        if (!c) {
            count_drop();
            disable("no space left for the capture file");
            return nullptr;
        }
        // One call instead of sixteen page faults while the chunk fills
        // (a no-op on kernels without MADV_POPULATE_WRITE).
        madvise(c, capture::kChunkSize, kMadvPopulateWrite);
        c->tid = w->tid;
        c->used.store(0, std::memory_order_relaxed);
        c->sealed.store(0, std::memory_order_relaxed);
        c->pending.store(0, std::memory_order_relaxed);
        c->magic.store(capture::kChunkMagic, std::memory_order_release);
        w->chunk = c;
        w->cur = reinterpret_cast<uint8_t*>(c + 1);
        w->end = reinterpret_cast<uint8_t*>(c) + capture::kChunkSize;
        w->last_ts = 0;
        w->last_ptr = 0;
    }
    return w;
}

uint64_t intern(ThreadWriter*& w, const char* s, size_t len) {
    uint64_t hash = 1469598103934665603ull;
    for (size_t i = 0; i < len; ++i) hash = (hash ^ static_cast<uint8_t>(s[i])) * 1099511628211ull;
    hash |= 1;  // 0 marks an empty slot
    uint32_t slot = static_cast<uint32_t>(hash >> 40) % ThreadWriter::kCacheSize;
    if (w->string_hash[slot] == hash) return w->string_id[slot];
    if (len > 4096) len = 4096;
    ThreadWriter* ww = writer_for(1 + 20 + len);
    if (!ww) return 0;
    w = ww;
    uint64_t id = next_string_id();
    uint8_t* p = w->cur;
    *p++ = capture::kString;
    p = capture::put_varint(p, id);
    p = capture::put_varint(p, len);
    memcpy(p, s, len);
    p += len;
    commit(w, p);
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
    if (rank) {
        strncpy(h->rank, rank, sizeof(h->rank) - 1);
    }
}

int channel_open(const char* session_dir) {
    if (channel_is_open()) return EALREADY;
    // The file is set up under a ".part" name (locked, header complete) and
    // only then renamed to its .msmcap name: the host never sees a capture
    // whose lock is not yet held or whose header is not yet written.
    char path[4096], part[4200];
    int fd = -1;
    pid_t pid = getpid();
    for (int n = 0; n < 1000 && fd < 0; ++n) {
        snprintf(path, sizeof(path), "%s/%d.%d.msmcap", session_dir, static_cast<int>(pid), n);
        if (access(path, F_OK) == 0) continue;  // an earlier image of this pid (exec)
        snprintf(part, sizeof(part), "%s.part", path);
        fd = open(part, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
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
    if (ftruncate(fd, capture::kHeaderSize) != 0) {
        int e = errno;
        close(fd);
        return e;
    }
    void* p = mmap(nullptr, capture::kHeaderSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        close(fd);
        return e;
    }
    auto* h = static_cast<CaptureHeader*>(p);
    h->format_major = capture::kFormatMajor;
    h->format_minor = capture::kFormatMinor;
    h->header_size = capture::kHeaderSize;
    h->chunk_size = capture::kChunkSize;
    h->pid = static_cast<uint32_t>(pid);
    h->ppid = static_cast<uint32_t>(getppid());
    struct timespec rt, mt;
    clock_gettime(CLOCK_REALTIME, &rt);
    clock_gettime(CLOCK_MONOTONIC, &mt);
    h->wall_start_ns = static_cast<uint64_t>(rt.tv_sec) * 1000000000ull + rt.tv_nsec;
    h->mono_start_ns = static_cast<uint64_t>(mt.tv_sec) * 1000000000ull + mt.tv_nsec;
    fill_cmdline(h);
    // Exact cross-thread ordering (capture_format.h): the host may issue
    // global expedited barriers that reach this process.
    h->ordering = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0 ? 1 : 0;
    g_fd = fd;
    for (auto& s : g_segments) s.store(nullptr, std::memory_order_relaxed);
    g_next_string_id.store(1, std::memory_order_relaxed);
    g_generation.fetch_add(1, std::memory_order_relaxed);
    memcpy(h->magic, capture::kMagic, sizeof(h->magic));  // last: marks the header valid
    std::atomic_thread_fence(std::memory_order_release);
    if (rename(part, path) != 0) {
        int e = errno;
        munmap(p, capture::kHeaderSize);
        unlink(part);
        close(fd);
        g_fd = -1;
        return e;
    }
    g_header.store(h, std::memory_order_release);
    return 0;
}

std::atomic<bool> g_closed{false};

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
    h->exit_code = code;
    uint32_t unknown = static_cast<uint32_t>(capture::EndKind::Unknown);
    if (h->end_kind.compare_exchange_strong(unknown, static_cast<uint32_t>(kind)))
        h->end_code.store(code, std::memory_order_relaxed);
    h->state.store(static_cast<uint32_t>(capture::State::Finished), std::memory_order_release);
    // Mappings stay: other threads may still be inside a hook. The lock goes
    // with the process.
}

void channel_note_signal(int sig) {
    CaptureHeader* h = g_header.load(std::memory_order_acquire);
    if (!h || h->pid != static_cast<uint32_t>(getpid())) return;
    uint32_t unknown = static_cast<uint32_t>(capture::EndKind::Unknown);
    if (h->end_kind.compare_exchange_strong(unknown, static_cast<uint32_t>(capture::EndKind::Signal)))
        h->end_code.store(sig, std::memory_order_release);
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
    if (g_fd >= 0) close(g_fd);
    g_fd = -1;
    g_closed.store(false);
    g_generation.fetch_add(1, std::memory_order_relaxed);
    if (t_tls.writer) t_tls.writer->chunk = nullptr;
}

}  // namespace msms::agent
