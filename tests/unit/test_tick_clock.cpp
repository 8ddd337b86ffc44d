// The capture's clock (issue #18 item 6): TSC ticks converted to
// CLOCK_MONOTONIC ns by the host (tick_clock.h), and the reader delivering
// format 3 captures (TSC ticks, packed heap records, kClock pairs) and
// format 2 captures (ns, varint records) with the same meaning.
#include <doctest/doctest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "capture_reader.h"
#include "tick_clock.h"

using namespace msms;
using namespace msms::capture;

TEST_CASE("TickClock: CLOCK_MONOTONIC captures are read as they are") {
    TickClock c;
    c.reset_identity();
    CHECK_FALSE(c.is_tsc());
    CHECK(c.to_ns(123456789) == 123456789);
    c.add_point(5, 7);  // ignored
    CHECK(c.to_ns(10) == 10);
    CHECK(c.ns_to_ticks(1000) == 1000);
}

TEST_CASE("TickClock: ticks convert from the last pair at the measured rate") {
    TickClock c;
    // 2.5 GHz: 0.4 ns per tick; the agent's first measure slightly off.
    c.reset_tsc(1'000'000, 5'000'000'000ull, 0.401);
    CHECK(c.is_tsc());
    CHECK(c.to_ns(1'000'000) == 5'000'000'000ull);
    CHECK(c.to_ns(1'001'000) == 5'000'000'401ull);    // first measure
    CHECK(c.to_ns(999'000) == 4'999'999'599ull);      // before the pair
    // A pair 200 us later (500000 ticks): re-anchors, and the rate is now
    // measured between the two pairs (0.4 exactly).
    c.add_point(1'500'000, 5'000'200'000ull);
    CHECK(c.ns_per_tick() == doctest::Approx(0.4).epsilon(1e-12));
    CHECK(c.to_ns(1'500'000) == 5'000'200'000ull);
    CHECK(c.to_ns(1'600'000) == 5'000'240'000ull);
    // A pair too close to the last one (< 20 us) re-anchors but keeps the rate.
    c.add_point(1'510'000, 5'000'204'010ull);
    CHECK(c.to_ns(1'510'000) == 5'000'204'010ull);
    CHECK(c.to_ns(1'520'000) == 5'000'208'010ull);
    CHECK(c.ns_per_tick() == doctest::Approx(0.4).epsilon(1e-12));
    // The next one far enough: the rate from the last measured pair.
    c.add_point(2'500'000, 5'000'600'200ull);  // 1M ticks, 400200 ns
    CHECK(c.ns_per_tick() == doctest::Approx(0.4002).epsilon(1e-12));
    CHECK(c.to_ns(3'500'000) == 5'001'000'400ull);
    CHECK(c.ns_to_ticks(4002) == 10000);
}

TEST_CASE("TickClock: pairs that go back or jump are ignored") {
    TickClock c;
    c.reset_tsc(1000, 1'000'000, 0.5);
    c.add_point(900, 2'000'000);      // tick back
    c.add_point(2000, 999'000);       // ns back
    c.add_point(100000, 1'000'000);   // no time passed in 99000 ticks
    c.add_point(100000, 100'000'000); // 2 ns per tick: not this clock
    CHECK(c.to_ns(101000) == 1'050'000);
    CHECK(c.ns_per_tick() == 0.5);
    CHECK(c.to_ns(0) == 999'500);
    c.reset_tsc(1000, 100, 0.5);
    CHECK(c.to_ns(0) == 0);  // never below zero
}

namespace {

struct TempFile {
    std::string path;
    TempFile() {
        char t[] = "/tmp/msms_tick_clock_XXXXXX";
        int fd = mkstemp(t);
        REQUIRE(fd >= 0);
        close(fd);
        path = t;
    }
    ~TempFile() { unlink(path.c_str()); }
};

// A finished one-chunk capture of the given format and clock; `records`
// writes the chunk's records (after its kThread record) and returns the end.
template <class F>
void write_capture(const std::string& path, uint32_t major, uint32_t clock, uint64_t tick0, uint64_t ns0,
                   double ns_per_tick, F records) {
    std::vector<uint64_t> words((kHeaderSize + kChunkSize) / 8, 0);
    auto* bytes = reinterpret_cast<uint8_t*>(words.data());
    auto* h = reinterpret_cast<CaptureHeader*>(bytes);
    h->format_major = major;
    h->header_size = kHeaderSize;
    h->chunk_size = kChunkSize;
    h->pid = 77;
    h->wall_start_ns = 1'700'000'000'000'000'000ull;
    h->mono_start_ns = ns0;
    h->clock = clock;
    h->tsc_start = tick0;
    h->ns_per_tick_q32 = static_cast<uint64_t>(ns_per_tick * 4294967296.0);
    h->fixed_sum = fixed_sum(h);
    h->chunks_taken.store(1);
    h->chunks_mapped.store(1);
    h->state.store(static_cast<uint32_t>(State::Finished));
    std::memcpy(h->magic, kMagic, sizeof(kMagic));
    auto* c = reinterpret_cast<ChunkHeader*>(bytes + chunk_offset(0));
    c->tid = 1;
    uint8_t* p = reinterpret_cast<uint8_t*>(c + 1);
    *p++ = kThread;
    p = put_varint(p, 4242);
    p = records(p);
    uint32_t used = static_cast<uint32_t>(p - reinterpret_cast<uint8_t*>(c + 1));
    c->used.store(used);
    c->checksum = chunk_sum(c, c->tid, used);
    c->sealed.store(1);
    c->magic.store(kChunkMagic);
    FILE* f = fopen(path.c_str(), "wb");
    REQUIRE(f);
    REQUIRE(fwrite(bytes, 1, words.size() * 8, f) == words.size() * 8);
    fclose(f);
}

// The agent's packed heap record (agent.cpp heap_record), byte by byte.
uint8_t* packed(uint8_t* p, bool malloc_, uint64_t dt, uint64_t dp, uint64_t size) {
    uint32_t tl = packed_len(dt), pl = packed_len(dp), sl = packed_len(size);
    *p++ = static_cast<uint8_t>(kPacked | (malloc_ ? kPackedMalloc : 0) | ((tl - 1) << 3) | (pl - 1));
    if (malloc_) *p++ = static_cast<uint8_t>(sl - 1);
    auto put = [&](uint64_t v, uint32_t n) {
        for (uint32_t i = 0; i < n; ++i) *p++ = static_cast<uint8_t>(v >> (8 * i));
    };
    put(dt, tl);
    put(dp, pl);
    if (malloc_) put(size, sl);
    return p;
}

std::vector<RawEvent> read_all(const std::string& path, CaptureReader& r) {
    std::string err;
    REQUIRE_MESSAGE(r.open(path, err), err);
    std::vector<RawEvent> out;
    size_t n = 0;
    uint64_t w = r.poll_ordered(0, n);
    RawEvent e;
    while (r.pop(e, w)) out.push_back(e);
    CHECK(r.corrupt_records() == 0);
    return out;
}

}  // namespace

TEST_CASE("capture reader: a TSC capture's events come out in CLOCK_MONOTONIC ns") {
    TempFile f;
    // 0.5 ns per tick; the header's first pair at tick 10'000 = 2 s.
    const uint64_t t0 = 10'000, n0 = 2'000'000'000ull;
    write_capture(f.path, 3, kClockTsc, t0, n0, 0.5, [&](uint8_t* p) {
        uint64_t last = 0;
        auto delta = [&](uint64_t t) {
            uint64_t d = t - last;
            last = t;
            return d;
        };
        p = packed(p, true, delta(t0 + 1000), zigzag(0x5000), 4096);       // malloc at 2 s + 500 ns
        p = packed(p, false, delta(t0 + 3000), zigzag(0), 0);              // free at + 1500 ns
        // A pair: tick t0 + 1'000'000 read at n0 + 500'100 (the clock runs
        // 0.0002 faster than the first measure).
        *p++ = kClock;
        p = put_varint(p, delta(t0 + 1'000'000));
        p = put_varint(p, 0);
        p = put_varint(p, n0 + 500'100);
        p = packed(p, true, delta(t0 + 1'000'000), zigzag(0x100), 1);    // at the pair
        p = packed(p, false, delta(t0 + 1'100'000), zigzag(-0x100), 0);  // 100000 ticks later
        // A Python call of 2 us returning at t0 + 1'200'000.
        *p++ = kPyCall;
        p = put_varint(p, delta(t0 + 1'200'000));
        p = put_varint(p, 2000);
        p = put_varint(p, 0);
        *p++ = kEnd;
        p = put_varint(p, delta(t0 + 1'300'000));
        p = put_varint(p, zigzag(0));
        return p;
    });
    CaptureReader r;
    auto ev = read_all(f.path, r);
    CHECK(r.tsc_clock());
    REQUIRE(ev.size() == 5);
    CHECK(ev[0].kind == 1);
    CHECK(ev[0].ptr == 0x5000);
    CHECK(ev[0].size == 4096);
    CHECK(ev[0].ts == n0 + 500);
    CHECK(ev[1].kind == 2);
    CHECK(ev[1].ptr == 0x5000);
    CHECK(ev[1].ts == n0 + 1500);
    CHECK(ev[2].ptr == 0x5100);
    CHECK(ev[2].size == 1);
    CHECK(ev[2].ts == n0 + 500'100);
    CHECK(ev[3].ptr == 0x5000);
    // 100000 ticks at the rate measured between the two pairs
    // (500100 ns / 1000000 ticks).
    CHECK(ev[3].ts == n0 + 500'100 + 50'010);
    CHECK(ev[4].kind == 9);
    CHECK(ev[4].ts == n0 + 500'100 + 100'020);
    CHECK(ev[4].aux0 == ev[4].ts - 2000);  // the call's start, in ns too
    CHECK(ev[4].flags == 0);
    CHECK(r.ended_normally());
}

TEST_CASE("capture reader: format 2 captures (ns, varint records) still read") {
    TempFile f;
    write_capture(f.path, 2, 0, 0, 1'000'000, 0, [&](uint8_t* p) {
        *p++ = kHeapMalloc;
        p = put_varint(p, 5'000'000);
        p = put_varint(p, zigzag(0x7000));
        p = put_varint(p, 64);
        *p++ = kPyCall;
        p = put_varint(p, 10);
        p = put_varint(p, 4);
        p = put_varint(p, 0);
        *p++ = kHeapFree;
        p = put_varint(p, 100);
        p = put_varint(p, zigzag(0));
        return p;
    });
    CaptureReader r;
    auto ev = read_all(f.path, r);
    CHECK_FALSE(r.tsc_clock());
    REQUIRE(ev.size() == 3);
    CHECK(ev[0].ts == 5'000'000);
    CHECK(ev[0].ptr == 0x7000);
    CHECK(ev[0].size == 64);
    CHECK(ev[1].ts == 5'000'010);
    CHECK(ev[1].aux0 == 5'000'006);
    CHECK(ev[2].ts == 5'000'110);
    CHECK(ev[2].kind == 2);
}

TEST_CASE("capture reader: formats it does not read are named") {
    TempFile f;
    write_capture(f.path, 5, 0, 0, 1, 0, [](uint8_t* p) { return p; });
    CaptureReader r;
    std::string err;
    CHECK_FALSE(r.open(f.path, err));
    CHECK(err == f.path + ": capture format 5.0 is not supported (this build reads 2.x to 4.x)");
    write_capture(f.path, 3, 7, 0, 1, 0, [](uint8_t* p) { return p; });
    CaptureReader r2;
    CHECK_FALSE(r2.open(f.path, err));
    CHECK(err == f.path + ": capture clock 7 is not supported");
}
