#include "step_filter.h"

#include <algorithm>

namespace msms {

std::string StepFilter::list_text() const {
    std::string out = "[";
    for (size_t i = 0; i < steps_.size(); ++i) out += (i ? ", " : "") + std::to_string(steps_[i]);
    return out + "]";
}

std::vector<long long> StepFilter::unreached() const {
    std::vector<long long> out;
    for (long long s : steps_)
        if (s < 1 || static_cast<uint64_t>(s) > current_) out.push_back(s);
    return out;
}

const char* StepFilter::selection_change() {
    if (steps_.empty() || in_selected_step() == said_selected_) return nullptr;
    said_selected_ = !said_selected_;
    return said_selected_ ? "true" : "false";
}

bool StepFilter::selected() const {
    return std::find(steps_.begin(), steps_.end(), static_cast<long long>(current_)) != steps_.end();
}

bool StepFilter::keep(const msms_event& ev, const std::string& name) {
    if (steps_.empty()) return true;
    if (ev.kind == MSMS_EV_SYSTEM) {
        if (ev.type == MSMS_T_STEP && !mstx_) {
            uint64_t n = ev.aux0;
            if (n == 0) n = std::strtoull(name.c_str(), nullptr, 10);
            current_ = n + 1;
            saw_steps_ = true;
        }
        return true;
    }
    if (ev.kind == MSMS_EV_MSTX && (name == "step start" || name == "\"step start\"") &&
        ev.type == MSMS_T_RANGE_START) {
        if (!mstx_) {
            mstx_ = true;
        }
        current_ = ++mstx_count_;
        saw_steps_ = true;
        range_id_ = ev.aux0;
        in_range_ = true;
        bool k = selected();
        if (!k) ++dropped_;
        return k;
    }
    if (mstx_ && ev.kind == MSMS_EV_MSTX && ev.type == MSMS_T_RANGE_END && in_range_ && ev.aux0 == range_id_) {
        bool k = selected();
        in_range_ = false;
        if (!k) ++dropped_;
        return k;
    }
    if (ev.kind == MSMS_EV_OOM_DETAIL && ev.type == MSMS_T_OOM_TRIGGER) {
        if (!in_selected_step())
            failures_outside_.push_back((!mstx_ || in_range_ ? "step " : "after step ") + std::to_string(current_));
        return true;
    }
    bool k = in_selected_step();
    if (!k) ++dropped_;
    return k;
}

}  // namespace msms
