// Registry tests against misbehaving fixture plugins (tests/fixtures/bad_plugins).
#include <doctest/doctest.h>

#include "registry.h"

using namespace msms;

TEST_CASE("check_descriptor refuses a missing descriptor") {
    CHECK(check_descriptor(nullptr) == "the entry returned no descriptor");
}
