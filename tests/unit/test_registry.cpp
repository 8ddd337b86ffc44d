// Registry tests against misbehaving fixture plugins (tests/fixtures/bad_plugins):
// each is refused with the exact reason framework/host/registry.cpp gives, or
// (throws_*) loads and then fails at the boundary with a status, never a crash.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "console_notes.h"
#include "plugin_cli.h"
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
    CHECK(refusal(reg, fixture("wrong_abi")) == "wrong ABI version: got 2.0, supported 1.4");
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
    reg.set_probe_helper(MSMEMSCOPE_PROBE_HELPER);
    reg.discover({MSMEMSCOPE_FIXTURE_PLUGIN_DIR, std::string(MSMEMSCOPE_FIXTURE_PLUGIN_DIR) + "/no_such_folder"});
    std::vector<std::string> loaded;
    for (auto& p : reg.plugins()) loaded.push_back(p.info.name);
    // duplicate_csv loads here: no built-in csv in this registry.
    CHECK(loaded == std::vector<std::string>{"bad_alloc_in_event", "c_function_entry", "chatty", "csv", "error_in_event", "hang_in_event",
                                             "hang_in_finish", "hang_in_sink_event", "hog_in_event", "kill_in_event",
                                             "old_minor", "segv_in_create", "segv_in_event", "segv_in_finish",
                                             "segv_in_sink_event", "throws_in_create",
                                             "throws_in_event", "throws_in_finish"});
    std::vector<std::string> refused;
    for (auto& r : reg.refused()) refused.push_back(std::filesystem::path(r.path).filename().string());
    std::vector<std::string> want{"libmsmemscope_plugin_abort_in_load.so", "libmsmemscope_plugin_bad_name.so",
                                  "libmsmemscope_plugin_bad_schema.so", "libmsmemscope_plugin_c_descriptor_variable.so",
                                  "libmsmemscope_plugin_missing_dep.so", "libmsmemscope_plugin_no_entry.so",
                                  "libmsmemscope_plugin_null_descriptor.so", "libmsmemscope_plugin_wrong_abi.so"};
    if (std::filesystem::exists(fixture("asan_built"))) want.insert(want.begin() + 1, "libmsmemscope_plugin_asan_built.so");
    CHECK(refused == want);
    const RefusedPlugin* aborted = reg.refusal_of("abort_in_load");  // by file name: no descriptor was read
    REQUIRE(aborted != nullptr);
    CHECK(aborted->reason ==
          "crashed (SIGABRT) while being loaded: abort_in_load: giving up in a static constructor");
}

TEST_CASE("a plain-C plugin exporting the entry as a function loads and works") {
    Registry reg;
    REQUIRE(reg.load(fixture("c_function_entry")));
    CHECK(reg.plugins().back().info.name == "c_function_entry");
    CHECK(reg.plugins().back().kind_name() == "analyzer");
}

TEST_CASE("the descriptor exported as the entry variable is refused with what to export, never called") {
    Registry reg;
    CHECK(refusal(reg, fixture("c_descriptor_variable")) ==
          "entry symbol 'msmemscope_plugin' is a variable of " + std::to_string(sizeof(msms_plugin_descriptor)) +
              " bytes, not a pointer to the entry function; export a function `const msms_plugin_descriptor* "
              "msmemscope_plugin(void)` (C) or use MSMEMSCOPE_PLUGIN(Class) (C++)");
}

TEST_CASE("an option schema with min > max is refused at load") {
    Registry reg;
    CHECK(refusal(reg, fixture("bad_schema")) == "plugin 'bad_schema': INT option 'depth' has min > max (10 > 1)");
    CHECK(reg.refusal_of("bad_schema") != nullptr);
}

TEST_CASE("a library whose dependency is missing is refused with the loader's message") {
    Registry reg;
    CHECK(refusal(reg, fixture("missing_dep")) ==
          "cannot load: libmsms_fixture_gone.so: cannot open shared object file: No such file or directory");
}

