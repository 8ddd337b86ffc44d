// Unit tests of watch: the CRC-64 and the host part on synthetic checkpoint events.
#include <doctest/doctest.h>

#include <msmemscope/testing.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "crc64.h"

using namespace msmemscope::testing;
namespace fs = std::filesystem;

namespace {
const msms_plugin_descriptor* plugin() { return require_descriptor(PLUGIN_PATH); }
EventBuilder checkpoint(const std::string& op, int count, const std::string& when, const std::string& crc) {
    return EventBuilder::mark("msmemscope.watch")
        .device(MSMS_DEV_CPU, -1)
        .thread(77)
        .attr("op", op)
        .attr("count", std::to_string(count))
        .attr("watched", "aten::mul")
        .attr("idx", "0")
        .attr("when", when)
        .attr("crc64", crc);
}
std::string slurp(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}
fs::path temp_dir(const char* name) {
    fs::path d = fs::temp_directory_path() / (std::string(name) + "_" + std::to_string(getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
}
}  // namespace

TEST_CASE("CRC-64 as upstream: reflected 0x42F0E1EBA9EA3693, all-ones init and xor") {
    // upstream's variant (not CRC-64/XZ: the polynomial is not bit-reversed); value computed independently
    CHECK(msms_crc64("123456789", 9) == 0xb86883e6fa710a9fULL);
    CHECK(msms_crc64("", 0) == 0);
    uint64_t part = msms_crc64_update(0, "1234", 4);
    CHECK(msms_crc64_update(part, "56789", 5) == 0xb86883e6fa710a9fULL);
}

TEST_CASE("hash mode writes the check-sum CSV and finds the op that changed the tensor") {
    fs::path dir = temp_dir("msms_watch_hash");
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin(dir.string(), "20260102030405") == MSMS_OK);
    h.feed(checkpoint("aten::mul", 0, "after", "00000000000000aa"));
    h.feed(checkpoint("aten::add", 1, "before", "00000000000000aa"));
    h.feed(checkpoint("aten::add", 1, "after", "00000000000000aa"));
    h.feed(checkpoint("aten::fill_", 1, "before", "00000000000000aa"));
    h.feed(checkpoint("aten::fill_", 1, "after", "00000000000000bb"));
    h.feed(EventBuilder::mark("unrelated"));
    REQUIRE(h.finish() == MSMS_OK);
    fs::path csv = dir / "device_cpu" / "watch_dump" / "watch_dump_data_check_sum_20260102030405.csv";
    REQUIRE(fs::exists(csv));
    CHECK(slurp(csv) ==
          "Tensor info,Check data sum\n"
          "cpu_77.aten.mul_0-aten.mul_0_after.bin,00000000000000aa\n"
          "cpu_77.aten.add_1-aten.mul_0_before.bin,00000000000000aa\n"
          "cpu_77.aten.add_1-aten.mul_0_after.bin,00000000000000aa\n"
          "cpu_77.aten.fill__1-aten.mul_0_before.bin,00000000000000aa\n"
          "cpu_77.aten.fill__1-aten.mul_0_after.bin,00000000000000bb\n");
    CHECK(h.reports == std::vector<std::string>{"watch: 5 checkpoint(s) written under device_*/watch_dump",
                                                "watch: tensor aten::mul_0 (made by aten::mul_0) was changed by "
                                                "aten::fill__1"});
    fs::remove_all(dir);
}

TEST_CASE("every op that changed a tensor is named, and a change between two operators") {
    fs::path dir = temp_dir("msms_watch_every");
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin(dir.string(), "20260102030405") == MSMS_OK);
    h.feed(checkpoint("aten::mul", 1, "after", "00000000000000aa"));  // the start op: a new tensor
    h.feed(checkpoint("aten::add_", 1, "before", "00000000000000aa"));
    h.feed(checkpoint("aten::add_", 1, "after", "00000000000000bb"));
    h.feed(checkpoint("aten::mul_", 1, "before", "00000000000000bb"));
    h.feed(checkpoint("aten::mul_", 1, "after", "00000000000000cc"));
    // changed between two operators (numpy() writes, a C extension): its next before differs
    h.feed(checkpoint("aten::sum", 1, "before", "00000000000000dd"));
    h.feed(checkpoint("aten::sum", 1, "after", "00000000000000dd"));
    // the next window's start op: a new tensor, not a change
    h.feed(checkpoint("aten::mul", 2, "after", "00000000000000ee"));
    h.feed(checkpoint("aten::add_", 2, "before", "00000000000000ee"));
    h.feed(checkpoint("aten::add_", 2, "after", "00000000000000ff"));
    REQUIRE(h.finish() == MSMS_OK);
    CHECK(h.reports ==
          std::vector<std::string>{
              "watch: 10 checkpoint(s) written under device_*/watch_dump",
              // each window's tensor is another one: never one list of both windows' changes
              "watch: tensor aten::mul_0 (made by aten::mul_1) was changed by aten::add__1 and aten::mul__1",
              "watch: tensor aten::mul_0 (made by aten::mul_1) was changed outside the watched operators between "
              "aten::mul__1 (after) and aten::sum_1 (before)",
              "watch: tensor aten::mul_0 (made by aten::mul_2) was changed by aten::add__2"});
    fs::remove_all(dir);
}

