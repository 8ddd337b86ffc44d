// The agent's reading of a process's memory bounds at a cpu allocation
// failure (framework/agent/memory_bound.h).
#include <doctest/doctest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "agent/memory_bound.h"

using namespace msms::agent::memory_bound;

namespace {
std::string attrs_of(const char* extra, const Bound& b, size_t size = 512) {
    char out[512];
    format_attrs(out, size, extra, b);
    return out;
}

uint64_t vm_size_bytes() {
    FILE* f = std::fopen("/proc/self/statm", "r");
    unsigned long long pages = 0;
    if (f) {
        if (std::fscanf(f, "%llu", &pages) != 1) pages = 0;
        std::fclose(f);
    }
    return pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

// Runs `check` in a child (it changes the child's limits); true if it
// returned true there.
template <class F>
bool in_child(F check) {
    pid_t pid = fork();
    if (pid == 0) _exit(check() ? 0 : 1);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}
}  // namespace

TEST_CASE("the files' fields: meminfo and status lines in kB, statm's first number, the cgroup v2 line") {
    const char* meminfo = "MemTotal:       24683748 kB\nMemFree:        20000000 kB\nMemAvailable:   23301048 kB\n";
    uint64_t v = 0;
    CHECK(kib_field(meminfo, "MemTotal", v));
    CHECK(v == 24683748ull * 1024);
    CHECK(kib_field(meminfo, "MemAvailable", v));
    CHECK(v == 23301048ull * 1024);
    CHECK_FALSE(kib_field(meminfo, "Mem", v));  // a whole key only
    CHECK_FALSE(kib_field(meminfo, "SwapTotal", v));
    CHECK(kib_field("Name:\tx\nVmData:\t  1234 kB\n", "VmData", v));
    CHECK(v == 1234 * 1024);
    CHECK(first_number("1048576 2000 300 1 0 500 0\n", v));
    CHECK(v == 1048576);
    CHECK_FALSE(first_number("", v));

    char path[64];
    CHECK(cgroup_v2_path("4:memory:/a\n0::/user.slice/app.scope\n", path, sizeof(path)));
    CHECK(std::string(path) == "/user.slice/app.scope");
    CHECK(cgroup_v2_path("0::/\n", path, sizeof(path)));
    CHECK(std::string(path) == "/");
    CHECK_FALSE(cgroup_v2_path("4:memory:/a\n1:cpu:/\n", path, sizeof(path)));  // cgroup v1 only
    CHECK_FALSE(cgroup_v2_path("0::/a/very/long/path/that/does/not/fit\n", path, 8));
}

TEST_CASE("the binding bound is the one with the least free memory; of two as free, the smaller") {
    Bound b;
    consider(b, 100, 60, "machine");
    consider(b, 50, 40, "cgroup");
    CHECK(std::string(b.name) == "cgroup");
    consider(b, 1000, 90, "RLIMIT_AS");  // a larger limit with more room: not it
    CHECK(std::string(b.name) == "cgroup");
    consider(b, 45, 40, "RLIMIT_DATA");  // as free, smaller
    CHECK(std::string(b.name) == "RLIMIT_DATA");
    CHECK(b.total == 45);
    consider(b, 10, 20, "RLIMIT_AS");  // used more than its limit allows now: none free
    CHECK(std::string(b.name) == "RLIMIT_AS");
    CHECK(b.free == 10);
}

TEST_CASE("the Attr entries: after the collector's own, total, free and limit; limit:unknown when none was read") {
    CHECK(attrs_of(nullptr, Bound{4096, 1024, "RLIMIT_AS"}) == "total:4096,free:1024,limit:RLIMIT_AS");
    CHECK(attrs_of("driver:cuda", Bound{1, 0, "machine"}) == "driver:cuda,total:1,free:0,limit:machine");
    CHECK(attrs_of("", Bound{}) == "limit:unknown");
    CHECK(attrs_of("driver:cuda", Bound{}, 8) == "driver:");  // cut short, never past the buffer
}

TEST_CASE("read_now: under RLIMIT_AS the address-space limit binds, its free is the limit less VmSize") {
    CHECK(in_child([] {
        uint64_t before = vm_size_bytes();
        struct rlimit lim;
        getrlimit(RLIMIT_AS, &lim);
        lim.rlim_cur = before + (64u << 20);
        if (setrlimit(RLIMIT_AS, &lim) != 0) return false;
        Bound b = read_now();
        uint64_t after = vm_size_bytes();
        return b.name && std::strcmp(b.name, "RLIMIT_AS") == 0 && b.total == lim.rlim_cur &&
               b.free <= lim.rlim_cur - before && b.free >= lim.rlim_cur - after;
    }));
}

TEST_CASE("read_now: under RLIMIT_DATA (Linux 4.7 and later) the data limit binds") {
    CHECK(in_child([] {
        struct rlimit lim;
        getrlimit(RLIMIT_DATA, &lim);
        lim.rlim_cur = 256u << 20;
        if (setrlimit(RLIMIT_DATA, &lim) != 0) return false;
        Bound b = read_now();
        return b.name && std::strcmp(b.name, "RLIMIT_DATA") == 0 && b.total == (256u << 20) && b.free < b.total;
    }));
}

TEST_CASE("read_now without rlimits: the machine or a cgroup, never more than the machine has") {
    CHECK(in_child([] {
        for (int r : {RLIMIT_AS, RLIMIT_DATA}) {  // none, whatever the shell running the tests set
            struct rlimit lim;
            getrlimit(r, &lim);
            if (lim.rlim_max != RLIM_INFINITY) return true;  // cannot be lifted here: nothing to check
            lim.rlim_cur = RLIM_INFINITY;
            setrlimit(r, &lim);
        }
        Bound b = read_now();
        FILE* f = std::fopen("/proc/meminfo", "r");
        unsigned long long total_kib = 0;
        if (!f || std::fscanf(f, "MemTotal: %llu kB", &total_kib) != 1) return false;
        std::fclose(f);
        if (!b.name) return false;
        if (std::strcmp(b.name, "machine") == 0) return b.total == total_kib * 1024 && b.free <= b.total;
        return std::strcmp(b.name, "cgroup") == 0 && b.free <= b.total;
    }));
}
