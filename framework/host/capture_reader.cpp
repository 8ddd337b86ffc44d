#include "capture_reader.h"

#include <fcntl.h>
#include <linux/membarrier.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif
#include <sys/syscall.h>
#include <time.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace msms {

using namespace capture;

namespace {
constexpr uint64_t kSegmentBytes = kChunksPerSegment * kChunkSize;
}

CaptureReader::CaptureReader() = default;

CaptureReader::~CaptureReader() {
    for (const uint8_t* s : segments_)
        if (s) munmap(const_cast<uint8_t*>(s), kSegmentBytes);
    if (header_) munmap(const_cast<CaptureHeader*>(header_), kHeaderSize);
    if (header_rw_) munmap(header_rw_, kHeaderSize);
    if (release_fd_ >= 0) close(release_fd_);
    if (fd_ >= 0) close(fd_);
}

std::string CaptureReader::enable_release(uint64_t retain_bytes) {
    if (fd_ < 0 || !header_) return "the capture is not open";
    int fd = ::open(path_.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return path_ + ": cannot open for writing: " + strerror(errno);
    struct stat a, b;
    if (fstat(fd, &a) != 0 || fstat(fd_, &b) != 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino) {
        close(fd);
        return path_ + ": the file was replaced";
    }
    void* p = mmap(nullptr, kHeaderSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        std::string why = path_ + ": cannot map the header for writing: " + strerror(errno);
        close(fd);
        return why;
    }
    release_fd_ = fd;
    header_rw_ = static_cast<CaptureHeader*>(p);
    releasing_ = true;
    retain_left_ = retain_bytes;
    return "";
}

void CaptureReader::release(uint64_t index) {
    // Holes read back as zeros, and nothing reads a done chunk again. A file
    // system without hole punching keeps the blocks (nothing else changes).
    fallocate(release_fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(chunk_offset(index)),
              static_cast<off_t>(kChunkSize));
    ++released_;
    if (!released_any_) {
        released_any_ = true;
        header_rw_->released_any.store(1, std::memory_order_release);
    }
    header_rw_->chunks_released.store(released_, std::memory_order_release);
}

bool CaptureReader::open(const std::string& path, std::string& error) {
    path_ = path;
    // O_NONBLOCK: a FIFO given as a capture opens at once (and is refused
    // below) instead of waiting for a writer; no effect on a regular file.
    fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd_ < 0) {
        error = path + ": cannot open: " + strerror(errno);
        return false;
    }
    struct stat st;
    if (fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
        error = path + ": not a msmemscope capture (not a regular file)";
        return false;
    }
    if (st.st_size < static_cast<off_t>(kHeaderSize)) {
        error = path + ": not a msmemscope capture (file too short: " + std::to_string(st.st_size) + " bytes)";
        return false;
    }
    void* p = mmap(nullptr, kHeaderSize, PROT_READ, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) {
        error = path + ": cannot map: " + strerror(errno);
        return false;
    }
    header_ = static_cast<const CaptureHeader*>(p);
    if (memcmp(header_->magic, kMagic, sizeof(kMagic)) != 0) {
        error = path + ": not a msmemscope capture (bad magic)";
        return false;
    }
    if (header_->format_major < kFormatMajorOldest || header_->format_major > kFormatMajor) {
        error = path + ": capture format " + std::to_string(header_->format_major) + "." +
                std::to_string(header_->format_minor) + " is not supported (this build reads " +
                std::to_string(kFormatMajorOldest) + ".x to " + std::to_string(kFormatMajor) + ".x)";
        return false;
    }
    if (header_->chunk_size != kChunkSize || header_->header_size != kHeaderSize) {
        error = path + ": capture with unsupported chunk layout";
        return false;
    }
    memcpy(static_cast<void*>(&header_copy_), header_, sizeof(CaptureHeader));
    if (header_copy_.fixed_sum != fixed_sum(&header_copy_)) {
        error = path + ": corrupt capture (the header fails its checksum)";
        return false;
    }
    // Format 2 knows one clock (its header's clock field is zero).
    uint32_t clock = header_copy_.format_major >= 3 ? header_copy_.clock : kClockMonotonic;
    if (clock == kClockTsc) {
        if (header_copy_.ns_per_tick_q32 == 0) {
            error = path + ": corrupt capture (a TSC clock without its rate)";
            return false;
        }
        clock_.reset_tsc(header_copy_.tsc_start, header_copy_.mono_start_ns,
                         static_cast<double>(header_copy_.ns_per_tick_q32) / 4294967296.0);
    } else if (clock == kClockMonotonic) {
        clock_.reset_identity();
    } else {
        error = path + ": capture clock " + std::to_string(clock) + " is not supported";
        return false;
    }
    // A live agent grows the file first and then publishes chunks_mapped
    // (channel.cpp, grow()): so the header is read first and the size taken
    // after it. The other way round, a growth between the two made a whole
    // capture look truncated (tests/unit/test_capture_growth.cpp).
    uint64_t mapped = header_->chunks_mapped.load(std::memory_order_acquire);
    if (mapped > kChunksPerSegment * kMaxSegments) {
        error = path + ": corrupt capture (bad chunk count " + std::to_string(mapped) + " in the header)";
        return false;
    }
    if (fstat(fd_, &st) != 0) {
        error = path + ": cannot read its size: " + strerror(errno);
        return false;
    }
    uint64_t want = kHeaderSize + mapped * static_cast<uint64_t>(kChunkSize);
    if (static_cast<uint64_t>(st.st_size) < want) {
        error = path + ": truncated capture (the header describes " + std::to_string(want) +
                " bytes, the file has " + std::to_string(st.st_size) + ")";
        return false;
    }
    return true;
}

