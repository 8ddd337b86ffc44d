// Registry tests against misbehaving fixture plugins (tests/fixtures/bad_plugins):
// each is refused with the exact reason framework/host/registry.cpp gives, or
// (throws_*) loads and then fails at the boundary with a status, never a crash.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "registry.h"

using namespace msms;

namespace {

std::string fixture(const std::string& name) {
    return std::string(MSMEMSCOPE_FIXTURE_PLUGIN_DIR) + "/libmsmemscope_plugin_" + name + ".so";
}

// The build tree's built-in plugin folder: <build>/lib/msmemscope/plugins
// (the fixtures are in <build>/tests/lib/bad_plugins).
std::string builtin(const std::string& name) {
    std::filesystem::path p = std::filesystem::path(MSMEMSCOPE_FIXTURE_PLUGIN_DIR) / ".." / ".." / ".." / "lib" /
                              "msmemscope" / "plugins" / ("libmsmemscope_plugin_" + name + ".so");
    return p.lexically_normal().string();
}

// Loads one file into a fresh registry; returns the refusal reason ("" if loaded).
std::string refusal(Registry& reg, const std::string& path) {
    if (reg.load(path)) return "";
    REQUIRE(!reg.refused().empty());
    CHECK(reg.refused().back().path == path);
    return reg.refused().back().reason;
}

}  // namespace

TEST_CASE("check_descriptor refuses a missing descriptor") {
    CHECK(check_descriptor(nullptr) == "the entry returned no descriptor");
}

TEST_CASE("a plugin declaring ABI major 2 is refused") {
    Registry reg;
    CHECK(refusal(reg, fixture("wrong_abi")) == "wrong ABI version: got 2.0, supported 1.0");
    CHECK(reg.plugins().empty());
}

TEST_CASE("a library without the entry symbol is refused") {
    Registry reg;
    CHECK(refusal(reg, fixture("no_entry")) == "no entry symbol 'msmemscope_plugin'");
}

TEST_CASE("an entry returning NULL is refused") {
    Registry reg;
    CHECK(refusal(reg, fixture("null_descriptor")) == "the entry returned no descriptor");
}

TEST_CASE("an invalid type name is refused") {
    Registry reg;
    CHECK(refusal(reg, fixture("bad_name")) ==
          "invalid type name 'Bad-Name' (allowed: [a-z][a-z0-9_]*, at most 64 characters)");
}

TEST_CASE("a second plugin with the type name 'csv' is refused, the first is kept") {
    Registry reg;
    std::string first = builtin("csv");
    if (!std::filesystem::exists(first)) first = fixture("duplicate_csv");  // csv sink not built: duplicate itself
    REQUIRE(reg.load(first));
    CHECK(refusal(reg, fixture("duplicate_csv")) ==
          "duplicate type name 'csv' (already provided by " + first + ")");
    REQUIRE(reg.plugins().size() == 1);
    CHECK(reg.plugins()[0].path == first);
    CHECK(reg.find("csv", MSMS_KIND_SINK) == &reg.plugins()[0]);
}

TEST_CASE("a missing file is refused as not loadable") {
    Registry reg;
    std::string reason = refusal(reg, fixture("does_not_exist"));
    CHECK(reason.rfind("cannot load: ", 0) == 0);
}

TEST_CASE("discover refuses every bad fixture and loads the others, in file name order") {
    Registry reg;
    reg.discover({MSMEMSCOPE_FIXTURE_PLUGIN_DIR, std::string(MSMEMSCOPE_FIXTURE_PLUGIN_DIR) + "/no_such_folder"});
    std::vector<std::string> loaded;
    for (auto& p : reg.plugins()) loaded.push_back(p.info.name);
    // duplicate_csv loads here: no built-in csv in this registry.
    CHECK(loaded == std::vector<std::string>{"csv", "throws_in_create", "throws_in_event"});
    std::vector<std::string> refused;
    for (auto& r : reg.refused()) refused.push_back(std::filesystem::path(r.path).filename().string());
    CHECK(refused == std::vector<std::string>{"libmsmemscope_plugin_bad_name.so", "libmsmemscope_plugin_no_entry.so",
                                              "libmsmemscope_plugin_null_descriptor.so",
                                              "libmsmemscope_plugin_wrong_abi.so"});
}

namespace {
struct NullHost {
    msms_host_api api{};
    NullHost() {
        api.struct_size = sizeof(api);
        api.host = this;
    }
};
}  // namespace

TEST_CASE("a plugin whose constructor throws loads, and create() reports the exception as a status") {
    Registry reg;
    REQUIRE(reg.load(fixture("throws_in_create")));
    const msms_plugin_descriptor* d = reg.plugins().back().descriptor;
    CHECK(d->kind == MSMS_KIND_ANALYZER);
    NullHost host;
    void* obj = reinterpret_cast<void*>(0x1);
    msms_error err{};
    CHECK(d->create(&host.api, nullptr, 0, &obj, &err) == MSMS_ERR_EXCEPTION);
    CHECK(std::string(err.message) == "throws_in_create: constructor failed on purpose");
}

TEST_CASE("a plugin that throws in on_event returns MSMS_ERR_EXCEPTION instead") {
    Registry reg;
    REQUIRE(reg.load(fixture("throws_in_event")));
    const msms_plugin_descriptor* d = reg.plugins().back().descriptor;
    NullHost host;
    void* obj = nullptr;
    msms_error err{};
    REQUIRE(d->create(&host.api, nullptr, 0, &obj, &err) == MSMS_OK);
    msms_event ev{};
    ev.struct_size = sizeof(ev);
    ev.kind = MSMS_EV_MALLOC;
    ev.type = MSMS_T_HOST;
    CHECK(d->on_event(obj, &ev) == MSMS_ERR_EXCEPTION);
    CHECK(d->finish(obj, &err) == MSMS_OK);
    d->destroy(obj);
}
