// AddrMap (framework/util/addr_map.h) against std::unordered_map over a long
// random sequence of inserts, re-inserts, finds and erases, with addresses
// that collide in their low bits as real allocations do.
#include <doctest/doctest.h>

#include <cstdint>
#include <map>
#include <random>
#include <unordered_map>

#include "util/addr_map.h"

using msms::AddrMap;

TEST_CASE("AddrMap: empty map finds nothing and iterates nothing") {
    AddrMap<int> m;
    CHECK(m.empty());
    CHECK(m.find(0) == m.end());
    CHECK(m.count(42) == 0);
    CHECK(m.erase(42) == 0);
    CHECK(m.begin() == m.end());
}

TEST_CASE("AddrMap: address 0 is a key like any other") {
    AddrMap<int> m;
    CHECK(m.emplace(0, 7).second);
    CHECK_FALSE(m.emplace(0, 8).second);
    REQUIRE(m.find(0) != m.end());
    CHECK(m.find(0)->second == 7);
    m.erase(m.find(0));
    CHECK(m.count(0) == 0);
    CHECK(m.size() == 0);
}

TEST_CASE("AddrMap: agrees with std::unordered_map over a random workload") {
    std::mt19937_64 rng(12345);
    AddrMap<uint64_t> m;
    std::unordered_map<uint64_t, uint64_t> ref;
    std::vector<uint64_t> keys;
    for (int step = 0; step < 400000; ++step) {
        uint64_t op = rng() % 10;
        if (op < 5 || keys.empty()) {
            // 64-byte aligned addresses in a 1 MiB arena: many re-uses, low bits shared
            uint64_t k = 0x7f0000000000ull + ((rng() % 16384) << 6);
            auto [it, inserted] = m.emplace(k, step);
            auto [rit, rinserted] = ref.emplace(k, step);
            REQUIRE(inserted == rinserted);
            REQUIRE(it->second == rit->second);
            if (inserted) keys.push_back(k);
        } else if (op < 8) {
            uint64_t k = keys[rng() % keys.size()];
            auto it = m.find(k);
            auto rit = ref.find(k);
            REQUIRE((it == m.end()) == (rit == ref.end()));
            if (rit != ref.end()) {
                REQUIRE(it->second == rit->second);
                m.erase(it);
                ref.erase(rit);
            }
        } else {
            uint64_t k = keys[rng() % keys.size()];
            REQUIRE(m.count(k) == ref.count(k));
            REQUIRE(m.erase(k) == ref.erase(k));
        }
        REQUIRE(m.size() == ref.size());
    }
    // every member reachable by lookup and by iteration, exactly once
    std::map<uint64_t, uint64_t> seen;
    for (auto& [k, v] : m) CHECK(seen.emplace(k, v).second);
    CHECK(seen.size() == ref.size());
    for (auto& [k, v] : ref) {
        auto it = m.find(k);
        REQUIRE(it != m.end());
        CHECK(it->second == v);
        CHECK(seen[k] == v);
    }
    m.clear();
    CHECK(m.empty());
    CHECK(m.begin() == m.end());
}

TEST_CASE("AddrMap: operator[] inserts a value-initialised member") {
    AddrMap<uint64_t> m;
    m[5] += 3;
    m[5] += 4;
    CHECK(m[5] == 7);
    CHECK(m.size() == 1);
}
