// The csv sink's output file on its own: blocks handed to the direct and
// the page-cache writer, in whatever order they finish, make the file the
// bytes appended, each once, in place; the accounting says so all along.
#include <doctest/doctest.h>

#include <sys/resource.h>

#include <csignal>
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
