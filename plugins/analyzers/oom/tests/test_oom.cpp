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
    CHECK(h.emitted[5].attr("allocated") == "1031");  // taken once the next event has applied
    CHECK(h.reports == std::vector<std::string>{"oom: 1 out-of-memory failure(s), 1 detail dump(s) written (OOM_DETAIL rows)"});
}

TEST_CASE("a failing loop: a snapshot at every failure (as upstream), the blocks once per interval; the after snapshot comes at the end if nothing follows") {
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
    CHECK(before == 3);
    CHECK(after == 1);
    CHECK(of_type(h, MSMS_T_OOM_TOP_ALLOC).size() == 2);
    CHECK(of_type(h, MSMS_T_OOM_TRIGGER).empty());  // write_trigger not set: the host writes it
    // stderr: one warning per dump, not one per failure
    size_t warnings = 0;
    for (auto& l : h.logs) warnings += l.first == 1 && l.second.find("bytes failed on device cpu") != std::string::npos;
    CHECK(warnings == 2);
    CHECK(h.reports == std::vector<std::string>{"oom: 3 out-of-memory failure(s), 2 detail dump(s) written (OOM_DETAIL rows)"});
}

TEST_CASE("write_trigger (a live run: the host hands the trigger over): OOM_Snapshot, then the trigger as it came, then the blocks") {
    PluginHarness h(plugin());
    REQUIRE(h.create({{"K", "1"}, {"write_trigger", "true"}}) == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    h.feed(EventBuilder::malloc(0x10, 100).at(1000));
    h.feed(trigger(1 << 30).at(2000).attr("func", "malloc").attr("req_size", "1073741824").c_stack("f\ng")
               .py_stack("t.py(1): <module>").process(5).thread(6));
    REQUIRE(h.finish() == MSMS_OK);
    std::vector<std::string> names;
    for (auto& e : h.emitted) names.push_back(e.name);
    CHECK(names == std::vector<std::string>{"OOM_Snapshot", "malloc", "", "", "OOM_Snapshot_After"});
    const OwnedEvent& snap = h.emitted[0];
    CHECK(snap.c_stack == "f\ng");  // upstream's OOM snapshot carries the failing call's stacks
    CHECK(snap.py_stack == "t.py(1): <module>");
    CHECK(snap.ev.timestamp_ns == 2000);
    const OwnedEvent& t = h.emitted[1];
    CHECK(t.ev.kind == MSMS_EV_OOM_DETAIL);
    CHECK(t.ev.type == MSMS_T_OOM_TRIGGER);
    CHECK(t.ev.size == (1u << 30));
    CHECK(t.ev.aux1 == 12);
    CHECK(t.ev.id == 0);  // the host numbers it
    CHECK(t.attrs == std::vector<std::pair<std::string, std::string>>{{"func", "malloc"}, {"req_size", "1073741824"}});
    CHECK(t.c_stack == "f\ng");
    CHECK(t.ev.pid == 5);
    CHECK(t.ev.tid == 6);
    CHECK(h.emitted[2].ev.type == MSMS_T_OOM_RECENT_ALLOC);
    CHECK(h.emitted[3].ev.type == MSMS_T_OOM_TOP_ALLOC);
}

TEST_CASE("details=false (oom not selected): an OOM_Snapshot row at each failure and nothing else, as upstream") {
    // No block list (it runs in every live run): the numbers are the host's
    // running totals, the framework pools' live bytes once there are any.
    PluginHarness h(plugin());
    REQUIRE(h.create({{"details", "false"}, {"write_trigger", "true"}}) == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    auto with_device_used = [](EventBuilder b, int64_t device_used) {
        OwnedEvent e = b;
        e.ev.device_used = device_used;
        return e;
    };
    h.feed(with_device_used(EventBuilder::malloc(0x10, 100).used(100).at(1000), 100));
    h.feed(with_device_used(EventBuilder::malloc(0x20, 50).used(150).at(1500), 150));
    h.feed(trigger(1 << 30).at(2000).thread(3).c_stack("oom_site"));  // a native program: the heap's bytes
    h.feed(with_device_used(EventBuilder::malloc(0x100, 4096).used(4246).at(2500), 4246));  // a tensor's storage
    h.feed(EventBuilder::malloc(0x100, 4096, MSMS_T_PTA).used(4096).total(4096).at(2600));  // ... and the tensor
    h.feed(trigger(1 << 30).at(3000).thread(3));
    h.feed(trigger(1 << 30).at(3001).thread(3));  // a retry: a snapshot again (upstream: one per failure)
    h.feed(EventBuilder::free(0x100, MSMS_T_PTA).used(0).total(0).at(4000));
    h.feed(EventBuilder::step(2));
    h.feed(EventBuilder::kernel("k"));
    REQUIRE(h.finish() == MSMS_OK);
    REQUIRE(h.emitted.size() == 3);
    for (auto& e : h.emitted) {
        CHECK(e.ev.kind == MSMS_EV_SNAPSHOT);
        CHECK(e.name == "OOM_Snapshot");
        CHECK(e.ev.tid == 3);
    }
    CHECK(h.emitted[0].attr("allocated") == "150");
    CHECK(h.emitted[0].attr("max_allocated") == "150");
    CHECK(h.emitted[0].c_stack == "oom_site");
    CHECK(h.emitted[1].attr("allocated") == "4096");  // the tensor once, not its malloc again
    CHECK(h.emitted[1].attr("reserved") == "4096");
    CHECK(h.emitted[1].attr("reserved_rate") == "100.000000");
    CHECK(h.emitted[2].ev.timestamp_ns == 3001);
    size_t warnings = 0;
    for (auto& l : h.logs) warnings += l.first == 1;
    CHECK(warnings == 1);  // one per interval
    CHECK(h.reports == std::vector<std::string>{
        "oom: 3 out-of-memory failure(s), an OOM_Snapshot row each; --analysis=oom adds the failing call and the "
        "most recent and largest live blocks (OOM_DETAIL rows)"});
}

TEST_CASE("snapshot numbers on a device with a framework pool: allocated and reserved are the framework's, as upstream's") {
    // An NPU: the caching allocator's segment is a HAL block, its tensors are
    // PTA blocks inside it (each byte once: not HAL + PTA); the PTA rows'
    // Attr total is the allocator's reserved (torch_npu memory_reserved).
    PluginHarness h(plugin());
    REQUIRE(h.create({{"K", "2"}}) == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    auto hal = [](uint64_t p, uint64_t s) { return EventBuilder::malloc(p, s, MSMS_T_HAL).device(MSMS_DEV_NPU, 1); };
    auto pta = [](uint64_t p, uint64_t s, const char* total) {
        return EventBuilder::malloc(p, s, MSMS_T_PTA).device(MSMS_DEV_NPU, 1).attr("total", total);
    };
    h.feed(hal(0x100000, 64 << 20));
    h.feed(pta(0x100000, 4 << 20, "67108864"));
    h.feed(pta(0x500000, 8 << 20, "67108864"));
    h.feed(EventBuilder::free(0x500000, MSMS_T_PTA).device(MSMS_DEV_NPU, 1).attr("total", "67108864"));
    h.feed(pta(0x500000, 2 << 20, "67108864"));
    h.feed(trigger(96 << 20).device(MSMS_DEV_NPU, 1));
    REQUIRE(h.finish() == MSMS_OK);
    REQUIRE(h.emitted.front().name == "OOM_Snapshot");
    const OwnedEvent& s = h.emitted.front();
    CHECK(s.attr("allocated") == std::to_string(6 << 20));
    CHECK(s.attr("max_allocated") == std::to_string(12 << 20));
    CHECK(s.attr("reserved") == std::to_string(64 << 20));
    CHECK(s.attr("max_reserved") == std::to_string(64 << 20));
    CHECK(s.attr("reserved_rate") == "9.375000");
    // the lists are upstream's: every pool's live blocks (the HAL segment too)
    auto top = of_type(h, MSMS_T_OOM_TOP_ALLOC);
    REQUIRE(top.size() == 2);
    CHECK(top[0].attr("pool") == "HAL");
    CHECK(top[1].attr("pool") == "PTA");
}

TEST_CASE("the imports' heap (one shadow block for many, at a made-up address) counts but is never listed as a recent or a large block") {
    PluginHarness h(plugin());
    REQUIRE(h.create({{"K", "2"}}) == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    h.feed(EventBuilder::malloc(0x10, 1000).at(100));
    h.feed(EventBuilder::malloc(0x20, 10).at(200));
    // re-written as the imports change: the latest, and the largest, row of the device
    h.feed(EventBuilder::malloc(0xffff800000000000ull, 64 << 20)
               .at(300)
               .attr("shadow", "true")
               .attr("import", "true")
               .attr("blocks", "325956"));
    h.feed(trigger(1 << 30).at(400));
    REQUIRE(h.finish() == MSMS_OK);
    auto recent = of_type(h, MSMS_T_OOM_RECENT_ALLOC);
    REQUIRE(recent.size() == 2);
    CHECK(recent[0].attr("ptr") == "0x20");
    CHECK(recent[1].attr("ptr") == "0x10");
    auto top = of_type(h, MSMS_T_OOM_TOP_ALLOC);
    REQUIRE(top.size() == 2);
    CHECK(top[0].attr("ptr") == "0x10");
    CHECK(top[1].attr("ptr") == "0x20");
    // the memory is the program's all the same
    CHECK(h.emitted[0].name == "OOM_Snapshot");
    CHECK(h.emitted[0].attr("allocated") == std::to_string(1010 + (64 << 20)));
}

TEST_CASE("a mapping (virtual:true) is its handle's memory: counted once, listed never, its unmap takes nothing off") {
    // cuMemCreate h (2000 B), cuMemMap m of h (2000 B, virtual:true), then
    // cuMemAlloc b (1000 B): the device holds 3000 B, as the host's
    // device_used says. It said 5000, and listed m beside h.
    auto on_cuda = [](EventBuilder b) { return b.device(MSMS_DEV_CUDA, 0); };
    PluginHarness h(plugin());
    REQUIRE(h.create({{"K", "3"}}) == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    h.feed(on_cuda(EventBuilder::malloc(0xa001, 2000, MSMS_T_HAL).at(100)));
    h.feed(on_cuda(EventBuilder::malloc(0x6000, 2000, MSMS_T_HAL).at(200).attr("virtual", "true")));
    h.feed(on_cuda(EventBuilder::malloc(0x7000, 1000, MSMS_T_HAL).at(300)));
    h.feed(on_cuda(trigger(1 << 30)).at(400));
    h.feed(on_cuda(EventBuilder::free(0x6000, MSMS_T_HAL)).at(500));  // unmapped: h still holds the memory
    REQUIRE(h.finish() == MSMS_OK);
    REQUIRE(h.emitted.size() >= 2);
    CHECK(h.emitted[0].name == "OOM_Snapshot");
    CHECK(h.emitted[0].attr("allocated") == "3000");
    CHECK(h.emitted[0].attr("max_allocated") == "3000");
    std::vector<std::string> listed;
    for (auto type : {MSMS_T_OOM_RECENT_ALLOC, MSMS_T_OOM_TOP_ALLOC})
        for (auto& e : of_type(h, type)) listed.push_back(e.attr("ptr"));
    CHECK(listed == std::vector<std::string>{"0x7000", "0xa001", "0xa001", "0x7000"});
    CHECK(h.emitted.back().name == "OOM_Snapshot_After");
    CHECK(h.emitted.back().attr("allocated") == "3000");
}

TEST_CASE("a block there when collection started is among the largest, never among the most recent") {
    // start(): the blocks already live are written then as shadow MALLOCs;
    // when they were allocated is not known, so an OOM right after start()
    // does not call them its most recent allocations.
    PluginHarness h(plugin());
    REQUIRE(h.create({{"K", "2"}}) == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    h.feed(EventBuilder::malloc(0x10, 1 << 20).at(100).attr("shadow", "true"));
    h.feed(EventBuilder::malloc(0x20, 8).at(100).attr("shadow", "true"));
    h.feed(EventBuilder::malloc(0x30, 64).at(200));
    h.feed(trigger(1 << 30).at(300));
    REQUIRE(h.finish() == MSMS_OK);
    auto recent = of_type(h, MSMS_T_OOM_RECENT_ALLOC);
    REQUIRE(recent.size() == 1);
    CHECK(recent[0].attr("ptr") == "0x30");
    auto top = of_type(h, MSMS_T_OOM_TOP_ALLOC);
    REQUIRE(top.size() == 2);
    CHECK(top[0].attr("ptr") == "0x10");
    CHECK(top[1].attr("ptr") == "0x30");
}

TEST_CASE("a cpu failure's memory bound (its trigger's total, free and limit) is the OOM_Snapshot's, not the trigger row's") {
    PluginHarness h(plugin());
    REQUIRE(h.create({{"K", "1"}, {"write_trigger", "true"}}) == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    h.feed(EventBuilder::malloc(0x10, 100).at(1000));
    h.feed(trigger(1 << 30).at(2000).attr("func", "malloc").attr("req_size", "1073741824")
               .attr("total", "4294967296").attr("free", "1073741824").attr("limit", "RLIMIT_AS"));
    REQUIRE(h.finish() == MSMS_OK);
    const OwnedEvent& snap = h.emitted.at(0);
    REQUIRE(snap.name == "OOM_Snapshot");
    // upstream's keys in upstream's order, then ours
    std::vector<std::string> keys;
    for (auto& kv : snap.attrs) keys.push_back(kv.first);
    CHECK(keys == std::vector<std::string>{"reserved", "max_reserved", "allocated", "max_allocated", "total", "free",
                                           "device_rate", "reserved_rate", "limit"});
    CHECK(snap.attr("total") == "4294967296");
    CHECK(snap.attr("free") == "1073741824");
    CHECK(snap.attr("device_rate") == "75.000000");
    CHECK(snap.attr("limit") == "RLIMIT_AS");
    const OwnedEvent& t = h.emitted.at(1);
    CHECK(t.attrs == std::vector<std::pair<std::string, std::string>>{{"func", "malloc"}, {"req_size", "1073741824"}});
    REQUIRE(h.findings["oom"].size() == 1);
    auto& f = h.findings["oom"][0];
    CHECK(f["total"] == "4294967296");
    CHECK(f["free"] == "1073741824");
    CHECK(f["limit"] == "RLIMIT_AS");
}

TEST_CASE("a cpu failure whose memory bound could not be read: total 0, free 0 and limit:unknown, said in the row") {
    PluginHarness h(plugin());
    REQUIRE(h.create({{"details", "false"}, {"write_trigger", "true"}}) == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    h.feed(trigger(64).attr("limit", "unknown"));
    REQUIRE(h.finish() == MSMS_OK);
    REQUIRE(h.emitted.size() == 1);
    CHECK(h.emitted[0].attr("total") == "0");
    CHECK(h.emitted[0].attr("free") == "0");
    CHECK(h.emitted[0].attr("device_rate") == "0.000000");
    CHECK(h.emitted[0].attr("limit") == "unknown");
}

TEST_CASE("a trigger without a memory bound (a device's: its driver's numbers) writes upstream's keys only") {
    PluginHarness h(plugin());
    REQUIRE(h.create({{"details", "false"}}) == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    EventBuilder dev_snapshot(MSMS_EV_SNAPSHOT, MSMS_T_SNAPSHOT);
    dev_snapshot.device(MSMS_DEV_NPU, 0).attr("total", "1000").attr("free", "250");
    h.feed(dev_snapshot);
    EventBuilder npu(MSMS_EV_OOM_DETAIL, MSMS_T_OOM_TRIGGER);
    npu.device(MSMS_DEV_NPU, 0).size(4096).name("halMemAlloc");
    h.feed(npu);
    REQUIRE(h.finish() == MSMS_OK);
    REQUIRE(h.emitted.size() == 1);
    CHECK(h.emitted[0].attr("total") == "1000");
    CHECK(h.emitted[0].attr("free") == "250");
    CHECK(h.emitted[0].attr("device_rate") == "75.000000");
    CHECK(h.emitted[0].attrs.size() == 8);  // no limit key
}

namespace {
EventBuilder bound_trigger(const char* total, const char* free, const char* limit) {
    return trigger(1 << 30).attr("total", total).attr("free", free).attr("limit", limit);
}
const OwnedEvent& after_snapshot(const PluginHarness& h) {
    for (auto& e : h.emitted)
        if (e.name == "OOM_Snapshot_After") return e;
    FAIL("no OOM_Snapshot_After");
    return h.emitted.front();
}
}  // namespace

TEST_CASE("the after snapshot's free is the failure's plus what the program gave back since, not the failure's again") {
    PluginHarness h(plugin());
    REQUIRE(h.create({{"K", "1"}}) == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    h.feed(EventBuilder::malloc(0x10, 3000).at(100));
    h.feed(EventBuilder::malloc(0x20, 500).at(200));
    h.feed(bound_trigger("10000", "4000", "RLIMIT_AS").at(300));
    h.feed(EventBuilder::free(0x10).at(400));  // the program's answer to the failure
    REQUIRE(h.finish() == MSMS_OK);
    CHECK(h.emitted.front().attr("free") == "4000");
    const OwnedEvent& after = after_snapshot(h);
    CHECK(after.ev.timestamp_ns == 400);
    CHECK(after.attr("allocated") == "500");
    CHECK(after.attr("total") == "10000");
    CHECK(after.attr("free") == "7000");
    CHECK(after.attr("device_rate") == "30.000000");
    CHECK(after.attr("limit") == "RLIMIT_AS");
}

TEST_CASE("the after snapshot's free: less what was allocated since, never below 0 nor above total") {
    auto after_free_of = [](EventBuilder next) {
        PluginHarness h(plugin());
        REQUIRE(h.create({{"K", "1"}}) == MSMS_OK);
        REQUIRE(h.begin() == MSMS_OK);
        h.feed(EventBuilder::malloc(0x10, 9000).at(100));
        h.feed(bound_trigger("10000", "800", "cgroup").at(200));
        h.feed(next.at(300));
        REQUIRE(h.finish() == MSMS_OK);
        return after_snapshot(h).attr("free");
    };
    CHECK(after_free_of(EventBuilder::malloc(0x20, 300)) == "500");
    CHECK(after_free_of(EventBuilder::malloc(0x20, 5000)) == "0");  // others gave back what it took: not seen
    CHECK(after_free_of(EventBuilder::free(0x10)) == "9800");
}

TEST_CASE("the after snapshot's free counts each byte once: a tensor's storage on a host block gives back the block") {
    PluginHarness h(plugin());
    REQUIRE(h.create({{"K", "1"}}) == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    h.feed(EventBuilder::malloc(0x10, 4096).at(100));
    h.feed(EventBuilder::malloc(0x10, 4096, MSMS_T_PTA).at(101));  // the framework's block on it
    h.feed(bound_trigger("100000", "1000", "machine").at(200));
    h.feed(EventBuilder::free(0x10, MSMS_T_PTA).at(300));  // the tensor goes, its storage's malloc not yet
    h.feed(EventBuilder::free(0x10).at(301));
    REQUIRE(h.finish() == MSMS_OK);
    CHECK(after_snapshot(h).attr("free") == "1000");  // at the framework's FREE nothing was given back
}

TEST_CASE("the after snapshot where free is not known (a device without a SNAPSHOT row): 0, as upstream's unknown") {
    PluginHarness h(plugin());
    REQUIRE(h.create({{"K", "1"}}) == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    h.feed(EventBuilder::malloc(0x10, 512, MSMS_T_HAL).device(MSMS_DEV_CUDA, 0).at(100));
    h.feed(trigger(1 << 20).device(MSMS_DEV_CUDA, 0).at(200));
    h.feed(EventBuilder::free(0x10, MSMS_T_HAL).device(MSMS_DEV_CUDA, 0).at(300));
    REQUIRE(h.finish() == MSMS_OK);
    CHECK(after_snapshot(h).attr("total") == "0");
    CHECK(after_snapshot(h).attr("free") == "0");
}

TEST_CASE("--analyze of a dump: the OOM_Snapshot row read back gives the offline analysis the live run's bound") {
    // the live run: the agent's trigger carries the bound
    PluginHarness live(plugin());
    REQUIRE(live.create({{"K", "1"}, {"write_trigger", "true"}}) == MSMS_OK);
    REQUIRE(live.begin() == MSMS_OK);
    live.feed(EventBuilder::malloc(0x10, 100).at(1000));
    live.feed(bound_trigger("4294967296", "4244070400", "RLIMIT_AS").at(2000).attr("func", "malloc"));
    REQUIRE(live.finish() == MSMS_OK);
    const OwnedEvent& written = live.emitted.at(0);
    REQUIRE(written.name == "OOM_Snapshot");
    // the dump read back (framework/host/offline/dump_reader.cpp): the
    // OOM_Snapshot row with its Attr as written, then the OOM_Trigger row,
    // which keeps upstream's keys only
    PluginHarness offline(plugin());
    REQUIRE(offline.create({{"K", "1"}}) == MSMS_OK);
    REQUIRE(offline.begin() == MSMS_OK);
    offline.feed(EventBuilder::malloc(0x10, 100).at(1000));
    EventBuilder row(MSMS_EV_SNAPSHOT, MSMS_T_SNAPSHOT);
    row.device(MSMS_DEV_CPU, -1).name("OOM_Snapshot").at(2000);
    for (auto& [k, v] : written.attrs) row.attr(k, v);
    offline.feed(row);
    offline.feed(trigger(1 << 30).at(2000).attr("func", "malloc"));
    REQUIRE(offline.finish() == MSMS_OK);
    const OwnedEvent& again = offline.emitted.at(0);
    REQUIRE(again.name == "OOM_Snapshot");
    CHECK(again.attrs == written.attrs);
    CHECK(again.attr("limit") == "RLIMIT_AS");
    REQUIRE(offline.findings["oom"].size() == 1);
    CHECK(offline.findings["oom"][0]["limit"] == live.findings["oom"][0]["limit"]);
    CHECK(offline.findings["oom"][0]["free"] == "4244070400");
}

TEST_CASE("the after snapshot of a device whose free came from an earlier SNAPSHOT row: moved from the failure's") {
    PluginHarness h(plugin());
    REQUIRE(h.create({{"K", "1"}}) == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    EventBuilder dev_snapshot(MSMS_EV_SNAPSHOT, MSMS_T_SNAPSHOT);
    dev_snapshot.device(MSMS_DEV_CUDA, 0).attr("total", "1000").attr("free", "600").at(100);
    h.feed(dev_snapshot);
    h.feed(EventBuilder::malloc(0x10, 200, MSMS_T_HAL).device(MSMS_DEV_CUDA, 0).at(200));
    h.feed(trigger(1 << 20).device(MSMS_DEV_CUDA, 0).at(300));
    h.feed(EventBuilder::free(0x10, MSMS_T_HAL).device(MSMS_DEV_CUDA, 0).at(400));
    REQUIRE(h.finish() == MSMS_OK);
    CHECK(h.emitted.front().attr("free") == "600");  // the failure's: the driver's last word
    CHECK(after_snapshot(h).attr("free") == "800");  // and the 200 bytes given back since
}

namespace {
// The end-of-run lines of one failure, under a run whose config.json lists
// these sinks (as Config::to_json writes the list).
std::vector<std::string> report_with_sinks(const std::string& sinks, bool details = true) {
    PluginHarness h(plugin());
    h.config_json = "{\n  \"analysis\": [\n    \"oom\"\n  ],\n  \"sinks\": " + sinks + ",\n  \"watch\": null\n}";
    REQUIRE(h.create({{"details", details ? "true" : "false"}}) == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    h.feed(EventBuilder::malloc(0x10, 100));
    h.feed(trigger(1 << 30));
    REQUIRE(h.finish() == MSMS_OK);
    return h.reports;
}
}  // namespace

TEST_CASE("--analyze of a dump (no sink but the write-back of annotations): the failures, nothing said written") {
    // what `msmemscope --analyze` gives its analyzers (offline.cpp): the
    // write-back sink, which drops every emitted row, or no sink at all
    const std::vector<std::string> offline{"oom: 1 out-of-memory failure(s)"};
    CHECK(report_with_sinks("[\n    \"offline_writeback\"\n  ]") == offline);
    CHECK(report_with_sinks("[]") == offline);
    CHECK(report_with_sinks("[\n    \"offline_writeback\"\n  ]", false) == offline);
    // a live run's sinks write the rows
    CHECK(report_with_sinks("[\n    \"csv\",\n    \"offline_writeback\"\n  ]") ==
          std::vector<std::string>{"oom: 1 out-of-memory failure(s), 1 detail dump(s) written (OOM_DETAIL rows)"});
    CHECK(report_with_sinks("[\n    \"csv\"\n  ]", false) ==
          std::vector<std::string>{"oom: 1 out-of-memory failure(s), an OOM_Snapshot row each; --analysis=oom adds "
                                   "the failing call and the most recent and largest live blocks (OOM_DETAIL rows)"});
}

TEST_CASE("--steps: a block carried over from a step not selected is listed with the time and step it was allocated") {
    // --steps=3: the weights allocated in step 1 (before the first STEP row,
    // step 0 as upstream numbers it) and a tensor of step 2 reach the
    // analysis as shadow MALLOCs when step 3 starts (framework/host/
    // step_gap.h), with the time their MALLOC happened: they were said to be
    // allocated in step 3, at the shadow rows' time.
    PluginHarness h(plugin());
    REQUIRE(h.create({{"K", "3"}}) == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    h.feed(EventBuilder::step(1).at(100));
    h.feed(EventBuilder::step(2).at(200));
    h.feed(EventBuilder::malloc(0x10, 1 << 20).at(200).attr("shadow", "true").attr("allocated_at", "50"));
    h.feed(EventBuilder::malloc(0x20, 1 << 10).at(200).attr("shadow", "true").attr("allocated_at", "150"));
    h.feed(EventBuilder::malloc(0x30, 64).at(250));
    h.feed(trigger(1 << 30).at(300));
    REQUIRE(h.finish() == MSMS_OK);
    auto top = of_type(h, MSMS_T_OOM_TOP_ALLOC);
    REQUIRE(top.size() == 3);
    CHECK(top[0].attr("ptr") == "0x10");
    CHECK(top[0].attr("timestamp") == "50");
    CHECK(top[0].attr("step") == "0");
    CHECK(top[1].attr("ptr") == "0x20");
    CHECK(top[1].attr("timestamp") == "150");
    CHECK(top[1].attr("step") == "2");
    CHECK(top[2].attr("step") == "3");
    // their time is known: they are listed among the recent as well, by it
    auto recent = of_type(h, MSMS_T_OOM_RECENT_ALLOC);
    REQUIRE(recent.size() == 3);
    CHECK(recent[0].attr("ptr") == "0x30");
    CHECK(recent[1].attr("ptr") == "0x20");
    CHECK(recent[2].attr("ptr") == "0x10");
}