std::vector<std::string> CaptureReader::cmdline() const {
    std::vector<std::string> out;
    const char* p = header_copy_.cmdline;
    const char* end = p + sizeof(header_copy_.cmdline);
    while (p < end && *p) {
        size_t n = strnlen(p, static_cast<size_t>(end - p));
        out.emplace_back(p, n);
        p += n + 1;
    }
    return out;
}

uint32_t CaptureReader::end_kind() const {
    uint32_t k = header_ ? header_->end_kind.load() : 0;
    if (end_corrupt()) return 0;  // not trusted
    if (k == static_cast<uint32_t>(EndKind::Exec)) return has_end_sum(&header_copy_) ? k : 0;
    return k <= static_cast<uint32_t>(EndKind::Returned) ? k : 0;
}
int32_t CaptureReader::end_code() const { return header_ && !end_corrupt() ? header_->end_code.load() : 0; }

bool CaptureReader::end_corrupt() const {
    // Format 4.2: an end (kind and code) that fails its checksum was edited
    // or damaged. Older captures have no checksum: their end is read as is.
    if (!header_ || !has_end_sum(&header_copy_)) return false;
    uint32_t k = header_->end_kind.load(std::memory_order_acquire);
    uint64_t sum = header_->end_sum.load(std::memory_order_acquire);
    if (k == 0 && sum == 0) return false;  // no end recorded
    char path[sizeof(header_->exec_path)];
    memcpy(path, header_->exec_path, sizeof(path));
    path[sizeof(path) - 1] = 0;
    return sum != end_record_sum(header_copy_.pid, k, header_->end_code.load(std::memory_order_acquire), path);
}

std::string CaptureReader::exec_path() const {
    if (!header_ || end_kind() != static_cast<uint32_t>(EndKind::Exec)) return "";
    return std::string(header_->exec_path, strnlen(header_->exec_path, sizeof(header_->exec_path)));
}

void CaptureReader::note_corruption(uint64_t chunk, uint64_t offset, const char* what) {
    ++corrupt_;
    if (first_corruption_.empty())
        first_corruption_ = std::string(what) + " in chunk " + std::to_string(chunk) + " at offset " + std::to_string(offset);
}

