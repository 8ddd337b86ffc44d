#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <initializer_list>

#include "run_processes.h"

using namespace msms;

// A worker forked for the first process learns while it runs that the
// console names processes: its warnings from then on name its process.
TEST_CASE("a worker forked before naming turned on sees it") {
    run_processes::begin_run();
    run_processes::note(100);
    int checked[2], go[2];  // child -> parent: it looked; parent -> child: a second process spoke
    REQUIRE(pipe(checked) == 0);
    REQUIRE(pipe(go) == 0);
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        run_processes::note_line(100);
        bool before = run_processes::naming();
        char c = 'x';
        (void)!write(checked[1], &c, 1);
        (void)!read(go[0], &c, 1);
        _exit(before ? 2 : run_processes::naming() ? 0 : 1);
    }
    char c;
    REQUIRE(read(checked[0], &c, 1) == 1);
    run_processes::note(200);
    run_processes::note_line(200);
    (void)!write(go[1], "x", 1);
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    for (int fd : {checked[0], checked[1], go[0], go[1]}) close(fd);
}

// platform.processor()'s `uname -p`, a subprocess.run(["true"]): profiled,
// silent, and no reason to name the program's own warnings.
TEST_CASE("a second process that says nothing and has no rank names nothing") {
    run_processes::begin_run();
    run_processes::note(100);
    run_processes::note(101);
    run_processes::note_line(100);
    run_processes::note_line(100);
    CHECK_FALSE(run_processes::naming());
}

TEST_CASE("a second process with a line to say turns naming on, for its own line too") {
    run_processes::begin_run();
    run_processes::note(100);
    run_processes::note(101);
    run_processes::note_line(101);  // the first to speak need not be the first process
    CHECK_FALSE(run_processes::naming());
    run_processes::note_line(100);
    CHECK(run_processes::naming());
}

// torchrun: a launcher without a rank and its trainers, ranks 0 and 1.
TEST_CASE("a launcher's ranked children turn naming on, whichever capture is found first") {
    run_processes::begin_run();
    run_processes::note(100);
    run_processes::note(101, 100, "0");  // a launcher's one trainer: its rank alone tells it from its parent
    CHECK(run_processes::naming());
    run_processes::begin_run();
    run_processes::note(101, 100, "1");  // (one scan sorts the names by pid as text)
    CHECK_FALSE(run_processes::naming());
    run_processes::note(100, 1);
    CHECK(run_processes::naming());
}

// A one-process program run with RANK=0 (exported in the user's shell or
// job script): its helpers inherit it.
TEST_CASE("a helper that inherits its parent's rank names nothing") {
    run_processes::begin_run();
    run_processes::note(100, 1, "0");
    run_processes::note(101, 100, "0");  // subprocess.run(["true"])
    run_processes::note(102, 101, "0");  // and its own helper
    run_processes::note_rank(100, "0");  // its worker, as it starts
    run_processes::note_rank(101, "0");
    CHECK_FALSE(run_processes::naming());
    run_processes::note(103, 100);  // a helper run with a clean environment
    CHECK_FALSE(run_processes::naming());
    run_processes::note(104, 100, "1");  // a rank of its own
    CHECK(run_processes::naming());
}

// torch.multiprocessing.spawn: no rank in any environment; each rank learns
// its own from init_process_group (process_rank.h), in its worker. Rank 0's
// first step warning may come before rank 1 learns its rank: its late rank,
// which its launcher had not, names it at once (it once came unnamed).
TEST_CASE("a trainer's late rank that its launcher had not turns naming on at once") {
    run_processes::begin_run();
    run_processes::note(100);
    run_processes::note(101, 100);
    run_processes::note(102, 100);
    run_processes::note_rank(101, "0");
    CHECK(run_processes::naming());
    run_processes::begin_run();  // a helper of a RANK=0 program that learns the same rank late
    run_processes::note(100, 1, "0");
    run_processes::note(101, 100);
    run_processes::note_rank(101, "0");
    CHECK_FALSE(run_processes::naming());
}

TEST_CASE("two processes with different ranks turn naming on, the first process's own rank included") {
    run_processes::begin_run();
    run_processes::note(100);
    run_processes::note_rank(101, "0");  // processes whose parents were not found
    run_processes::note_rank(101, "0");
    CHECK_FALSE(run_processes::naming());
    run_processes::note_rank(102, "1");
    CHECK(run_processes::naming());
    run_processes::begin_run();
    run_processes::note(100, 1, "0");  // the first process's own rank, and another's
    run_processes::note(200, 1, "1");
    CHECK(run_processes::naming());
}

TEST_CASE("a process named on the console: its pid, and its rank when it has one") {
    run_processes::begin_run();
    run_processes::note(100);
    run_processes::note(101, 100);
    CHECK(run_processes::named(101, "") == "");  // the first to speak, while it is the only one
    CHECK(run_processes::named(100, "3") == "[pid 100, rank 3] ");
    CHECK(run_processes::named(101, "") == "[pid 101] ");
}

TEST_CASE("an exec's new image is the same process") {
    run_processes::begin_run();
    run_processes::note(100, 1, "0");
    run_processes::note_line(100);
    run_processes::note(100, 1, "1");  // `RANK=1 exec ...`
    run_processes::note_rank(100, "1");
    run_processes::note_line(100);
    CHECK_FALSE(run_processes::naming());
}

TEST_CASE("a new run names nothing yet") {
    run_processes::begin_run();
    run_processes::note(100);
    run_processes::note(101, 100, "1");
    REQUIRE(run_processes::naming());
    run_processes::begin_run();
    run_processes::note(101);
    run_processes::note_line(101);
    CHECK_FALSE(run_processes::naming());
}
