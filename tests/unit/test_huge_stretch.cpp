// Huge-page stretches for the agent's dense tables (framework/agent/huge_stretch.h)
// and the fold map's use of them for the brk heap's leaves (fold_map.cpp).
#include <doctest/doctest.h>

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agent/fold_map.h"
#include "agent/huge_stretch.h"

namespace hs = msms::agent::huge_stretch;
using msms::agent::fold_map::Map;

namespace {

// The VmFlags of the mapping holding p ("" when none does).
std::string vm_flags(const void* p) {
    std::ifstream smaps("/proc/self/smaps");
    const auto at = reinterpret_cast<uintptr_t>(p);
    std::string line;
    bool inside = false;
    while (std::getline(smaps, line)) {
        unsigned long lo = 0, hi = 0;
        if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2) {  // a mapping's first line
            inside = at >= lo && at < hi;
            continue;
        }
        if (inside && line.compare(0, 9, "VmFlags: ") == 0) return line.substr(9);
    }
    return "";
}

bool huge_advised(const void* p) { return (" " + vm_flags(p) + " ").find(" hg ") != std::string::npos; }

// Whether this kernel takes MADV_HUGEPAGE at all (built with THP).
bool kernel_has_thp() { return access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) == 0; }

}  // namespace

TEST_CASE("a stretch is 2 MiB, aligned, zeroed and writable, with the huge-page advice where THP exists") {
    auto* p = static_cast<unsigned char*>(hs::map());
    REQUIRE(p != nullptr);
    CHECK(reinterpret_cast<uintptr_t>(p) % hs::kBytes == 0);
    CHECK(p[0] == 0);
    CHECK(p[hs::kBytes - 1] == 0);
    p[0] = 1;
    p[hs::kBytes - 1] = 2;
    CHECK(p[hs::kBytes - 1] == 2);
    if (kernel_has_thp()) CHECK(huge_advised(p));
}

TEST_CASE("pieces are cut in order, eight of 256 KiB to a stretch, the ninth from a new one") {
    static hs::Pieces pieces(256 << 10);
    std::vector<uintptr_t> got;
    for (int i = 0; i < 9; ++i) {
        void* p = pieces.take();
        REQUIRE(p != nullptr);
        got.push_back(reinterpret_cast<uintptr_t>(p));
    }
    CHECK(got[0] % hs::kBytes == 0);
    for (int i = 1; i < 8; ++i) CHECK(got[i] == got[0] + i * (256u << 10));
    CHECK(got[8] % hs::kBytes == 0);
    CHECK(got[8] != got[0]);
}

TEST_CASE("four threads taking pieces at once never get the same bytes") {
    static hs::Pieces pieces(64 << 10);
    constexpr int kThreads = 4, kEach = 200;  // 25 stretches
    std::vector<std::vector<uintptr_t>> got(kThreads);
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] {
            ready.fetch_add(1);
            while (ready.load() < kThreads) {
            }
            for (int i = 0; i < kEach; ++i) got[t].push_back(reinterpret_cast<uintptr_t>(pieces.take()));
        });
    for (auto& th : threads) th.join();
    std::set<uintptr_t> all;
    for (auto& g : got)
        for (uintptr_t p : g) {
            CHECK(p != 0);
            CHECK(p % (64u << 10) == 0);
            all.insert(p);
        }
    CHECK(all.size() == size_t{kThreads} * kEach);
}

TEST_CASE("the fold map's leaves of the brk heap share huge-page stretches; other leaves do not") {
    static Map m;
    // A small block of glibc's main arena lies below the program break.
    void* block = malloc(48);
    REQUIRE(block != nullptr);
    const auto heap = reinterpret_cast<uint64_t>(block);
    const auto brk = reinterpret_cast<uint64_t>(sbrk(0));
    if (heap >= brk) {
        free(block);
        return;  // the main arena is not a brk heap here (e.g. brk is blocked): nothing to check
    }
    REQUIRE(m.put(heap, 48));
    const void* dense = m.leaf_memory(heap);
    REQUIRE(dense != nullptr);
    CHECK(reinterpret_cast<uintptr_t>(dense) % (256u << 10) == 0);
    if (kernel_has_thp()) CHECK(huge_advised(dense));
    uint64_t size = 0;
    REQUIRE(m.take(heap, &size));
    CHECK(size == 48);
    free(block);

    // An address far from the heap (an mmap'ed block's place): a leaf of its own, 4 KiB-paged.
    const uint64_t sparse = 0x7e0000000000ull;
    REQUIRE(m.put(sparse, 1 << 20));
    const void* own = m.leaf_memory(sparse);
    REQUIRE(own != nullptr);
    CHECK_FALSE(huge_advised(own));
    REQUIRE(m.take(sparse, &size));
    CHECK(size == (1u << 20));
}