uint64_t CaptureReader::poll_ordered(uint64_t window_ns, size_t& decoded, uint64_t barrier_every_ns) {
    bool gone = writer_gone();
    writer_seen_gone_ = writer_seen_gone_ || gone;
    // In the capture's clock: the TSC (this host runs on the target's
    // machine) or CLOCK_MONOTONIC.
    uint64_t now;
#if defined(__x86_64__) || defined(__i386__)
    if (clock_.is_tsc()) {
        _mm_lfence();
        now = __rdtsc();
        _mm_lfence();
        window_ns = clock_.ns_to_ticks(window_ns);
        barrier_every_ns = clock_.ns_to_ticks(barrier_every_ns);
    } else
#endif
    {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        now = static_cast<uint64_t>(t.tv_sec) * 1000000000ull + static_cast<uint64_t>(t.tv_nsec);
    }
    // Each barrier interrupts every CPU that runs a thread of the target
    // (an IPI; in a VM, an exit to the hypervisor on the target's CPU).
    // Every clock read of the target before the last barrier's `now` has
    // its pending mark (or its record) visible to every read after that
    // barrier, so the watermark may stay at that `now` until the next one.
    bool exact = false;
    if (!gone && header_->ordering != 0) {
        if (barriers_ != 0 && barrier_every_ns && now - barrier_at_ < barrier_every_ns) {
            exact = true;
        } else if (syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0) == 0) {
            barrier_at_ = now;
            ++barriers_;
            exact = true;
        }
    }
    decoded = poll();
    if (gone) return UINT64_MAX;
    if (!exact) return now > window_ns ? now - window_ns : 0;
    uint64_t w = barrier_at_ - 1;
    if (pending_bound_ < w) w = pending_bound_;
    return w;
}

uint64_t CaptureReader::dropped() const { return header_ ? header_->dropped.load() : 0; }
uint32_t CaptureReader::disabled_reason() const { return header_ ? header_->disabled_reason.load() : 0; }
bool CaptureReader::agent_disabled() const { return disabled_reason() != 0; }
uint64_t CaptureReader::chunks_total() const { return header_ ? header_->chunks_taken.load(std::memory_order_relaxed) : 0; }
uint64_t CaptureReader::stacks_defined() const {
    return header_ ? header_->stacks_defined.load(std::memory_order_relaxed) : 0;
}

bool CaptureReader::writer_gone() {
    if (gone_) return true;
    // The agent holds an exclusive flock for its whole life.
    if (flock(fd_, LOCK_EX | LOCK_NB) == 0) {
        gone_ = true;
        flock(fd_, LOCK_UN);
    }
    return gone_;
}

const uint8_t* CaptureReader::chunk_ptr(uint64_t index) {
    uint64_t seg = index / kChunksPerSegment;
    if (seg >= kMaxSegments) return nullptr;
    if (seg >= segments_.size()) {
        segments_.resize(seg + 1, nullptr);
        seg_done_.resize(seg + 1, 0);
    }
    if (!segments_[seg]) {
        if (seg_done_[seg] >= kChunksPerSegment) return nullptr;  // read and released
        // The whole segment's range; only chunks the file holds are touched.
        off_t off = static_cast<off_t>(kHeaderSize + seg * kSegmentBytes);
        void* p = mmap(nullptr, kSegmentBytes, PROT_READ, MAP_SHARED, fd_, off);
        if (p == MAP_FAILED) {
            if (read_error_.empty())
                read_error_ = std::string("cannot map the capture (") +
                              (errno == ENOMEM ? "out of address space, ulimit -v" : strerror(errno)) + ")";
            return nullptr;
        }
        segments_[seg] = static_cast<const uint8_t*>(p);
    }
    return segments_[seg] + (index % kChunksPerSegment) * kChunkSize;
}

void CaptureReader::chunk_done(uint64_t index) {
    ++chunks_read_;
    if (releasing_) {
        if (retain_left_ >= kChunkSize) {
            retain_left_ -= kChunkSize;
            retained_.push_back(index);
        } else {
            for (uint64_t r : retained_) release(r);
            retained_.clear();
            retained_.shrink_to_fit();
            retain_left_ = 0;
            release(index);
        }
    }
    uint64_t seg = index / kChunksPerSegment;
    if (seg >= seg_done_.size()) return;
    if (++seg_done_[seg] == kChunksPerSegment && segments_[seg]) {
        munmap(const_cast<uint8_t*>(segments_[seg]), kSegmentBytes);
        segments_[seg] = nullptr;
    }
}

