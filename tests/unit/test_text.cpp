#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "util/csv.h"
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
