// Unit tests of the inefficient analyzer: each rule and its edge cases.
#include <doctest/doctest.h>

#include <msmemscope/testing.hpp>

using namespace msmemscope::testing;

namespace {
const msms_plugin_descriptor* plugin() { return require_descriptor(PLUGIN_PATH); }
EventBuilder m(uint64_t p, uint64_t s) { return EventBuilder::malloc(p, s, MSMS_T_PTA).device(MSMS_DEV_NPU, 0); }
EventBuilder f(uint64_t p) { return EventBuilder::free(p, MSMS_T_PTA).device(MSMS_DEV_NPU, 0); }
EventBuilder a(uint64_t p) { return EventBuilder::access(p, MSMS_T_READ).device(MSMS_DEV_NPU, 0); }
EventBuilder start(const char* n = "aten::add") { return EventBuilder::op(n, true); }
EventBuilder end(const char* n = "aten::add") { return EventBuilder::op(n, false); }

using Opts = std::vector<std::pair<std::string, std::string>>;
struct Run {
    PluginHarness h{plugin()};
    Run() : Run(std::vector<std::pair<std::string, std::string>>{}) {}
    explicit Run(const std::vector<std::pair<std::string, std::string>>& opts) {
        REQUIRE(h.create(opts) == MSMS_OK);
        REQUIRE(h.begin() == MSMS_OK);
    }
    std::string mark(uint64_t id) {
        auto it = h.annotations.find(id);
        if (it == h.annotations.end()) return "";
        return it->second["inefficient_type"];
    }
};
}  // namespace

TEST_CASE("early_allocation: a freeing API lies between the MALLOC API and the first access API") {
    Run r;
    r.h.feed(m(0x100, 64).id(1));      // API 1: block A allocated
    r.h.feed(m(0x200, 64).id(2));      // API 2
    r.h.feed(f(0x200).id(3));          // API 3 frees
    r.h.feed(start().id(4));           // API 4
    r.h.feed(a(0x100).id(5));          // first access of A
    r.h.feed(end().id(6));
    r.h.finish();
    CHECK(r.mark(1) == "early_allocation");
    CHECK(r.mark(2) == "");
}

TEST_CASE("early_allocation: no freeing API in between, or the free in the MALLOC's own API, is fine") {
    Run r;
    r.h.feed(start().id(1));
    r.h.feed(m(0x100, 64).id(2));      // API 1 allocates A and frees B
    r.h.feed(m(0x200, 64).id(3));
    r.h.feed(f(0x200).id(4));
    r.h.feed(end().id(5));
    r.h.feed(start().id(6));           // API 2 accesses A
    r.h.feed(a(0x100).id(7));
    r.h.feed(end().id(8));
    r.h.finish();
    CHECK(r.mark(2) == "");

    // Positive control: the same free in an API of its own between them is early.
    Run p;
    p.h.feed(start().id(1));
    p.h.feed(m(0x100, 64).id(2));      // API 1 allocates A
    p.h.feed(m(0x200, 64).id(3));
    p.h.feed(end().id(4));
    p.h.feed(f(0x200).id(5));          // API 2 frees B
    p.h.feed(start().id(6));           // API 3 accesses A
    p.h.feed(a(0x100).id(7));
    p.h.feed(end().id(8));
    p.h.finish();
    CHECK(p.mark(2) == "early_allocation");
}

TEST_CASE("late_deallocation: an allocating API lies between the last access and the FREE") {
    Run r;
    r.h.feed(m(0x100, 64).id(1));      // API 1
    r.h.feed(start().id(2));           // API 2 accesses A
    r.h.feed(a(0x100).id(3));
    r.h.feed(end().id(4));
    r.h.feed(m(0x300, 64).id(5));      // API 3 allocates
    r.h.feed(f(0x100).id(6));          // API 4 frees A
    r.h.finish();
    CHECK(r.mark(1) == "late_deallocation");
    CHECK(r.mark(5) == "");
}

