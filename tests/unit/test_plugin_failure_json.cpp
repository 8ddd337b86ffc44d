#include <doctest/doctest.h>

#include <string>

#include "plugin_failure_json.h"

using namespace msms;

// summary.json and live.json give a failure the same three keys, in this
// order; a reader (or the live page) finds them by these names.
TEST_CASE("a plugin failure is its plugin, kind and what, in that order") {
    Json entry = plugin_failure_json("leaks", "analyzer", "threw std::runtime_error: boom");
    CHECK(entry.dump(2) ==
          "{\n"
          "  \"plugin\": \"leaks\",\n"
          "  \"kind\": \"analyzer\",\n"
          "  \"what\": \"threw std::runtime_error: boom\"\n"
          "}");
}

// What a plugin said is the user's text: quotes and control characters are
// escaped, not copied into the file raw.
TEST_CASE("a failure's words are quoted as JSON strings") {
    Json entry = plugin_failure_json("db", "sink", "said \"no\"\nthen stopped");
    CHECK(entry.dump() == R"({"plugin":"db","kind":"sink","what":"said \"no\"\nthen stopped"})");
}

// live.json adds the banner after the shared keys.
TEST_CASE("a caller adds its own keys after the shared ones") {
    Json entry = plugin_failure_json("html", "sink", "crashed (SIGSEGV)");
    entry.set("text", Json("banner"));
    CHECK(entry.dump() == R"json({"plugin":"html","kind":"sink","what":"crashed (SIGSEGV)","text":"banner"})json");
}
