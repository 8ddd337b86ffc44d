#include <doctest/doctest.h>

#include <string>

#include "step_filter.h"

using namespace msms;

namespace {
msms_event row(uint16_t kind, uint16_t type, uint64_t aux0 = 0) {
    msms_event ev{};
    ev.kind = kind;
    ev.type = type;
    ev.aux0 = aux0;
    return ev;
}

// What the host writes on a row the filter kept (process_run.cpp): its Attr
// step_selected, "" for none. Only SYSTEM and MSTX rows carry it.
std::string kept_row(StepFilter& f, const msms_event& ev, const std::string& name = "") {
    REQUIRE(f.keep(ev, name));
    if (ev.kind != MSMS_EV_SYSTEM && ev.kind != MSMS_EV_MSTX) return "";
    const char* change = f.selection_change();
    return change ? change : "";
}

const msms_event kStart = row(MSMS_EV_SYSTEM, MSMS_T_START_TRACE);
const msms_event kMalloc = row(MSMS_EV_MALLOC, MSMS_T_HOST);
msms_event step_row(uint64_t n) { return row(MSMS_EV_SYSTEM, MSMS_T_STEP, n); }
}  // namespace

// The host says on the rows where --steps stops and starts dropping events
// (step_filter.h): the views draw those spans, never a rule of their own.
TEST_CASE("step() steps: the rows that end a step say where the selection starts and stops") {
    StepFilter f({2, 3});
    CHECK(kept_row(f, kStart) == "false");  // step 1 is not selected: nothing of it is collected
    CHECK_FALSE(f.keep(kMalloc, ""));
    CHECK(kept_row(f, step_row(1)) == "true");  // step 2 starts
    CHECK(kept_row(f, kMalloc) == "");
    CHECK(kept_row(f, step_row(2)) == "");  // step 3 goes on collecting
    CHECK(kept_row(f, step_row(3)) == "false");
    CHECK_FALSE(f.keep(kMalloc, ""));
    CHECK(kept_row(f, step_row(4)) == "");
}

TEST_CASE("mstx steps: the events before the first range are step 1's, collected when step 1 is selected") {
    // (the rule the html page had copied drew them as not collected)
    StepFilter f({1});
    CHECK(kept_row(f, kStart) == "");
    CHECK(kept_row(f, row(MSMS_EV_MSTX, MSMS_T_MARK), "training start") == "");
    CHECK(kept_row(f, kMalloc) == "");
    CHECK(kept_row(f, row(MSMS_EV_MSTX, MSMS_T_RANGE_START, 7), "step start") == "");
    CHECK(kept_row(f, row(MSMS_EV_MSTX, MSMS_T_RANGE_END, 7)) == "false");
    CHECK_FALSE(f.keep(kMalloc, ""));
    CHECK_FALSE(f.keep(row(MSMS_EV_MSTX, MSMS_T_RANGE_START, 8), "step start"));  // step 2
    CHECK_FALSE(f.keep(row(MSMS_EV_MSTX, MSMS_T_RANGE_END, 8), ""));
    CHECK(kept_row(f, row(MSMS_EV_SYSTEM, MSMS_T_STOP_TRACE)) == "");
}

TEST_CASE("a change on a dropped row is said on the next row that can carry it") {
    StepFilter f({2});
    CHECK_FALSE(f.keep(kMalloc, ""));  // the stream's first event, in step 1
    CHECK_FALSE(f.keep(row(MSMS_EV_MSTX, MSMS_T_MARK), "warm-up"));
    CHECK(kept_row(f, kStart) == "false");
    CHECK_FALSE(f.keep(row(MSMS_EV_MSTX, MSMS_T_RANGE_START, 1), "step start"));  // step 1's range
    CHECK_FALSE(f.keep(row(MSMS_EV_MSTX, MSMS_T_RANGE_END, 1), ""));
    CHECK(kept_row(f, row(MSMS_EV_MSTX, MSMS_T_RANGE_START, 2), "step start") == "true");
}

TEST_CASE("without --steps no row says anything") {
    StepFilter f({});
    CHECK(kept_row(f, kStart) == "");
    CHECK(kept_row(f, step_row(1)) == "");
}
