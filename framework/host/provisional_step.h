// A provisional step mark (COMPAT: the optimizer's steps under the CLI).
//
// Under the CLI, after the program's start() and before any step was
// marked, the Python package cannot tell at the optimizer's first step
// whether the program marks its steps itself, with msmemscope.step() after
// opt.step() and maybe allocations in between (upstream's pattern), or not
// at all (then the optimizer's steps are the steps). It writes the
// optimizer's mark at once with Attr provisional:true, and the host holds
// the process's rows after it until it knows:
//  * the program's step() came: a STEP row of the same number with Attr
//    takes_over:true. The provisional row is dropped, the held rows go
//    first, then the program's STEP (its takes_over Attr removed): the
//    rows between opt.step() and step() are that step's, as upstream's;
//  * anything else ended it (the next STEP, STOP_TRACE or START_TRACE, the
//    stream's end, or kMaxHeld rows held): the provisional row is kept,
//    its provisional Attr removed, then the held rows. A takes_over row
//    that comes after that is dropped: its step was marked already.
// The rows come out in their order otherwise; applied to each process's
// ordered stream before anything else reads it (process_run.cpp).
#pragma once

#include <cstddef>
#include <deque>

#include "record.h"

namespace msms {

class ProvisionalStep {
public:
    static constexpr size_t kMaxHeld = 1 << 18;  // rows held at most

    // Offers the next row of the stream. False: r is not held, use it now.
    // True: it was taken (held, queued behind held rows, or dropped): next()
    // gives what is ready.
    bool take(Record& r);
    // The next row ready (in stream order) into r; false when none.
    bool next(Record& r);
    // The stream ended: what is held is ready (the provisional mark stands).
    // Whether any row is ready.
    bool end();
    bool holding() const { return holding_; }

private:
    void settle(bool taken_over);
    std::deque<Record> rows_;
    size_t ready_ = 0;  // rows_'s first ready_ rows are ready
    bool holding_ = false;
};

}  // namespace msms
