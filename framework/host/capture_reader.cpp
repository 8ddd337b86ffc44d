#include "capture_reader.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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
    if (fd_ >= 0) close(fd_);
}

bool CaptureReader::open(const std::string& path, std::string& error) {
    path_ = path;
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) {
        error = path + ": cannot open: " + strerror(errno);
        return false;
    }
    struct stat st;
    if (fstat(fd_, &st) != 0 || st.st_size < static_cast<off_t>(kHeaderSize)) {
        error = path + ": not a msmemscope capture (file too short)";
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
    if (header_->format_major != kFormatMajor) {
        error = path + ": capture format " + std::to_string(header_->format_major) + "." +
                std::to_string(header_->format_minor) + " is not supported (this build reads " +
                std::to_string(kFormatMajor) + ".x)";
        return false;
    }
    if (header_->chunk_size != kChunkSize || header_->header_size != kHeaderSize) {
        error = path + ": capture with unsupported chunk layout";
        return false;
    }
    memcpy(static_cast<void*>(&header_copy_), header_, sizeof(CaptureHeader));
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

uint64_t CaptureReader::dropped() const { return header_ ? header_->dropped.load() : 0; }
bool CaptureReader::agent_disabled() const { return header_ && header_->disabled_reason.load() != 0; }

bool CaptureReader::writer_gone() {
    if (gone_) return true;
    // The agent holds an exclusive flock for its whole life.
    if (flock(fd_, LOCK_EX | LOCK_NB) == 0) {
        gone_ = true;
        flock(fd_, LOCK_UN);
    }
    return gone_;
}

bool CaptureReader::map_upto(uint64_t chunks) {
    struct stat st;
    if (fstat(fd_, &st) != 0) return false;
    uint64_t need_segments = (chunks + kChunksPerSegment - 1) / kChunksPerSegment;
    while (segments_.size() < need_segments) {
        uint64_t seg = segments_.size();
        off_t off = static_cast<off_t>(kHeaderSize + seg * kSegmentBytes);
        if (st.st_size < off + static_cast<off_t>(kSegmentBytes)) return false;  // truncated file
        void* p = mmap(nullptr, kSegmentBytes, PROT_READ, MAP_SHARED, fd_, off);
        if (p == MAP_FAILED) return false;
        segments_.push_back(static_cast<const uint8_t*>(p));
    }
    return true;
}

const uint8_t* CaptureReader::chunk_ptr(uint64_t index) {
    uint64_t seg = index / kChunksPerSegment;
    if (seg >= segments_.size()) return nullptr;
    return segments_[seg] + (index % kChunksPerSegment) * kChunkSize;
}

size_t CaptureReader::poll() {
    size_t before = decoded_;
    uint64_t mapped = header_->chunks_mapped.load(std::memory_order_acquire);
    uint64_t taken = header_->chunks_taken.load(std::memory_order_acquire);
    if (taken > mapped) taken = mapped;
    if (!map_upto(taken)) {
        // Map what the file really holds (a truncated capture).
        while (taken > 0 && !map_upto(taken)) taken -= std::min<uint64_t>(taken, kChunksPerSegment);
    }
    // Assign newly set-up chunks to their threads, in index order.
    std::vector<uint64_t> pending;
    pending.swap(uninitialized_);
    for (; next_chunk_ < taken; ++next_chunk_) pending.push_back(next_chunk_);
    for (uint64_t idx : pending) {
        auto* ch = reinterpret_cast<const ChunkHeader*>(chunk_ptr(idx));
        if (!ch || ch->magic.load(std::memory_order_acquire) != kChunkMagic) {
            uninitialized_.push_back(idx);
            continue;
        }
        thread_chunks_[ch->tid].push_back(ChunkState{idx, ch->tid, 0});
    }
    // Per thread: read the oldest chunk; move on only once it is sealed and
    // read to its end, so a thread's records stay in order.
    for (auto& [tid, chunks] : thread_chunks_) {
        while (!chunks.empty()) {
            ChunkState& c = chunks.front();
            auto* ch = reinterpret_cast<const ChunkHeader*>(chunk_ptr(c.index));
            bool sealed = ch->sealed.load(std::memory_order_acquire) != 0;
            uint32_t used = ch->used.load(std::memory_order_acquire);
            if (used > kChunkPayload) {
                ++corrupt_;
                used = kChunkPayload;
            }
            if (used > c.read) decode(c, reinterpret_cast<const uint8_t*>(ch + 1), used);
            // Sealed: final. Writer gone: nothing more will come.
            if (sealed || gone_) {
                chunks.pop_front();
                continue;
            }
            break;
        }
    }
    return decoded_ - before;
}

void CaptureReader::push(const RawEvent& e) {
    auto& q = queues_[e.tid];
    if (q.empty()) heap_.push(HeapItem{e.ts, e.tid});
    q.push_back(e);
    ++decoded_;
}

void CaptureReader::decode(ChunkState& c, const uint8_t* payload, uint32_t used) {
    const uint8_t* p = payload + c.read;
    const uint8_t* end = payload + used;
    // A chunk's deltas start from 0 at its first record.
    uint64_t& last_ts = c.last_ts;
    uint64_t& last_ptr = c.last_ptr;
    while (p < end) {
        const uint8_t* rec = p;
        uint8_t tag = *p++;
        uint64_t v[16];
        bool ok = true;
        auto rd = [&](int n) {
            for (int i = 0; i < n && ok; ++i) ok = get_varint(p, end, v[i]);
        };
        RawEvent e;
        e.tid = c.tid;
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
            rd(3);
            if (!ok) break;
            last_ts += v[0];
            modules_.push_back(ModuleDef{v[1], v[2], last_ts});
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
        default:
            ok = false;
        }
        if (!ok) {
            // A record cut short can only be the last one of a chunk whose
            // writer died mid-write; anything else is corruption.
            ++corrupt_;
            p = end;
            (void)rec;
        }
    }
    c.read = used;
}

bool CaptureReader::pop(RawEvent& out, uint64_t watermark) {
    if (heap_.empty()) return false;
    HeapItem top = heap_.top();
    if (top.ts > watermark) return false;
    heap_.pop();
    auto& q = queues_[top.tid];
    out = q.front();
    q.pop_front();
    if (!q.empty()) heap_.push(HeapItem{q.front().ts, top.tid});
    if (out.ts < last_popped_) ++stragglers_;
    else last_popped_ = out.ts;
    return true;
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
