// CaptureReader's per-thread queue against std::deque, across growth and
// wrap-around.
#include <doctest/doctest.h>

#include <deque>

#include "capture_reader.h"

using namespace msms;

TEST_CASE("EventRing keeps FIFO order through growth and wrap-around") {
    EventRing ring;
    std::deque<uint64_t> model;
    uint64_t next = 1;
    CHECK(ring.empty());
    // Uneven push/pop bursts: the ring wraps at every size it grows to.
    for (int round = 0; round < 200; ++round) {
        int pushes = (round * 37) % 150, pops = (round * 53) % 140;
        for (int i = 0; i < pushes; ++i) {
            RawEvent e;
            e.ts = next;
            ring.push_back(e);
            model.push_back(next++);
            CHECK(ring.back().ts == model.back());
        }
        for (int i = 0; i < pops && !model.empty(); ++i) {
            REQUIRE(!ring.empty());
            CHECK(ring.front().ts == model.front());
            ring.pop_front();
            model.pop_front();
        }
        REQUIRE(ring.size() == model.size());
    }
    while (!model.empty()) {
        CHECK(ring.front().ts == model.front());
        ring.pop_front();
        model.pop_front();
    }
    CHECK(ring.empty());
}
