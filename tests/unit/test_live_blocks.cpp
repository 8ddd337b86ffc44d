// The agent's table of blocks allocated while collection is off
// (framework/agent/live_blocks.h, issue #15 item 4).
#include <doctest/doctest.h>
#include <msmemscope/abi.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "agent/live_blocks.h"

namespace lb = msms::agent::live_blocks;

namespace {
std::vector<lb::Block> drain_all(uint64_t* lost = nullptr) {
    std::vector<lb::Block> out;
    uint64_t n = lb::drain([](const lb::Block& b, void* p) { static_cast<std::vector<lb::Block>*>(p)->push_back(b); },
                           &out);
    if (lost) *lost = n;
    std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.ptr != b.ptr ? a.ptr < b.ptr : a.type < b.type; });
    return out;
}
}  // namespace

TEST_CASE("a block noted while off comes back once from drain, with its pool and device; a freed one does not") {
    drain_all();
    CHECK(lb::note_alloc(MSMS_T_HOST, MSMS_DEV_CPU, -1, 0x1000, 12345));
    CHECK(lb::note_alloc(MSMS_T_HAL, MSMS_DEV_NPU, 3, 0x1000, 1ull << 40));  // same address, other pool
    CHECK(lb::note_alloc(MSMS_T_HOST, MSMS_DEV_CPU, -1, 0x2000, 7));
    CHECK(lb::note_free(MSMS_T_HOST, 0x2000));
    CHECK_FALSE(lb::note_free(MSMS_T_HOST, 0x2000));  // already gone
    CHECK_FALSE(lb::note_free(MSMS_T_HOST, 0x3000));  // never noted (allocated while collecting)
    CHECK(lb::size() == 2);
    uint64_t lost = 1;
    auto got = drain_all(&lost);
    CHECK(lost == 0);
    REQUIRE(got.size() == 2);
    CHECK(got[0].ptr == 0x1000);
    CHECK(got[0].type == MSMS_T_HAL);
    CHECK(got[0].dev_kind == MSMS_DEV_NPU);
    CHECK(got[0].dev_id == 3);
    CHECK(got[0].size == (1ull << 40));
    CHECK(got[1].type == MSMS_T_HOST);
    CHECK(got[1].dev_id == -1);
    CHECK(got[1].size == 12345);
    CHECK(drain_all().empty());  // drained: empty again
    CHECK(lb::size() == 0);
}

TEST_CASE("a block's tag (its MALLOC's Attr extras) comes back with it, beside its device and size") {
    drain_all();
    CHECK(lb::note_alloc(MSMS_T_HAL, MSMS_DEV_CUDA, 0, 0x1000, 2u << 20, true, 5));
    CHECK(lb::note_alloc(MSMS_T_HAL, MSMS_DEV_NPU, 1023, 0x2000, (1ull << 42) - 1, true, lb::kMaxTag));
    CHECK(lb::note_alloc(MSMS_T_HOST_PINNED, MSMS_DEV_CPU, -1, 0x3000, 4096, true, 1));
    CHECK(lb::note_alloc(MSMS_T_HOST, MSMS_DEV_CPU, -1, 0x4000, 64, true, lb::kMaxTag + 1));  // kept as 0
    auto got = drain_all();
    REQUIRE(got.size() == 4);
    CHECK((got[0].dev_kind == MSMS_DEV_CUDA && got[0].dev_id == 0 && got[0].size == (2u << 20) && got[0].tag == 5));
    CHECK((got[1].dev_kind == MSMS_DEV_NPU && got[1].dev_id == 1023 && got[1].size == (1ull << 42) - 1 &&
           got[1].tag == lb::kMaxTag));
    CHECK((got[2].type == MSMS_T_HOST_PINNED && got[2].dev_id == -1 && got[2].size == 4096 && got[2].tag == 1));
    CHECK((got[3].dev_id == -1 && got[3].size == 64 && got[3].tag == 0));
}

