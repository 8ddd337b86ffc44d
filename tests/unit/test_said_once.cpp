#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "said_once.h"

using namespace msms;

// The record of setup warnings said is shared with forked workers: a text
// one worker said is not said by the next (a DataLoader's 4 workers said the
// leak analysis is off 5 times).
TEST_CASE("a text said by one process is not said by another of the run") {
    said_once::begin_run();
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) _exit(said_once::first_to_say("leaks: off under --steps") ? 0 : 1);
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);  // the child said it first
    CHECK_FALSE(said_once::first_to_say("leaks: off under --steps"));
    CHECK(said_once::first_to_say("another text"));
    CHECK_FALSE(said_once::first_to_say("another text"));
}

TEST_CASE("a new run says its texts again") {
    said_once::begin_run();
    CHECK(said_once::first_to_say("leaks: off under --steps"));
    said_once::begin_run();
    CHECK(said_once::first_to_say("leaks: off under --steps"));
}

TEST_CASE("once the record is full, a new text is still said, every time") {
    said_once::begin_run();
    int firsts = 0;
    for (int i = 0; i < 2000; ++i) firsts += said_once::first_to_say("text " + std::to_string(i));  // past a page's 512
    CHECK(firsts == 2000);
    CHECK(said_once::first_to_say("text 0") == false);  // what it holds is still known
    CHECK(said_once::first_to_say("one more"));
    CHECK(said_once::first_to_say("one more"));
}
