// What an offline analysis over its memory budget tells its user about the
// budget (framework/host/offline/memory_budget.h, offline.h): the command
// line's option on the command line; to the Python API's analyze() and
// check_inefficient(), which have no keyword for it, the command line that
// runs the analysis with one.
#include <doctest/doctest.h>

#include <stdlib.h>
#include <sys/stat.h>

#include <cstdio>
#include <string>

#include "config.h"
#include "config_fixture.h"
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

// Before: the command named the analyzers and the input only, so running it
// gave the analysis with the options' defaults, another answer than the
// run's (config(plugin_options=...) and the call's keywords reach the
// command line as --plugin-option).
TEST_CASE("the command line given to the Python API gives the analyzers the options the run was given") {
    auto r = msms_test::run({"--analyze=inefficient,oom:25", "--input=d.csv", "--python-api",
                             "--plugin-option=inefficient.idle_threshold=3000"});
    REQUIRE(r.ok);
    CHECK(budget_setter(r.cfg, "d.csv") ==
          "the Python API has no keyword for the memory budget; msmemscope --analyze=inefficient,oom --input=d.csv "
          "--plugin-option=inefficient.idle_threshold=3000 --plugin-option=oom.k=25 --offline-memory=<MiB> runs "
          "the analysis with one");
    // (the defaults, which the command line applies anyway, are not named)
    auto plain = msms_test::run({"--analyze=inefficient", "--input=d.csv", "--python-api"});
    REQUIRE(plain.ok);
    CHECK(budget_setter(plain.cfg, "d.csv") ==
          "the Python API has no keyword for the memory budget; msmemscope --analyze=inefficient --input=d.csv "
          "--offline-memory=<MiB> runs the analysis with one");
}

TEST_CASE("the options in the Python API's command line are quoted for a shell") {
    Config cfg;
    cfg.offline_api = true;
    cfg.analyzers = {"mine"};
    cfg.plugin_options["mine"] = {{"label", "my label"}, {"unset", "default"}};
    cfg.analyzer_options_given["mine"] = {"label"};
    CHECK(budget_setter(cfg, "d.csv") ==
          "the Python API has no keyword for the memory budget; msmemscope --analyze=mine --input=d.csv "
          "'--plugin-option=mine.label=my label' --offline-memory=<MiB> runs the analysis with one");
}

namespace {

// A fixture tree of cgroup files under a temporary folder, with the
// /proc/self/cgroup and /proc/self/mountinfo that lead to it.
class CgroupFixture {
public:
    CgroupFixture() {
        char dir[] = "/tmp/msms_budget_XXXXXX";
        REQUIRE(mkdtemp(dir));
        root_ = dir;
    }
    ~CgroupFixture() { std::system(("rm -rf '" + root_ + "'").c_str()); }
    // A file (and its folders) below the fixture's root.
    void file(const std::string& rel, const std::string& text) {
        std::string path = root_ + "/" + rel;
        for (size_t slash = path.find('/', root_.size() + 1); slash != std::string::npos;
             slash = path.find('/', slash + 1))
            mkdir(path.substr(0, slash).c_str(), 0755);
        FILE* f = std::fopen(path.c_str(), "w");
        REQUIRE(f);
        std::fputs(text.c_str(), f);
        std::fclose(f);
    }
    const std::string& root() const { return root_; }
    size_t limit(const std::string& proc_cgroup, const std::string& mountinfo) {
        file("proc_cgroup", proc_cgroup);
        file("mountinfo", mountinfo);
        proc_cgroup_ = root_ + "/proc_cgroup";
        mountinfo_ = root_ + "/mountinfo";
        msms::memory_cgroups::Sources sources;
        sources.proc_cgroup = proc_cgroup_.c_str();
        sources.mountinfo = mountinfo_.c_str();
        sources.systemd_places = false;  // the machine's, not the fixture's
        return memory_cgroup_limit(sources);
    }

private:
    std::string root_, proc_cgroup_, mountinfo_;
};

}  // namespace

TEST_CASE("the budget's cgroup limit: docker --memory on a cgroup v1 host, the container's cgroup as the mount's root") {
    CgroupFixture fx;
    fx.file("memory/memory.limit_in_bytes", "2147483648\n");
    fx.file("memory/memory.usage_in_bytes", "1048576\n");
    CHECK(fx.limit("12:cpu,cpuacct:/docker/0123\n5:blkio,memory,pids:/docker/0123\n0::/\n",
                   "611 600 0:52 /docker/0123 " + fx.root() + "/cpu ro - cgroup cgroup rw,cpu,cpuacct\n"
                   "612 600 0:53 /docker/0123 " + fx.root() + "/memory ro,nosuid - cgroup cgroup rw,memory,hugetlb\n") ==
          (2ull << 30));
}

TEST_CASE("the budget's cgroup limit: a limit on a parent cgroup (v2) binds its children without one") {
    CgroupFixture fx;
    fx.file("unified/a/memory.max", "1073741824\n");
    fx.file("unified/a/memory.current", "4096\n");
    fx.file("unified/a/b/memory.max", "max\n");
    fx.file("unified/a/b/memory.current", "4096\n");
    const std::string mountinfo = "35 24 0:30 / " + fx.root() + "/unified rw,nosuid shared:9 - cgroup2 cgroup2 rw\n";
    CHECK(fx.limit("0::/a/b\n", mountinfo) == (1ull << 30));
    fx.file("unified/a/b/memory.max", "536870912\n");  // the smaller of the two binds
    CHECK(fx.limit("0::/a/b\n", mountinfo) == (512ull << 20));
}

TEST_CASE("the budget's cgroup limit: v1's parent binds only while it counts its children; none: 0") {
    CgroupFixture fx;
    fx.file("memory/jobs/memory.limit_in_bytes", "1073741824\n");
    fx.file("memory/jobs/memory.usage_in_bytes", "0\n");
    fx.file("memory/jobs/memory.use_hierarchy", "0\n");
    fx.file("memory/jobs/7/memory.limit_in_bytes", "9223372036854771712\n");  // none (LONG_MAX, 4 KiB pages)
    fx.file("memory/jobs/7/memory.usage_in_bytes", "0\n");
    const std::string mountinfo = "34 30 0:31 / " + fx.root() + "/memory rw,relatime - cgroup cgroup rw,memory\n";
    CHECK(fx.limit("4:memory:/jobs/7\n", mountinfo) == 0);
    fx.file("memory/jobs/memory.use_hierarchy", "1\n");
    CHECK(fx.limit("4:memory:/jobs/7\n", mountinfo) == (1ull << 30));
    CHECK(fx.limit("4:memory:/jobs/7\n", "") == 0);  // no mount of it: no limit found
}