size_t CaptureReader::poll() {
    size_t before = decoded_;
    if (header_rw_) header_rw_->host_polls.fetch_add(1, std::memory_order_relaxed);
    // The header before the file's size (see open()): a chunk the header
    // counts as mapped is in the file unless the file was cut.
    uint64_t mapped = header_->chunks_mapped.load(std::memory_order_acquire);
    uint64_t taken = header_->chunks_taken.load(std::memory_order_acquire);
    if (taken > mapped) taken = mapped;
    if (taken > kChunksPerSegment * kMaxSegments) taken = kChunksPerSegment * kMaxSegments;
    struct stat st;
    if (fstat(fd_, &st) == 0 && static_cast<uint64_t>(st.st_size) < chunk_offset(taken)) {
        // Read what the file really holds (a truncated capture).
        taken = static_cast<uint64_t>(st.st_size) > kHeaderSize ? (st.st_size - kHeaderSize) / kChunkSize : 0;
    }
    // Assign newly set-up chunks to their threads, in index order.
    std::vector<uint64_t> pending;
    pending.swap(uninitialized_);
    for (; next_chunk_ < taken; ++next_chunk_) {
        if (gone_) {
            // Nothing more will be written: holes (never set up, or a crafted
            // sparse file) are skipped without reading them.
            off_t d = lseek(fd_, static_cast<off_t>(chunk_offset(next_chunk_)), SEEK_DATA);
            if (d < 0) {
                next_chunk_ = taken;
                break;
            }
            uint64_t first = (static_cast<uint64_t>(d) - kHeaderSize) / kChunkSize;
            if (first > next_chunk_) next_chunk_ = std::min(first, taken);
            if (next_chunk_ >= taken) break;
        }
        pending.push_back(next_chunk_);
    }
    // Chunks written in place (or copied to their place) are found by
    // index; chunks still staged by their slots. A lane's chunks are found
    // in index order within a poll and sorted so; a staged chunk's earlier
    // chunks were in their place before it was staged, so they are found in
    // the same poll at the latest (scan_stages).
    std::vector<ChunkState> found;
    std::vector<uint64_t> zeros;
    for (uint64_t idx : pending) classify(idx, found, zeros);
    scan_stages(0, taken, found, zeros);
    // Indices that were not set up when first read: set up since (a chunk
    // copied to its place while the slot already stages the next one), or
    // still not.
    pending.swap(zeros);
    zeros.clear();
    size_t stages_before = stages_.size();
    for (uint64_t idx : pending) classify(idx, found, zeros);
    if (stages_.size() > stages_before) scan_stages(stages_before, taken, found, zeros);
    for (uint64_t idx : zeros) {
        // Taken but never set up (the writer died in between): nothing to read.
        if (gone_) chunk_done(idx);
        else uninitialized_.push_back(idx);
    }
    std::sort(found.begin(), found.end(), [](const ChunkState& a, const ChunkState& b) { return a.index < b.index; });
    for (ChunkState& c : found) thread_chunks_[c.tid].push_back(std::move(c));
    // In-flight records (read before the records themselves: a record
    // published after this point has its pending mark visible here).
    ++poll_gen_;
    pending_bound_ = UINT64_MAX;
    for (auto& [tid, chunks] : thread_chunks_) {
        if (chunks.empty()) continue;
        // A staged chunk's mark is in its slot (a later chunk's mark there
        // is a later lower bound: as good).
        const ChunkState& last = chunks.back();
        auto* ch = reinterpret_cast<const ChunkHeader*>(chunk_ptr(last.stage != kNotStaged ? last.stage : last.index));
        uint64_t pend = ch->pending.load(std::memory_order_acquire);
        if (pend && pend - 1 < pending_bound_) pending_bound_ = pend - 1;
    }
    // Snapshot what every chunk has published (sealed first: a sealed
    // chunk's fill level read after it is final), then decode lazily.
    for (auto& [tid, chunks] : thread_chunks_) {
        for (ChunkState& c : chunks) {
            if (c.stage != kNotStaged && snapshot_staged(c)) continue;
            auto* ch = reinterpret_cast<const ChunkHeader*>(chunk_ptr(c.index));
            if (ch->magic.load(std::memory_order_acquire) != kChunkMagic) {
                // A chunk that left its slot is in its place, whole.
                if (!c.final) note_corruption(c.index, 0, "a staged chunk missing from its place");
                c.limit = c.read;
                c.final = true;
                continue;
            }
            bool sealed = ch->sealed.load(std::memory_order_acquire) != 0;
            uint32_t used = ch->used.load(std::memory_order_acquire);
            bool bad = false;
            if (used > kChunkPayload) {
                if (!c.final) note_corruption(c.index, 0, "bad fill level");
                used = kChunkPayload;
                bad = true;
            }
            if (sealed && !c.checked) {
                // A sealed chunk carries the checksum of what it holds:
                // damage is reported and the chunk's unread records skipped.
                c.checked = true;
                if (!bad && ch->checksum != chunk_sum(ch, ch->tid, used)) {
                    note_corruption(c.index, 0, "checksum mismatch");
                    bad = true;
                }
                if (bad) {
                    c.limit = c.read;
                    c.final = true;
                    continue;
                }
            }
            if (c.checked && c.limit == c.read && c.final) continue;  // skipped as damaged
            if (used > c.limit) c.limit = used;
            // Sealed: final. Writer gone: nothing more will come.
            c.final = sealed || gone_;
        }
    }
    for (auto& [tid, chunks] : thread_chunks_) fill(tid);
    return decoded_ - before;
}

