// memory_viz: the pickle writer's opcodes, frame parsing, and the sink's
// segments and trace through its C descriptor (Python reads the files in
// tests/python/test_sinks_memory_viz.py, with Debian's torch).
#include <doctest/doctest.h>
#include <msmemscope/testing.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "frames.h"
#include "pickle_writer.h"

namespace fs = std::filesystem;
using msms_viz::PickleWriter;
using namespace msmemscope::testing;

namespace {

std::string pickled(void (*f)(PickleWriter&)) {
    std::string out;
    PickleWriter w([&](const char* p, size_t n) { out.append(p, n); });
    f(w);
    w.finish();
    return out;
}

std::string bytes(std::initializer_list<int> b) {
    std::string s;
    for (int c : b) s += static_cast<char>(c);
    return s;
}

}  // namespace

TEST_CASE("pickle: a dict with a list, memoized keys, ints of every width") {
    std::string p = pickled([](PickleWriter& w) {
        w.dict_begin();
        w.key("a");
        w.list_begin();
        w.integer(1);
        w.str("x");
        w.list_end();
        w.key("a");  // the second time from the memo
        w.integer(300);
        w.dict_end();
    });
    std::string want = bytes({0x80, 2, '}', '(', 'X', 1, 0, 0, 0, 'a', 'q', 0, ']', '(', 'K', 1, 'X', 1, 0, 0, 0, 'x', 'e',
                              'h', 0, 'M', 0x2c, 0x01, 'u', '.'});
    CHECK(p == want);
    std::string n = pickled([](PickleWriter& w) {
        w.list_begin();
        w.integer(-1);
        w.integer(1ll << 40);
        w.unsigned_integer(0xffffffffffffffffull);
        w.boolean(true);
        w.none();
        w.list_end();
    });
    CHECK(n == bytes({0x80, 2, ']', '(', 'J', 0xff, 0xff, 0xff, 0xff, 0x8a, 8, 0, 0, 0, 0, 0, 1, 0, 0, 0x8a, 9, 0xff, 0xff,
                      0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0x88, 'N', 'e', '.'}));
}

TEST_CASE("pickle: long lists are written in batches of 1000, memoized lists are shared") {
    std::string p = pickled([](PickleWriter& w) {
        w.list_begin();
        for (int i = 0; i < 2500; ++i) w.integer(7);
        w.list_end();
    });
    // APPENDS after every 1000 items, then a new MARK
    CHECK(p.find(bytes({'K', 7, 'e', '(', 'K', 7})) == 2 + 2 + 2 * 999);
    std::string m = pickled([](PickleWriter& w) {
        w.list_begin();
        uint32_t i = w.list_begin_memo();
        w.str("f");
        w.list_end();
        w.get(i);
        w.list_end();
    });
    CHECK(m == bytes({0x80, 2, ']', '(', ']', 'q', 0, '(', 'X', 1, 0, 0, 0, 'f', 'e', 'h', 0, 'e', '.'}));
    std::string bad;
    PickleWriter w([&](const char* p2, size_t n) { bad.append(p2, n); });
    w.list_begin();
    CHECK_THROWS_WITH(w.finish(), "pickle writer: a container is still open");
}

TEST_CASE("pickle: strings are valid UTF-8") {
    CHECK(PickleWriter::valid_utf8("caf\xc3\xa9") == "caf\xc3\xa9");
    CHECK(PickleWriter::valid_utf8("a\xff" "b\xc3") == "a?b?");
    CHECK(PickleWriter::valid_utf8("\xed\xa0\x80") == "???");  // a surrogate
    CHECK(PickleWriter::valid_utf8("\xf0\x9f\x98\x80") == "\xf0\x9f\x98\x80");
}

TEST_CASE("frames: Python and C stack lines") {
    auto py = msms_viz::python_frame("/w/my (copy)/train.py(42): forward");
    CHECK(py.filename == "/w/my (copy)/train.py");
    CHECK(py.line == 42);
    CHECK(py.name == "forward");
    auto c = msms_viz::c_frame("at::empty(c10::ArrayRef<long>)+0x1a at /src/aten/Empty.cpp:88 in /usr/lib/libtorch.so");
    CHECK(c.name == "at::empty(c10::ArrayRef<long>)");
    CHECK(c.filename == "/src/aten/Empty.cpp");
    CHECK(c.line == 88);
    auto nosrc = msms_viz::c_frame("malloc+0x10 in /lib/libc.so.6");
    CHECK((nosrc.name == "malloc" && nosrc.filename == "/lib/libc.so.6" && nosrc.line == 0));
    auto raw = msms_viz::c_frame("0x1234 in /lib/libx.so");
    CHECK((raw.name == "0x1234" && raw.filename == "/lib/libx.so"));
    auto plain = msms_viz::c_frame("main");
    CHECK((plain.name == "main" && plain.filename.empty() && plain.line == 0));
    auto all = msms_viz::frames_of("malloc+0x10 in /lib/libc.so.6\nPyEval+0x1 in /usr/bin/python3", "t.py(3): f\nt.py(9): <module>\n");
    REQUIRE(all.size() == 4);
    CHECK(all[0].name == "malloc");
    CHECK(all[2].name == "f");
    CHECK(all[3].line == 9);
}

TEST_CASE("sink: writes memory_viz_<ts>.pickle; a framework block lies in the driver block it was carved from") {
    std::string dir = std::string(MSMS_TEST_OUT) + "/carve";
    fs::remove_all(dir);
    fs::create_directories(dir);
    PluginHarness h(require_descriptor(MSMS_MEMORY_VIZ_PLUGIN));
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin(dir) == MSMS_OK);
    h.feed(EventBuilder::malloc(0x10000, 1 << 20, MSMS_T_HAL).device(MSMS_DEV_NPU, 0).allocation_id(1));
    h.feed(EventBuilder::malloc(0x10000, 4096, MSMS_T_PTA).device(MSMS_DEV_NPU, 0).allocation_id(2).py_stack("m.py(1): f"));
    REQUIRE(h.finish() == MSMS_OK);
    std::ifstream in(dir + "/memory_viz_20260101000000.pickle", std::ios::binary);
    std::string p((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    REQUIRE(p.size() > 100);
    CHECK(p.substr(0, 2) == bytes({0x80, 2}));
    CHECK(p.back() == '.');
    for (const char* s : {"segment_alloc", "active_allocated", "inactive", "npu:0 framework pools (PTA)", "npu:0 driver memory",
                          "m.py"})
        CHECK_MESSAGE(p.find(s) != std::string::npos, s);
    CHECK(h.reports.empty());
}

TEST_CASE("sink: past max_trace_entries the most recent entries stay, and the report says so") {
    std::string dir = std::string(MSMS_TEST_OUT) + "/ring";
    fs::remove_all(dir);
    fs::create_directories(dir);
    PluginHarness h(require_descriptor(MSMS_MEMORY_VIZ_PLUGIN));
    REQUIRE(h.create({{"max_trace_entries", "10"}}) == MSMS_OK);
    REQUIRE(h.begin(dir) == MSMS_OK);
    for (uint64_t i = 1; i <= 5; ++i) {
        h.feed(EventBuilder::malloc(0x1000 * i, 64).allocation_id(i));
        h.feed(EventBuilder::free(0x1000 * i).allocation_id(i));
    }
    REQUIRE(h.finish() == MSMS_OK);
    REQUIRE(h.reports.size() == 1);
    CHECK(h.reports[0] == "memory_viz: cpu host memory: the trace keeps the last 10 of 25 actions (option max_trace_entries)");
}
