// The csv sink's output file through its C descriptor: a dump of many
// 8 MiB blocks, written direct by the sink's writer thread while it builds
// the next rows, holds every row once, in order, and nothing else; the last
// partial block goes through the page cache at the end.
#include <doctest/doctest.h>
#include <msmemscope/testing.hpp>

#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

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

namespace {
std::string read_all(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// `rows` MALLOC rows (IDs 1..rows), each with a 40-frame Python stack that
// names it (~700 bytes a row), fed to a csv sink with hold_mib `hold`;
// after row i is fed, after_row(h, i) may change earlier rows' Attrs.
// Returns the dump's text; `said` gets the sink's count of rows changed in
// memory and after they were written (its last "csv: " line; empty if none).
std::string stack_rows_dump(const std::string& dir, const std::string& hold, int rows,
                            const std::function<void(PluginHarness&, int)>& after_row, std::string& said) {
    std::string frames;
    for (int f = 0; f < 40; ++f) frames += "frame_" + std::to_string(f) + " (\"x,y\")\n";
    fs::remove_all(dir);
    PluginHarness h(require_descriptor(MSMS_CSV_PLUGIN));
    REQUIRE(h.create({{"hold_mib", hold}}) == MSMS_OK);
    REQUIRE(h.begin(dir, "20260101000000") == MSMS_OK);
    for (int i = 1; i <= rows; ++i) {
        h.feed(EventBuilder::malloc(0x10000 + 64 * static_cast<uint64_t>(i), 64)
                   .id(static_cast<uint64_t>(i))
                   .at(1000 + static_cast<uint64_t>(i))
                   .py_stack("row " + std::to_string(i) + "\n" + frames)
                   .attr("allocation_id", std::to_string(i)));
        if (after_row) after_row(h, i);
    }
    REQUIRE(h.finish() == MSMS_OK);
    said.clear();
    for (auto& [level, m] : h.logs)
        if (m.rfind("csv: ", 0) == 0) said = m;
    return read_all(dir + "/device_cpu/dump/memscope_dump_20260101000000.csv");
}

// Row `id` of a stack_rows_dump text gets `owner` in its Attr, as the sink
// writes it; the row is looked for from offset `from` on.
void tag_row(std::string& csv, uint64_t id, const std::string& owner, size_t from = 0) {
    size_t at = csv.find("\n" + std::to_string(id) + ",MALLOC,", from);
    REQUIRE(at != std::string::npos);
    std::string attr = "{allocation_id:" + std::to_string(id) + "}";
    size_t a = csv.find(attr, at);
    REQUIRE(a != std::string::npos);
    csv.replace(a, attr.size(), "{allocation_id:" + std::to_string(id) + ",owner:" + owner + "}");
}

// Rows whose stacks hold quotes, commas and newlines; `annotate` ids get an
// owner after every row is written (as decompose does). hold_mib "0": no
// row stays in memory, every change goes through the rewrite at the end.
std::string dump_with(const std::string& dir, const std::vector<uint64_t>& annotate, bool rising = true,
                      const std::string& hold_mib = "64") {
    fs::remove_all(dir);
    PluginHarness h(require_descriptor(MSMS_CSV_PLUGIN));
    REQUIRE(h.create({{"hold_mib", hold_mib}}) == MSMS_OK);
    REQUIRE(h.begin(dir, "20260101000000") == MSMS_OK);
    const int rows = 1000;
    for (int i = 1; i <= rows; ++i) {
        // not rising: rows 500 and 501 swapped (IDs out of order in the file)
        int id = rising ? i : (i == 500 ? 501 : i == 501 ? 500 : i);
        std::string stack = "f(\"" + std::to_string(id) + "\", x)\n";
        for (int f = 0; f < id % 7; ++f) stack += "g,\"h\"\"\",\n";
        h.feed(EventBuilder::malloc(0x10000 + 64 * static_cast<uint64_t>(id), 64)
                   .id(static_cast<uint64_t>(id))
                   .at(1000 + static_cast<uint64_t>(id))
                   .py_stack(stack)
                   .attr("allocation_id", std::to_string(id)));
    }
    for (uint64_t id : annotate) REQUIRE(h.annotate(id, "owner", "PTA@weight") == MSMS_OK);
    REQUIRE(h.finish() == MSMS_OK);
    return read_all(dir + "/device_cpu/dump/memscope_dump_20260101000000.csv");
}
}  // namespace

TEST_CASE("csv: analyzers' Attr changes reach exactly their rows, the rest byte for byte") {
    std::string base = std::string(MSMS_TEST_OUT) + "/patches";
    std::string plain = dump_with(base + "_none", {});
    // the first row, rows at and around every 32nd (where the sink keeps
    // offsets), neighbours, the last row, and IDs that are not in the file
    std::vector<uint64_t> ids = {1, 2, 31, 32, 33, 64, 65, 500, 501, 999, 1000, 1001, 5000};
    std::string patched = dump_with(base + "_some", ids);
    std::string expected = plain;
    for (uint64_t id : ids) {
        if (id > 1000) continue;
        std::string from = "{allocation_id:" + std::to_string(id) + "}";
        std::string to = "{allocation_id:" + std::to_string(id) + ",owner:PTA@weight}";
        size_t at = expected.find("\n" + std::to_string(id) + ",MALLOC,");
        REQUIRE(at != std::string::npos);
        size_t a = expected.find(from, at);
        REQUIRE(a != std::string::npos);
        expected.replace(a, from.size(), to);
    }
    CHECK(patched.size() == expected.size());
    CHECK(patched == expected);
    // The same through the rewrite of the written file (nothing held).
    CHECK(dump_with(base + "_rewritten", ids, true, "0") == expected);
    // IDs not rising through the file: the full parse gives the same rows.
    std::string swapped = dump_with(base + "_swapped", ids, false);
    std::string swapped_plain = dump_with(base + "_swapped_none", {}, false);
    CHECK(swapped != swapped_plain);
    for (uint64_t id : {500, 501, 64}) {
        std::string to = "{allocation_id:" + std::to_string(id) + ",owner:PTA@weight}";
        CHECK(swapped.find(to) != std::string::npos);
    }
    CHECK(swapped.size() == patched.size());
}

// Owner tags that come while the dump is written (as decompose tags a
// gradient within its step): rows still in the held part of the buffer are
// changed in memory, rows already written through the rewrite at the end,
// a row tagged twice keeps the last value, and the rows after each changed
// one are found again (the row index follows the buffer).
TEST_CASE("csv: Attr changes while rows are written, in memory and by the rewrite, give the same file") {
    std::string base = std::string(MSMS_TEST_OUT) + "/live_patches";
    const int rows = 30000;  // ~20 MB: blocks are written while rows come
    std::string said;  // the sink's count of rows changed in memory and after they were written
    auto changes = [&](PluginHarness& h, int i) {
        if (i % 97 == 0) {
            REQUIRE(h.annotate(static_cast<uint64_t>(i - 40), "owner", "PTA@gradient") == MSMS_OK);
            if (i % 3 == 0) REQUIRE(h.annotate(static_cast<uint64_t>(i - 40), "owner", "PTA@optimizer_state") == MSMS_OK);
        }
        if (i == rows) {
            for (uint64_t id : {1, 32, 33, 5000, 29999})
                REQUIRE(h.annotate(id, "owner", "PTA@weight") == MSMS_OK);
            // rows still held after the last block was written, after rows
            // changed in memory before it: found by the index as it moved
            for (uint64_t id = 29011; id < 29991; id += 50)
                REQUIRE(h.annotate(id, "owner", "PTA@activation") == MSMS_OK);
        }
    };
    auto run = [&](const std::string& dir, const std::string& hold, bool tags) {
        return stack_rows_dump(dir, hold, rows, tags ? std::function<void(PluginHarness&, int)>(changes) : nullptr, said);
    };
    std::string plain = run(base + "_none", "64", false);
    std::string expected = plain;
    auto tag = [&](uint64_t id, const std::string& owner) { tag_row(expected, id, owner); };
    for (int i = 97; i <= rows; i += 97) tag(static_cast<uint64_t>(i - 40), i % 3 == 0 ? "PTA@optimizer_state" : "PTA@gradient");
    for (uint64_t id : {1, 32, 33, 5000, 29999}) tag(id, "PTA@weight");
    for (uint64_t id = 29011; id < 29991; id += 50) tag(id, "PTA@activation");
    REQUIRE(plain.size() > 16u << 20);
    // 309 rows tagged 40 rows after they came; 1, 32, 33, 5000, 29999 and 20 held rows at the end
    std::string held = run(base + "_held", "1", true);  // in memory but for the four early ones
    CHECK(said == "csv: 330 row(s) got analyzers' Attr changes in memory, 4 after they were written (the files are "
                  "rewritten for those)");
    CHECK(held.size() == expected.size());
    CHECK(held == expected);
    std::string rewritten = run(base + "_rewritten", "0", true);  // all rewritten
    CHECK(said == "csv: 0 row(s) got analyzers' Attr changes in memory, 334 after they were written (the files are "
                  "rewritten for those)");
    CHECK(rewritten == expected);
    std::string all_held = run(base + "_all_held", "64", true);  // all in memory
    CHECK(said == "csv: 334 row(s) got analyzers' Attr changes in memory, 0 after they were written (the files are "
                  "rewritten for those)");
    CHECK(all_held == expected);
}

// Rows are held for analyzers' Attr changes from the start, given up when
// a file's first 4 holds of rows brought no change (a run whose analyzers
// change nothing then pays nothing for the hold), and held again from the
// next change on: a row written in between gets its change by the rewrite,
// a row still in the buffer in memory. The file is the same either way.
TEST_CASE("csv: rows are held while analyzers change them, given up while none does") {
    std::string dir = std::string(MSMS_TEST_OUT) + "/hold_given_up";
    // first_change: the row after which rows 1 (the first) and 14990 are
    // tagged (0: none); the hold is 1 MiB, given up at 4 MiB of rows
    auto run = [&](int first_change, std::string& said) {
        return stack_rows_dump(dir, "1", 30000, [&](PluginHarness& h, int i) {
            if (i == first_change) REQUIRE(h.annotate(1, "owner", "PTA@weight") == MSMS_OK);
            if (first_change && i == 15000) REQUIRE(h.annotate(14990, "owner", "PTA@gradient") == MSMS_OK);
        }, said);
    };
    std::string said;
    std::string expected = run(0, said);
    CHECK(said.empty());  // no change, nothing to say
    REQUIRE(expected.size() > 16u << 20);
    tag_row(expected, 1, "PTA@weight");
    tag_row(expected, 14990, "PTA@gradient");
    // the first change after row 100 (~70 kB): held all along, both in memory
    std::string early = run(100, said);
    CHECK(said == "csv: 2 row(s) got analyzers' Attr changes in memory, 0 after they were written (the files are "
                  "rewritten for those)");
    CHECK(early == expected);
    // the first change after row 15000 (~10 MB): given up at 4 MiB, row 1
    // written since; row 14990 still in the buffer, held from then on
    std::string late = run(15000, said);
    CHECK(said == "csv: 1 row(s) got analyzers' Attr changes in memory, 1 after they were written (the files are "
                  "rewritten for those)");
    CHECK(late.size() == expected.size());
    CHECK(late == expected);
}

// The rows just after the end of a written block are found in the buffer
// like any other: tagged before the next block goes out, they change in
// memory, not by the rewrite at the end (with only every 32nd row's offset
// noted, those whose group began in the written block were not found).
TEST_CASE("csv: rows just after a written block are changed in memory") {
    std::string dir = std::string(MSMS_TEST_OUT) + "/after_block";
    // ~25 MB in blocks of 8 MiB; hold 1 MiB. After row tag_after, rows
    // first..first+4 get an owner.
    auto run = [&](int tag_after, int first, std::string& said) {
        return stack_rows_dump(dir, "1", 30000, [&](PluginHarness& h, int i) {
            if (i == tag_after)
                for (int k = first; k < first + 5; ++k)
                    REQUIRE(h.annotate(static_cast<uint64_t>(k), "owner", "PTA@gradient") == MSMS_OK);
        }, said);
    };
    std::string said;
    std::string plain = run(0, 0, said);
    size_t from = 0;  // rows are looked for in rising order: each from the last one found
    auto row_start = [&](int id) {
        size_t at = plain.find("\n" + std::to_string(id) + ",MALLOC,", from);
        REQUIRE(at != std::string::npos);
        from = at;
        return at + 1;
    };
    // the first row that starts at or after the first block's end (8 MiB),
    // and the first row built after 12 MiB (between the first two blocks)
    const size_t block = 8u << 20;  // the output file's block (output_file.h)
    int first = 1;
    while (row_start(first) < block) ++first;
    int mid = first;
    while (row_start(mid) < block + (4u << 20)) ++mid;
    REQUIRE((first - 1) % 32 != 0);  // its group of 32 began in the written block
    std::string expected = plain;
    for (int k = first; k < first + 5; ++k) tag_row(expected, static_cast<uint64_t>(k), "PTA@gradient", block - 4096);
    std::string tagged = run(mid, first, said);
    CHECK(said == "csv: 5 row(s) got analyzers' Attr changes in memory, 0 after they were written (the files are "
                  "rewritten for those)");
    CHECK(tagged == expected);
}

namespace {
using Tags = std::vector<std::pair<uint64_t, std::string>>;

// A dump of `rows` MALLOC rows whose owner is `owner`, then late owner
// changes (hold_mib=0: every change reaches the file by the end's rewrite);
// the file's text.
std::string dump_with_late_tags(const std::string& dir, int rows, const std::string& frames, const std::string& owner,
                                const Tags& tags) {
    fs::remove_all(dir);
    PluginHarness h(require_descriptor(MSMS_CSV_PLUGIN));
    REQUIRE(h.create({{"hold_mib", "0"}}) == MSMS_OK);
    REQUIRE(h.begin(dir, "20260101000000") == MSMS_OK);
    for (int i = 1; i <= rows; ++i)
        h.feed(EventBuilder::malloc(0x10000 + 64 * static_cast<uint64_t>(i), 64)
                   .id(static_cast<uint64_t>(i))
                   .at(1000 + static_cast<uint64_t>(i))
                   .py_stack("row " + std::to_string(i) + "\n" + frames)
                   .attr("allocation_id", std::to_string(i))
                   .attr("owner", owner));
    for (auto& [id, to] : tags) REQUIRE(h.annotate(id, "owner", to) == MSMS_OK);
    REQUIRE(h.finish() == MSMS_OK);
    return read_all(dir + "/device_cpu/dump/memscope_dump_20260101000000.csv");
}

// `text` with row id's owner `from` replaced by `to`, as the rewrite should.
void retag(std::string& text, uint64_t id, const std::string& from, const std::string& to) {
    size_t at = text.find("\n" + std::to_string(id) + ",MALLOC,");
    REQUIRE(at != std::string::npos);
    size_t a = text.find("owner:" + from + "}", at);
    REQUIRE(a != std::string::npos);
    text.replace(a, from.size() + 7, "owner:" + to + "}");
}
}  // namespace

// The rewrite at the end changes the file in place from the first changed
// row on: rows that shrink (an owner replaced by a shorter one) and rows
// that grow, mixed, over more than one of its 8 MiB chunks, leave exactly
// the expected bytes (no stale tail, no lost byte) in the same file.
TEST_CASE("csv: the rewrite in place moves later rows by what changed rows shrank or grew") {
    std::string dir = std::string(MSMS_TEST_OUT) + "/in_place";
    std::string frames;
    for (int f = 0; f < 30; ++f) frames += "frame_" + std::to_string(f) + "\n";
    const int rows = 30000;  // ~11 MB
    Tags tags;
    for (uint64_t id = 3; id <= rows; id += 7) tags.emplace_back(id, "PTA@w");  // shrink by 14 bytes
    for (uint64_t id = 5; id <= rows; id += 11) tags.emplace_back(id, "PTA@optimizer_state_fp32");  // grow by 9
    std::string expected = dump_with_late_tags(dir, rows, frames, "PTA@optimizer_state", {});
    REQUIRE(expected.size() > (8u << 20));
    std::map<uint64_t, std::string> last;  // a row tagged twice keeps the later owner
    for (auto& [id, owner] : tags) last[id] = owner;
    for (auto& [id, owner] : last) retag(expected, id, "PTA@optimizer_state", owner);
    std::string got = dump_with_late_tags(dir, rows, frames, "PTA@optimizer_state", tags);
    CHECK(got.size() == expected.size());
    CHECK(got == expected);
    // no temporary beside it
    CHECK(!fs::exists(dir + "/device_cpu/dump/memscope_dump_20260101000000.csv.tmp"));
}

TEST_CASE("csv: late changes of a row's length only (ops@aten -> gradient) are written in place; one that grows after them moves the rest") {
    std::string dir = std::string(MSMS_TEST_OUT) + "/same_length";
    const int rows = 20000;
    const std::string frames = "frame_a\nframe_b\n";
    // same-length tags on every 97th row, and one that grows at grow_at (0: none)
    auto tags = [&](int grow_at) {
        Tags t;
        for (uint64_t id = 2; id <= rows; id += 97) t.emplace_back(id, "PTA@gradient");
        if (grow_at > 0) t.emplace_back(static_cast<uint64_t>(grow_at), "PTA@optimizer_state");
        return t;
    };
    const std::string plain = dump_with_late_tags(dir, rows, frames, "PTA@ops@aten", {});
    auto expect = [&](int grow_at) {
        std::string e = plain;
        for (auto& [id, owner] : tags(grow_at)) retag(e, id, "PTA@ops@aten", owner);
        return e;
    };
    auto run = [&](int grow_at) { return dump_with_late_tags(dir, rows, frames, "PTA@ops@aten", tags(grow_at)); };
    std::string got = run(0);  // only same-length changes
    CHECK(got.size() == plain.size());
    CHECK(got == expect(0));
    got = run(rows / 2 + 1);  // same-length ones before and after one that grows
    CHECK(got.size() == plain.size() + 7);
    CHECK(got == expect(rows / 2 + 1));
    got = run(3);  // the first change grows its row
    CHECK(got == expect(3));
}