void CaptureReader::classify(uint64_t idx, std::vector<ChunkState>& found, std::vector<uint64_t>& zeros) {
    auto* ch = reinterpret_cast<const ChunkHeader*>(chunk_ptr(idx));
    uint32_t magic = ch ? ch->magic.load(std::memory_order_acquire) : 0;
    if (magic == kChunkMagic) {
        // Keyed by lane; the thread comes from the chunk's first record.
        found.emplace_back(idx, ch->tid);
    } else if (magic == kStageMagic && header_copy_.format_major >= 4) {
        stages_.push_back(StageSlot{idx});
    } else if (!ch && gone_) {
        // Not mappable: nothing more can be read.
    } else if (magic != 0 && gone_) {
        // Taken but never set up is harmless when all zero; anything else is damage.
        note_corruption(idx, 0, "bad chunk magic");
        chunk_done(idx);
    } else {
        zeros.push_back(idx);
    }
}

void CaptureReader::scan_stages(size_t from, uint64_t taken, std::vector<ChunkState>& found, std::vector<uint64_t>& zeros) {
    for (size_t i = from; i < stages_.size(); ++i) {
        StageSlot& s = stages_[i];
        auto* sh = reinterpret_cast<const StageHeader*>(chunk_ptr(s.index));
        uint64_t t = sh->target.load(std::memory_order_acquire);
        if (t == 0 || t == s.last_target) continue;
        uint32_t lane = sh->tid;
        std::atomic_thread_fence(std::memory_order_acquire);
        if (sh->target.load(std::memory_order_relaxed) != t) continue;  // moved on meanwhile: the next poll
        uint64_t j = t - 1;
        // Taken after this poll read the count: its records come after the
        // poll's barrier (the next poll reads them).
        if (j >= taken) continue;
        s.last_target = t;
        // Already in its place: found by index (this poll or before).
        auto* at = reinterpret_cast<const ChunkHeader*>(chunk_ptr(j));
        if (at && at->magic.load(std::memory_order_acquire) == kChunkMagic) continue;
        // Not set up in its place: this poll's classify() put it among the
        // zeros (uninitialized_ is empty while a poll sorts its indices).
        auto z = std::find(zeros.begin(), zeros.end(), j);
        if (z != zeros.end()) zeros.erase(z);
        ChunkState c(j, lane);
        c.stage = s.index;
        c.copy.reset(new uint8_t[kChunkPayload]);
        found.push_back(std::move(c));
    }
}