TEST_CASE("an ABI 1.0 plugin loads; its failures carry no message (no last_error)") {
    Registry reg;
    REQUIRE(reg.load(fixture("old_minor")));
    const msms_plugin_descriptor* d = reg.plugins().back().descriptor;
    CHECK(d->abi_minor == 0);
    CHECK(d->struct_size == 136);
    void* obj = nullptr;
    msms_error err{};
    msms_host_api api{};
    api.struct_size = sizeof(api);
    REQUIRE(d->create(&api, nullptr, 0, &obj, &err) == MSMS_OK);
    msms_event ev{};
    ev.struct_size = sizeof(ev);
    CHECK(d->on_event(obj, &ev) == MSMS_ERR_EXCEPTION);
    CHECK(plugin_last_error(d, obj) == "");
    d->destroy(obj);
}

TEST_CASE("an ABI 1.1+ plugin's on_event failure carries its message") {
    Registry reg;
    REQUIRE(reg.load(fixture("throws_in_event")));
    const msms_plugin_descriptor* d = reg.plugins().back().descriptor;
    CHECK(d->abi_minor == MSMS_ABI_MINOR);
    void* obj = nullptr;
    msms_error err{};
    msms_host_api api{};
    api.struct_size = sizeof(api);
    REQUIRE(d->create(&api, nullptr, 0, &obj, &err) == MSMS_OK);
    msms_event ev{};
    ev.struct_size = sizeof(ev);
    CHECK(d->on_event(obj, &ev) == MSMS_ERR_EXCEPTION);
    CHECK(plugin_last_error(d, obj) == "throws_in_event: on purpose");
    d->destroy(obj);
}

