// The csv sink's output file on its own: blocks handed to the direct and
// the page-cache writer, in whatever order they finish, make the file the
// bytes appended, each once, in place; the accounting says so all along.
#include <doctest/doctest.h>

#include <sys/resource.h>

#include <algorithm>
#include <random>
#include <vector>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "output_file.h"

namespace fs = std::filesystem;

namespace {

std::string read_all(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Line i of the test content: numbered, of varying length.
void append_line(std::string& out, int i) {
    out += "line ";
    out += std::to_string(i);
    out.append(static_cast<size_t>(i % 97), 'x');
    out += '\n';
}

}  // namespace

TEST_CASE("output file: many blocks are the bytes appended, each once, in place") {
    std::string dir = std::string(MSMS_TEST_OUT) + "/output_file";
    fs::remove_all(dir);
    std::string path = dir + "/sub/out.csv";
    std::string expect = "HEAD\n";
    uint64_t blocks = 0;
    {
        msms::OutputFile f(path, "HEAD");
        CHECK(fs::file_size(path) == 5);  // the header at once
        // lines one by one, then a big run of them at once (flush() hands
        // block after block while the one before is still being written)
        for (int i = 0; i < 3000000; ++i) {
            size_t at = f.buffer().size();
            append_line(f.buffer(), i);
            expect.append(f.buffer(), at, std::string::npos);
            if (i < 1000000) f.maybe_flush();
            if (f.written() + f.pending() != expect.size()) FAIL("written + pending != appended at line " << i);
        }
        f.flush();
        CHECK(f.pending() < 4096);  // whole blocks out, the partial one waits for close
        f.close();
        CHECK(f.written() + f.pending() == expect.size());
        blocks = f.direct_blocks();
    }
    std::string got = read_all(path);
    REQUIRE(got.size() == expect.size());
    CHECK(got == expect);
    // ~3000000 lines of ~60 bytes: every whole block went to the disk directly
    CHECK(blocks >= expect.size() / msms::OutputFile::kBlock);
}

namespace {
// The smaps entry of the mapping that holds address p: its "Key:" lines.
std::string smaps_of(const void* p) {
    std::ifstream in("/proc/self/smaps");
    std::string line, out;
    bool inside = false;
    const auto a = reinterpret_cast<uintptr_t>(p);
    while (std::getline(in, line)) {
        unsigned long lo = 0, hi = 0;
        char dash = 0;
        if (std::sscanf(line.c_str(), "%lx%c%lx", &lo, &dash, &hi) == 3 && dash == '-' && line.find(':') > 20) {
            inside = a >= lo && a < hi;
            continue;
        }
        if (inside) out += line + "\n";
    }
    return out;
}
}  // namespace

TEST_CASE("output file: the direct-write buffers are whole huge pages, asked for as such") {
    // A direct write pins its buffer's pages and the completion unpins them
    // on the CPU that takes the disk's interrupt (often the program's):
    // 4 huge pages a block instead of 2048 small ones.
    std::string dir = std::string(MSMS_TEST_OUT) + "/output_file_huge";
    fs::remove_all(dir);
    msms::OutputFile f(dir + "/out.csv", "HEAD");
    if (!f.direct_buffer(0)) {
        MESSAGE("O_DIRECT refused here: no direct-write buffers to check");
        return;
    }
    std::string thp = read_all("/sys/kernel/mm/transparent_hugepage/enabled");
    for (int i = 0; i < 2; ++i) {
        const char* b = f.direct_buffer(i);
        REQUIRE(b != nullptr);
        CHECK(reinterpret_cast<uintptr_t>(b) % msms::OutputFile::kHugeAlign == 0);
        if (thp.empty() || thp.find("[never]") != std::string::npos) continue;
        std::string sm = smaps_of(b);
        INFO("smaps of direct buffer " << i << ":\n" << sm);
        // VmFlags "hg": madvise(MADV_HUGEPAGE) on the whole mapping
        size_t flags = sm.find("VmFlags:");
        REQUIRE(flags != std::string::npos);
        std::string vm = sm.substr(flags, sm.find('\n', flags) - flags) + " ";
        CHECK(vm.find(" hg ") != std::string::npos);
    }
}

TEST_CASE("output file: a file-size limit stops it with the reason, not a signal or a silent cut") {
    std::string dir = std::string(MSMS_TEST_OUT) + "/output_file_limit";
    fs::remove_all(dir);
    std::string path = dir + "/out.csv";
    struct rlimit old;
    REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
    auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = old;
    lim.rlim_cur = 20ull << 20;  // 2.5 blocks
    REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    std::string error;
    try {
        msms::OutputFile f(path, "HEAD");
        for (int i = 0; i < 1000000; ++i) {
            append_line(f.buffer(), i);
            f.maybe_flush();
        }
        f.flush();
    } catch (const std::exception& e) {
        error = e.what();
    }
    setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, old_handler);
    CHECK(error == "cannot write " + path + ": File too large");
    // what fits is there: the header and whole lines from the start
    std::string got = read_all(path);
    CHECK(got.size() == (20u << 20));
    CHECK(got.rfind("HEAD\nline 0\nline 1x\n", 0) == 0);
}

