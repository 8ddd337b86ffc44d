#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <initializer_list>

#include "run_processes.h"

using namespace msms;

// A worker forked for the first process learns of the second one while it
// runs: its warnings from then on name its process.
TEST_CASE("a worker forked before a second process was noted sees it") {
    run_processes::begin_run();
    run_processes::note(100);
    int checked[2], go[2];  // child -> parent: it looked; parent -> child: the second pid is noted
    REQUIRE(pipe(checked) == 0);
    REQUIRE(pipe(go) == 0);
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        bool before = run_processes::more_than_one();
        char c = 'x';
        (void)!write(checked[1], &c, 1);
        (void)!read(go[0], &c, 1);
        _exit(before ? 2 : run_processes::more_than_one() ? 0 : 1);
    }
    char c;
    REQUIRE(read(checked[0], &c, 1) == 1);
    run_processes::note(200);
    (void)!write(go[1], "x", 1);
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    for (int fd : {checked[0], checked[1], go[0], go[1]}) close(fd);
}

TEST_CASE("an exec's new image is the same process") {
    run_processes::begin_run();
    run_processes::note(100);
    run_processes::note(100);
    CHECK_FALSE(run_processes::more_than_one());
    run_processes::note(101);
    CHECK(run_processes::more_than_one());
}

TEST_CASE("a new run has seen no process yet") {
    run_processes::begin_run();
    run_processes::note(100);
    run_processes::note(101);
    run_processes::begin_run();
    run_processes::note(101);
    CHECK_FALSE(run_processes::more_than_one());
}
