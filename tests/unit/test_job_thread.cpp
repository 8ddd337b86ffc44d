// JobThread: the sinks' writer thread (one job at a time, in order; a failed
// job's exception comes back at the next wait or submit, once).
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "util/job_thread.h"

TEST_CASE("JobThread runs jobs one at a time, in the order given") {
    msms::JobThread t;
    std::vector<int> done;  // touched by one job at a time, read after wait()
    for (int i = 0; i < 100; ++i) t.submit([&done, i] { done.push_back(i); });
    t.wait();
    REQUIRE(done.size() == 100);
    bool in_order = true;
    for (int i = 0; i < 100; ++i) in_order = in_order && done[static_cast<size_t>(i)] == i;
    CHECK(in_order);
}

TEST_CASE("JobThread: a failed job's error is thrown once, at the next wait or submit") {
    msms::JobThread t;
    t.submit([] { throw std::runtime_error("disk full"); });
    CHECK_THROWS_WITH(t.wait(), "disk full");
    CHECK_NOTHROW(t.wait());
    t.submit([] { throw std::runtime_error("again"); });
    bool ran = false;
    CHECK_THROWS_WITH(t.submit([&ran] { ran = true; }), "again");
    t.wait();
    CHECK_FALSE(ran);  // not started after a failure
    t.submit([] { throw std::runtime_error("dropped"); });
    t.stop();  // the error of the last job is dropped, the thread ends
    CHECK_NOTHROW(t.wait());
}

TEST_CASE("JobThread without a job never starts a thread; stop and wait are no-ops") {
    msms::JobThread t;
    CHECK_NOTHROW(t.wait());
    CHECK_NOTHROW(t.stop());
}