TEST_CASE("check_descriptor: sizes, names, events and defaults") {
    msms_plugin_descriptor d{};
    d.abi_major = MSMS_ABI_MAJOR;
    d.abi_minor = 1;
    d.struct_size = 136;  // a 1.0 size claiming 1.1
    d.kind = MSMS_KIND_SINK;
    CHECK(check_descriptor(&d) == "descriptor too small for ABI 1.1: 136 bytes (at least 144)");
    d.struct_size = sizeof(d);
    d.type_name = "x";
    CHECK(check_descriptor(&d) == "plugin 'x': its version is missing");
    d.version = "1";
    d.description = "a sink";
    d.events = "alloc,frees";
    CHECK(check_descriptor(&d) ==
          "plugin 'x': unknown event class 'frees' in events (allowed: alloc, free, launch, access, traceback)");
    d.events = "alloc";
    d.agent_library = "libx.so";
    CHECK(check_descriptor(&d) == "plugin 'x': only collectors may name an agent library");
    d.agent_library = nullptr;
    d.create = [](const msms_host_api*, const msms_kv*, uint32_t, void**, msms_error*) { return 0; };
    d.destroy = [](void*) {};
    d.on_event = [](void*, const msms_event*) { return 0; };
    CHECK(check_descriptor(&d) == "");
    msms_option_spec opts[2] = {{"mode", MSMS_OPT_ENUM, "c", "a|b", 0, 0, "pick one"},
                                {"mode", MSMS_OPT_BOOL, "true", nullptr, 0, 0, "again"}};
    d.options = opts;
    d.option_count = 1;
    CHECK(check_descriptor(&d) == "plugin 'x': bad default: x.mode: invalid value 'c' (allowed: a, b)");
    opts[0].default_value = "b";
    CHECK(check_descriptor(&d) == "");
    d.option_count = 2;
    CHECK(check_descriptor(&d) == "plugin 'x': option 'mode' is declared twice");
    opts[1].name = "bad name";
    CHECK(check_descriptor(&d) ==
          "plugin 'x': option name 'bad name' is not [A-Za-z][A-Za-z0-9_-]* of at most 64 characters");
    d.option_count = 1000;
    CHECK(check_descriptor(&d) == "plugin 'x' declares 1000 options (at most 256)");
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

TEST_CASE("std::bad_alloc at the boundary is MSMS_ERR_OUT_OF_MEMORY, not a generic exception") {
    Registry reg;
    REQUIRE(reg.load(fixture("bad_alloc_in_event")));
    const msms_plugin_descriptor* d = reg.plugins().back().descriptor;
    NullHost host;
    void* obj = nullptr;
    msms_error err{};
    REQUIRE(d->create(&host.api, nullptr, 0, &obj, &err) == MSMS_OK);
    msms_event ev{};
    ev.struct_size = sizeof(ev);
    ev.kind = MSMS_EV_MALLOC;
    ev.type = MSMS_T_HOST;
    for (int i = 1; i < 100; ++i) REQUIRE(d->on_event(obj, &ev) == MSMS_OK);
    CHECK(d->on_event(obj, &ev) == MSMS_ERR_OUT_OF_MEMORY);
    CHECK(std::string(d->last_error(obj)) == "std::bad_alloc");
    CHECK(d->finish(obj, &err) == MSMS_OK);
    d->destroy(obj);
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

namespace {

// What drop_unloadable_selections says of a refused plugin that `raw`
// selects (one error), and the selection it leaves in `raw`.
std::pair<std::string, std::string> dropped(RawConfig& raw, const std::string& key) {
    Registry reg;
    reg.load(fixture("no_entry"));
    size_t before = console_notes().size();
    CHECK(drop_unloadable_selections(raw, reg) == 1);
    auto notes = console_notes();
    REQUIRE(notes.size() == before + 1);
    CHECK(notes.back().kind == ConsoleNote::Error);
    return {notes.back().text, raw.values[key].value};
}
std::pair<std::string, std::string> dropped(RawConfig&& raw, const std::string& key) { return dropped(raw, key); }

RawConfig selecting(const std::string& key, const std::string& value, const std::string& origin,
                    const std::string& mode = "") {
    RawConfig raw;
    raw.values[key] = RawValue{value, origin};
    if (!mode.empty()) raw.values[mode] = RawValue{"x", "--" + mode};
    return raw;
}

}  // namespace

// The error that drops a refused plugin names the selection as its user
// made it. A Python API session's program wrote config(analysis=...), not
// --analysis (the session's host is run with it); analyze()'s caller named
// the analyzer by the call, which the package names before the line.
TEST_CASE("a dropped selection is named in the words of the user who made it") {
    const std::string why = fixture("no_entry") + ": no entry symbol 'msmemscope_plugin'";
    CHECK(dropped(selecting("analysis", "leaks,no_entry", "--analysis"), "analysis") ==
          std::make_pair("plugin 'no_entry' (selected by --analysis) cannot be loaded: " + why + "; running without it",
                         std::string("leaks")));
    CHECK(dropped(selecting("analysis", "no_entry,leaks", "--analysis", "serve-session"), "analysis") ==
          std::make_pair("plugin 'no_entry' (selected by 'analysis') cannot be loaded: " + why +
                             "; running without it",
                         std::string("leaks")));
    CHECK(dropped(selecting("sinks", "csv,no_entry", "profile.yaml:3: sinks"), "sinks") ==
          std::make_pair("plugin 'no_entry' (selected by profile.yaml:3: sinks) cannot be loaded: " + why +
                             "; running without it",
                         std::string("csv")));
    CHECK(dropped(selecting("analyze", "leaks,no_entry", "--analyze", "python-api"), "analyze") ==
          std::make_pair("plugin 'no_entry' cannot be loaded: " + why + "; running without it", std::string("leaks")));
}

// --analyze=no_entry alone: said once, with nothing left to run (it went on
// to "--analyze: empty value", a value the user never gave).
TEST_CASE("an offline analysis that loses its only analyzer has nothing left to run") {
    const std::string why = fixture("no_entry") + ": no entry symbol 'msmemscope_plugin'";
    RawConfig raw = selecting("analyze", "no_entry", "--analyze");
    CHECK_FALSE(analyzes_nothing(raw));
    CHECK(dropped(raw, "analyze") ==
          std::make_pair("plugin 'no_entry' (selected by --analyze) cannot be loaded: " + why +
                             "; no analyzer is left to run",
                         std::string("")));
    CHECK(analyzes_nothing(raw));
}