TEST_CASE("a window a step: ten tensors are named, then how many more were changed") {
    fs::path dir = temp_dir("msms_watch_windows");
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin(dir.string(), "20260102030405") == MSMS_OK);
    for (int w = 1; w <= 12; ++w) {
        char made[17], changed[17];
        std::snprintf(made, sizeof made, "%016x", 2 * w);
        std::snprintf(changed, sizeof changed, "%016x", 2 * w + 1);
        h.feed(checkpoint("aten::mul", w, "after", made));
        h.feed(checkpoint("aten::add_", w, "before", made));
        h.feed(checkpoint("aten::add_", w, "after", w == 5 ? made : changed));  // window 5: left as it was
    }
    REQUIRE(h.finish() == MSMS_OK);
    REQUIRE(h.reports.size() == 12);
    CHECK(h.reports[0] == "watch: 36 checkpoint(s) written under device_*/watch_dump");
    CHECK(h.reports[1] == "watch: tensor aten::mul_0 (made by aten::mul_1) was changed by aten::add__1");
    CHECK(h.reports[5] == "watch: tensor aten::mul_0 (made by aten::mul_6) was changed by aten::add__6");
    CHECK(h.reports[10] == "watch: tensor aten::mul_0 (made by aten::mul_11) was changed by aten::add__11");
    CHECK(h.reports[11] == "watch: and 1 more watched tensor(s) were changed (every hash is in device_*/watch_dump)");
    fs::remove_all(dir);
}

TEST_CASE("a budget that ran out: its line, ten tensors named, then how many more; all in the budget file") {
    fs::path dir = temp_dir("msms_watch_budget");
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin(dir.string(), "20260102030405") == MSMS_OK);
    for (int w = 0; w < 12; ++w) {
        std::string name = "w" + std::to_string(w);
        auto mark = [&](const char* when) {
            return EventBuilder::mark("msmemscope.watch")
                .device(MSMS_DEV_CPU, -1)
                .thread(77)
                .attr("op", "aten::add_")
                .attr("count", std::to_string(w + 1))
                .attr("watched", name)
                .attr("idx", "0")
                .attr("when", when);
        };
        h.feed(mark("before").attr("size", "64").attr("crc64", "00000000000000aa"));
        // dump_nums=1: the after of the same call is the first checkpoint not taken
        h.feed(mark("after").attr("unchecked", "budget").attr("dump_nums", "1"));
    }
    REQUIRE(h.finish() == MSMS_OK);
    auto line = [](int w) {
        return "tensor w" + std::to_string(w) + "_0: its checkpoint budget ran out (dump_nums=1): 1 checkpoint(s), " +
               "the last at aten::add__" + std::to_string(w + 1) + " (before); not checked from aten::add__" +
               std::to_string(w + 1) + " (after) on, so later changes are not reported";
    };
    REQUIRE(h.reports.size() == 12);
    CHECK(h.reports[0] == "watch: 12 checkpoint(s) written under device_*/watch_dump");
    for (int w = 0; w < 10; ++w) CHECK(h.reports[1 + w] == "watch: " + line(w));
    CHECK(h.reports[11] == "watch: and 2 more watched tensor(s) ran out of their checkpoint budget (dump_nums): each "
                           "is in device_*/watch_dump/watch_dump_budget_used_up_*.txt");
    std::string all;
    for (int w = 0; w < 12; ++w) all += line(w) + "\n";
    CHECK(slurp(dir / "device_cpu" / "watch_dump" / "watch_dump_budget_used_up_20260102030405.txt") == all);
    // the check-sum file has the checkpoints only, as upstream's
    std::string csv = slurp(dir / "device_cpu" / "watch_dump" / "watch_dump_data_check_sum_20260102030405.csv");
    CHECK(std::count(csv.begin(), csv.end(), '\n') == 13);
    fs::remove_all(dir);
}

