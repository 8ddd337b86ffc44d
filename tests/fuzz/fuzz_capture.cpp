// The capture reader against damaged and hostile captures (#16): it never
// crashes or hangs, and damage to anything the format protects (the header's
// fixed part, a sealed chunk's thread, fill level, checksum and records) is
// always reported, never silently read as data.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "capture_reader.h"
#include "fuzz_util.h"

using namespace msms;
using namespace msms::capture;

namespace {

struct Image {
    std::vector<uint64_t> words;  // 8-byte aligned storage
    uint8_t* bytes() { return reinterpret_cast<uint8_t*>(words.data()); }
    size_t size() const { return words.size() * 8; }
    std::string str() { return std::string(reinterpret_cast<const char*>(bytes()), size()); }
};

struct ChunkSpec {
    uint32_t lane;
    uint32_t tid;
    bool sealed;
    uint32_t handed_to;  // non-zero: a kThread record half-way
    uint64_t stages = 0;  // non-zero: a staging slot (format 4) holding chunk stages - 1
};

// A small valid capture: 3 chunks (two threads, the second chunk handed on
// to a third thread), a fourth thread's chunk still in its staging slot
// (index 3, staging chunk 4, whose place is empty), strings, heap and
// generic records, an end record.
constexpr uint64_t kCaptureChunks = 5;
constexpr uint64_t kCaptureEvents = 4 * 200 * 3;
Image make_capture(std::vector<std::pair<size_t, size_t>>& protected_ranges) {
    const std::vector<ChunkSpec> chunks = {
        {1, 100, true, 0}, {2, 101, true, 0}, {1, 100, false, 102}, {3, 103, false, 0, 5}};
    Image img;
    img.words.assign((kHeaderSize + kCaptureChunks * kChunkSize) / 8, 0);
    auto* h = reinterpret_cast<CaptureHeader*>(img.bytes());
    h->format_major = kFormatMajor;
    h->format_minor = kFormatMinor;
    h->header_size = kHeaderSize;
    h->chunk_size = kChunkSize;
    h->pid = 4242;
    h->ppid = 1;
    h->wall_start_ns = 1'700'000'000'000'000'000ull;
    h->mono_start_ns = 1'000'000;
    std::strcpy(h->rank, "3");
    std::memcpy(h->cmdline, "prog\0--arg\0", 11);
    std::strcpy(h->exe, "/bin/prog");
    h->fixed_sum = fixed_sum(h);
    h->chunks_taken.store(kCaptureChunks);
    h->chunks_mapped.store(kCaptureChunks);
    h->state.store(static_cast<uint32_t>(State::Finished));
    h->end_kind.store(static_cast<uint32_t>(EndKind::Exit));
    std::memcpy(h->magic, kMagic, sizeof(kMagic));
    protected_ranges.push_back({kFixedBegin, kFixedEnd + 8});
    protected_ranges.push_back({kClockBegin, kClockEnd});  // format 3: in fixed_sum
    protected_ranges.push_back({0, 12});   // magic, major version: checked on open
    protected_ranges.push_back({16, 24});  // layout: checked on open
    uint64_t ts = 2'000'000, ptr = 0x7f0000001000;
    for (size_t i = 0; i < chunks.size(); ++i) {
        auto* c = reinterpret_cast<ChunkHeader*>(img.bytes() + chunk_offset(i));
        c->tid = chunks[i].lane;
        uint8_t* p = reinterpret_cast<uint8_t*>(c + 1);
        *p++ = kThread;
        p = put_varint(p, chunks[i].tid);
        uint64_t last_ts = 0, last_ptr = 0;
        auto stamp = [&](uint8_t tag) {
            *p++ = tag;
            ts += 1000;
            p = put_varint(p, ts - last_ts);
            last_ts = ts;
        };
        uint64_t sid = 10 + i;
        *p++ = kString;
        p = put_varint(p, sid);
        p = put_varint(p, 5);
        std::memcpy(p, "alloc", 5);
        p += 5;
        for (int k = 0; k < 200; ++k) {
            if (chunks[i].handed_to && k == 100) {
                *p++ = kThread;
                p = put_varint(p, chunks[i].handed_to);
            }
            stamp(kHeapMalloc);
            ptr += 64;
            p = put_varint(p, zigzag(static_cast<int64_t>(ptr - last_ptr)));
            last_ptr = ptr;
            p = put_varint(p, 32 + k);
            stamp(kHeapFree);
            p = put_varint(p, zigzag(0));
            stamp(kGeneric);
            for (uint64_t v : {uint64_t{3}, uint64_t{1}, uint64_t{2}, zigzag(0), ptr, uint64_t{64}, uint64_t{0},
                               uint64_t{0}, sid, uint64_t{0}, uint64_t{0}, uint64_t{0}})
                p = put_varint(p, v);
        }
        if (i == 0) {
            stamp(kEnd);
            p = put_varint(p, zigzag(0));
        }
        uint32_t used = static_cast<uint32_t>(p - reinterpret_cast<uint8_t*>(c + 1));
        c->used.store(used);
        if (chunks[i].sealed) {
            c->checksum = chunk_sum(c, c->tid, used);
            c->sealed.store(1);
            size_t base = chunk_offset(i);
            protected_ranges.push_back({base, base + 12});                            // magic, tid, used
            protected_ranges.push_back({base + 24, base + sizeof(ChunkHeader) + used});  // checksum, records
        }
        if (chunks[i].stages) {
            auto* st = reinterpret_cast<StageHeader*>(c);
            st->target.store(chunks[i].stages);
            st->magic.store(kStageMagic);
        } else {
            c->magic.store(kChunkMagic);
        }
    }
    return img;
}

struct Outcome {
    bool opened = false;
    uint64_t events = 0, corrupt = 0;
    std::string error;
};

// Reads a capture file the way a replay does (bounded rounds).
Outcome read_capture(const std::string& path) {
    Outcome o;
    CaptureReader r;
    if (!r.open(path, o.error)) return o;
    o.opened = true;
    (void)r.rank();
    (void)r.cmdline();
    (void)r.exe();
    RawEvent e;
    for (int round = 0; round < 50; ++round) {
        size_t n = 0;
        uint64_t w = r.poll_ordered(50'000'000, n);
        while (r.pop(e, w)) {
            ++o.events;
            if (e.name_id) (void)r.string(e.name_id);
        }
        if (w == UINT64_MAX && r.empty()) break;
    }
    o.corrupt = r.corrupt_records();
    return o;
}

}  // namespace

