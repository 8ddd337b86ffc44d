// Unit tests of the leaks analyzer on synthetic event streams.
#include <doctest/doctest.h>

#include <msmemscope/testing.hpp>

#include <unistd.h>

#include <algorithm>
#include <map>
#include <memory>

#include "../suppressions.h"

using namespace msmemscope::testing;

namespace {

const msms_plugin_descriptor* plugin() { return require_descriptor(PLUGIN_PATH); }

EventBuilder pta_malloc(uint64_t ptr, uint64_t size, int64_t used) {
    return EventBuilder::malloc(ptr, size, MSMS_T_PTA).device(MSMS_DEV_NPU, 0).used(used);
}
EventBuilder pta_free(uint64_t ptr, int64_t used) {
    return EventBuilder::free(ptr, MSMS_T_PTA).device(MSMS_DEV_NPU, 0).used(used);
}

bool has_line(const std::vector<std::string>& lines, const std::string& l) {
    return std::find(lines.begin(), lines.end(), l) != lines.end();
}

// The report of one host block of 64 bytes from leaky_a live `when` ("at
// exit", "at stop()").
std::vector<std::string> one_block_live(const std::string& when) {
    return {"leaks: msmemscope's details (not in upstream's report):",
            "  Host memory still allocated " + when + " on device cpu: 1 block(s), 64 bytes, from 1 allocation site(s):",
            "    1 block(s), 64 bytes, allocated at: leaky_a (prog+0x10)"};
}

}  // namespace

TEST_CASE("a training loop that keeps one tensor per step is reported with its steps and sizes") {
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    int64_t used = 0;
    for (uint64_t step = 1; step <= 5; ++step) {
        // a temporary that is freed within the step
        h.feed(pta_malloc(0x1000, 4096, used + 4096));
        h.feed(EventBuilder::kernel("k").device(MSMS_DEV_NPU, 0));
        h.feed(pta_free(0x1000, used));
        // one tensor kept per step
        used += 1048576;
        h.feed(pta_malloc(0x100000 * (step + 1), 1048576, used));
        h.feed(EventBuilder::step(step));
    }
    REQUIRE(h.finish() == MSMS_OK);
    // kept in step 2 (after step(1)) .. step 4: lived a whole step more by step(5);
    // step 0 (before the first step()) is warm-up; the one of step 5 did not outlive a step yet.
    // Upstream's report, line for line (csrc/analysis/stepinner_analyzer.cpp
    // ReportLeak, ReportGap): its pool name, %f sizes, the sum with 6 digits,
    // the gap table (used/step: 1/2 MiB in step 2 ... 4/5 MiB in step 5).
    const std::vector<std::string> upstream{
        "====== ERROR: Detected memory leaks on device 0 ======",
        "Direct Pytorch Caching memory pool leak of 1.000000 Mb(s) at 0x300000 in kernel_2 at step 2.",
        "Direct Pytorch Caching memory pool leak of 1.000000 Mb(s) at 0x400000 in kernel_3 at step 3.",
        "Direct Pytorch Caching memory pool leak of 1.000000 Mb(s) at 0x500000 in kernel_4 at step 4.",
        "====== SUMMARY: 3 Mb(s) leaked in 3 allocation(s) ======",
        "======= Pytorch Caching memory pool Gap Analysis of Device 0 =======",
        "\tMinAlloc/MaxAlloc(%)     MinAllocMem(MB)          StepId                   ",
        "MinGap\t50.0000                  1.0000                   2                        ",
        "MaxGap\t80.0000                  4.0000                   5                        "};
    REQUIRE(h.reports.size() >= upstream.size());
    CHECK(std::vector<std::string>(h.reports.begin(), h.reports.begin() + upstream.size()) == upstream);
    // ours follows, after a header line of its own, indented
    CHECK(h.reports[upstream.size()] == "leaks: msmemscope's details (not in upstream's report):");
    for (size_t i = upstream.size() + 1; i < h.reports.size(); ++i) CHECK(h.reports[i].rfind("  ", 0) == 0);
    REQUIRE(h.findings["leaks"].size() == 3);
    CHECK(h.findings["leaks"][0]["pool"] == "PTA");
    CHECK(h.findings["leaks"][0]["step"] == "2");
    CHECK(h.findings["leaks"][0]["size"] == "1048576");
    CHECK(h.findings["leaks"][0]["kind"] == "step");
}

TEST_CASE("the same loop without the kept tensor reports nothing") {
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    for (uint64_t step = 1; step <= 5; ++step) {
        h.feed(pta_malloc(0x1000, 4096, 4096));
        h.feed(pta_free(0x1000, 0));
        h.feed(EventBuilder::step(step));
    }
    REQUIRE(h.finish() == MSMS_OK);
    CHECK(h.reports.empty());
    CHECK(h.findings["leaks"].empty());
}

TEST_CASE("a shadow block (made while collection was off) is never judged, whatever the step at the start") {
    // Two start()/stop() windows: tensors made between them get a MALLOC
    // with shadow:true at the second start(); they were judged as leaks of
    // the step current then (step 5's), as if that step had made them.
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    h.feed(EventBuilder(MSMS_EV_SYSTEM, MSMS_T_START_TRACE));
    for (uint64_t step = 1; step <= 5; ++step) h.feed(EventBuilder::step(step));
    h.feed(EventBuilder(MSMS_EV_SYSTEM, MSMS_T_STOP_TRACE));
    h.feed(EventBuilder(MSMS_EV_SYSTEM, MSMS_T_START_TRACE));
    h.feed(pta_malloc(0x7000, 8888, 8888).attr("shadow", "true"));
    for (uint64_t step = 6; step <= 10; ++step) h.feed(EventBuilder::step(step));
    REQUIRE(h.finish() == MSMS_OK);
    CHECK(h.findings["leaks"].empty());
    for (auto& line : h.reports) CHECK(line.find("leak of") == std::string::npos);
}

TEST_CASE("mstx 'step start' ranges are steps; a block freed in the next step is no leak") {
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    for (uint64_t step = 1; step <= 4; ++step) {
        h.feed(EventBuilder::mark("step start", MSMS_T_RANGE_START).aux(step));
        if (step == 2) h.feed(pta_malloc(0xa000, 100, 100));   // lives through step 3: leak
        if (step == 3) h.feed(pta_malloc(0xb000, 200, 300));   // freed in step 4: fine
        if (step == 4) h.feed(pta_free(0xb000, 100));
        h.feed(EventBuilder::mark("other", MSMS_T_RANGE_END).aux(99));
        h.feed(EventBuilder::mark("step start", MSMS_T_RANGE_END).aux(step));
    }
    REQUIRE(h.finish() == MSMS_OK);
    CHECK(has_line(h.reports, "Direct Pytorch Caching memory pool leak of 0.000095 Mb(s) at 0xa000 in kernel_0 at step 2."));
    CHECK(h.findings["leaks"].size() == 1);
}

