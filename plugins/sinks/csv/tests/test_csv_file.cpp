// The csv sink's output file through its C descriptor: a dump of many
// 8 MiB blocks, written direct by the sink's writer thread while it builds
// the next rows, holds every row once, in order, and nothing else; the last
// partial block goes through the page cache at the end.
#include <doctest/doctest.h>
#include <msmemscope/testing.hpp>

#include <filesystem>
#include <fstream>
#include <string>

namespace fs = std::filesystem;
using namespace msmemscope::testing;

TEST_CASE("csv: a dump of many blocks holds every row once, in order, byte for byte") {
    std::string dir = std::string(MSMS_TEST_OUT) + "/many_blocks";
    fs::remove_all(dir);
    PluginHarness h(require_descriptor(MSMS_CSV_PLUGIN));
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin(dir, "20260101000000") == MSMS_OK);
    // ~40 MB: four direct blocks and a partial one. Each row's stack text
    // names the row, so a block written twice, lost or out of place shows.
    std::string frames;
    for (int f = 0; f < 40; ++f) frames += "frame_" + std::to_string(f) + "_of_a_deep_enough_stack\n";
    const int rows = 30000;
    for (int i = 1; i <= rows; ++i)
        h.feed(EventBuilder::malloc(0x10000 + 64 * static_cast<uint64_t>(i), 64)
                   .allocation_id(static_cast<uint64_t>(i))
                   .at(1000 + static_cast<uint64_t>(i))
                   .c_stack("row " + std::to_string(i) + "\n" + frames)
                   .attr("allocation_id", std::to_string(i)));
    REQUIRE(h.finish() == MSMS_OK);
    std::string path = dir + "/device_cpu/dump/memscope_dump_20260101000000.csv";
    REQUIRE(fs::exists(path));
    CHECK(fs::file_size(path) > 4 * (8u << 20));
    std::ifstream in(path, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(text.size() == fs::file_size(path));
    CHECK(text.rfind("ID,Event,", 0) == 0);
    // "row N" appears once per row, in order, and the file ends with a newline.
    size_t at = 0;
    int in_order = 0;
    for (int i = 1; i <= rows; ++i) {
        size_t next = text.find("\"row " + std::to_string(i) + "\n", at);
        if (next == std::string::npos) break;
        at = next + 1;
        ++in_order;
    }
    CHECK(in_order == rows);
    CHECK(text.find("\"row " + std::to_string(rows + 1) + "\n") == std::string::npos);
    CHECK(text.back() == '\n');
    CHECK(text.find('\0') == std::string::npos);
}
