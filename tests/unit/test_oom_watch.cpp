// OomWatch (framework/host/oom_watch.cpp) on made-up mount tables and
// /proc: the cgroup v2 path (memory.events) and the v1 path
// (memory.oom_control), a cgroup root that is not "/" (a cgroup namespace
// or a bind mount), a process that moves, and files without the counter.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "oom_watch.h"

namespace fs = std::filesystem;

namespace {

struct Tree {
    fs::path root;
    Tree() {
        char tmpl[] = "/tmp/msms_oom_watch_XXXXXX";
        REQUIRE(mkdtemp(tmpl) != nullptr);
        root = tmpl;
    }
    ~Tree() {
        std::error_code ec;
        fs::remove_all(root, ec);
    }
    void write(const std::string& rel, const std::string& text) const {
        fs::path p = root / rel;
        fs::create_directories(p.parent_path());
        std::ofstream(p) << text;
    }
    std::string path(const std::string& rel) const { return (root / rel).string(); }
    // mountinfo line: root of the mount inside the hierarchy, where it is mounted
    std::string mount(const std::string& fs_root, const std::string& rel, const std::string& fstype,
                      const std::string& super) const {
        return "30 25 0:26 " + fs_root + " " + path(rel) + " rw,nosuid - " + fstype + " " + fstype + " " + super + "\n";
    }
};

}  // namespace

TEST_CASE("cgroup v2: the kill count of memory.events in the process's cgroup") {
    Tree t;
    t.write("mountinfo", "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n" + t.mount("/", "cg2", "cgroup2", "rw,nsdelegate"));
    t.write("proc/123/cgroup", "0::/job/step\n");
    t.write("cg2/job/step/memory.events", "low 0\nhigh 0\nmax 5\noom 1\noom_kill 2\noom_group_kill 0\n");
    msms::OomWatch w(123, t.path("mountinfo"), t.path("proc"));
    w.sample();
    REQUIRE(w.watched() == std::vector<std::string>{t.path("cg2/job/step/memory.events")});
    CHECK_FALSE(w.increased());
    t.write("cg2/job/step/memory.events", "low 0\nhigh 0\nmax 9\noom 2\noom_kill 3\noom_group_kill 0\n");
    CHECK(w.increased());
}

TEST_CASE("cgroup v2 inside a cgroup namespace / bind mount: the path is taken relative to the mount's root") {
    Tree t;
    t.write("mountinfo", t.mount("/kubepods/pod1", "cg2", "cgroup2", "rw"));
    t.write("proc/7/cgroup", "0::/kubepods/pod1/ctr\n");
    t.write("cg2/ctr/memory.events", "oom 0\noom_kill 0\n");
    msms::OomWatch w(7, t.path("mountinfo"), t.path("proc"));
    w.sample();
    REQUIRE(w.watched() == std::vector<std::string>{t.path("cg2/ctr/memory.events")});
    t.write("cg2/ctr/memory.events", "oom 1\noom_kill 1\n");
    CHECK(w.increased());
}

TEST_CASE("a process that moves to another cgroup: both are watched; a kill in the later one counts") {
    Tree t;
    t.write("mountinfo", t.mount("/", "cg2", "cgroup2", "rw"));
    t.write("proc/9/cgroup", "0::/a\n");
    t.write("cg2/a/memory.events", "oom_kill 4\n");
    t.write("cg2/b/memory.events", "oom_kill 0\n");
    msms::OomWatch w(9, t.path("mountinfo"), t.path("proc"));
    w.sample();
    t.write("proc/9/cgroup", "0::/b\n");
    w.sample();
    CHECK(w.watched().size() == 2);
    CHECK_FALSE(w.increased());
    t.write("cg2/b/memory.events", "oom_kill 1\n");
    CHECK(w.increased());
}

TEST_CASE("cgroup v1 memory hierarchy (hybrid: v2 mounted without the memory controller)") {
    Tree t;
    t.write("mountinfo", t.mount("/", "v1mem", "cgroup", "rw,memory") + t.mount("/", "v1cpu", "cgroup", "rw,cpu,cpuacct") +
                             t.mount("/", "unified", "cgroup2", "rw"));
    t.write("proc/5/cgroup", "9:cpu,cpuacct:/x\n4:memory:/job\n0::/job\n");
    t.write("v1mem/job/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n");
    // the v2 cgroup has no memory controller: no memory.events there
    t.write("unified/job/cgroup.procs", "5\n");
    msms::OomWatch w(5, t.path("mountinfo"), t.path("proc"));
    w.sample();
    REQUIRE(w.watched() == std::vector<std::string>{t.path("v1mem/job/memory.oom_control")});
    t.write("v1mem/job/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n");
    CHECK(w.increased());
}

TEST_CASE("nothing to watch: no cgroup mounts, a gone process, a counter-less file") {
    Tree t;
    t.write("mountinfo", "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n");
    msms::OomWatch none(1, t.path("mountinfo"), t.path("proc"));
    none.sample();
    CHECK(none.watched().empty());
    CHECK_FALSE(none.increased());

    t.write("mountinfo2", t.mount("/", "cg2", "cgroup2", "rw"));
    msms::OomWatch gone(2, t.path("mountinfo2"), t.path("proc"));  // no proc/2/cgroup
    gone.sample();
    CHECK(gone.watched().empty());

    t.write("proc/3/cgroup", "0::/old\n");
    t.write("cg2/old/memory.events", "low 0\nhigh 0\n");  // an old kernel: no oom_kill line
    msms::OomWatch old(3, t.path("mountinfo2"), t.path("proc"));
    old.sample();
    CHECK(old.watched().empty());
    CHECK_FALSE(old.increased());
}
