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

TEST_CASE("a rank turns naming on, unless it is the first process's own") {
    run_processes::begin_run();
    run_processes::note(100);
    run_processes::note_rank(100);  // a rank 0 that starts the others, before any of them
    run_processes::note(101);
    CHECK_FALSE(run_processes::naming());
    run_processes::note(102);
    run_processes::note_rank(102);
    CHECK(run_processes::naming());
}

TEST_CASE("an exec's new image is the same process") {
    run_processes::begin_run();
    run_processes::note(100);
    run_processes::note_line(100);
    run_processes::note(100);
    run_processes::note_rank(100);
    run_processes::note_line(100);
    CHECK_FALSE(run_processes::naming());
}

TEST_CASE("a new run names nothing yet") {
    run_processes::begin_run();
    run_processes::note(100);
    run_processes::note(101);
    run_processes::note_rank(101);
    REQUIRE(run_processes::naming());
    run_processes::begin_run();
    run_processes::note(101);
    run_processes::note_line(101);
    CHECK_FALSE(run_processes::naming());
}
