#include <doctest/doctest.h>

#include <set>
#include <string>
#include <tuple>

#include "step_gap.h"

using namespace msms;

namespace {
// What the pipeline holds live: (type, ptr); device cpu.
std::set<std::pair<uint16_t, uint64_t>> held;

StepGap gap() {
    return StepGap([](uint16_t, int16_t, uint16_t type, bool virt, uint64_t ptr) {
        return !virt && held.count({type, ptr}) > 0;
    });
}

Record event(uint16_t kind, uint16_t type, uint64_t ptr, uint64_t size = 0) {
    Record r;
    r.ev.kind = kind;
    r.ev.type = type;
    r.ev.device_kind = MSMS_DEV_CPU;
    r.ev.ptr = ptr;
    r.ev.size = size;
    return r;
}

std::string attr(const Record& r, const std::string& key) {
    for (auto& a : r.attrs)
        if (a.first == key) return a.second;
    return "";
}
}  // namespace

// --steps=2,3: what steps 1 (and 4) did to memory reaches the pipeline as
// shadow rows when the selected step starts (step_gap.h).
TEST_CASE("a selected step starts with the frees of the pipeline's blocks, then the blocks made unseen") {
    held = {{MSMS_T_PTA, 0x100}, {MSMS_T_PTA, 0x200}, {MSMS_T_PTA, 0x300}};
    StepGap g = gap();
    CHECK_FALSE(g.pending());
    Record m = event(MSMS_EV_MALLOC, MSMS_T_PTA, 0x900, 64);
    m.attrs = {{"owner", "PTA@weight"}};
    g.dropped(m);                                           // made unseen, live at the step's start
    g.dropped(event(MSMS_EV_FREE, MSMS_T_PTA, 0x200));       // the pipeline's block, freed unseen
    g.dropped(event(MSMS_EV_MALLOC, MSMS_T_PTA, 0xa00, 8));  // made and freed unseen: nothing
    g.dropped(event(MSMS_EV_FREE, MSMS_T_PTA, 0xa00));
    g.dropped(event(MSMS_EV_MALLOC, MSMS_T_PTA, 0x100, 32));  // the pipeline's 0x100 released unseen, a new block there
    g.dropped(event(MSMS_EV_FREE, MSMS_T_PTA, 0x777));       // a block from before collection: nothing to pair
    g.dropped(event(MSMS_EV_ACCESS, MSMS_T_PTA, 0x300));     // not memory: nothing
    REQUIRE(g.pending());
    auto rows = g.catch_up(5000, 42);
    CHECK_FALSE(g.pending());
    std::vector<std::tuple<uint16_t, uint64_t, uint64_t>> got;
    for (auto& r : rows) {
        got.emplace_back(r.ev.kind, r.ev.ptr, r.ev.size);
        CHECK(attr(r, "shadow") == "true");
        CHECK(r.ev.timestamp_ns == 5000);
        CHECK(r.ev.pid == 42);
        CHECK(r.ev.type == MSMS_T_PTA);
    }
    // FREEs first, in the order they happened (the pipeline fills in their
    // allocation_id and size), then the MALLOCs in theirs
    CHECK(got == std::vector<std::tuple<uint16_t, uint64_t, uint64_t>>{{MSMS_EV_FREE, 0x200, 0},
                                                                      {MSMS_EV_FREE, 0x100, 0},
                                                                      {MSMS_EV_MALLOC, 0x900, 64},
                                                                      {MSMS_EV_MALLOC, 0x100, 32}});
    CHECK(attr(rows[2], "owner") == "PTA@weight");  // with the extras its MALLOC carried
    CHECK(g.catch_up(6000, 42).empty());
}

TEST_CASE("a block freed twice unseen is freed once; a mapping keeps its pool") {
    held = {{MSMS_T_PTA, 0x100}};
    StepGap g = gap();
    g.dropped(event(MSMS_EV_FREE, MSMS_T_PTA, 0x100));
    g.dropped(event(MSMS_EV_MALLOC, MSMS_T_PTA, 0x100, 16));  // the same address again: not a second FREE
    Record v = event(MSMS_EV_MALLOC, MSMS_T_PTA, 0x5000, 4096);
    v.attrs = {{"virtual", "true"}};
    g.dropped(v);
    auto rows = g.catch_up(1, 1);
    REQUIRE(rows.size() == 3);
    CHECK(rows[0].ev.kind == MSMS_EV_FREE);
    CHECK(rows[1].ev.ptr == 0x100);
    CHECK(rows[2].ev.ptr == 0x5000);
    CHECK(attr(rows[2], "virtual") == "true");
}

// A mapping (cuMemMap: Attr virtual:true on its MALLOC) is memory another
// block holds. Its shadow FREE carries no device_used, so the views count
// the device's bytes by its Attr: without virtual:true the trace's "in use"
// track and the oom analysis took its bytes off the device at the step's start.
TEST_CASE("the shadow FREE of a mapping unmapped unseen says virtual:true, a plain block's not") {
    StepGap g([](uint16_t, int16_t, uint16_t type, bool virt, uint64_t ptr) {
        return type == MSMS_T_HAL && ((virt && ptr == 0x6000) || (!virt && ptr == 0xa001));
    });
    g.dropped(event(MSMS_EV_FREE, MSMS_T_HAL, 0x6000));  // cuMemUnmap of the pipeline's mapping
    g.dropped(event(MSMS_EV_FREE, MSMS_T_HAL, 0xa001));  // its handle's memory given back
    auto rows = g.catch_up(1, 1);
    REQUIRE(rows.size() == 2);
    CHECK(rows[0].ev.ptr == 0x6000);
    CHECK(attr(rows[0], "virtual") == "true");
    CHECK(rows[1].ev.ptr == 0xa001);
    CHECK(attr(rows[1], "virtual") == "");
}

// The analyses list a carried-over block with the step it was allocated in
// (the oom analyzer's OOM_TOP_ALLOC): its shadow MALLOC says when that was.
TEST_CASE("a shadow MALLOC says when its block was allocated; a block there when collection started, never") {
    held = {};
    StepGap g = gap();
    Record weights = event(MSMS_EV_MALLOC, MSMS_T_PTA, 0x900, 64);
    weights.ev.timestamp_ns = 1234;
    g.dropped(weights);
    // the agent's shadow of a block there when start() came (a start() in a
    // step not selected): when it was allocated is not known
    Record before = event(MSMS_EV_MALLOC, MSMS_T_PTA, 0xa00, 8);
    before.ev.timestamp_ns = 1300;
    before.attrs = {{"shadow", "true"}};
    g.dropped(before);
    // a shadow that said its time already (a dump read back) keeps it
    Record carried = event(MSMS_EV_MALLOC, MSMS_T_PTA, 0xb00, 8);
    carried.ev.timestamp_ns = 1400;
    carried.attrs = {{"shadow", "true"}, {"allocated_at", "77"}};
    g.dropped(carried);
    auto rows = g.catch_up(5000, 42);
    REQUIRE(rows.size() == 3);
    CHECK(rows[0].ev.timestamp_ns == 5000);
    CHECK(attr(rows[0], "allocated_at") == "1234");
    CHECK(attr(rows[1], "allocated_at") == "");
    CHECK(attr(rows[2], "allocated_at") == "77");
    for (auto& r : rows) {
        size_t n = 0;
        for (auto& a : r.attrs) n += a.first == "allocated_at";
        CHECK(n <= 1);
    }
}
