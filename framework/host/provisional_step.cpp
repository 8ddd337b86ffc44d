#include "provisional_step.h"

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>

namespace msms {

namespace {
void drop_attr(Record& r, const char* key) {
    r.attrs.erase(std::remove_if(r.attrs.begin(), r.attrs.end(), [&](auto& a) { return a.first == key; }),
                  r.attrs.end());
}

}  // namespace

void ProvisionalStep::settle(bool taken_over) {
    holding_ = false;
    auto mark = rows_.begin() + static_cast<std::ptrdiff_t>(ready_);  // the provisional row
    if (taken_over) rows_.erase(mark);  // the program's STEP marks this step
    else drop_attr(*mark, "provisional");
    ready_ = rows_.size();
}

bool ProvisionalStep::take(Record& r) {
    const bool step = r.ev.kind == MSMS_EV_SYSTEM && r.ev.type == MSMS_T_STEP;
    if (holding_) {
        const Record& mark = rows_[ready_];
        if (step && attr_true(r, "takes_over") && r.ev.aux0 == mark.ev.aux0) {
            drop_attr(r, "takes_over");
            settle(true);
        } else if (r.ev.kind == MSMS_EV_SYSTEM &&
                   (step || r.ev.type == MSMS_T_STOP_TRACE || r.ev.type == MSMS_T_START_TRACE)) {
            settle(false);
        } else if (rows_.size() - ready_ > kMaxHeld) {
            settle(false);
        } else {
            rows_.push_back(std::move(r));
            return true;
        }
    }
    // A takes_over row with no provisional one held: the mark stood (settled
    // before), its step is marked already.
    if (step && attr_true(r, "takes_over")) return true;
    if (step && attr_true(r, "provisional")) {
        holding_ = true;  // rows_[ready_] is this row
        rows_.push_back(std::move(r));
        return true;
    }
    if (rows_.empty()) return false;
    rows_.push_back(std::move(r));
    ++ready_;
    return true;
}

bool ProvisionalStep::next(Record& r) {
    if (ready_ == 0) return false;
    r = std::move(rows_.front());
    rows_.pop_front();
    --ready_;
    return true;
}

bool ProvisionalStep::end() {
    if (holding_) settle(false);
    return ready_ > 0;
}

}  // namespace msms
