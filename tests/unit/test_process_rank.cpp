// ProcessRank (framework/host/process_rank.h): the environment's rank, else
// the one torch.distributed reported once init_process_group completed
// (mp.spawn sets no RANK); and rank_of (run_index.h), which the console's
// process table and index.html show.
#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

#include "process_rank.h"
#include "run_index.h"
#include "util/output_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

// A filesystem without RENAME_NOREPLACE (NFS): renameat2 with flags fails
// EINVAL while this is set (this binary's own renameat2 wins over libc's).
static bool g_no_noreplace = false;
extern "C" int renameat2(int from_dir, const char* from, int to_dir, const char* to, unsigned int flags) __THROW {
    if (g_no_noreplace && flags != 0) {
        errno = EINVAL;
        return -1;
    }
    return static_cast<int>(syscall(SYS_renameat2, from_dir, from, to_dir, to, flags));
}

using msms::ProcessRank;
using Attrs = std::vector<std::pair<std::string, std::string>>;

TEST_CASE("without an environment rank, torch.distributed's is the process's") {
    ProcessRank r("");
    CHECK(r.rank() == "");
    r.note_late({{"rank", "1"}, {"world_size", "2"}}, 42);
    CHECK(r.rank() == "1");
    CHECK(r.warning() == "");
    // a second init_process_group does not move it
    r.note_late({{"rank", "0"}, {"world_size", "2"}}, 42);
    CHECK(r.rank() == "1");
}

TEST_CASE("the environment's rank wins, and a different late one is warned about once") {
    ProcessRank same("3");
    same.note_late({{"rank", "3"}, {"world_size", "4"}}, 7);
    CHECK(same.rank() == "3");
    CHECK(same.warning() == "");

    ProcessRank r("1");  // LOCAL_RANK of a second node, say
    r.note_late({{"rank", "5"}, {"world_size", "8"}}, 7);
    r.note_late({{"rank", "6"}, {"world_size", "8"}}, 7);
    CHECK(r.rank() == "1");
    CHECK(r.warning() == "pid 7: its environment's rank 1 and torch.distributed's rank 5 differ; the environment's is kept");
}

TEST_CASE("a world of one process has no rank, nor does a row that is not a rank") {
    ProcessRank r("");
    r.note_late({{"rank", "0"}, {"world_size", "1"}}, 1);
    CHECK(r.rank() == "");
    for (const Attrs& bad : {Attrs{{"rank", "x"}, {"world_size", "2"}}, Attrs{{"rank", "1"}},
                             Attrs{{"rank", "-1"}, {"world_size", "2"}}, Attrs{{"rank", "1234567890"}, {"world_size", "2"}},
                             Attrs{}}) {
        r.note_late(bad, 1);
        CHECK(r.rank() == "");
    }
    CHECK(r.warning() == "");
}

TEST_CASE("an environment rank that is not a number gives way to the late one") {
    ProcessRank r("abc");
    r.note_late({{"rank", "1"}, {"world_size", "2"}}, 9);
    CHECK(r.rank() == "1");
    CHECK(r.warning() == "");
}

TEST_CASE("rank_of: the summary's rank, else the folder name's") {
    msms::ProcessSummary s;
    s.output_dir = "out/msmemscope_12_20260101000000_cpu";
    CHECK(msms::rank_of(s) == "");
    s.rank = "1";  // torch.distributed's: the folder was named before it came
    CHECK(msms::rank_of(s) == "1");
    s.rank.clear();
    s.output_dir = "out/msmemscope_12_20260101000000_cpu_rank3_2";
    CHECK(msms::rank_of(s) == "3");
}

TEST_CASE("rename_fresh_at: the run's own folder, to a fresh name, never over an entry nor through a link") {
    char tmpl[] = "/tmp/msms_rank_XXXXXX";
    REQUIRE(mkdtemp(tmpl));
    std::string root = tmpl;
    int parent = open(root.c_str(), O_RDONLY | O_DIRECTORY);
    REQUIRE(parent >= 0);
    const std::string first = "msmemscope_12_20260101000000_cpu", want = first + "_rank1";
    REQUIRE(mkdirat(parent, first.c_str(), 0700) == 0);
    int dir = openat(parent, first.c_str(), O_RDONLY | O_DIRECTORY);
    REQUIRE(dir >= 0);
    REQUIRE(mkdirat(dir, "inside", 0700) == 0);
    // the name is taken (another run's folder, with a file): it stays, the next variant is used
    REQUIRE(mkdirat(parent, want.c_str(), 0700) == 0);
    REQUIRE(mkdirat(parent, (want + "/theirs").c_str(), 0700) == 0);
    std::string error;
    CHECK(msms::rename_fresh_at(parent, first, want, dir, error) == want + "_2");
    CHECK(error == "");
    struct stat st;
    CHECK(fstatat(parent, (want + "/theirs").c_str(), &st, 0) == 0);
    CHECK(fstatat(parent, (want + "_2/inside").c_str(), &st, 0) == 0);  // ours, with what was in it
    CHECK(fstatat(parent, first.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0);
    CHECK(msmemscope::files::still_there(parent, want + "_2", dir));
    // a link (or another folder) at the run's folder's name is never moved
    REQUIRE(symlinkat((root + "/" + want + "_2").c_str(), parent, "planted") == 0);
    CHECK(msms::rename_fresh_at(parent, "planted", "moved", dir, error) == "");
    CHECK(error == "planted: not this run's folder any more (replaced, or moved)");
    CHECK(fstatat(parent, "planted", &st, AT_SYMLINK_NOFOLLOW) == 0);
    CHECK(fstatat(parent, "moved", &st, AT_SYMLINK_NOFOLLOW) != 0);
    for (const char* p : {"planted"}) unlinkat(parent, p, 0);
    for (std::string d : {want + "_2/inside", want + "_2", want + "/theirs", want}) unlinkat(parent, d.c_str(), AT_REMOVEDIR);
    close(dir);
    close(parent);
    rmdir(root.c_str());
}

TEST_CASE("rename_fresh_at without RENAME_NOREPLACE: over an empty folder of its own, never over another") {
    g_no_noreplace = true;
    char tmpl[] = "/tmp/msms_rank_XXXXXX";
    REQUIRE(mkdtemp(tmpl));
    std::string root = tmpl;
    int parent = open(root.c_str(), O_RDONLY | O_DIRECTORY);
    REQUIRE(parent >= 0);
    REQUIRE(mkdirat(parent, "mine", 0700) == 0);
    int dir = openat(parent, "mine", O_RDONLY | O_DIRECTORY);
    REQUIRE(dir >= 0);
    REQUIRE(mkdirat(parent, "new", 0700) == 0);  // taken, even empty: not ours to replace
    std::string error;
    CHECK(msms::rename_fresh_at(parent, "mine", "new", dir, error) == "new_2");
    CHECK(error == "");
    CHECK(msmemscope::files::still_there(parent, "new_2", dir));
    struct stat st;
    CHECK(fstatat(parent, "new", &st, 0) == 0);
    CHECK(fstatat(parent, "mine", &st, AT_SYMLINK_NOFOLLOW) != 0);
    g_no_noreplace = false;
    for (const char* d : {"new_2", "new"}) unlinkat(parent, d, AT_REMOVEDIR);
    close(dir);
    close(parent);
    rmdir(root.c_str());
}