TEST_CASE("addresses, pools and sizes the table cannot hold are refused and counted as lost, not mixed up") {
    drain_all();
    CHECK_FALSE(lb::note_alloc(MSMS_T_HOST, MSMS_DEV_CPU, -1, 1ull << 57, 8));
    CHECK_FALSE(lb::note_alloc(MSMS_T_HOST, MSMS_DEV_CPU, -1, 2, 8));
    CHECK_FALSE(lb::note_alloc(200, MSMS_DEV_CPU, -1, 0x5000, 8));
    CHECK_FALSE(lb::note_alloc(MSMS_T_HOST, MSMS_DEV_CPU, -1, 0x6000, 1ull << 42));  // 4 TiB: no longer 4 TiB - 1
    CHECK_FALSE(lb::note_alloc(MSMS_T_HOST, MSMS_DEV_CPU, -1, 0x7000, 1ull << 42, /*count_overflow=*/false));
    uint64_t lost = 0;
    CHECK(drain_all(&lost).empty());
    CHECK(lost == 4);  // the caller that writes its block another way is not counted
}

TEST_CASE("threads noting and freeing at once: exactly the blocks still live come back") {
    drain_all();
    constexpr int kThreads = 4, kPer = 50000;  // 200000 blocks: more than the first level holds
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t)
        ts.emplace_back([t] {
            for (int i = 0; i < kPer; ++i) {
                uint64_t p = 0x10000000ull + (static_cast<uint64_t>(t) * kPer + i) * 16;
                lb::note_alloc(MSMS_T_HOST, MSMS_DEV_CPU, -1, p, static_cast<uint64_t>(i + 1));
                if (i % 2) lb::note_free(MSMS_T_HOST, p);
            }
        });
    for (auto& t : ts) t.join();
    uint64_t lost = 1;
    auto got = drain_all(&lost);
    CHECK(lost == 0);
    REQUIRE(got.size() == static_cast<size_t>(kThreads * kPer / 2));
    size_t odd = 0;
    for (auto& b : got) odd += ((b.ptr - 0x10000000ull) / 16 % kPer) % 2;
    CHECK(odd == 0);
}

TEST_CASE("a table of its own: a free hands back the block's size; 400000 live blocks fit beside churn") {
    static lb::Table t;  // as import_fold.cpp keeps one
    CHECK(t.note_alloc(MSMS_T_HOST, MSMS_DEV_CPU, -1, 0x7000, 4242));
    uint64_t size = 0;
    CHECK(t.note_free(MSMS_T_HOST, 0x7000, &size));
    CHECK(size == 4242);
    CHECK_FALSE(t.note_free(MSMS_T_HOST, 0x7000, &size));
    CHECK(lb::size() == 0);  // the table of blocks made while off is another one
    constexpr uint64_t kLive = 400000;
    for (uint64_t i = 0; i < kLive; ++i) {
        REQUIRE(t.note_alloc(MSMS_T_HOST, MSMS_DEV_CPU, -1, 0x20000000ull + i * 32, i + 1));
        // a short-lived block beside each (an import's temporaries)
        REQUIRE(t.note_alloc(MSMS_T_HOST, MSMS_DEV_CPU, -1, 0x90000000ull + i * 16, 8));
        REQUIRE(t.note_free(MSMS_T_HOST, 0x90000000ull + i * 16));
    }
    CHECK(t.size() == kLive);
    uint64_t sum = 0;
    for (uint64_t i = 0; i < kLive; i += 2) {
        REQUIRE(t.note_free(MSMS_T_HOST, 0x20000000ull + i * 32, &size));
        sum += size;
    }
    CHECK(sum == (kLive / 2) * (kLive / 2));  // 1 + 3 + 5 + ...
    std::vector<lb::Block> rest;
    CHECK(t.drain([](const lb::Block& b, void* p) { static_cast<std::vector<lb::Block>*>(p)->push_back(b); }, &rest) ==
          0);
    CHECK(rest.size() == kLive / 2);
    CHECK(t.size() == 0);
}