bool CaptureReader::snapshot_staged(ChunkState& c) {
    auto* sh = reinterpret_cast<const StageHeader*>(chunk_ptr(c.stage));
    uint64_t t = sh->target.load(std::memory_order_acquire);
    if (t == c.index + 1) {
        uint32_t used = sh->used.load(std::memory_order_acquire);
        if (used > kChunkPayload) used = kChunkPayload;
        if (used > c.limit) memcpy(c.copy.get() + c.limit, reinterpret_cast<const uint8_t*>(sh + 1) + c.limit, used - c.limit);
        // A sequence lock: the copy holds this chunk's records only if the
        // slot still stages it after the copy.
        std::atomic_thread_fence(std::memory_order_acquire);
        if (sh->target.load(std::memory_order_relaxed) == t) {
            if (used > c.limit) c.limit = used;
            c.final = gone_;  // the writer gone: nothing more will come
            return true;
        }
    }
    // Copied to its place (the slot was reset only after that): read from
    // there on, the same bytes.
    c.stage = kNotStaged;
    c.copy.reset();
    return false;
}

void CaptureReader::fill(uint32_t tid) {
    auto it = thread_chunks_.find(tid);
    if (it == thread_chunks_.end()) return;
    auto& chunks = it->second;
    auto& q = queue_of(tid);
    // A thread's chunks are read in order: the next one only once the
    // current one is final and read to its end.
    while (!chunks.empty() && q.size() < kQueueTarget) {
        ChunkState& c = chunks.front();
        if (c.read < c.limit) {
            const uint8_t* payload = c.copy ? c.copy.get()
                                            : reinterpret_cast<const uint8_t*>(
                                                  reinterpret_cast<const ChunkHeader*>(chunk_ptr(c.index)) + 1);
            decode(c, payload, c.limit, kQueueTarget - q.size());
        }
        if (c.read >= c.limit && c.final) {
            chunk_done(c.index);
            chunks.pop_front();
            continue;
        }
        if (c.read >= c.limit) break;  // wait for more to be published
    }
}

EventRing& CaptureReader::queue_of(uint32_t tid) {
    // Consecutive events mostly come from one thread: skip the hash lookup.
    // (Values of an unordered_map keep their address; queues are never erased.)
    if (tid != last_queue_tid_ || !last_queue_) {
        last_queue_ = &queues_[tid];
        last_queue_tid_ = tid;
    }
    return *last_queue_;
}

void CaptureReader::push(const RawEvent& e) {
    auto& q = queue_of(decoding_lane_);
    if (q.empty()) heap_push(HeapItem{e.ts, decoding_lane_});
    q.push_back(e);
    q.back().gen = static_cast<uint16_t>(poll_gen_);
    ++decoded_;
}

