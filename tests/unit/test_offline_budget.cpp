// What an offline analysis over its memory budget tells its user about the
// budget (framework/host/offline/memory_budget.h, offline.h): the command
// line's option on the command line; to the Python API's analyze() and
// check_inefficient(), which have no keyword for it, the command line that
// runs the analysis with one.
#include <doctest/doctest.h>

#include <string>

#include "config.h"
#include "offline/memory_budget.h"
#include "offline/offline.h"

using namespace msms;

namespace {

// The guard's error once it looks (every 4096 rows) and finds more in use
// than a budget of 0 bytes.
std::string over_budget(const std::string& setter) {
    MemoryGuard guard(0, setter);
    std::string error;
    for (size_t rows = 1; rows <= 4096; ++rows)
        if (!guard.check(rows, error)) break;
    return error;
}

}  // namespace

TEST_CASE("the command line is told its option that sets the budget") {
    Config cfg;
    CHECK(budget_setter(cfg, "d.csv") == "--offline-memory");
    std::string error = over_budget(budget_setter(cfg, "d.csv"));
    CHECK(error.find("over the memory budget of 0 MiB (--offline-memory; what the input keeps live: blocks, "
                     "operators, per-step figures)") != std::string::npos);
}

TEST_CASE("the Python API is told the command line that runs the analysis with a budget") {
    Config cfg;
    cfg.offline_api = true;
    cfg.analyzers = {"leaks"};
    CHECK(budget_setter(cfg, "d.csv") ==
          "the Python API has no keyword for the memory budget; msmemscope --analyze=leaks --input=d.csv "
          "--offline-memory=<MiB> runs the analysis with one");
    std::string error = over_budget(budget_setter(cfg, "d.csv"));
    CHECK(error.find("over the memory budget of 0 MiB (the Python API has no keyword for the memory budget; "
                     "msmemscope --analyze=leaks --input=d.csv --offline-memory=<MiB> runs the analysis with one; "
                     "what the input keeps live: blocks, operators, per-step figures)") != std::string::npos);
}

TEST_CASE("the command line given to the Python API names its plugin folders, quoted for a shell") {
    Config cfg;
    cfg.offline_api = true;
    cfg.analyzers = {"mine"};
    cfg.plugin_search_paths = {"/opt/my plugins"};
    CHECK(budget_setter(cfg, "it's.csv") ==
          "the Python API has no keyword for the memory budget; msmemscope --analyze=mine '--input=it'\\''s.csv' "
          "'--plugin-path=/opt/my plugins' --offline-memory=<MiB> runs the analysis with one");
}
