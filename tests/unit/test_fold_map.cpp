// The direct map of folded blocks' sizes (framework/agent/fold_map.h).
#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "agent/fold_map.h"

using msms::agent::fold_map::Map;

TEST_CASE("a block's exact size comes back once, small, at the edge and large") {
    static Map m;
    const uint64_t sizes[] = {0, 1, 17, 0xFFFC, 0xFFFD, 0xFFFE, 0xFFFF, 0x10000, uint64_t{5} << 30};
    uint64_t at = 0x5500000000ull;
    for (uint64_t s : sizes) {
        REQUIRE(m.put(at, s));
        CHECK(m.holds(at));
        at += 16;
    }
    at = 0x5500000000ull;
    for (uint64_t s : sizes) {
        uint64_t got = ~uint64_t{0};
        REQUIRE(m.take(at, &got));
        CHECK(got == s);
        CHECK_FALSE(m.holds(at));
        CHECK_FALSE(m.take(at, &got));  // forgotten
        at += 16;
    }
}

TEST_CASE("neighbouring blocks 16 bytes apart are independent; a block's interior is not a block") {
    static Map m;
    REQUIRE(m.put(0x7000000010ull, 100));
    REQUIRE(m.put(0x7000000020ull, 200));
    uint64_t got = 0;
    CHECK_FALSE(m.take(0x7000000030ull, &got));  // inside no block held
    CHECK_FALSE(m.take(0x7000000018ull, &got));  // not a block's start
    REQUIRE(m.take(0x7000000020ull, &got));
    CHECK(got == 200);
    CHECK(m.holds(0x7000000010ull));
    REQUIRE(m.take(0x7000000010ull, &got));
    CHECK(got == 100);
}

TEST_CASE("addresses the map cannot hold are refused, never misplaced") {
    static Map m;
    uint64_t got = 0;
    CHECK_FALSE(m.put(0, 8));
    CHECK_FALSE(m.put(0x6000000008ull, 8));          // 8-byte aligned only
    CHECK_FALSE(m.put(uint64_t{1} << 47, 8));        // beyond 47 bits (5-level paging)
    CHECK_FALSE(m.put(0xffff800000000000ull, 8));
    CHECK_FALSE(m.take(0x6000000008ull, &got));
    CHECK_FALSE(m.holds(0x6000000000ull));           // its aligned neighbour was not touched
    CHECK_FALSE(m.take(0x1234000000ull, &got));      // a stretch never made: nothing held, nothing made
    REQUIRE(m.put((uint64_t{1} << 47) - 16, 9));     // the last slot
    REQUIRE(m.take((uint64_t{1} << 47) - 16, &got));
    CHECK(got == 9);
}

TEST_CASE("two million blocks over many stretches: every size back, the map empty after") {
    static Map m;
    constexpr uint64_t kN = 2000000;
    // 48-byte strides over ~96 MiB (48 stretches), a few large blocks among them
    auto addr = [](uint64_t i) { return 0x30000000000ull + i * 48; };
    auto size = [](uint64_t i) { return i % 1000 == 7 ? 70000 + i : i % 4096; };
    for (uint64_t i = 0; i < kN; ++i) REQUIRE(m.put(addr(i), size(i)));
    uint64_t bad = 0;
    for (uint64_t i = 0; i < kN; i += 2) {
        uint64_t got = 0;
        bad += !m.take(addr(i), &got) || got != size(i);
    }
    for (uint64_t i = 1; i < kN; i += 2) {
        uint64_t got = 0;
        bad += !m.take(addr(i), &got) || got != size(i);
    }
    CHECK(bad == 0);
    uint64_t held = 0;
    for (uint64_t i = 0; i < kN; ++i) held += m.holds(addr(i));
    CHECK(held == 0);
}

TEST_CASE("threads making the same stretches at once all keep their blocks; a block freed on another thread") {
    static Map m;
    constexpr int kThreads = 8;
    constexpr uint64_t kPer = 20000;
    std::atomic<int> ready{0};
    std::vector<std::thread> ts;
    // thread t's blocks interleave with the others' in the same fresh stretches
    auto addr = [](int t, uint64_t i) { return 0x40000000000ull + (i * kThreads + t) * 16 * 7; };
    for (int t = 0; t < kThreads; ++t)
        ts.emplace_back([&, t] {
            ready.fetch_add(1);
            while (ready.load() < kThreads) {
            }
            for (uint64_t i = 0; i < kPer; ++i) REQUIRE(m.put(addr(t, i), t * 1000 + i % 1000));
        });
    for (auto& t : ts) t.join();
    ts.clear();
    std::atomic<uint64_t> bad{0};
    for (int t = 0; t < kThreads; ++t)
        ts.emplace_back([&, t] {
            // each thread frees the blocks another made
            const int owner = (t + 1) % kThreads;
            for (uint64_t i = 0; i < kPer; ++i) {
                uint64_t got = 0;
                if (!m.take(addr(owner, i), &got) || got != owner * 1000 + i % 1000) bad.fetch_add(1);
            }
        });
    for (auto& t : ts) t.join();
    CHECK(bad.load() == 0);
}

TEST_CASE("abandon forgets every block, small and large, and the map takes new ones after") {
    static Map m;
    REQUIRE(m.put(0x6600000000ull, 40));
    REQUIRE(m.put(0x6600000010ull, uint64_t{1} << 20));  // large: its own table
    m.abandon();
    uint64_t got = 0;
    CHECK_FALSE(m.holds(0x6600000000ull));
    CHECK_FALSE(m.take(0x6600000000ull, &got));
    CHECK_FALSE(m.take(0x6600000010ull, &got));
    REQUIRE(m.put(0x6600000010ull, 77));
    REQUIRE(m.take(0x6600000010ull, &got));
    CHECK(got == 77);
}