TEST_CASE("capture reader: a valid capture reads whole, the handed-on and the staged chunk included") {
    fuzz::TempDir dir;
    std::vector<std::pair<size_t, size_t>> prot;
    Image img = make_capture(prot);
    fuzz::write_file(dir.file("ok.msmcap"), img.str());
    Outcome o = read_capture(dir.file("ok.msmcap"));
    REQUIRE(o.opened);
    CHECK(o.corrupt == 0);
    CHECK(o.events == kCaptureEvents);
}

TEST_CASE("capture reader: every damage to a protected byte is reported (fixed seed)") {
    fuzz::TempDir dir;
    std::vector<std::pair<size_t, size_t>> prot;
    Image img = make_capture(prot);
    const std::string good = img.str();
    std::mt19937_64 rng(fuzz::kSeed);
    fuzz::Budget budget(4.0);
    int cases = 0, detected = 0;
    for (; cases < 400 && budget.left(); ++cases) {
        // Half the flips where the format promises detection.
        size_t pos;
        if (cases % 2 == 0) {
            auto& r = prot[rng() % prot.size()];
            pos = r.first + rng() % (r.second - r.first);
        } else {
            pos = rng() % good.size();
        }
        std::string bad = good;
        bad[pos] = static_cast<char>(bad[pos] ^ static_cast<char>(1 + rng() % 255));
        std::string path = dir.file("flip.msmcap");
        fuzz::write_file(path, bad);
        Outcome o = read_capture(path);
        bool is_protected = false;
        for (auto& r : prot) is_protected = is_protected || (pos >= r.first && pos < r.second);
        if (is_protected) {
            INFO("flipped byte " << pos << " events " << o.events);
            CHECK((!o.opened || o.corrupt > 0));
            ++detected;
        }
    }
    CHECK(cases > 50);
    CHECK(detected > 25);
}

TEST_CASE("capture reader: arbitrary mutations never crash or hang it (fixed seed)") {
    fuzz::TempDir dir;
    std::vector<std::pair<size_t, size_t>> prot;
    Image img = make_capture(prot);
    const std::string good = img.str();
    std::mt19937_64 rng(fuzz::kSeed + 1);
    fuzz::Budget budget(4.0);
    int cases = 0;
    for (; cases < 300 && budget.left(); ++cases) {
        std::string bad = fuzz::mutate(good, rng);
        std::string path = dir.file("m.msmcap");
        fuzz::write_file(path, bad);
        Outcome o = read_capture(path);
        CHECK((o.opened || !o.error.empty()));
    }
    CHECK(cases > 30);
}

TEST_CASE("capture reader: a sparse capture claiming 256 GiB is read in a moment") {
    fuzz::TempDir dir;
    std::vector<std::pair<size_t, size_t>> prot;
    Image img = make_capture(prot);
    auto* h = reinterpret_cast<CaptureHeader*>(img.bytes());
    uint64_t all = kChunksPerSegment * kMaxSegments;
    h->chunks_taken.store(all);
    h->chunks_mapped.store(all);
    std::string path = dir.file("sparse.msmcap");
    fuzz::write_file(path, img.str());
    REQUIRE(truncate(path.c_str(), static_cast<off_t>(chunk_offset(all))) == 0);
    fuzz::Budget budget(20.0);
    Outcome o = read_capture(path);
    CHECK(budget.left());  // a hang would have taken minutes (it did: #16)
    REQUIRE(o.opened);
    CHECK(o.events == kCaptureEvents);
}

TEST_CASE("capture reader: an older format is refused with the version named") {
    fuzz::TempDir dir;
    std::vector<std::pair<size_t, size_t>> prot;
    Image img = make_capture(prot);
    reinterpret_cast<CaptureHeader*>(img.bytes())->format_major = 1;
    std::string path = dir.file("old.msmcap");
    fuzz::write_file(path, img.str());
    Outcome o = read_capture(path);
    CHECK_FALSE(o.opened);
    // The capture's own minor (the agent's kFormatMinor) is named with it.
    CHECK(o.error == path + ": capture format 1." + std::to_string(kFormatMinor) +
                         " is not supported (this build reads 2.x to 4.x)");
}