TEST_CASE("shadow rows are not judged: a block live at the end was not freed, one from before the start has no known allocation") {
    // A is accessed, an allocating API follows, and A is still live at the
    // end: the pipeline's end-of-dump FREE (shadow:true) is no deallocation,
    // in a live run (no such event reaches the analyzer) and offline (the
    // row is read back), as upstream's live analyzer skips shadow events.
    for (bool offline : {false, true}) {
        CAPTURE(offline);
        Run r;
        r.h.feed(m(0x100, 64).id(1).allocation_id(7));   // API 1: A
        r.h.feed(start().id(2));                         // API 2 accesses A
        r.h.feed(a(0x100).id(3));
        r.h.feed(end().id(4));
        r.h.feed(m(0x300, 8).id(5).allocation_id(8));    // API 3 allocates
        if (offline) r.h.feed(f(0x100).id(6).allocation_id(7).attr("shadow", "true"));
        r.h.finish();
        CHECK(r.mark(1) == "");
        REQUIRE(r.h.reports.size() == 1);
        CHECK(r.h.reports[0] == "inefficient: no block marked on device 0, of 2 block(s) judged");
    }
    // B was there before collection started (its MALLOC written at the
    // start, shadow:true): a freeing API before its first access says
    // nothing of when it was allocated; it is not judged, nor counted, and
    // its rows make no API: C, allocated in the range, is judged as if
    // they were not there.
    Run r;
    r.h.feed(m(0x200, 64).id(1).allocation_id(1).attr("shadow", "true"));
    r.h.feed(m(0x500, 8).id(2).allocation_id(2));      // API 1
    r.h.feed(f(0x500).id(3).allocation_id(2));         // API 2 frees
    r.h.feed(a(0x200).id(4));                          // API 3: B's first access
    r.h.feed(m(0x600, 8).id(5).allocation_id(3));      // API 4: C
    r.h.feed(start().id(6));                           // API 5 accesses C
    r.h.feed(a(0x600).id(7));
    r.h.feed(end().id(8));
    r.h.feed(m(0x700, 8).id(9).allocation_id(4));      // API 6 allocates
    r.h.feed(f(0x200).id(10).allocation_id(1).attr("shadow", "true"));
    r.h.feed(f(0x600).id(11).allocation_id(3));        // API 7: C late (API 6 between 5 and 7)
    r.h.finish();
    CHECK(r.mark(1) == "");
    CHECK(r.mark(5) == "late_deallocation");
    REQUIRE(r.h.reports.size() == 1);
    CHECK(r.h.reports[0] == "inefficient: 1 block(s), 8 bytes marked on device 0, of 3 block(s) judged: "
                            "late_deallocation 1 block(s), 8 bytes");
}

TEST_CASE("a block live at the end keeps the marks it earned while it was used") {
    Run r;
    r.h.feed(m(0x100, 64).id(1));      // API 1: A
    r.h.feed(m(0x500, 8).id(2));       // API 2
    r.h.feed(f(0x500).id(3));          // API 3 frees
    r.h.feed(a(0x100).id(4));          // API 4: A early
    r.h.finish();
    CHECK(r.mark(1) == "early_allocation");
    REQUIRE(r.h.reports.size() == 1);
    CHECK(r.h.reports[0] == "inefficient: 1 block(s), 64 bytes marked on device 0, of 2 block(s) judged: "
                            "early_allocation 1 block(s), 64 bytes");
}

TEST_CASE("late_deallocation: a free right after the last access is fine") {
    Run r;
    r.h.feed(m(0x300, 8).id(1));
    r.h.feed(m(0x100, 64).id(2));
    r.h.feed(start().id(3));
    r.h.feed(a(0x100).id(4));
    r.h.feed(end().id(5));
    r.h.feed(f(0x100).id(6));
    r.h.finish();
    CHECK(r.mark(2) == "");

    // Positive control: an allocating API between the last access and the free is late.
    Run p;
    p.h.feed(m(0x300, 8).id(1));
    p.h.feed(m(0x100, 64).id(2));
    p.h.feed(start().id(3));
    p.h.feed(a(0x100).id(4));
    p.h.feed(end().id(5));
    p.h.feed(m(0x400, 8).id(6));       // allocating API
    p.h.feed(f(0x100).id(7));
    p.h.finish();
    CHECK(p.mark(2) == "late_deallocation");
}

