#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include "util/csv.h"
#include "util/json.h"
#include "util/text.h"

using namespace msms;

TEST_CASE("split_list accepts half- and full-width commas") {
    auto v = split_list("alloc\xEF\xBC\x8C" "free, launch");
    REQUIRE(v.size() == 3);
    CHECK(v[0] == "alloc");
    CHECK(v[1] == "free");
    CHECK(v[2] == "launch");
    CHECK(split_list("").empty());
    CHECK(split_list(" , ,").empty());
}

TEST_CASE("did_you_mean picks a close candidate only") {
    CHECK(did_you_mean("devce", {"device", "events", "level"}) == "device");
    CHECK(did_you_mean("zzzzzz", {"device", "events"}).empty());
}

TEST_CASE("parse_attr_list keeps commas inside brackets") {
    auto a = parse_attr_list("{dtype:float,shape:[2, 3],size:24}");
    REQUIRE(a.size() == 3);
    CHECK(a[1].first == "shape");
    CHECK(a[1].second == "[2, 3]");
}

TEST_CASE("append_uint and append_int write every digit count like printf") {
    std::vector<uint64_t> values = {0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, 65535, 1000000007ull,
                                    1764480000123456789ull, UINT64_MAX};
    for (uint64_t p = 1; p && p <= UINT64_MAX / 10; p *= 10) {
        values.push_back(p - 1);
        values.push_back(p);
        values.push_back(p + 1);
    }
    for (uint64_t v : values) {
        std::string out = "x";
        append_uint(out, v);
        CHECK(out == "x" + std::to_string(v));
        // format_uint writes its digits and not a byte after them
        char buf[32];
        std::memset(buf, '#', sizeof(buf));
        char* end = format_uint(buf + 1, v);
        CHECK(std::string(buf + 1, end) == std::to_string(v));
        CHECK(buf[0] == '#');
        for (char* q = end; q < buf + sizeof(buf); ++q) CHECK(*q == '#');
    }
    std::string s;
    append_int(s, -1234567);
    s += ',';
    append_int(s, INT64_MIN);
    CHECK(s == "-1234567,-9223372036854775808");
}

TEST_CASE("csv_field quotes exactly the fields with a comma, quote or line break") {
    auto field = [](std::string_view v) {
        std::string out;
        csv_field(out, v);
        return out;
    };
    CHECK(field("bench.py(26): fib") == "bench.py(26): fib");
    CHECK(field("a,b") == "\"a,b\"");
    CHECK(field("say \"hi\"") == "\"say \"\"hi\"\"\"");
    CHECK(field("two\nlines") == "\"two\nlines\"");
    CHECK(field("cr\r") == "\"cr\r\"");
    CHECK(field("") == "");
    CHECK(field(std::string_view("nul\0byte", 8)) == std::string("nul\0byte", 8));
}

TEST_CASE("csv_field finds a special byte at any position of a long name") {
    for (size_t len = 1; len <= 40; ++len) {
        std::string plain(len, 'a');
        std::string out;
        csv_field(out, plain);
        CHECK(out == plain);
        for (size_t pos = 0; pos < len; ++pos)
            for (char c : {',', '"', '\n', '\r'}) {
                std::string v = plain;
                v[pos] = c;
                out.clear();
                csv_field(out, v);
                INFO("len " << len << " pos " << pos << " char " << int(c));
                CHECK(out.front() == '"');
                CHECK(out.back() == '"');
            }
    }
    // Bytes near the specials (0x2B, 0x21, 0x0B, 0x8C...) are not specials.
    std::string near = "+!\x0b\x0c\x8c\xa2\xac-.";
    near += near;
    std::string out;
    csv_field(out, near);
    CHECK(out == near);
}

TEST_CASE("escape_controls: control characters and bytes that are not UTF-8 are shown escaped") {
    CHECK(escape_controls("plain text / é 中") == "plain text / é 中");
    CHECK(escape_controls("a\x1b[31mb\x07\n\r\t\x7f") == "a\\x1b[31mb\\x07\\n\\r\\t\\x7f");
    CHECK(escape_controls("csi\xC2\x9B" "2J") == "csi\\u009b2J");  // C1 control U+009B
    CHECK(escape_controls("bad\xff\xC3") == "bad\\xff\\xc3");
    CHECK(escape_controls(std::string("nul\0x", 5)) == "nul\\x00x");
}

TEST_CASE("json_quote: output is valid UTF-8 whatever the input bytes") {
    std::string out;
    json_quote(out, "tr\xffue \xC3\xA9 \xE2\x80\xA6 \xED\xA0\x80 \xF0\x9F\x98\x80 \xC3");
    CHECK(out == "\"tr\\u00ffue \xC3\xA9 \xE2\x80\xA6 \\u00ed\\u00a0\\u0080 \xF0\x9F\x98\x80 \\u00c3\"");
    out.clear();
    json_quote(out, "q\"\\\n\x01");
    CHECK(out == "\"q\\\"\\\\\\n\\u0001\"");
}

TEST_CASE("open_regular_file refuses a FIFO without blocking; read_at_most counts bytes read") {
    char dir[] = "/tmp/msms_text_XXXXXX";
    REQUIRE(mkdtemp(dir));
    std::string fifo = std::string(dir) + "/f", file = std::string(dir) + "/r";
    REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
    std::string why;
    CHECK(open_regular_file(fifo, why) == -1);
    CHECK(why == "'" + fifo + "' is not a regular file (a FIFO); give a file");
    CHECK(open_regular_file("/dev/null", why) == -1);
    CHECK(why == "'/dev/null' is not a regular file (a character device); give a file");
    CHECK(open_regular_file(dir, why) == -1);
    CHECK(why == "'" + std::string(dir) + "' is not a regular file (a folder); give a file");
    std::FILE* f = std::fopen(file.c_str(), "w");
    REQUIRE(f);
    std::fputs("0123456789", f);
    std::fclose(f);
    int fd = open_regular_file(file, why);
    REQUIRE(fd >= 0);
    std::string got;
    CHECK(read_at_most(fd, 9, got) == 0);
    CHECK(lseek(fd, 0, SEEK_SET) == 0);
    CHECK(read_at_most(fd, 10, got) == 1);
    CHECK(got == "0123456789");
    close(fd);
    unlink(fifo.c_str());
    unlink(file.c_str());
    rmdir(dir);
}

TEST_CASE("rename_mentions: whole mentions of a folder name only") {
    const std::string from = "msmemscope_12_20260101000000_cpu", to = from + "_rank1";
    CHECK(msms::rename_mentions("... 3 more in out/" + from + "/leaks_1.txt", from, to) ==
          "... 3 more in out/" + to + "/leaks_1.txt");
    CHECK(msms::rename_mentions(from + ": cannot write; out/" + from + ".", from, to) == to + ": cannot write; out/" + to + ".");
    // another folder whose name begins with it, or a longer name ending with it: not this one
    CHECK(msms::rename_mentions("out/" + from + "_2/x and out/" + from + "-old and x" + from, from, to) ==
          "out/" + from + "_2/x and out/" + from + "-old and x" + from);
    CHECK(msms::rename_mentions("nothing", from, to) == "nothing");
    CHECK(msms::rename_mentions("", from, to) == "");
}