void CaptureReader::decode(ChunkState& c, const uint8_t* payload, uint32_t used, size_t max_events) {
    const uint8_t* p = payload + c.read;
    const uint8_t* end = payload + used;
    size_t stop_at = decoded_ + max_events;
    // A chunk's deltas start from 0 at its first record.
    uint64_t& last_ts = c.last_ts;
    uint64_t& last_ptr = c.last_ptr;
    decoding_lane_ = c.tid;
    while (p < end && decoded_ < stop_at) {
        const uint8_t* rec = p;
        uint8_t tag = *p++;
        uint64_t v[16];
        bool ok = true;
        auto rd = [&](int n) {
            for (int i = 0; i < n && ok; ++i) ok = get_varint(p, end, v[i]);
        };
        RawEvent e;
        e.tid = c.cur_tid;
        if (tag & kPacked) {
            // Format 3's packed heap record (capture_format.h).
            bool is_malloc = (tag & kPackedMalloc) != 0;
            uint32_t tl = ((tag >> 3) & 7) + 1, pl = (tag & 7) + 1, sl = 0;
            if (is_malloc) {
                if (p >= end || *p > 7) {
                    ok = false;
                } else {
                    sl = *p++ + 1u;
                }
            }
            if (ok && static_cast<size_t>(end - p) < tl + pl + sl) ok = false;
            if (ok) {
                auto field = [&](uint32_t n) {
                    uint64_t x = 0;
                    for (uint32_t i = 0; i < n; ++i) x |= static_cast<uint64_t>(p[i]) << (8 * i);
                    p += n;
                    return x;
                };
                last_ts += field(tl);
                last_ptr += static_cast<uint64_t>(unzigzag(field(pl)));
                e.ts = last_ts;
                e.kind = is_malloc ? 1 : 2;  // MSMS_EV_MALLOC / MSMS_EV_FREE
                e.type = 15;                 // MSMS_T_HOST
                e.dev_kind = 1;              // MSMS_DEV_CPU
                e.ptr = last_ptr;
                if (is_malloc) e.size = field(sl);
                push(e);
            }
            if (!ok) {
                note_corruption(c.index, static_cast<uint64_t>(rec - payload), "undecodable record");
                p = end;
            }
            continue;
        }
        switch (tag) {
        case kPad:
            p = end;
            continue;
        case kHeapMalloc:
        case kHeapMallocS:
        case kHeapFree:
        case kHeapFreeS: {
            bool is_malloc = tag == kHeapMalloc || tag == kHeapMallocS;
            bool with_stacks = tag == kHeapMallocS || tag == kHeapFreeS;
            int n = 2 + (is_malloc ? 1 : 0) + (with_stacks ? 2 : 0);
            rd(n);
            if (!ok) break;
            last_ts += v[0];
            last_ptr += static_cast<uint64_t>(unzigzag(v[1]));
            e.ts = last_ts;
            e.kind = is_malloc ? 1 : 2;  // MSMS_EV_MALLOC / MSMS_EV_FREE
            e.type = 15;                 // MSMS_T_HOST
            e.dev_kind = 1;              // MSMS_DEV_CPU
            e.ptr = last_ptr;
            int i = 2;
            if (is_malloc) e.size = v[i++];
            if (with_stacks) {
                e.cstack = v[i++];
                e.pystack = v[i++];
            }
            push(e);
            break;
        }
        case kGeneric: {
            rd(13);
            if (!ok) break;
            last_ts += v[0];
            e.ts = last_ts;
            e.kind = static_cast<uint16_t>(v[1]);
            e.type = static_cast<uint16_t>(v[2]);
            e.dev_kind = static_cast<uint16_t>(v[3]);
            e.dev_id = static_cast<int16_t>(unzigzag(v[4]));
            e.ptr = v[5];
            e.size = v[6];
            e.aux0 = v[7];
            e.aux1 = v[8];
            e.name_id = v[9];
            e.attrs_id = v[10];
            e.cstack = v[11];
            e.pystack = v[12];
            push(e);
            break;
        }
        case kPyCall: {
            rd(3);
            if (!ok) break;
            last_ts += v[0];
            e.ts = last_ts;
            e.kind = 9;      // MSMS_EV_PY_TRACE
            e.type = 80;     // MSMS_T_PY_CALL
            e.dev_kind = 0;  // MSMS_DEV_NA
            e.dev_id = -1;
            e.name_id = v[2];
            if (clock_.is_tsc()) {
                // The duration is in ns: the start is known once ts is (pop).
                e.aux0 = v[1];
                e.flags = kStartFromDuration;
            } else {
                e.aux0 = last_ts - v[1];
            }
            push(e);
            break;
        }
        case kClock: {
            rd(3);
            if (!ok) break;
            last_ts += v[0];
            // Delivered in order with the events, consumed by pop().
            e.ts = last_ts;
            e.flags = kCalibration;
            e.aux0 = last_ts + v[1];
            e.aux1 = v[2];
            push(e);
            break;
        }
        case kString: {
            rd(2);
            if (!ok || v[1] > static_cast<uint64_t>(end - p)) {
                ok = false;
                break;
            }
            strings_[v[0]] = std::string(reinterpret_cast<const char*>(p), v[1]);
            p += v[1];
            break;
        }
        case kStack: {
            rd(3);
            if (!ok || v[2] > 100000) {
                ok = false;
                break;
            }
            StackDef s;
            s.kind = static_cast<uint8_t>(v[1]);
            uint64_t id = v[0], n = v[2];
            s.frames.reserve(n);
            for (uint64_t i = 0; i < n && ok; ++i) {
                uint64_t f;
                ok = get_varint(p, end, f);
                s.frames.push_back(f);
            }
            if (ok) stacks_[id] = std::move(s);
            break;
        }
        case kModule: {
            rd(4);
            if (!ok) break;
            last_ts += v[0];
            modules_.push_back(ModuleDef{v[1], v[2], v[3], last_ts});
            break;
        }
        case kEnd: {
            rd(2);
            if (!ok) break;
            last_ts += v[0];
            saw_end_ = true;
            end_code_ = unzigzag(v[1]);
            break;
        }
        case kThreadName:
            rd(1);
            break;
        case kThread:
            rd(1);
            if (!ok || v[0] == 0 || v[0] > UINT32_MAX) {
                ok = false;
                break;
            }
            c.cur_tid = static_cast<uint32_t>(v[0]);
            break;
        default:
            ok = false;
        }
        if (!ok) {
            // Records are published whole, so a record that does not decode
            // is damage: skip the rest of the chunk.
            note_corruption(c.index, static_cast<uint64_t>(rec - payload), "undecodable record");
            p = end;
        }
    }
    c.read = static_cast<uint32_t>(p - payload);
}

