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