TEST_CASE("temporary_idleness: consecutive accesses more than idle_threshold APIs apart") {
    Run r(Opts{{"idle_threshold", "3"}});
    r.h.feed(m(0x100, 64).id(1));
    r.h.feed(a(0x100).id(2));               // API 2
    for (int i = 0; i < 3; ++i) {            // APIs 3..5
        r.h.feed(start());
        r.h.feed(end());
    }
    r.h.feed(a(0x100).id(20));              // API 6: 4 apart, not more than 3? 6-2 = 4 > 3
    r.h.finish();
    CHECK(r.mark(1) == "temporary_idleness");

    Run q(Opts{{"idle_threshold", "3"}});
    q.h.feed(m(0x100, 64).id(1));
    q.h.feed(a(0x100).id(2));               // API 2
    for (int i = 0; i < 2; ++i) {
        q.h.feed(start());
        q.h.feed(end());
    }
    q.h.feed(a(0x100).id(20));              // API 5: exactly 3 apart
    q.h.finish();
    CHECK(q.mark(1) == "");
}

TEST_CASE("mem_size, inefficient_type and pools filter what is marked") {
    auto scenario = [](Run& r, uint16_t pool) {
        r.h.feed(EventBuilder::malloc(0x100, 64, pool).device(MSMS_DEV_NPU, 0).id(1));
        r.h.feed(EventBuilder::malloc(0x200, 64, pool).device(MSMS_DEV_NPU, 0).id(2));
        r.h.feed(EventBuilder::free(0x200, pool).device(MSMS_DEV_NPU, 0).id(3));
        r.h.feed(a(0x100).id(4));
        r.h.finish();
    };
    Run plain;  // positive control: the scenario is early_allocation with the defaults
    scenario(plain, MSMS_T_PTA);
    CHECK(plain.mark(1) == "early_allocation");
    Run big(Opts{{"mem_size", "65"}});
    scenario(big, MSMS_T_PTA);
    CHECK(big.mark(1) == "");
    Run at_size(Opts{{"mem_size", "64"}});  // a 64-byte block is not smaller than mem_size 64
    scenario(at_size, MSMS_T_PTA);
    CHECK(at_size.mark(1) == "early_allocation");
    Run other(Opts{{"inefficient_type", "late_deallocation"}});
    scenario(other, MSMS_T_PTA);
    CHECK(other.mark(1) == "");
    Run same(Opts{{"inefficient_type", "early_allocation"}});
    scenario(same, MSMS_T_PTA);
    CHECK(same.mark(1) == "early_allocation");
    Run host_default;
    scenario(host_default, MSMS_T_HOST);
    CHECK(host_default.mark(1) == "");
    Run host(Opts{{"pools", "HOST"}});
    scenario(host, MSMS_T_HOST);
    CHECK(host.mark(1) == "early_allocation");
}

TEST_CASE("an access is matched by allocation_id or by an address inside the block; several kinds join") {
    Run r(Opts{{"idle_threshold", "1"}});
    r.h.feed(m(0x1000, 256).id(1).allocation_id(7));
    r.h.feed(m(0x5000, 8).id(2));
    r.h.feed(f(0x5000).id(3));                            // API 3 frees
    r.h.feed(a(0x1080).id(4));                            // API 4: inside block 0x1000: early
    r.h.feed(a(0x9999).attr("allocation_id", "7").id(5)); // API 5
    r.h.feed(m(0x6000, 8).id(6));                         // API 6
    r.h.feed(a(0x1000).id(7));                            // API 7: 2 apart > 1: idleness
    r.h.finish();
    CHECK(r.mark(1) == "early_allocation,temporary_idleness");
}