namespace {

// Lines appended and changed as the csv sink does it: held rows, some of
// the rows about to be written changed at the flush (longer, shorter, the
// first and the last one before the cut among them). Every flush leaves the
// unwritten part of the buffer equal to the end of what the file must be;
// the file is every line's last text, in order.
struct Model {
    std::vector<std::string> text;  // each line's current text
    std::vector<uint64_t> off;      // its file offset
    uint64_t size = 0;              // all of them
    void add(const std::string& t) {
        off.push_back(size);
        text.push_back(t);
        size += t.size();
    }
    // Line i becomes t: the lines after it move.
    void change(size_t i, const std::string& t) {
        int64_t d = static_cast<int64_t>(t.size()) - static_cast<int64_t>(text[i].size());
        text[i] = t;
        for (size_t k = i + 1; k < off.size(); ++k) off[k] = static_cast<uint64_t>(static_cast<int64_t>(off[k]) + d);
        size = static_cast<uint64_t>(static_cast<int64_t>(size) + d);
    }
    std::string from(uint64_t at) const {  // the content from file offset `at`
        auto it = std::upper_bound(off.begin(), off.end(), at);
        size_t i = static_cast<size_t>(it - off.begin()) - 1;
        std::string s = text[i].substr(static_cast<size_t>(at - off[i]));
        for (++i; i < text.size(); ++i) s += text[i];
        return s;
    }
};

void changed_flushes(const std::string& path, size_t hold, bool direct) {
    Model m;
    m.add("HEAD\n");
    uint64_t flushes = 0, changed = 0;
    std::mt19937 rng(7);
    {
        msms::OutputFile f(path, "HEAD");
        if (!direct) f.through_page_cache();
        f.set_hold(hold);
        const size_t cap = f.buffer().capacity();
        for (int i = 0; i < 600000; ++i) {
            std::string line;
            append_line(line, i);
            f.buffer() += line;
            m.add(line);
            if (!f.flush_due()) continue;
            // the lines wholly unwritten before the cut: some of them change
            size_t cut = f.buffer().size() - f.hold();
            uint64_t base = f.written() - f.start(), cut_off = base + cut;
            std::vector<size_t> lines;
            for (size_t k = m.off.size(); k-- > 0 && m.off[k] >= f.written();)
                if (m.off[k] + m.text[k].size() <= cut_off) lines.push_back(k);
            std::reverse(lines.begin(), lines.end());
            REQUIRE(lines.size() > 10);
            std::vector<size_t> pick = {lines.front(), lines.back()};
            for (int k = 0; k < 40; ++k) pick.push_back(lines[rng() % lines.size()]);
            std::sort(pick.begin(), pick.end());
            pick.erase(std::unique(pick.begin(), pick.end()), pick.end());
            std::vector<std::string> texts;
            std::vector<msms::OutputFile::Patch> patches;
            for (size_t k : pick) {
                size_t at = static_cast<size_t>(m.off[k] - base);
                std::string t = rng() % 2 ? "changed " + std::to_string(k) + std::string(rng() % 300, 'y') + "\n"
                                          : "c\n";
                patches.push_back({at, at + m.text[k].size(), {}});
                texts.push_back(t);
            }
            for (size_t k = 0; k < pick.size(); ++k) patches[k].text = texts[k];
            f.flush(cut, patches.data(), patches.size());
            for (size_t k = 0; k < pick.size(); ++k) m.change(pick[k], texts[k]);
            changed += pick.size();
            ++flushes;
            if (f.written() + f.pending() != m.size) FAIL("written + pending != the content after flush " << flushes);
            if (f.buffer().compare(f.start(), std::string::npos, m.from(f.written())) != 0)
                FAIL("the unwritten part is not the end of the content after flush " << flushes);
            if (f.buffer().capacity() != cap) FAIL("the buffer grew (a copy of it) at flush " << flushes);
        }
        f.close();
        CHECK((f.direct_blocks() > 0) == direct);
    }
    CHECK(flushes >= 3);
    CHECK(changed > 100);
    std::string got = read_all(path);
    std::string want = m.from(0);
    REQUIRE(got.size() == want.size());
    CHECK(got == want);
}

}  // namespace

