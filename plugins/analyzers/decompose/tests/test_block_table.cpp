// BlockTable (plugins/analyzers/common/block_table.h), which holds decompose's
// and leaks' live blocks, against std::map over a random sequence of puts,
// finds and erases spread over several pools, with events alternating
// between pools as a PyTorch run's HOST and PTA rows do (the last-pool cache
// must never answer for another pool).
#include <doctest/doctest.h>

#include <cstdint>
#include <map>
#include <random>
#include <tuple>

#include "../../common/block_table.h"

using msms_an::BlockKey;
using msms_an::BlockTable;

namespace {
std::tuple<uint16_t, int16_t, uint16_t, uint64_t> tie_of(const BlockKey& k) {
    return {k.dev_kind, k.dev_id, k.type, k.ptr};
}
}  // namespace

TEST_CASE("BlockTable: one address in two pools is two blocks") {
    BlockTable<int> t;
    BlockKey host{1, 0, 2, 0x1000}, pta{1, 0, 20, 0x1000}, other_dev{1, 1, 2, 0x1000};
    CHECK(t.find(host) == nullptr);
    CHECK_FALSE(t.erase(host));
    t.put(host, 1);
    t.put(pta, 2);
    t.put(other_dev, 3);
    REQUIRE(t.find(host));
    CHECK(*t.find(host) == 1);
    CHECK(*t.find(pta) == 2);
    CHECK(*t.find(other_dev) == 3);
    CHECK(t.size() == 3);
    t.put(pta, 4);  // replaces
    CHECK(*t.find(pta) == 4);
    CHECK(t.size() == 3);
    CHECK(t.erase(host));
    CHECK(t.find(host) == nullptr);
    CHECK(*t.find(pta) == 4);  // the other pool's block at the same address stays
    CHECK(t.size() == 2);
}

TEST_CASE("BlockTable: agrees with std::map over a random run across pools") {
    std::mt19937_64 rng(7);
    BlockTable<uint64_t> t;
    std::map<std::tuple<uint16_t, int16_t, uint16_t, uint64_t>, uint64_t> ref;
    const BlockKey pools[] = {{1, 0, 2, 0}, {1, 0, 20, 0}, {2, 3, 1, 0}, {2, -1, 1, 0}};
    for (int i = 0; i < 200000; ++i) {
        BlockKey k = pools[rng() % 4];
        k.ptr = 0x7f0000000000ull + (rng() % 4096) * 64;  // shared low bits, as allocations
        uint64_t v = rng();
        switch (rng() % 3) {
        case 0:
            t.put(k, v);
            ref[tie_of(k)] = v;
            break;
        case 1:
            CHECK(t.erase(k) == (ref.erase(tie_of(k)) == 1));
            break;
        default: {
            const uint64_t* got = t.find(k);
            auto it = ref.find(tie_of(k));
            REQUIRE((got != nullptr) == (it != ref.end()));
            if (got) CHECK(*got == it->second);
        }
        }
    }
    CHECK(t.size() == ref.size());
    size_t seen = 0;
    t.for_each([&](const BlockKey& k, uint64_t v) {
        auto it = ref.find(tie_of(k));
        REQUIRE(it != ref.end());
        CHECK(it->second == v);
        ++seen;
    });
    CHECK(seen == ref.size());
}
