// The trace sink's memory counters: every sample while within the budget;
// past it, the same resolution over the whole run, peaks and final levels
// kept.
#include <doctest/doctest.h>

#include <algorithm>

#include "counter_series.h"

using msms_trace::CounterPoint;
using msms_trace::CounterSeries;

TEST_CASE("counters within the budget: every sample, in order") {
    CounterSeries s(1000, 100);
    size_t t = s.add_track("cpu HOST allocated");
    for (int i = 0; i < 50; ++i) s.add(t, 1000 + i * 10, i);
    s.fit(100);
    auto p = s.points_of(t);
    REQUIRE(p.size() == 50);
    CHECK(s.samples() == 50);
    CHECK(s.width_ns(t) == 1);
    for (int i = 0; i < 50; ++i) CHECK((p[i].ts == 1000u + i * 10 && p[i].value == i));
}

TEST_CASE("past the budget: buckets keep the peak, the dip and the last level; the busy track is reduced first") {
    CounterSeries s(0, 1000);
    size_t a = s.add_track("a"), b = s.add_track("b");
    // a: a sawtooth with one tall spike late in the run; b: a slow ramp
    for (uint64_t i = 0; i < 100000; ++i) {
        int64_t v = static_cast<int64_t>(i % 100);
        if (i == 77777) v = 1000000;
        s.add(a, i * 100, v);
        if (i % 10 == 0) s.add(b, i * 100 + 5, static_cast<int64_t>(i));
    }
    s.fit(600);
    CHECK(s.samples() == 110000);
    CHECK(s.points() <= 600);
    auto pa = s.points_of(a), pb = s.points_of(b);
    CHECK(pa.size() + pb.size() == s.points());
    auto maxa = std::max_element(pa.begin(), pa.end(), [](auto& x, auto& y) { return x.value < y.value; });
    CHECK(maxa->value == 1000000);
    CHECK(maxa->ts == 7777700u);
    CHECK(std::min_element(pa.begin(), pa.end(), [](auto& x, auto& y) { return x.value < y.value; })->value == 0);
    CHECK(pa.back().value == 99);  // the last sample
    CHECK(pb.back().value == 99990);
    for (size_t i = 1; i < pa.size(); ++i) CHECK(pa[i - 1].ts < pa[i].ts);
    // b (10,000 samples) keeps more of its own than a (100,000) does
    CHECK(s.width_ns(b) < s.width_ns(a));
    CHECK(pb.size() * 10 > s.points() * 4);
    // the same resolution over the whole run: points spread evenly
    size_t first_half = static_cast<size_t>(std::count_if(pa.begin(), pa.end(), [](auto& p) { return p.ts < 5000000; }));
    CHECK(first_half * 10 > pa.size() * 4);
    CHECK(first_half * 10 < pa.size() * 6);
}

TEST_CASE("a budget below three points per track keeps three per track") {
    CounterSeries s(0, 1);
    size_t t = s.add_track("x");
    for (uint64_t i = 0; i < 1000; ++i) s.add(t, i, static_cast<int64_t>(i % 7));
    s.fit(1);
    CHECK(s.points() <= 3);
    auto p = s.points_of(t);
    CHECK(p.back().value == 999 % 7);
}

TEST_CASE("samples of the same nanosecond are one bucket's, not a reduction") {
    // (--steps: a selected step's shadow rows all come at its start; the
    // trace called such a run "over the trace's budget")
    CounterSeries s(0, 100);
    size_t t = s.add_track("cpu in use");
    for (int i = 1; i <= 10; ++i) s.add(t, 500, i * 10);
    s.add(t, 600, 7);
    s.fit(100);
    CHECK(s.points() < s.samples());
    CHECK_FALSE(s.widened());
    auto p = s.points_of(t);
    REQUIRE(p.size() == 2);  // the instant's last level, then the next sample
    CHECK((p[0].value == 100 && p[1].value == 7));
}
