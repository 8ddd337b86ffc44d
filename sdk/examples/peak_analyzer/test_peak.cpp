// Unit test of my_peak with the SDK's test doubles: no msmemscope run, no
// test framework needed. Usage: test_my_peak <path of libmsmemscope_plugin_my_peak.so>
#include <msmemscope/testing.hpp>

#include <cstdio>
#include <string>
#include <vector>

using msmemscope::testing::EventBuilder;
using msmemscope::testing::PluginHarness;

static int failures = 0;
#define EXPECT(cond)                                                          \
    do {                                                                      \
        if (!(cond)) {                                                        \
            std::fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #cond); \
            ++failures;                                                       \
        }                                                                     \
    } while (0)

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: test_my_peak PLUGIN.so\n");
        return 2;
    }
    std::string error;
    const msms_plugin_descriptor* d = msmemscope::testing::load_descriptor(argv[1], &error);
    if (!d) {
        std::fprintf(stderr, "cannot load %s: %s\n", argv[1], error.c_str());
        return 1;
    }
    EXPECT(std::string(d->type_name) == "my_peak");
    EXPECT(d->option_count == 2);

    PluginHarness h(d);
    // The host fills in every option; a test passes them all too.
    EXPECT(h.create({{"top", "2"}, {"unit", "B"}}) == MSMS_OK);
    EXPECT(h.begin() == MSMS_OK);
    // step 1: weights 100 (kept), activations 50 + 30 at once, then freed
    h.feed(EventBuilder::malloc(0x1000, 100, MSMS_T_PTA).allocation_id(1).attr("owner", "w"));
    h.feed(EventBuilder::malloc(0x2000, 50, MSMS_T_PTA).allocation_id(2).attr("owner", "a"));
    h.feed(EventBuilder::malloc(0x3000, 30, MSMS_T_PTA).allocation_id(3).attr("owner", "a"));
    h.feed(EventBuilder::free(0x2000, MSMS_T_PTA).allocation_id(2));
    h.feed(EventBuilder::free(0x3000, MSMS_T_PTA).allocation_id(3));
    h.feed(EventBuilder::malloc(0x4000, 7).allocation_id(4));  // no owner: the pool type
    h.feed(EventBuilder::step(1));
    // step 2: activations 10 only
    h.feed(EventBuilder::malloc(0x2000, 10, MSMS_T_PTA).allocation_id(5).attr("owner", "a"));
    h.feed(EventBuilder::free(0x2000, MSMS_T_PTA).allocation_id(5));
    EXPECT(h.finish() == MSMS_OK);
    EXPECT(h.finish() == MSMS_OK);  // a second finish is a no-op

    std::vector<std::string> want{"my_peak: step 1: w 100 B, a 80 B", "my_peak: step 2: w 100 B, a 10 B"};
    EXPECT(h.reports == want);
    for (auto& r : h.reports) std::printf("%s\n", r.c_str());
    EXPECT(h.findings["my_peak"].size() == 4);
    if (!h.findings["my_peak"].empty()) {
        auto& row = h.findings["my_peak"][0];
        EXPECT(row["step"] == "1" && row["rank"] == "1" && row["owner"] == "w" && row["peak_bytes"] == "100");
    }
    std::printf("%s\n", failures ? "FAILED" : "OK");
    return failures ? 1 : 0;
}