TEST_CASE("output file: rows changed as they are written land in place, the rest byte for byte") {
    std::string dir = std::string(MSMS_TEST_OUT) + "/output_file_changes";
    fs::remove_all(dir);
    SUBCASE("direct blocks, rows held") { changed_flushes(dir + "/held.csv", 2 << 20, true); }
    SUBCASE("direct blocks, nothing held") { changed_flushes(dir + "/none.csv", 0, true); }
    SUBCASE("through the page cache (where O_DIRECT is refused)") { changed_flushes(dir + "/cache.csv", 2 << 20, false); }
}

TEST_CASE("output file: a change longer than the part written waits in the buffer, changed") {
    // The changed bytes make more than the place they take: a whole block
    // goes out, the rest of them waits in front of the rows after the cut.
    const size_t kBlock = msms::OutputFile::kBlock;
    std::string dir = std::string(MSMS_TEST_OUT) + "/output_file_small";
    fs::remove_all(dir);
    std::string path = dir + "/small.csv";
    std::string want = "HEAD\n" + std::string(kBlock + 9000, 'z') + "\nb\nc\n";
    {
        msms::OutputFile f(path, "HEAD");
        f.buffer() += "a\nb\nc\n";  // buffer: "HEAD\na\nb\nc\n"
        std::string big(kBlock + 9000, 'z');
        big += '\n';
        msms::OutputFile::Patch p{5, 7, big};  // "a\n" -> a block and 9000 z's
        f.flush(9, &p, 1);                      // up to "c\n"
        CHECK(f.written() == kBlock);
        CHECK(f.written() + f.pending() == want.size());
        CHECK(f.buffer().substr(f.start()) == want.substr(kBlock));
        f.close();
    }
    CHECK(read_all(path) == want);
}

TEST_CASE("output file: a block short of a whole one waits while rows follow it") {
    // Written at once, it would wait for the block in flight, and the disk
    // would then stand idle while the next rows are built. Only when
    // nothing follows in the buffer (the end) do its whole pages go out.
    std::string dir = std::string(MSMS_TEST_OUT) + "/output_file_partial";
    fs::remove_all(dir);
    std::string path = dir + "/partial.csv";
    std::string want = "HEAD\n" + std::string(20000, 'p') + "\nrest\n";
    {
        msms::OutputFile f(path, "HEAD");
        f.buffer() += std::string(20000, 'p') + "\nrest\n";
        f.flush(f.buffer().size() - 5);  // "rest\n" follows the cut
        CHECK(f.written() == 0);
        CHECK(f.direct_blocks() == 0);
        CHECK(f.buffer().substr(f.start()) == want);
        f.flush();  // nothing follows: its whole pages (4 of 4096 bytes) go out
        CHECK(f.written() == 4 * 4096);
        CHECK(f.direct_blocks() == 1);
        CHECK(f.buffer().substr(f.start()) == want.substr(4 * 4096));
        f.close();
    }
    CHECK(read_all(path) == want);
}

TEST_CASE("output file: a hold given up gives its room back at the next flush") {
    std::string dir = std::string(MSMS_TEST_OUT) + "/output_file_unhold";
    fs::remove_all(dir);
    std::string path = dir + "/unhold.csv";
    std::string expect = "HEAD\n";
    {
        msms::OutputFile f(path, "HEAD");
        int i = 0;
        auto add_line = [&] {  // one more line, written when due
            size_t at = f.buffer().size();
            append_line(f.buffer(), i++);
            expect.append(f.buffer(), at, std::string::npos);
            f.maybe_flush();
        };
        const size_t small = f.buffer().capacity();  // a block and a row's slack
        f.set_hold(16u << 20);
        const size_t held = f.buffer().capacity();
        CHECK(held >= (32u << 20));  // the hold and two blocks
        while (f.written() < (40u << 20)) add_line();  // blocks written while rows are held
        CHECK(f.buffer().capacity() == held);
        f.set_hold(0);
        while (f.buffer().capacity() == held && i < 3000000) add_line();
        CHECK(f.buffer().capacity() < held);
        CHECK(f.buffer().capacity() <= 2 * small);
        for (int k = 0; k < 200000; ++k) add_line();  // and rows go on as before
        f.close();
    }
    CHECK(read_all(path) == expect);
}
