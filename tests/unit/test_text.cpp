#include <doctest/doctest.h>

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
