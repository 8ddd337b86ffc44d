// Unit tests of the oom analyzer.
#include <doctest/doctest.h>

#include <msmemscope/testing.hpp>

using namespace msmemscope::testing;

namespace {
const msms_plugin_descriptor* plugin() { return require_descriptor(PLUGIN_PATH); }
EventBuilder trigger(uint64_t size) {
    EventBuilder b(MSMS_EV_OOM_DETAIL, MSMS_T_OOM_TRIGGER);
    b.device(MSMS_DEV_CPU, -1).size(size).name("malloc").aux(0, 12);
    return b;
}
std::vector<OwnedEvent> of_type(const PluginHarness& h, uint16_t type) {
    std::vector<OwnedEvent> out;
    for (auto& e : h.emitted)
        if (e.ev.type == type) out.push_back(e);
    return out;
}
}  // namespace

TEST_CASE("an OOM trigger writes the K most recent and K largest live blocks between two snapshots") {
    PluginHarness h(plugin());
    REQUIRE(h.create({{"K", "2"}}) == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    h.feed(EventBuilder::malloc(0x10, 1000).c_stack("big_site"));
    h.feed(EventBuilder::malloc(0x20, 10));
    h.feed(EventBuilder::step(1));
    h.feed(EventBuilder::malloc(0x30, 500));
    h.feed(EventBuilder::malloc(0x40, 20).py_stack("a.py(3): f"));
    h.feed(EventBuilder::free(0x30));
    h.feed(trigger(1 << 30));
    h.feed(EventBuilder::malloc(0x50, 1));  // the next memory event: snapshot after
    REQUIRE(h.finish() == MSMS_OK);
    REQUIRE(h.emitted.size() == 6);
    CHECK(h.emitted[0].ev.kind == MSMS_EV_SNAPSHOT);
    CHECK(h.emitted[0].name == "OOM_Snapshot");
    CHECK(h.emitted[0].attr("allocated") == "1030");
    CHECK(h.emitted[0].attr("max_allocated") == "1530");
    auto recent = of_type(h, MSMS_T_OOM_RECENT_ALLOC);
    REQUIRE(recent.size() == 2);
    CHECK(recent[0].attr("ptr") == "0x40");
    CHECK(recent[0].attr("size") == "20");
    CHECK(recent[0].attr("step") == "2");
    CHECK(recent[0].attr("pool") == "HOST");
    CHECK(recent[0].attr("client") == "1");
    CHECK(recent[0].py_stack == "a.py(3): f");
    CHECK(recent[1].attr("ptr") == "0x20");
    auto top = of_type(h, MSMS_T_OOM_TOP_ALLOC);
    REQUIRE(top.size() == 2);
    CHECK(top[0].attr("ptr") == "0x10");
    CHECK(top[0].attr("size") == "1000");
    CHECK(top[0].c_stack == "big_site");
    CHECK(top[1].attr("ptr") == "0x40");
    CHECK(h.emitted[5].name == "OOM_Snapshot_After");
    CHECK(h.emitted[5].attr("allocated") == "1030");  // taken before the next event applies
    CHECK(h.reports == std::vector<std::string>{"oom: 1 out-of-memory failure(s), 1 detail dump(s) written (OOM_DETAIL rows)"});
}

TEST_CASE("a failing loop gets one detail dump per interval; the after snapshot comes at the end if nothing follows") {
    PluginHarness h(plugin());
    REQUIRE(h.create({{"K", "10"}, {"interval_ms", "1"}}) == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    h.feed(EventBuilder::malloc(0x10, 100).at(1000));
    h.feed(trigger(1 << 30).at(2000));
    h.feed(trigger(1 << 30).at(3000));        // within 1 ms: no second dump
    h.feed(trigger(1 << 30).at(5000000));     // later: dumped again
    REQUIRE(h.finish() == MSMS_OK);
    size_t before = 0, after = 0;
    for (auto& e : h.emitted) {
        if (e.name == "OOM_Snapshot") ++before;
        if (e.name == "OOM_Snapshot_After") ++after;
    }
    CHECK(before == 2);
    CHECK(after == 1);
    CHECK(of_type(h, MSMS_T_OOM_TOP_ALLOC).size() == 2);
}

TEST_CASE("each byte once: a framework block at a live host block's address is listed and counted once") {
    // A CPU tensor's storage: malloc (HOST) then the framework's MALLOC
    // (PTA) at the same address -- one block, the framework's.
    PluginHarness h(plugin());
    REQUIRE(h.create({{"K", "10"}}) == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    auto host = [](uint64_t p, uint64_t s) { return EventBuilder::malloc(p, s, MSMS_T_HOST).device(MSMS_DEV_CPU, -1); };
    auto pta = [](uint64_t p, uint64_t s) { return EventBuilder::malloc(p, s, MSMS_T_PTA).device(MSMS_DEV_CPU, -1); };
    h.feed(host(0x1000, 4096).thread(7));
    h.feed(pta(0x1000, 4096).thread(7));
    h.feed(host(0x9000, 100).thread(7));   // a plain host block
    h.feed(host(0x5000, 8192).thread(7));  // a second tensor, its storage freed again
    h.feed(pta(0x5000, 8192).thread(7));
    h.feed(EventBuilder::free(0x5000, MSMS_T_PTA).device(MSMS_DEV_CPU, -1).thread(7));
    h.feed(EventBuilder::free(0x5000, MSMS_T_HOST).device(MSMS_DEV_CPU, -1).thread(7));
    h.feed(trigger(1 << 30).process(42).thread(9));
    REQUIRE(h.finish() == MSMS_OK);
    auto top = of_type(h, MSMS_T_OOM_TOP_ALLOC);
    REQUIRE(top.size() == 2);
    CHECK(top[0].attr("pool") == "PTA");
    CHECK(top[0].attr("ptr") == "0x1000");
    CHECK(top[1].attr("pool") == "HOST");
    CHECK(top[1].attr("ptr") == "0x9000");
    CHECK(of_type(h, MSMS_T_OOM_RECENT_ALLOC).size() == 2);
    REQUIRE(h.emitted.front().name == "OOM_Snapshot");
    CHECK(h.emitted.front().attr("allocated") == "4196");
    CHECK(h.emitted.front().attr("max_allocated") == "12388");  // 4096 + 100 + 8192, never twice
    // the rows of a failure carry the failing thread (and process)
    for (auto& e : h.emitted) {
        CHECK(e.ev.tid == 9);
        CHECK(e.ev.pid == 42);
    }
    CHECK(h.emitted.back().name == "OOM_Snapshot_After");
}

TEST_CASE("OOM_Snapshot numbers are upstream's: total/free from the device's last SNAPSHOT, %f rates, 0 when unknown") {
    // csrc/analysis/dump.cpp DumpSnapshotEvent writes numbers only
    PluginHarness h(plugin());
    REQUIRE(h.create({{"K", "1"}}) == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    h.feed(EventBuilder::malloc(0x10, 1000).at(1000));
    h.feed(trigger(1 << 30).at(2000));  // no snapshot seen yet: total and free unknown
    EventBuilder snap(MSMS_EV_SNAPSHOT, MSMS_T_SNAPSHOT);
    snap.device(MSMS_DEV_CPU, -1).aux(4000, 3000);  // a native row: aux0 total, aux1 free
    h.feed(snap);
    EventBuilder py(MSMS_EV_SNAPSHOT, MSMS_T_SNAPSHOT);  // the Python package's row: Attr total/free
    py.device(MSMS_DEV_NPU, 0).attr("reserved", "0").attr("total", "1000").attr("free", "500");
    h.feed(py);
    h.feed(EventBuilder::malloc(0x20, 10).device(MSMS_DEV_NPU, 0).at(3000));
    h.feed(trigger(1 << 30).at(10'000'000'000ull));  // past interval_ms: dumped again
    h.feed(trigger(1 << 30).device(MSMS_DEV_NPU, 0).at(10'000'000'000ull));
    REQUIRE(h.finish() == MSMS_OK);
    std::vector<OwnedEvent> snaps;
    for (auto& e : h.emitted)
        if (e.name == "OOM_Snapshot") snaps.push_back(e);
    REQUIRE(snaps.size() == 3);
    CHECK(snaps[0].attr("total") == "0");
    CHECK(snaps[0].attr("free") == "0");
    CHECK(snaps[0].attr("device_rate") == "0.000000");
    CHECK(snaps[0].attr("reserved") == "0");
    CHECK(snaps[0].attr("reserved_rate") == "0.000000");
    CHECK(snaps[1].attr("total") == "4000");
    CHECK(snaps[1].attr("free") == "3000");
    CHECK(snaps[1].attr("device_rate") == "25.000000");
    CHECK(snaps[2].ev.device_kind == MSMS_DEV_NPU);
    CHECK(snaps[2].attr("device_rate") == "50.000000");
}