// Definitions are published before the events that use them, but possibly by
// another thread whose chunk this poll read first: an event decoded in the
// current poll whose strings or stacks are not known yet waits one poll.
bool CaptureReader::resolvable(const RawEvent& e) const {
    if (e.name_id && !strings_.count(e.name_id)) return false;
    if (e.attrs_id && !strings_.count(e.attrs_id)) return false;
    for (uint64_t sid : {e.cstack, e.pystack}) {
        if (!sid) continue;
        auto it = stacks_.find(sid);
        if (it == stacks_.end()) return false;
        if (it->second.kind == 1 && !it->second.strings_known) {
            for (uint64_t f : it->second.frames)
                if (!strings_.count(f)) return false;
            it->second.strings_known = true;
        }
    }
    return true;
}

void CaptureReader::heap_push(const HeapItem& h) {
    heap_.push_back(h);
    std::push_heap(heap_.begin(), heap_.end(), std::greater<HeapItem>());
}

void CaptureReader::heap_pop() {
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<HeapItem>());
    heap_.pop_back();
}

bool CaptureReader::pop(RawEvent& out, uint64_t watermark) {
    for (;;) {
        if (heap_.empty()) return false;
        HeapItem top = heap_.front();
        if (top.ts > watermark) return false;
        auto& q = queue_of(top.tid);
        if (!gone_) {
            const RawEvent& front = q.front();
            if (front.gen == static_cast<uint16_t>(poll_gen_) && !resolvable(front)) return false;
        }
        out = q.front();
        q.pop_front();
        if (!q.empty()) {
            HeapItem next{q.front().ts, top.tid};
            if (heap_.size() == 1 || !(next > heap_[1] || (heap_.size() > 2 && next > heap_[2]))) {
                heap_.front() = next;  // still the earliest: the heap holds
            } else {
                heap_pop();
                heap_push(next);
            }
        } else {
            heap_pop();
            fill(top.tid);  // push() puts the thread back on the heap
        }
        if (out.ts < last_popped_) ++stragglers_;
        else last_popped_ = out.ts;
        if (out.flags & kCalibration) {
            // A calibration pair: converts the events after it.
            clock_.add_point(out.aux0, out.aux1);
            continue;
        }
        // Capture clock to CLOCK_MONOTONIC ns; delivered times never go back
        // (two conversions either side of a new pair may differ by the
        // clock reads' jitter).
        uint64_t ns = clock_.to_ns(out.ts);
        if (clock_.is_tsc()) {
            if (ns < last_out_ns_) ns = last_out_ns_;
            last_out_ns_ = ns;
        }
        out.ts = ns;
        if (out.flags & kStartFromDuration) out.aux0 = out.aux0 <= ns ? ns - out.aux0 : 0;
        out.flags = 0;
        return true;
    }
}

const std::string* CaptureReader::string(uint64_t id) const {
    auto it = strings_.find(id);
    return it == strings_.end() ? nullptr : &it->second;
}

const StackDef* CaptureReader::stack(uint64_t id) const {
    auto it = stacks_.find(id);
    return it == stacks_.end() ? nullptr : &it->second;
}

}  // namespace msms