namespace {
const char* kToken = "0123456789abcdef0123456789abcdef";

// A live run's session folder (0700) the host names to the plugin.
struct Staging {
    fs::path dir;
    explicit Staging(const char* name) {
        dir = temp_dir(name) / ".msmemscope_session_test";
        fs::create_directories(dir);
        fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace);
        setenv("MSMEMSCOPE_HOST_WATCH_STAGING", dir.c_str(), 1);
        setenv("MSMEMSCOPE_HOST_WATCH_TOKEN", kToken, 1);
    }
    ~Staging() {
        unsetenv("MSMEMSCOPE_HOST_WATCH_STAGING");
        unsetenv("MSMEMSCOPE_HOST_WATCH_TOKEN");
    }
    // pid 1: the harness's RunInfo.pid
    static std::string name(int n, int pid = 1) {
        return std::string("watch_") + kToken + "_" + std::to_string(pid) + "_" + std::to_string(n) + ".bin";
    }
};

EventBuilder full_checkpoint(const std::string& file) {
    return EventBuilder::mark("msmemscope.watch")
        .device(MSMS_DEV_NPU, 2)
        .thread(5)
        .attr("op", "Foo/aten::add")
        .attr("count", "3")
        .attr("watched", "aten::mul")
        .attr("idx", "1")
        .attr("when", "before")
        .attr("file", file);
}

struct Node {
    ino_t ino;
    std::string content;
};
Node node(const fs::path& p) {
    struct stat st{};
    REQUIRE(lstat(p.c_str(), &st) == 0);
    return {st.st_ino, S_ISREG(st.st_mode) ? slurp(p) : std::string()};
}

// One checkpoint naming `file`: nothing is moved, the original stays (same
// inode, content, place), no watch_dump file, one warning naming it.
void check_ignored(const fs::path& out, const std::string& file, const fs::path& original, const char* why) {
    Node before = node(original);
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin(out.string(), "20260102030405") == MSMS_OK);
    h.feed(full_checkpoint(file));
    h.feed(full_checkpoint(file));
    REQUIRE(h.finish() == MSMS_OK);
    Node after = node(original);
    CHECK(after.ino == before.ino);
    CHECK(after.content == before.content);
    CHECK(!fs::exists(out / "device_2" / "watch_dump" / "2_5.Foo.aten.add_3-aten.mul_1_before.bin"));
    REQUIRE(h.logs.size() == 1);
    CHECK(h.logs[0].first == 1);
    CHECK(h.logs[0].second == "watch: 2 checkpoint file(s) named by the events were ignored, first '" + file + "' (" +
                                  why +
                                  "); only the profiled program's own staging files of this live run are moved "
                                  "(never a path read from a capture or dump)");
    CHECK(h.reports.empty());
}
}  // namespace

TEST_CASE("full-content mode moves the target's staging file into watch_dump under the upstream name") {
    Staging s("msms_watch_full");
    fs::path out = s.dir.parent_path() / "out";
    fs::create_directories(out);
    fs::path bin = s.dir / Staging::name(7);
    { std::ofstream(bin) << "abcd"; }
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin(out.string(), "20260102030405") == MSMS_OK);
    h.feed(full_checkpoint(Staging::name(7)));
    REQUIRE(h.finish() == MSMS_OK);
    // '/' and "::" become '.': no colons in file names
    fs::path to = out / "device_2" / "watch_dump" / "2_5.Foo.aten.add_3-aten.mul_1_before.bin";
    CHECK(fs::exists(to));
    CHECK(!fs::exists(bin));
    CHECK(slurp(to) == "abcd");
    CHECK(h.logs.empty());
    CHECK(h.reports == std::vector<std::string>{"watch: 1 checkpoint(s) written under device_*/watch_dump"});
    fs::remove_all(s.dir.parent_path());
}

TEST_CASE("a file a checkpoint names outside the session folder is never moved (issue #29)") {
    Staging s("msms_watch_outside");
    fs::path out = s.dir.parent_path() / "out";
    fs::path secret_dir = s.dir.parent_path() / "private";
    fs::create_directories(secret_dir);
    fs::path secret = secret_dir / "secret";
    { std::ofstream(secret) << "root's"; }
    fs::permissions(secret, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::replace);
    fs::permissions(secret_dir, fs::perms::owner_all, fs::perm_options::replace);
    check_ignored(out, secret.string(), secret, "not a file name of the session folder");
    // the same name, even with this session's token, outside the folder
    fs::path named = secret_dir / Staging::name(1);
    { std::ofstream(named) << "x"; }
    check_ignored(out, named.string(), named, "not a file name of the session folder");
    fs::remove_all(s.dir.parent_path());
}