TEST_CASE("the report counts each marked block once, and once in each of its kinds") {
    // A (256 bytes) is early and then late: annotated twice, one block; B
    // (64 bytes) is early only; C and D (8 bytes) are never accessed.
    Run r;
    r.h.feed(m(0x1000, 256).id(1));    // API 1: A
    r.h.feed(m(0x2000, 64).id(2));     // API 2: B
    r.h.feed(m(0x5000, 8).id(3));      // API 3: C
    r.h.feed(f(0x5000).id(4));         // API 4 frees
    r.h.feed(a(0x1000).id(5));         // API 5: A early
    r.h.feed(a(0x2000).id(6));         // API 6: B early
    r.h.feed(f(0x2000).id(7));         // API 7: B freed, nothing allocated since its access
    r.h.feed(m(0x6000, 8).id(8));      // API 8 allocates D
    r.h.feed(f(0x1000).id(9));         // API 9: A late
    r.h.finish();
    CHECK(r.mark(1) == "early_allocation,late_deallocation");
    CHECK(r.mark(2) == "early_allocation");
    REQUIRE(r.h.reports.size() == 1);
    CHECK(r.h.reports[0] == "inefficient: 2 block(s), 320 bytes marked on device 0, of 4 block(s) judged: "
                            "early_allocation 2 block(s), 320 bytes; late_deallocation 1 block(s), 256 bytes");
}

TEST_CASE("the report says when nothing was marked, or nothing was judged") {
    Run r;
    r.h.feed(m(0x1000, 256).id(1));
    r.h.feed(a(0x1000).id(2));
    r.h.feed(f(0x1000).id(3));
    r.h.finish();
    CHECK(r.h.reports == std::vector<std::string>{"inefficient: no block marked on device 0, of 1 block(s) judged"});
    // Without a single access (a dump recorded without access in --events)
    // no block could earn a kind: "of 2 block(s) judged" contradicted the
    // offline warning that the analysis had nothing to judge.
    Run unseen;
    unseen.h.feed(m(0x1000, 256).id(1));
    unseen.h.feed(m(0x2000, 64).id(2));
    unseen.h.feed(f(0x1000).id(3));
    unseen.h.finish();
    CHECK(unseen.h.reports == std::vector<std::string>{
                                  "inefficient: no block judged on device 0: none of its 2 block(s) had an access "
                                  "(no ACCESS rows)"});
    Run none;
    none.h.feed(EventBuilder::malloc(0x100, 64, MSMS_T_HOST).device(MSMS_DEV_CPU, -1).id(1));
    none.h.finish();
    REQUIRE(none.h.reports.size() == 1);
    CHECK(none.h.reports[0].rfind("inefficient: no block marked (no block of the pools ", 0) == 0);
}

TEST_CASE("two collection ranges: a block freed while collection was off is not the one at its address now") {
    // A is allocated and used in the first range and freed while collection
    // is off; B is allocated at A's address then. The second start() writes
    // A's FREE and B's MALLOC as shadow rows: B's accesses are not A's.
    Run r(Opts{{"idle_threshold", "1"}});
    r.h.feed(m(0x100, 64).id(1).allocation_id(1));   // API 1: A
    r.h.feed(a(0x100).id(2));                        // API 2
    r.h.feed(f(0x100).id(3).allocation_id(1).attr("shadow", "true"));
    r.h.feed(m(0x100, 64).id(4).allocation_id(2).attr("shadow", "true"));
    r.h.feed(m(0x500, 8).id(5).allocation_id(3));    // API 3
    r.h.feed(m(0x600, 8).id(6).allocation_id(4));    // API 4
    r.h.feed(a(0x100).id(7));                        // API 5: B, two APIs after A's last access
    r.h.finish();
    CHECK(r.mark(1) == "");
    CHECK(r.mark(4) == "");
    REQUIRE(r.h.reports.size() == 1);
    CHECK(r.h.reports[0] == "inefficient: no block marked on device 0, of 3 block(s) judged");
}
