// Plugin ABI versions (tests/fixtures/abi_versions): a plugin built against
// ABI 1.1 (before msms_host_api.progress) loads and runs unchanged; a 1.2
// plugin reports progress, and on an older host's smaller host API does not
// call it; and each built-in sink's last progress report is its files' size.
#include <doctest/doctest.h>

#include <msmemscope/testing.hpp>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "registry.h"

namespace fs = std::filesystem;
using msmemscope::testing::EventBuilder;
using msmemscope::testing::PluginHarness;
using namespace msms;

namespace {

std::string abi_fixture(const std::string& name) {
    return std::string(MSMEMSCOPE_ABI_FIXTURE_DIR) + "/libmsmemscope_plugin_" + name + ".so";
}

// <build>/lib/msmemscope/plugins (the fixtures are in <build>/tests/lib/abi_plugins).
std::string builtin(const std::string& name) {
    fs::path p = fs::path(MSMEMSCOPE_ABI_FIXTURE_DIR) / ".." / ".." / ".." / "lib" / "msmemscope" / "plugins" /
                 ("libmsmemscope_plugin_" + name + ".so");
    return p.lexically_normal().string();
}

fs::path fresh_dir(const std::string& name) {
    fs::path d = fs::temp_directory_path() / ("msms_abi_versions_" + std::to_string(getpid()) + "_" + name);
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
}

uint64_t bytes_under(const fs::path& dir) {
    uint64_t n = 0;
    for (auto& e : fs::recursive_directory_iterator(dir))
        if (e.is_regular_file()) n += e.file_size();
    return n;
}

}  // namespace

TEST_CASE("a sink built against ABI 1.1 loads and runs on this host") {
    Registry reg;
    REQUIRE(reg.load(abi_fixture("abi11_sink")));
    const msms_plugin_descriptor* d = reg.plugins().back().descriptor;
    CHECK(d->abi_minor == 1);
    CHECK(d->struct_size == offsetof(msms_plugin_descriptor, last_error) + sizeof(void*));
    fs::path dir = fresh_dir("abi11");
    PluginHarness h(d);
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin(dir.string(), "20260101000000") == MSMS_OK);
    for (int i = 0; i < 3; ++i) REQUIRE(h.feed(EventBuilder::malloc(0x1000 + i, 64, MSMS_T_HOST)) == MSMS_OK);
    REQUIRE(h.finish() == MSMS_OK);
    std::ifstream f(dir / "abi11_sink_20260101000000.txt");
    std::stringstream text;
    text << f.rdbuf();
    CHECK(text.str() == "events 3\n");
    CHECK(h.progress.empty());
    fs::remove_all(dir);
}

TEST_CASE("a 1.2 plugin reports progress; on a 1.1 host's API it never calls it") {
    Registry reg;
    REQUIRE(reg.load(abi_fixture("progress_sink")));
    const msms_plugin_descriptor* d = reg.plugins().back().descriptor;
    CHECK(d->abi_minor == MSMS_ABI_MINOR);
    {
        PluginHarness h(d);
        REQUIRE(h.create() == MSMS_OK);
        REQUIRE(h.begin() == MSMS_OK);
        h.feed(EventBuilder::malloc(0x1000, 64, MSMS_T_HOST));
        h.feed(EventBuilder::free(0x1000, MSMS_T_HOST));
        REQUIRE(h.finish() == MSMS_OK);
        REQUIRE(h.progress.size() == 3);
        CHECK(h.progress[0].what == "counting");
        CHECK(h.progress[0].done == 1);
        CHECK(h.progress[0].total == 0);
        CHECK(h.progress[0].unit == MSMS_PROGRESS_ITEMS);
        CHECK(h.progress[2].done == 2);
        CHECK(h.progress[2].total == 2);
        CHECK(h.reports == std::vector<std::string>{"progress_sink: 2 events, host took progress: yes"});
    }
    {
        PluginHarness old(d);
        old.set_host_api_size(offsetof(msms_host_api, progress));  // what a 1.1 host gives
        REQUIRE(old.create() == MSMS_OK);
        REQUIRE(old.begin() == MSMS_OK);
        old.feed(EventBuilder::malloc(0x1000, 64, MSMS_T_HOST));
        REQUIRE(old.finish() == MSMS_OK);
        CHECK(old.progress.empty());
        CHECK(old.reports == std::vector<std::string>{"progress_sink: 1 events, host took progress: no"});
    }
}

TEST_CASE("each built-in sink ends its progress at its files' size") {
    for (const char* name : {"csv", "db", "html", "trace", "memory_viz"}) {
        CAPTURE(name);
        Registry reg;
        REQUIRE(reg.load(builtin(name)));
        fs::path dir = fresh_dir(name);
        PluginHarness h(reg.plugins().back().descriptor);
        REQUIRE(h.create() == MSMS_OK);
        REQUIRE(h.begin(dir.string()) == MSMS_OK);
        for (uint64_t i = 0; i < 2000; ++i) {
            h.feed(EventBuilder::malloc(0x10000 + i * 64, 64, MSMS_T_HOST).allocation_id(i + 1));
            if (i % 2) h.feed(EventBuilder::free(0x10000 + i * 64, MSMS_T_HOST).allocation_id(i + 1));
        }
        REQUIRE(h.finish() == MSMS_OK);
        REQUIRE(!h.progress.empty());
        const auto& last = h.progress.back();
        CHECK(last.what == "");  // "writing <name>" on the line
        CHECK(last.unit == MSMS_PROGRESS_BYTES);
        CHECK(last.done == last.total);
        CHECK(last.done == bytes_under(dir));
        CHECK(last.flags == 0u);
        // Never more done than the end.
        for (auto& p : h.progress) CHECK(p.done <= last.done);
        fs::remove_all(dir);
    }
}