TEST_CASE("warm-up steps 0 and 1 are skipped with mstx ranges") {
    // The same kept block in step 1 (warm-up) and, as the positive control, in step 2.
    auto run = [](uint64_t kept_in) {
        auto h = std::make_unique<PluginHarness>(plugin());
        REQUIRE(h->create() == MSMS_OK);
        REQUIRE(h->begin() == MSMS_OK);
        h->feed(pta_malloc(0x1, 10, 10));  // step 0
        for (uint64_t step = 1; step <= 4; ++step) {
            h->feed(EventBuilder::mark("step start", MSMS_T_RANGE_START).aux(step));
            if (step == kept_in) h->feed(pta_malloc(0x2, 10, 20));
            h->feed(EventBuilder::mark("step start", MSMS_T_RANGE_END).aux(step));
        }
        REQUIRE(h->finish() == MSMS_OK);
        return h;
    };
    auto warm = run(1);
    CHECK(warm->findings["leaks"].empty());
    auto judged = run(2);
    CHECK(judged->findings["leaks"].size() == 1);
    CHECK(has_line(judged->reports,
                   "Direct Pytorch Caching memory pool leak of 0.000010 Mb(s) at 0x2 in kernel_0 at step 2."));
}

TEST_CASE("HAL blocks live at exit are leaks, freed ones are not") {
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    h.feed(EventBuilder::malloc(0x10000, 2097152, MSMS_T_HAL).device(MSMS_DEV_NPU, 1));
    h.feed(EventBuilder::malloc(0x20000, 4096, MSMS_T_HAL).device(MSMS_DEV_NPU, 1));
    h.feed(EventBuilder::free(0x20000, MSMS_T_HAL).device(MSMS_DEV_NPU, 1));
    REQUIRE(h.finish() == MSMS_OK);
    // upstream's report has no such lines (its HAL leaks go to its log): ours only
    CHECK(h.reports == std::vector<std::string>{
                           "leaks: msmemscope's details (not in upstream's report):",
                           "  Driver memory still allocated at exit on device 1: 1 block(s), 2.000000 Mb(s):",
                           "    HAL block of 2.000000 Mb(s) at 0x10000 in kernel_0 at step 0"});
}