TEST_CASE("a symbolic link in the session folder is never followed or moved") {
    Staging s("msms_watch_link");
    fs::path out = s.dir.parent_path() / "out";
    fs::path target = s.dir.parent_path() / "target";
    { std::ofstream(target) << "precious"; }
    fs::create_symlink(target, s.dir / Staging::name(2));
    check_ignored(out, Staging::name(2), s.dir / Staging::name(2), "a symbolic link");
    CHECK(fs::is_symlink(s.dir / Staging::name(2)));
    CHECK(slurp(target) == "precious");
    fs::remove_all(s.dir.parent_path());
}

TEST_CASE("a directory, a hard link, '..', another token or another process's file are never moved") {
    Staging s("msms_watch_other");
    fs::path out = s.dir.parent_path() / "out";
    // a directory tree under a staging name
    fs::create_directories(s.dir / Staging::name(3) / "sub");
    { std::ofstream(s.dir / Staging::name(3) / "sub" / "f") << "tree"; }
    check_ignored(out, Staging::name(3), s.dir / Staging::name(3), "not a regular file");
    CHECK(slurp(s.dir / Staging::name(3) / "sub" / "f") == "tree");
    // a file with a second link elsewhere
    fs::path elsewhere = s.dir.parent_path() / "elsewhere";
    { std::ofstream(elsewhere) << "linked"; }
    fs::create_hard_link(elsewhere, s.dir / Staging::name(4));
    check_ignored(out, Staging::name(4), elsewhere, "a file with other links");
    // '..' out of the session folder
    fs::path up = s.dir.parent_path() / "up";
    { std::ofstream(up) << "up"; }
    check_ignored(out, "../up", up, "not a file name of the session folder");
    check_ignored(out, "..", s.dir.parent_path(), "not a file name of the session folder");
    // a token that is not this session's, a pid that is not this capture's
    fs::path other = s.dir / "watch_ffffffffffffffffffffffffffffffff_1_5.bin";
    { std::ofstream(other) << "o"; }
    check_ignored(out, other.filename().string(), other, "not a staging file name of this session and process");
    fs::path pid = s.dir / Staging::name(6, 2);
    { std::ofstream(pid) << "p"; }
    check_ignored(out, Staging::name(6, 2), pid, "not a staging file name of this session and process");
    fs::remove_all(s.dir.parent_path());
}

TEST_CASE("without a live session (--replay, --analyze) no file is moved, even a staging name") {
    fs::path dir = temp_dir("msms_watch_replay");
    fs::path bin = dir / Staging::name(1);
    { std::ofstream(bin) << "abcd"; }
    unsetenv("MSMEMSCOPE_HOST_WATCH_STAGING");
    unsetenv("MSMEMSCOPE_HOST_WATCH_TOKEN");
    check_ignored(dir / "out", bin.string(), bin, "not a live run's session folder");
    check_ignored(dir / "out", Staging::name(1), bin, "not a live run's session folder");
    fs::remove_all(dir);
}

TEST_CASE("a session folder others can enter is not used") {
    Staging s("msms_watch_open");
    fs::permissions(s.dir, fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec,
                    fs::perm_options::replace);
    fs::path bin = s.dir / Staging::name(1);
    { std::ofstream(bin) << "abcd"; }
    check_ignored(s.dir.parent_path() / "out", Staging::name(1), bin, "not a live run's session folder");
    fs::remove_all(s.dir.parent_path());
}

TEST_CASE("--analyze of a dump: the checkpoints' line names the --output folder they went into") {
    // `msmemscope --analyze` lists no run folder's files after these lines
    // (offline.cpp gives the analyzers no sink but offline_writeback)
    fs::path dir = temp_dir("msms_watch_offline");
    PluginHarness h(plugin());
    h.config_json = "{\n  \"analysis\": [\n    \"watch\"\n  ],\n  \"sinks\": [\n    \"offline_writeback\"\n  ],\n"
                    "  \"watch\": null\n}";
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin(dir.string() + "/", "20260102030405") == MSMS_OK);
    h.feed(checkpoint("aten::mul", 0, "after", "00000000000000aa"));
    REQUIRE(h.finish() == MSMS_OK);
    CHECK(fs::exists(dir / "device_cpu" / "watch_dump" / "watch_dump_data_check_sum_20260102030405.csv"));
    CHECK(h.reports ==
          std::vector<std::string>{"watch: 1 checkpoint(s) written under " + dir.string() + "/device_*/watch_dump"});
    fs::remove_all(dir);
}
