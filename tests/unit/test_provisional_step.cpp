#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "provisional_step.h"

using namespace msms;

namespace {
Record row(uint16_t kind, uint16_t type, uint64_t aux0 = 0, const char* attr = nullptr) {
    Record r;
    r.ev.kind = kind;
    r.ev.type = type;
    r.ev.aux0 = aux0;
    if (kind == MSMS_EV_SYSTEM && type == MSMS_T_STEP) r.name = std::to_string(aux0);
    if (attr) r.attrs.emplace_back(attr, "true");
    return r;
}
Record step(uint64_t n, const char* attr = nullptr) { return row(MSMS_EV_SYSTEM, MSMS_T_STEP, n, attr); }
Record alloc(uint64_t ptr) {
    Record r = row(MSMS_EV_MALLOC, MSMS_T_HOST);
    r.ev.ptr = ptr;
    return r;
}

// What the stream gives after each row offered: "S1" a STEP, "M7" a MALLOC
// at 7, "X" STOP_TRACE; an Attr left on a row as "+name".
std::string text(const Record& r) {
    std::string s = r.ev.kind == MSMS_EV_MALLOC ? "M" + std::to_string(r.ev.ptr)
                    : r.ev.type == MSMS_T_STEP  ? "S" + r.name
                                                : "X";
    for (auto& a : r.attrs) s += "+" + a.first;
    return s;
}

std::vector<std::string> feed(ProvisionalStep& p, std::vector<Record> rows, bool end = true) {
    std::vector<std::string> out;
    Record r;
    for (Record& in : rows) {
        if (!p.take(in)) out.push_back(text(in));
        while (p.next(r)) out.push_back(text(r));
    }
    if (end && p.end())
        while (p.next(r)) out.push_back(text(r));
    return out;
}
}  // namespace

// opt.step(); keep.append(...); msmemscope.step(): the rows between the
// optimizer's provisional mark and the program's step() are that step's.
TEST_CASE("the program's step() takes the provisional mark over: the rows in between come before its STEP") {
    ProvisionalStep p;
    CHECK(feed(p, {alloc(1), step(1, "provisional"), alloc(2), step(1, "takes_over"), alloc(3), step(2)}) ==
          std::vector<std::string>{"M1", "M2", "S1", "M3", "S2"});
}

TEST_CASE("without a step() the provisional mark stands, its Attr removed, when the next mark comes") {
    ProvisionalStep p;
    CHECK(feed(p, {step(1, "provisional"), alloc(2), step(2), alloc(3)}) ==
          std::vector<std::string>{"S1", "M2", "S2", "M3"});
}

TEST_CASE("stop() or the stream's end lets the provisional mark stand") {
    ProvisionalStep a;
    CHECK(feed(a, {step(1, "provisional"), alloc(2), row(MSMS_EV_SYSTEM, MSMS_T_STOP_TRACE)}) ==
          std::vector<std::string>{"S1", "M2", "X"});
    ProvisionalStep b;
    CHECK(feed(b, {step(1, "provisional"), alloc(2)}, false).empty());  // held until it is known
    Record r;
    CHECK(b.end());
    std::vector<std::string> out;
    while (b.next(r)) out.push_back(text(r));
    CHECK(out == std::vector<std::string>{"S1", "M2"});
}

TEST_CASE("past the rows it may hold the provisional mark stands, and a later takes_over row is dropped") {
    ProvisionalStep p;
    std::vector<Record> rows{step(1, "provisional")};
    for (size_t i = 0; i <= ProvisionalStep::kMaxHeld; ++i) rows.push_back(alloc(10));
    rows.push_back(step(1, "takes_over"));
    rows.push_back(alloc(3));
    auto out = feed(p, std::move(rows));
    REQUIRE(out.size() == ProvisionalStep::kMaxHeld + 3);
    CHECK(out.front() == "S1");
    CHECK(out.back() == "M3");
}