TEST_CASE("host blocks live at exit are grouped by allocation site and all counted") {
    PluginHarness h(plugin());
    REQUIRE(h.create({{"max_lines", "1"}}) == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    for (int i = 0; i < 100; ++i)
        h.feed(EventBuilder::malloc(0x1000 + i * 64, 64).c_stack("libmsms_host_heap_hook.so malloc\nleaky_a (prog+0x10)\nmain"));
    for (int i = 0; i < 3; ++i) h.feed(EventBuilder::malloc(0x9000 + i * 16, 16).c_stack("leaky_b (prog+0x20)\nmain"));
    h.feed(EventBuilder::malloc(0xf000, 1));
    h.feed(EventBuilder::free(0xf000));
    REQUIRE(h.finish() == MSMS_OK);
    CHECK(h.reports == std::vector<std::string>{
                           "leaks: msmemscope's details (not in upstream's report):",
                           "  Host memory still allocated at exit on device cpu: 103 block(s), 6448 bytes, from 2 "
                           "allocation site(s):",
                           "    100 block(s), 6400 bytes, allocated at: leaky_a (prog+0x10)",
                           "    ... and 1 more site(s): 3 block(s), 48 bytes"});
    REQUIRE(h.findings["leaks"].size() == 2);
    CHECK(h.findings["leaks"][0]["count"] == "100");
}

TEST_CASE("a shell's heap live at exit is its own: said on a line of its own that no leak total reads") {
    // The command's first word names the shell (a path, a login shell's
    // "-bash", busybox's applet); its driver blocks stay reported as leaks.
    const std::vector<std::pair<std::string, std::string>> shells{{"/usr/bin/bash user.sh", "bash"},
                                                                  {"/bin/sh -c echo start; python3 train.py", "sh"},
                                                                  {"-bash", "bash"},
                                                                  {"dash script.sh", "dash"},
                                                                  {"/bin/busybox sh -c true", "busybox sh"}};
    for (auto& [command, shell] : shells) {
        PluginHarness h(plugin());
        REQUIRE(h.create() == MSMS_OK);
        h.command_line = command;
        REQUIRE(h.begin() == MSMS_OK);
        for (int i = 0; i < 3; ++i) h.feed(EventBuilder::malloc(0x1000 + i * 64, 64).c_stack("xmalloc (bash+0x10)\nmain"));
        h.feed(EventBuilder::malloc(0x10000, 2097152, MSMS_T_HAL).device(MSMS_DEV_NPU, 1));
        REQUIRE(h.finish() == MSMS_OK);
        CHECK(h.reports == std::vector<std::string>{
                               "leaks: msmemscope's details (not in upstream's report):",
                               "  Host memory of the shell still allocated at exit on device cpu: 3 block(s), 192 bytes (" +
                                   shell + "'s own heap: a shell does not free it before it exits; not counted as leaked)",
                               "  Driver memory still allocated at exit on device 1: 1 block(s), 2.000000 Mb(s):",
                               "    HAL block of 2.000000 Mb(s) at 0x10000 in kernel_0 at step 0"});
        // the driver block is a leak finding; the heap is not judged
        REQUIRE(h.findings["leaks"].size() == 1);
        CHECK(h.findings["leaks"][0]["pool"] == "HAL");
        REQUIRE(h.findings["leaks_not_judged"].size() == 1);
        CHECK(h.findings["leaks_not_judged"][0]["blocks"] == "3");
        CHECK(h.findings["leaks_not_judged"][0]["bytes"] == "192");
        CHECK(h.findings["leaks_not_judged"][0]["why"] ==
              shell + "'s own heap: a shell does not free it before it exits, still allocated at exit; in no leak total");
    }
    // A program whose name only looks like one, or that a shell's name is an
    // argument of, is judged as any program.
    for (std::string command : {"/usr/bin/bashful x", "python3 bash", "/opt/sh/prog"}) {
        PluginHarness h(plugin());
        REQUIRE(h.create() == MSMS_OK);
        h.command_line = command;
        REQUIRE(h.begin() == MSMS_OK);
        h.feed(EventBuilder::malloc(0x1000, 64).c_stack("leaky_a (prog+0x10)\nmain"));
        REQUIRE(h.finish() == MSMS_OK);
        CHECK(h.reports == one_block_live("at exit"));
    }
}

TEST_CASE("blocks live when collection ended at stop() are said to be so, not at exit") {
    // The Python API's run ends with STOP_TRACE (stop()); a CLI run has no
    // STOP_TRACE at its end, nor one that started again after stop().
    for (bool restarted : {false, true}) {
        PluginHarness h(plugin());
        REQUIRE(h.create() == MSMS_OK);
        REQUIRE(h.begin() == MSMS_OK);
        h.feed(EventBuilder(MSMS_EV_SYSTEM, MSMS_T_START_TRACE));
        h.feed(EventBuilder::malloc(0x1000, 64).c_stack("leaky_a (prog+0x10)\nmain"));
        h.feed(EventBuilder(MSMS_EV_SYSTEM, MSMS_T_STOP_TRACE));
        if (restarted) h.feed(EventBuilder(MSMS_EV_SYSTEM, MSMS_T_START_TRACE));
        REQUIRE(h.finish() == MSMS_OK);
        std::string when = restarted ? "at exit" : "at stop()";
        CHECK(h.reports == one_block_live(when));
    }
}

TEST_CASE("the Python API's STOP_TRACE at the interpreter's exit (no stop() called) says at exit") {
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    h.feed(EventBuilder(MSMS_EV_SYSTEM, MSMS_T_START_TRACE));
    h.feed(EventBuilder::malloc(0x1000, 64).c_stack("leaky_a (prog+0x10)\nmain"));
    h.feed(EventBuilder(MSMS_EV_SYSTEM, MSMS_T_STOP_TRACE).attr("at_exit", "true"));
    REQUIRE(h.finish() == MSMS_OK);
    CHECK(h.reports == one_block_live("at exit"));
}

TEST_CASE("memory fluctuation: a new extreme of min/max within a step is warned about") {
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    h.feed(EventBuilder::step(1));  // now in step 2
    h.feed(pta_malloc(0x1, 100, 100));
    h.feed(pta_malloc(0x2, 300, 400));
    h.feed(pta_free(0x2, 100));
    h.feed(EventBuilder::step(2));  // min/max = 100/400 = 0.25: the first measure
    h.feed(pta_malloc(0x2, 100, 200));
    h.feed(pta_free(0x2, 100));
    h.feed(EventBuilder::step(3));  // 100/200 = 0.5: largest gap increases
    REQUIRE(h.finish() == MSMS_OK);
    // 0x1 (step 2) outlived step 3 at the same step end: one line per step says both
    bool warned = false;
    for (auto& [level, m] : h.logs)
        if (m == "leaks: [device 0][step 3]: ptr: 0x1 has lasted for 1 steps. Please check if there is leaks in PTA. "
                 "Memory fluctuation: PTA Min/Max Allocated memory largest gap increases to 0.500000, last is 0.250000")
            warned = level == 1;
    CHECK(warned);
    CHECK(h.logs.size() == 1);
}

TEST_CASE("memory fluctuation without a new leak is upstream's line alone") {
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    h.feed(pta_malloc(0x1, 100, 100));  // step 0: warm-up, never judged
    h.feed(EventBuilder::step(1));      // now in step 2
    h.feed(pta_malloc(0x2, 300, 400));
    h.feed(pta_free(0x2, 100));
    h.feed(EventBuilder::step(2));  // min/max = 100/400
    h.feed(pta_malloc(0x2, 100, 200));
    h.feed(pta_free(0x2, 100));
    h.feed(EventBuilder::step(3));
    REQUIRE(h.finish() == MSMS_OK);
    CHECK(h.logs == std::vector<std::pair<int, std::string>>{
                        {1, "leaks: memory fluctuation: [device 0]: PTA Min/Max Allocated memory largest gap increases "
                            "to 0.500000, last is 0.250000"}});
}

TEST_CASE("offline mark rule: HAL blocks allocated between A and B and not freed by C") {
    PluginHarness h(plugin());
    REQUIRE(h.create({{"mstx_info", "leak_check"}, {"start_index", "1"}}) == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    auto hal = [](uint64_t p, uint64_t s) { return EventBuilder::malloc(p, s, MSMS_T_HAL).device(MSMS_DEV_NPU, 0); };
    auto hfree = [](uint64_t p) { return EventBuilder::free(p, MSMS_T_HAL).device(MSMS_DEV_NPU, 0); };
    auto mark = [] { return EventBuilder::mark("leak_check").device(MSMS_DEV_NPU, 0); };
    h.feed(mark().id(1));          // index 0
    h.feed(hal(0x1, 1).id(2));     // before A
    h.feed(mark().id(3));          // A (index 1)
    h.feed(hal(0x2, 1048576).id(4));
    h.feed(hal(0x3, 10).id(5));
    h.feed(mark().id(6));          // B
    h.feed(hal(0x4, 10).id(7));    // after B: not counted
    h.feed(hfree(0x3).id(8));
    h.feed(mark().id(9));          // C
    h.feed(hfree(0x2).id(10));     // after C: does not count
    REQUIRE(h.finish() == MSMS_OK);
    // upstream's check_leaks output (python/msmemscope/analyzer/leaks.py), line for line
    CHECK(h.reports == std::vector<std::string>{"INFO: Starting to analyze data for device 0...",
                                                "",
                                                "Leak Analysis Results for the Custom Range:",
                                                "====== ERROR: Detected memory leaks on device 0 ======",
                                                "Direct Hal memory leak of 1.0 Mb(s) at 0x0000000000000002 in Index 4."});
    CHECK(h.annotations[4]["leak"] == "hal");
}

TEST_CASE("offline mark rule: too few marks and an index out of range are told") {
    PluginHarness h(plugin());
    REQUIRE(h.create({{"mstx_info", "m"}, {"start_index", "2"}}) == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    for (int i = 0; i < 3; ++i) h.feed(EventBuilder::mark("m").device(MSMS_DEV_NPU, 0));
    for (int i = 0; i < 2; ++i) h.feed(EventBuilder::mark("m").device(MSMS_DEV_NPU, 1));
    REQUIRE(h.finish() == MSMS_OK);
    // told while analysing, as upstream does; no results, so no results header
    CHECK(h.reports == std::vector<std::string>{
                           "INFO: Starting to analyze data for device 0...",
                           "INFO: Start index 2 is out of bounds. Device 0 has a total of 3 MSTX events.",
                           "INFO: Starting to analyze data for device 1...",
                           "ERROR: Device 1 has fewer than 3 data points. Please re-collect the data points."});
}

TEST_CASE("a leaked block names its operator and the program's line; warm-up blocks are counted in a note") {
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    const std::string py =
        "/usr/lib/python3/dist-packages/torch/_tensor.py(10): helper\n/home/u/train.py(42): keep\n/home/u/train.py(60): main";
    for (uint64_t step = 1; step <= 4; ++step) {
        h.feed(EventBuilder::op("aten::ones", true).device(MSMS_DEV_CPU, -1).thread(7));
        h.feed(EventBuilder::op("aten::empty", true).device(MSMS_DEV_CPU, -1).thread(7));
        h.feed(EventBuilder::malloc(0x10000 * step, 1024, MSMS_T_PTA).device(MSMS_DEV_CPU, -1).thread(7).used(1024 * step)
                   .py_stack(py));
        h.feed(EventBuilder::op("aten::empty", false).device(MSMS_DEV_CPU, -1).thread(7));
        h.feed(EventBuilder::op("aten::ones", false).device(MSMS_DEV_CPU, -1).thread(7));
        h.feed(EventBuilder::step(step));
    }
    REQUIRE(h.finish() == MSMS_OK);
    // step 0's block is warm-up (still live, not judged); steps 2 and 3 leak; step 4's is the last
    CHECK(has_line(h.reports,
                   "Direct Pytorch Caching memory pool leak of 0.000977 Mb(s) at 0x20000 in kernel_4 at step 2."));
    // ours: by site (operator and first user frame), with the blocks' count, bytes and steps
    CHECK(has_line(h.reports, "  Leaked blocks on device cpu by site, largest first: 2 block(s), 2048 bytes, from 1 "
                              "site(s):"));
    CHECK(has_line(h.reports, "    2 block(s), 2048 bytes (steps 2-3): allocated by: operator aten::ones, called from "
                              "/home/u/train.py(42): keep"));
    CHECK(has_line(h.reports, "  Note: steps 0 and 1 are warm-up and not checked for leaks; on device cpu, 1 block(s) "
                              "(1024 bytes) allocated then were still live when step 4 (the last) ended and were "
                              "not judged."));
    REQUIRE(h.findings["leaks"].size() == 2);
    CHECK(h.findings["leaks"][0]["operator"] == "aten::ones");
    CHECK(h.findings["leaks"][0]["python_site"] == "/home/u/train.py(42): keep");
}

TEST_CASE("host leak sites start at the first frame outside the allocator and libc's wrappers") {
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    h.feed(EventBuilder::malloc(0x1000, 8).c_stack(
        "malloc (/usr/lib/msmemscope/libmsms_host_heap_hook.so+0x10)\nmalloc (/lib/libc.so.6+0x20)\n"
        "__strdup (/lib/libc.so.6+0x30)\nmake_buf (prog.c:12)\nmain (prog.c:30)"));
    REQUIRE(h.finish() == MSMS_OK);
    CHECK(has_line(h.reports, "    1 block(s), 8 bytes, allocated at: make_buf (prog.c:12)"));
    REQUIRE(h.findings["leaks"].size() == 1);
    CHECK(h.findings["leaks"][0]["stack"].find("__strdup") != std::string::npos);  // the inner frames stay
}

TEST_CASE("each byte once: a framework block at a live host block's address is no host leak") {
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    h.feed(EventBuilder::malloc(0x5000, 4096, MSMS_T_HOST).device(MSMS_DEV_CPU, -1));
    h.feed(EventBuilder::malloc(0x5000, 4096, MSMS_T_PTA).device(MSMS_DEV_CPU, -1).used(4096));
    h.feed(EventBuilder::malloc(0x9000, 16, MSMS_T_HOST).device(MSMS_DEV_CPU, -1));
    REQUIRE(h.finish() == MSMS_OK);
    CHECK(has_line(h.reports,
                   "  Host memory still allocated at exit on device cpu: 1 block(s), 16 bytes, from 1 allocation site(s):"));
}

// ------------------------------------------------ suppressions (issue #19 item 7)

namespace {
std::string write_temp(const std::string& text) {
    char path[] = "/tmp/msms_supp_XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    REQUIRE(write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
    close(fd);
    return path;
}
}  // namespace

TEST_CASE("a suppression file removes leak sites by function or library substring, and says how many") {
    std::string file = write_temp("# one pattern per line, heaptrack/LSan style\n\nleak:make_cache\n  libthird.so$  \n");
    PluginHarness h(plugin());
    REQUIRE(h.create({{"suppress", file}, {"default_suppressions", "false"}}) == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    // kept: the program's own leak
    h.feed(EventBuilder::malloc(0x1000, 8).c_stack("malloc (libc.so.6)\nmake_buf (prog.c:12)\nmain (prog.c:30)"));
    // suppressed by function (a deeper frame matches, as LSan does)
    h.feed(EventBuilder::malloc(0x2000, 100).c_stack("malloc (libc.so.6)\ninner (prog.c:5)\nmake_cache (prog.c:40)"));
    h.feed(EventBuilder::malloc(0x3000, 100).c_stack("malloc (libc.so.6)\ninner (prog.c:5)\nmake_cache (prog.c:40)"));
    // suppressed by library (anchored at the frame's end)
    h.feed(EventBuilder::malloc(0x4000, 50).c_stack("malloc (libc.so.6)\nthird_init+0x10 in /opt/lib/libthird.so"));
    REQUIRE(h.finish() == MSMS_OK);
    CHECK(has_line(h.reports, "  Host memory still allocated at exit on device cpu: 1 block(s), 8 bytes, from 1 allocation site(s):"));
    CHECK(has_line(h.reports, "    1 block(s), 8 bytes, allocated at: make_buf (prog.c:12)"));
    CHECK(has_line(h.reports, "  2 allocation site(s) suppressed on device cpu (3 block(s), 250 bytes): 2 by " + file));
    REQUIRE(h.findings["leaks"].size() == 1);  // suppressed sites are no findings either
    unlink(file.c_str());
}

TEST_CASE("when every site is suppressed the device reports no leaks, with the count") {
    std::string file = write_temp("leak:^make_cache\n");
    PluginHarness h(plugin());
    REQUIRE(h.create({{"suppress", file}, {"default_suppressions", "false"}}) == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    h.feed(EventBuilder::malloc(0x2000, 100).c_stack("malloc (libc.so.6)\nmake_cache (prog.c:40)"));
    // '^' anchors at the frame's start: "not_make_cache" does not match
    h.feed(EventBuilder::malloc(0x3000, 7).c_stack("malloc (libc.so.6)\nnot_make_cache (prog.c:9)"));
    REQUIRE(h.finish() == MSMS_OK);
    CHECK(has_line(h.reports, "    1 block(s), 7 bytes, allocated at: not_make_cache (prog.c:9)"));
    PluginHarness h2(plugin());
    REQUIRE(h2.create({{"suppress", file}, {"default_suppressions", "false"}}) == MSMS_OK);
    REQUIRE(h2.begin() == MSMS_OK);
    h2.feed(EventBuilder::malloc(0x2000, 100).c_stack("malloc (libc.so.6)\nmake_cache (prog.c:40)"));
    REQUIRE(h2.finish() == MSMS_OK);
    CHECK(h2.reports == std::vector<std::string>{"leaks: msmemscope's details (not in upstream's report):",
                                                 "  1 allocation site(s) suppressed on device cpu (1 block(s), 100 "
                                                 "bytes): 1 by " + file});
    unlink(file.c_str());
}

TEST_CASE("the built-in list takes the interpreter's own sites only, and can be turned off") {
    auto feed = [](PluginHarness& h) {
        // the interpreter's arena (Debian's python3.11 has no symbols)
        h.feed(EventBuilder::malloc(0x1000, 262144).c_stack("malloc (libc.so.6)\n0x62d1da in /usr/bin/python3.11"));
        // the dynamic loader's map of an extension module
        h.feed(EventBuilder::malloc(0x2000, 600).c_stack(
            "malloc (libc.so.6)\n_dl_new_object+0x6a at ../include/rtld-malloc.h:44 in /lib64/ld-linux-x86-64.so.2\n"
            "0x4fb809 in /usr/bin/python3.11"));
        // an extension module's own leak, called from the interpreter: kept
        h.feed(EventBuilder::malloc(0x3000, 64).c_stack(
            "malloc (libc.so.6)\nleaky_fn+0x10 in /tmp/leaky.cpython-311-x86_64-linux-gnu.so\n"
            "0x4fb809 in /usr/bin/python3.11"));
    };
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    feed(h);
    REQUIRE(h.finish() == MSMS_OK);
    CHECK(has_line(h.reports, "  Host memory still allocated at exit on device cpu: 1 block(s), 64 bytes, from 1 allocation site(s):"));
    CHECK(has_line(h.reports, "  2 allocation site(s) suppressed on device cpu (2 block(s), 262744 bytes): 2 by the built-in "
                              "list of one-time set-up (the interpreter, the imports' heap, the loader, libc's locale tables; "
                              "--default-suppressions=false shows them)"));
    PluginHarness off(plugin());
    REQUIRE(off.create({{"default_suppressions", "false"}}) == MSMS_OK);
    REQUIRE(off.begin() == MSMS_OK);
    feed(off);
    REQUIRE(off.finish() == MSMS_OK);
    CHECK(has_line(off.reports, "  Host memory still allocated at exit on device cpu: 3 block(s), 262808 bytes, from 3 allocation site(s):"));
}

TEST_CASE("the built-in list knows torch's one-time set-up by its native site, and nothing of the program's") {
    msms_leaks::Suppressions s;
    s.add_builtin();
    auto origin = [&](const std::string& site) -> std::string {
        msms_leaks::Suppressions::Rule* r = s.match_builtin_site(site);
        return r ? r->origin.substr(0, r->origin.rfind(':')) : "";
    };
    // the sites torch's set-up has (Debian's torch 1.13: libcpuinfo and libgomp have no symbols)
    CHECK(origin("0x64a8 in /lib/x86_64-linux-gnu/libcpuinfo.so.0") == msms_leaks::kTorchOrigin);
    CHECK(origin("cpuinfo_x86_linux_init+0x40 in /opt/torch/lib/libtorch_cpu.so") == msms_leaks::kTorchOrigin);
    CHECK(origin("0xd09d in /lib/x86_64-linux-gnu/libgomp.so.1") == msms_leaks::kTorchOrigin);
    CHECK(origin("0xd09d in /site-packages/torch.libs/libgomp-a34b3233.so.1") == msms_leaks::kTorchOrigin);
    CHECK(origin("gomp_malloc+0x12 in /usr/lib/libgomp.so.1") == msms_leaks::kTorchOrigin);
    CHECK(origin("at::CUDAHooksRegistry[abi:cxx11]()+0x4a in /lib/x86_64-linux-gnu/libtorch_cpu.so.1.13") ==
          msms_leaks::kTorchOrigin);
    CHECK(origin("at::detail::getCUDAHooks()+0x232 in /lib/x86_64-linux-gnu/libtorch_cpu.so.1.13") ==
          msms_leaks::kTorchOrigin);
    CHECK(origin("c10::impl::PyInterpreter::disarm()+0x45 in /lib/x86_64-linux-gnu/libc10.so.1.13") ==
          msms_leaks::kTorchOrigin);
    // the program's own: a ctypes malloc (libffi), an extension, a Python line, torch's operators
    CHECK(origin("0x6f7a in /lib/x86_64-linux-gnu/libffi.so.8") == "");
    CHECK(origin("leaky_fn+0x10 in /tmp/leaky.cpython-311-x86_64-linux-gnu.so") == "");
    CHECK(origin("/home/u/libgomp_test.py(3): <module>") == "");
    CHECK(origin("/home/u/cpuinfo_probe.py(3): <module>") == "");
    CHECK(origin("at::native::empty_cpu(c10::ArrayRef<long>)+0x10 in /lib/x86_64-linux-gnu/libtorch_cpu.so.1.13") == "");
    CHECK(origin("my_get_cpuinfo_copy+0x10 in /tmp/ext.so") == "");
}

TEST_CASE("with Python stacks alone, a host block whose allocator's caller is torch's set-up is no leak; "
          "the program's own at the same line stay") {
    const std::string line = "/tmp/prog.py(6): <module>";
    auto feed = [&](PluginHarness& h) {
        // cpuinfo's tables at the program's first operator (two sites: two callers)
        h.feed(EventBuilder::malloc(0x1000, 160).py_stack(line).alloc_caller("0x64a8 in /usr/lib/libcpuinfo.so.0", 7));
        h.feed(EventBuilder::malloc(0x1100, 272).py_stack(line).alloc_caller("0x6784 in /usr/lib/libcpuinfo.so.0", 8));
        // c10's hooks registry, through operator new (its caller's frame second)
        h.feed(EventBuilder::malloc(0x1200, 216)
                   .py_stack("/usr/lib/python3/dist-packages/torch/autograd/__init__.py(197): backward")
                   .alloc_caller("operator new(unsigned long)+0x1c in /usr/lib/libstdc++.so.6\n"
                                 "at::CUDAHooksRegistry[abi:cxx11]()+0x4a in /usr/lib/libtorch_cpu.so.1.13",
                                 9));
        // torch's tag at the interpreter's exit: no Python stack at all
        h.feed(EventBuilder::malloc(0x1300, 8).alloc_caller(
            "operator new(unsigned long)+0x1c in /usr/lib/libstdc++.so.6\n"
            "c10::impl::PyInterpreter::disarm()+0x45 in /usr/lib/libc10.so.1.13",
            10));
        // the program's: a ctypes malloc at the same line (libffi), a Python object (the interpreter)
        h.feed(EventBuilder::malloc(0x2000, 4321).py_stack(line).alloc_caller("0x6f7a in /usr/lib/libffi.so.8", 11));
        h.feed(EventBuilder::malloc(0x3000, 5001).py_stack(line).alloc_caller("0x4fb809 in /usr/bin/python3.11", 12));
    };
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    feed(h);
    REQUIRE(h.finish() == MSMS_OK);
    CHECK(h.reports == std::vector<std::string>{
                           "leaks: msmemscope's details (not in upstream's report):",
                           "  Host memory still allocated at exit on device cpu: 2 block(s), 9322 bytes, from 1 allocation site(s):",
                           "    2 block(s), 9322 bytes, allocated at: /tmp/prog.py(6): <module>",
                           "  4 allocation site(s) suppressed on device cpu (4 block(s), 656 bytes): 4 by the built-in list of "
                           "torch's one-time set-up (cpuinfo's tables, libgomp's threads, c10's hooks registries; "
                           "--default-suppressions=false shows them)"});
    // without the built-in list every block is the program's line's, as before
    PluginHarness off(plugin());
    REQUIRE(off.create({{"default_suppressions", "false"}}) == MSMS_OK);
    REQUIRE(off.begin() == MSMS_OK);
    feed(off);
    REQUIRE(off.finish() == MSMS_OK);
    CHECK(has_line(off.reports, "    4 block(s), 9754 bytes, allocated at: /tmp/prog.py(6): <module>"));
    CHECK(has_line(off.reports, "    1 block(s), 216 bytes, allocated at: "
                                "/usr/lib/python3/dist-packages/torch/autograd/__init__.py(197): backward"));
    CHECK(has_line(off.reports, "    1 block(s), 8 bytes, allocated at: an unknown site (collect stacks with --call-stack=c)"));
}

TEST_CASE("suppression patterns: '*', '^' and '$'") {
    using msms_leaks::pattern_matches;
    CHECK(pattern_matches("cache", "make_cache (prog.c:40)"));
    CHECK(pattern_matches("make*40", "make_cache (prog.c:40)"));
    CHECK_FALSE(pattern_matches("make*41", "make_cache (prog.c:40)"));
    CHECK(pattern_matches("^make_", "make_cache (prog.c:40)"));
    CHECK_FALSE(pattern_matches("^cache", "make_cache (prog.c:40)"));
    CHECK(pattern_matches("libthird.so$", "f in /opt/libthird.so"));
    CHECK_FALSE(pattern_matches("libthird.so$", "f in /opt/libthird.so.1"));
    CHECK(pattern_matches("^f in*.so$", "f in /opt/libthird.so"));
    CHECK(pattern_matches("^exact$", "exact"));
    CHECK_FALSE(pattern_matches("^exact$", "exact2"));
}

TEST_CASE("msmemscope's own memory: its modules in any frame, its start-up hook's lines as the site") {
    msms_leaks::Suppressions s;
    s.add_builtin();
    const std::string hook = "/out/.msmemscope_session_Ab12Cd/python/sitecustomize.py";
    // the hook's own line (a call into the package) as the site: the profiler's
    std::string chain = hook + "(41): _msmemscope_chain\n" + hook + "(45): <module>";
    auto* r = s.match(chain, hook + "(41): _msmemscope_chain");
    REQUIRE(r != nullptr);
    CHECK(r->origin.rfind(msms_leaks::kOwnOrigin, 0) == 0);
    // the boot anywhere in the stack, a bare frame address as the C site
    r = s.match("0x27f6bb30\n" + hook + "(23): _msmemscope_boot\n" + hook + "(44): <module>", "0x27f6bb30");
    REQUIRE(r != nullptr);
    CHECK(r->origin.rfind(msms_leaks::kOwnOrigin, 0) == 0);
    // the program's own sitecustomize, run by the hook's chain: the program's
    std::string own = "/home/u/site/sitecustomize.py(3): <module>\n" + hook + "(38): _msmemscope_chain";
    CHECK(s.match(own, "/home/u/site/sitecustomize.py(3): <module>") == nullptr);
}

// ------------------------------------------------ a large leak on the console (issue #27 item 3)

namespace {
std::string temp_dir() {
    char path[] = "/tmp/msms_leaks_XXXXXX";
    REQUIRE(mkdtemp(path) != nullptr);
    return path;
}
std::vector<std::string> read_lines(const std::string& path) {
    std::vector<std::string> out;
    FILE* f = fopen(path.c_str(), "r");
    if (!f) return out;
    char buf[4096];
    while (fgets(buf, sizeof(buf), f)) {
        std::string l(buf);
        if (!l.empty() && l.back() == '\n') l.pop_back();
        out.push_back(l);
    }
    fclose(f);
    return out;
}
size_t count_prefix(const std::vector<std::string>& lines, const std::string& p) {
    return static_cast<size_t>(
        std::count_if(lines.begin(), lines.end(), [&](const std::string& l) { return l.rfind(p, 0) == 0; }));
}
// Steps 1..`steps`: each keeps `a` blocks of 1 KiB made by aten::mul at
// train.py(10) and `b` blocks of 4 KiB made by aten::add at train.py(20).
void feed_big_leak(PluginHarness& h, int steps, int a, int b) {
    const std::string mul = "/home/u/train.py(10): step\n/home/u/train.py(30): main";
    const std::string add = "/home/u/train.py(20): step\n/home/u/train.py(30): main";
    uint64_t ptr = 0x100000;
    int64_t used = 0;
    for (int step = 1; step <= steps; ++step) {
        for (int i = 0; i < a + b; ++i) {
            bool is_a = i < a;
            uint64_t size = is_a ? 1024 : 4096;
            h.feed(EventBuilder::op(is_a ? "aten::mul" : "aten::add", true).device(MSMS_DEV_CPU, -1).thread(3));
            used += static_cast<int64_t>(size);
            h.feed(EventBuilder::malloc(ptr, size, MSMS_T_PTA).device(MSMS_DEV_CPU, -1).thread(3).used(used)
                       .py_stack(is_a ? mul : add));
            h.feed(EventBuilder::op(is_a ? "aten::mul" : "aten::add", false).device(MSMS_DEV_CPU, -1).thread(3));
            ptr += 0x10000;
        }
        h.feed(EventBuilder::step(static_cast<uint64_t>(step)));
    }
}
}  // namespace

TEST_CASE("a leak of a thousand blocks: 20 upstream lines, '... N more in FILE', the file holds them all") {
    std::string dir = temp_dir();
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin(dir, "20260102030405") == MSMS_OK);
    // 12 steps of 100 blocks: steps 2..11 leak (0 and 1 are warm-up, 12 is the last): 1000 blocks
    feed_big_leak(h, 12, 90, 10);
    REQUIRE(h.finish() == MSMS_OK);
    const std::string file = dir + "/leaks_20260102030405.txt";
    auto& r = h.reports;
    REQUIRE(r.size() >= 23);
    CHECK(r[0] == "====== ERROR: Detected memory leaks on device cpu ======");
    for (size_t i = 1; i <= 20; ++i) CHECK(r[i].rfind("Direct Pytorch Caching memory pool leak of 0.00", 0) == 0);
    CHECK(r[1] == "Direct Pytorch Caching memory pool leak of 0.000977 Mb(s) at 0x740000 in kernel_101 at step 2.");
    CHECK(r[21] == "... 980 more in " + file);
    // upstream's SUMMARY counts every block: 10 steps x (90 x 1 KiB + 10 x 4 KiB)
    CHECK(r[22] == "====== SUMMARY: 1.26953 Mb(s) leaked in 1000 allocation(s) ======");
    // ours: two sites, largest first, their blocks and bytes add up to the SUMMARY's
    CHECK(has_line(r, "  Leaked blocks on device cpu by site, largest first: 1000 block(s), 1331200 bytes, from 2 "
                      "site(s):"));
    CHECK(has_line(r, "    900 block(s), 921600 bytes (steps 2-11): allocated by: operator aten::mul, called from "
                      "/home/u/train.py(10): step"));
    CHECK(has_line(r, "    100 block(s), 409600 bytes (steps 2-11): allocated by: operator aten::add, called from "
                      "/home/u/train.py(20): step"));
    auto big = std::find(r.begin(), r.end(), "    900 block(s), 921600 bytes (steps 2-11): allocated by: operator "
                                             "aten::mul, called from /home/u/train.py(10): step");
    REQUIRE(big != r.end());
    CHECK((big + 1)->rfind("    100 block(s)", 0) == 0);
    CHECK(r.size() < 40);  // one screen
    // the file: every block's upstream line, each followed by where it was allocated, and the sites
    auto lines = read_lines(file);
    CHECK(count_prefix(lines, "Direct Pytorch Caching memory pool leak of ") == 1000);
    CHECK(count_prefix(lines, "  allocated by: operator aten::mul, called from /home/u/train.py(10): step") == 900);
    CHECK(count_prefix(lines, "  allocated by: operator aten::add, called from /home/u/train.py(20): step") == 100);
    REQUIRE(lines.size() == 1 + 2000 + 1 + 1 + 2);
    CHECK(lines[0] == "====== ERROR: Detected memory leaks on device cpu ======");
    CHECK(lines[1] == r[1]);
    CHECK(lines[2001] == r[22]);
    CHECK(lines[2003] == "  900 block(s), 921600 bytes (steps 2-11): allocated by: operator aten::mul, called from "
                         "/home/u/train.py(10): step");
    // every block is still a finding
    CHECK(h.findings["leaks"].size() == 1000);
    // the step warnings: one line per step, naming the first addresses
    size_t warned = 0;
    for (auto& [level, m] : h.logs)
        if (m.find("have lasted for") != std::string::npos) ++warned;
    CHECK(warned == 10);
    bool step3 = false;
    for (auto& [level, m] : h.logs)
        if (m.rfind("leaks: [device cpu][step 3]: 100 ptrs (0x740000, 0x750000, 0x760000 and 97 more; 133120 bytes) "
                    "have lasted for 1 steps. Please check if there is leaks in PTA.", 0) == 0)
            step3 = true;
    CHECK(step3);
    // only our own file, no temporary left behind
    CHECK(unlink(file.c_str()) == 0);
    CHECK(rmdir(dir.c_str()) == 0);
}

TEST_CASE("the full list never replaces a file (takes the next free name) and never follows a link") {
    std::string dir = temp_dir();
    const std::string file = dir + "/leaks_20260102030405.txt";
    // a file of that name already there (the user's, or an earlier run's): kept
    FILE* f = fopen(file.c_str(), "w");
    REQUIRE(f);
    fputs("old\n", f);
    fclose(f);
    {
        PluginHarness h(plugin());
        REQUIRE(h.create({{"max_lines", "5"}}) == MSMS_OK);
        REQUIRE(h.begin(dir, "20260102030405") == MSMS_OK);
        feed_big_leak(h, 4, 3, 1);  // steps 2, 3: 8 blocks
        REQUIRE(h.finish() == MSMS_OK);
        const std::string second = dir + "/leaks_20260102030405_2.txt";
        CHECK(has_line(h.reports, "... 3 more in " + second));
        CHECK(count_prefix(read_lines(second), "Direct ") == 8);
        CHECK(read_lines(file) == std::vector<std::string>{"old"});
        unlink(second.c_str());
    }
    unlink(file.c_str());
    // the run folder given as a link to another folder: not opened, the console says so
    std::string other = temp_dir();
    std::string link = dir + "/link";
    REQUIRE(symlink(other.c_str(), link.c_str()) == 0);
    {
        PluginHarness h(plugin());
        REQUIRE(h.create({{"max_lines", "5"}}) == MSMS_OK);
        REQUIRE(h.begin(link, "20260102030405") == MSMS_OK);
        feed_big_leak(h, 4, 3, 1);
        REQUIRE(h.finish() == MSMS_OK);
        bool said = false;
        for (auto& l : h.reports)
            if (l.rfind("... 3 more (the full list was not written: cannot open the run folder " + link + ": ", 0) == 0)
                said = true;
        CHECK(said);
        CHECK(has_line(h.reports, "====== SUMMARY: 0.0136719 Mb(s) leaked in 8 allocation(s) ======"));
        bool logged = false;
        for (auto& [level, m] : h.logs)
            if (level == 2 && m.rfind("leaks: the full list of leaked blocks was not written: cannot open the run folder " + link, 0) == 0) logged = true;
        CHECK(logged);
    }
    CHECK(rmdir(other.c_str()) == 0);  // nothing was written through the link
    unlink(link.c_str());
    CHECK(rmdir(dir.c_str()) == 0);
}

TEST_CASE("a small leak writes no file and prints every block") {
    std::string dir = temp_dir();
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin(dir, "20260102030405") == MSMS_OK);
    feed_big_leak(h, 4, 8, 2);  // 20 blocks: exactly the console's
    REQUIRE(h.finish() == MSMS_OK);
    CHECK(count_prefix(h.reports, "Direct ") == 20);
    CHECK(count_prefix(h.reports, "... ") == 0);
    CHECK(rmdir(dir.c_str()) == 0);  // empty
}

TEST_CASE("a site is the operator and the first user frame; the C site only for blocks without one") {
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    const std::string py = "/home/u/train.py(7): step";
    for (uint64_t step = 1; step <= 3; ++step) {
        h.feed(EventBuilder::op("aten::mul", true).device(MSMS_DEV_CPU, -1).thread(3));
        // same operator and user line, two C paths: one site
        h.feed(EventBuilder::malloc(0x1000 * step, 100, MSMS_T_PTA).device(MSMS_DEV_CPU, -1).thread(3).used(1)
                   .py_stack(py).c_stack("malloc (libc.so.6)\npath_a (libtorch.so)"));
        h.feed(EventBuilder::malloc(0x1000 * step + 0x100, 100, MSMS_T_PTA).device(MSMS_DEV_CPU, -1).thread(3).used(2)
                   .py_stack(py).c_stack("malloc (libc.so.6)\npath_b (libtorch.so)"));
        h.feed(EventBuilder::op("aten::mul", false).device(MSMS_DEV_CPU, -1).thread(3));
        // no Python stack: the operator and the C site
        h.feed(EventBuilder::malloc(0x100000 * step, 10, MSMS_T_PTA).device(MSMS_DEV_CPU, -1).thread(3).used(3)
                   .c_stack("malloc (libc.so.6)\nmake_x (prog.c:3)"));
        h.feed(EventBuilder::malloc(0x100000 * step + 0x100, 20, MSMS_T_PTA).device(MSMS_DEV_CPU, -1).thread(3).used(4)
                   .c_stack("malloc (libc.so.6)\nmake_y (prog.c:9)"));
        h.feed(EventBuilder::step(step));
    }
    REQUIRE(h.finish() == MSMS_OK);
    CHECK(has_line(h.reports, "  Leaked blocks on device cpu by site, largest first: 4 block(s), 230 bytes, from 3 "
                              "site(s):"));
    CHECK(has_line(h.reports, "    2 block(s), 200 bytes (step 2): allocated by: operator aten::mul, called from "
                              "/home/u/train.py(7): step"));
    CHECK(has_line(h.reports, "    1 block(s), 20 bytes (step 2): allocated at: make_y (prog.c:9)"));
    CHECK(has_line(h.reports, "    1 block(s), 10 bytes (step 2): allocated at: make_x (prog.c:3)"));
}

namespace {

// A DataLoader batch's note from the Python collector (ACCESS UNKNOWN, Attr dataloader).
EventBuilder dataloader(uint64_t ptr, const std::string& what) {
    return EventBuilder::access(ptr, MSMS_T_UNKNOWN).device(MSMS_DEV_NPU, 0).name("dataloader.next").attr("dataloader",
                                                                                                          what);
}

// A loop over a DataLoader with worker processes: in each step the program
// is handed batch b (one shared-memory block each) and lets the one before go.
// Batches arrive out of order while the program waits for batch b (batch
// b+3 and b+1 while it waits for batch 0 and 4), so the DataLoader holds them
// until their turn: batch 7 is received in step 5 and handed in step 8.
// keep: the program keeps every batch it is handed (a leak). header: the
// bytes in front of each storage's data in its block (torch's file_system
// sharing strategy maps a storage with a 64-byte header), so the notes name
// an address inside the block.
std::unique_ptr<PluginHarness> loader_run(bool notes, bool keep, uint64_t header = 0) {
    auto h = std::make_unique<PluginHarness>(plugin());
    REQUIRE(h->create() == MSMS_OK);
    REQUIRE(h->begin() == MSMS_OK);
    auto ptr = [](uint64_t b) { return 0x100000 * (b + 1); };
    const std::map<uint64_t, std::vector<uint64_t>> arrive{{0, {3, 1, 0}}, {2, {2}}, {4, {7, 5, 4}}, {6, {6}}};
    int64_t used = 0;
    uint64_t step = 0;
    for (uint64_t b = 0; b < 8; ++b) {
        // next(): what arrives while the program waits for batch b, then batch b
        auto a = arrive.find(b);
        if (a != arrive.end())
            for (uint64_t got : a->second) {
                h->feed(pta_malloc(ptr(got), 4096, used += 4096));
                if (notes && got != b) h->feed(dataloader(ptr(got) + header, "held"));
            }
        if (notes) h->feed(dataloader(ptr(b) + header, "handed"));
        if (b > 0 && !keep) h->feed(pta_free(ptr(b - 1), used -= 4096));  // the previous batch goes
        h->feed(EventBuilder::step(++step));  // batch b is used in step b+1 (batch 0 in step 0)
    }
    REQUIRE(h->finish() == MSMS_OK);
    return h;
}

}  // namespace

TEST_CASE("a DataLoader batch received out of order is judged from the step it is handed in") {
    // Without the DataLoader's notes, upstream's rule alone: batches 5 and 7
    // (received in step 5, handed in steps 6 and 8) outlived step 5: the false
    // leaks the notes remove (batch 7 only because it is not judged while
    // held: its step ends 5, 6 and 7 pass before it is handed).
    auto plain = loader_run(false, false);
    CHECK(plain->findings["leaks"].size() == 2);
    CHECK(has_line(plain->reports,
                   "Direct Pytorch Caching memory pool leak of 0.003906 Mb(s) at 0x600000 in kernel_0 at step 5."));
    CHECK(has_line(plain->reports,
                   "Direct Pytorch Caching memory pool leak of 0.003906 Mb(s) at 0x800000 in kernel_0 at step 5."));
    // With them: no leak, no warning that a block lasted.
    auto noted = loader_run(true, false);
    CHECK(noted->findings["leaks"].empty());
    for (auto& l : noted->reports) CHECK(l.find("Detected memory leaks") == std::string::npos);
    for (auto& [level, l] : noted->logs) CHECK(l.find("lasted") == std::string::npos);
    // Positive control: the program keeps every batch: each one handed from
    // step 2 on is a leak of the step it was handed in (batch b in step b+1,
    // batch 1 too although it was received in warm-up step 0).
    auto kept = loader_run(true, true);
    REQUIRE(kept->findings["leaks"].size() == 6);  // batches 1..6 (batch 7: its next step has not ended)
    for (uint64_t b = 1; b <= 6; ++b)
        CHECK(has_line(kept->reports, "Direct Pytorch Caching memory pool leak of 0.003906 Mb(s) at 0x" +
                                          std::to_string(b + 1) + "00000 in kernel_0 at step " +
                                          std::to_string(b + 1) + "."));
}

TEST_CASE("a DataLoader note names the block its storage lies in (torch's file_system strategy)") {
    // Each batch's storage is 64 bytes into its mapping (the block): the
    // notes are the block's, as when they name its start.
    auto noted = loader_run(true, false, 64);
    CHECK(noted->findings["leaks"].empty());
    for (auto& l : noted->reports) CHECK(l.find("Detected memory leaks") == std::string::npos);
    auto kept = loader_run(true, true, 64);
    REQUIRE(kept->findings["leaks"].size() == 6);
    for (uint64_t b = 1; b <= 6; ++b)
        CHECK(has_line(kept->reports, "Direct Pytorch Caching memory pool leak of 0.003906 Mb(s) at 0x" +
                                          std::to_string(b + 1) + "00000 in kernel_0 at step " +
                                          std::to_string(b + 1) + "."));
    // an address past a block's end is no block's: that note changes nothing
    auto past = loader_run(true, false, 4096);
    CHECK(past->findings["leaks"].size() == 2);
}
