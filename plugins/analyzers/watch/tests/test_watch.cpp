// Unit tests of watch: the CRC-64 and the host part on synthetic checkpoint events.
#include <doctest/doctest.h>

#include <msmemscope/testing.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "crc64.h"

using namespace msmemscope::testing;
namespace fs = std::filesystem;

namespace {
const msms_plugin_descriptor* plugin() { return require_descriptor(PLUGIN_PATH); }
EventBuilder checkpoint(const std::string& op, int count, const std::string& when, const std::string& crc) {
    return EventBuilder::mark("msmemscope.watch")
        .device(MSMS_DEV_CPU, -1)
        .thread(77)
        .attr("op", op)
        .attr("count", std::to_string(count))
        .attr("watched", "aten::mul")
        .attr("idx", "0")
        .attr("when", when)
        .attr("crc64", crc);
}
std::string slurp(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}
fs::path temp_dir(const char* name) {
    fs::path d = fs::temp_directory_path() / (std::string(name) + "_" + std::to_string(getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
}
}  // namespace

TEST_CASE("CRC-64 as upstream: reflected 0x42F0E1EBA9EA3693, all-ones init and xor") {
    // upstream's variant (not CRC-64/XZ: the polynomial is not bit-reversed); value computed independently
    CHECK(msms_crc64("123456789", 9) == 0xb86883e6fa710a9fULL);
    CHECK(msms_crc64("", 0) == 0);
    uint64_t part = msms_crc64_update(0, "1234", 4);
    CHECK(msms_crc64_update(part, "56789", 5) == 0xb86883e6fa710a9fULL);
}

TEST_CASE("hash mode writes the check-sum CSV and finds the op that changed the tensor") {
    fs::path dir = temp_dir("msms_watch_hash");
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin(dir.string(), "20260102030405") == MSMS_OK);
    h.feed(checkpoint("aten::mul", 0, "after", "00000000000000aa"));
    h.feed(checkpoint("aten::add", 1, "before", "00000000000000aa"));
    h.feed(checkpoint("aten::add", 1, "after", "00000000000000aa"));
    h.feed(checkpoint("aten::fill_", 1, "before", "00000000000000aa"));
    h.feed(checkpoint("aten::fill_", 1, "after", "00000000000000bb"));
    h.feed(EventBuilder::mark("unrelated"));
    REQUIRE(h.finish() == MSMS_OK);
    fs::path csv = dir / "device_cpu" / "watch_dump" / "watch_dump_data_check_sum_20260102030405.csv";
    REQUIRE(fs::exists(csv));
    CHECK(slurp(csv) ==
          "Tensor info,Check data sum\n"
          "cpu_77.aten.mul_0-aten.mul_0_after.bin,00000000000000aa\n"
          "cpu_77.aten.add_1-aten.mul_0_before.bin,00000000000000aa\n"
          "cpu_77.aten.add_1-aten.mul_0_after.bin,00000000000000aa\n"
          "cpu_77.aten.fill__1-aten.mul_0_before.bin,00000000000000aa\n"
          "cpu_77.aten.fill__1-aten.mul_0_after.bin,00000000000000bb\n");
    CHECK(h.reports == std::vector<std::string>{"watch: 5 checkpoint(s) written under device_*/watch_dump",
                                                "watch: tensor aten::mul_0 was changed by aten::fill__1"});
    fs::remove_all(dir);
}

TEST_CASE("full-content mode moves the target's file into watch_dump under the upstream name") {
    fs::path dir = temp_dir("msms_watch_full");
    fs::path bin = dir / "tmp.bin";
    { std::ofstream(bin) << "abcd"; }
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin(dir.string(), "20260102030405") == MSMS_OK);
    h.feed(EventBuilder::mark("msmemscope.watch")
               .device(MSMS_DEV_NPU, 2)
               .thread(5)
               .attr("op", "Foo/aten::add")
               .attr("count", "3")
               .attr("watched", "aten::mul")
               .attr("idx", "1")
               .attr("when", "before")
               .attr("file", bin.string()));
    REQUIRE(h.finish() == MSMS_OK);
    // '/' and "::" become '.': no colons in file names
    fs::path to = dir / "device_2" / "watch_dump" / "2_5.Foo.aten.add_3-aten.mul_1_before.bin";
    CHECK(fs::exists(to));
    CHECK(!fs::exists(bin));
    CHECK(slurp(to) == "abcd");
    fs::remove_all(dir);
}
