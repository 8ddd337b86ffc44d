// The YAML config loader against mutated files (#16): every outcome is a
// result or an error list, never an escaped exception or a crash.
#include <doctest/doctest.h>

#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "config.h"
#include "fuzz_util.h"

using namespace msms;

TEST_CASE("YAML loader: mutated configs never escape as exceptions (fixed seed)") {
    std::vector<std::string> seeds;
    for (const char* name : {"cpu-leaks.yaml", "python-training.yaml", "npu-training.yaml", "compat-defaults.yaml"}) {
        std::ifstream f(std::string(MSMEMSCOPE_SOURCE_DIR) + "/configs/" + name);
        std::stringstream ss;
        ss << f.rdbuf();
        if (!ss.str().empty()) seeds.push_back(ss.str());
    }
    seeds.push_back("device: [cpu, npu:0]\nanalysis: {leaks: {mstx_info: 1}}\nsteps: [1, 2]\n&a x: *a\n");
    REQUIRE_FALSE(seeds.empty());
    fuzz::TempDir dir;
    std::string path = dir.file("c.yaml");
    std::mt19937_64 rng(fuzz::kSeed + 4);
    fuzz::Budget budget(4.0);
    int cases = 0;
    for (; cases < 1500 && budget.left(); ++cases) {
        fuzz::write_file(path, fuzz::mutate(seeds[cases % seeds.size()], rng));
        RawConfig raw;
        std::vector<std::string> errors;
        bool threw = false;
        try {
            load_yaml(path, raw, errors);
        } catch (const std::exception& e) {
            threw = true;
            INFO("case " << cases << ": " << e.what());
            CHECK_FALSE(threw);
        }
    }
    CHECK(cases > 100);
}
