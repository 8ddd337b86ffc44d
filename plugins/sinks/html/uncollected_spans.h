// The spans of a --steps run that were not collected (the host keeps the
// selected steps' events only: framework/host/step_filter.h). The page
// shades them as it shades collection off between stop() and start():
// without the shading a chart reads 0 B before the first selected step and
// a flat level after the last, where the program went on unseen.
//
// The host says where it stopped and started dropping, on the rows that
// mark steps (Attr step_selected: "false" after this row, "true" from this
// row on; before the first row the run counts as collected): the page draws
// exactly those spans, whatever rule numbered the steps.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace msmemscope::html {

using Span = std::pair<uint64_t, uint64_t>;

class UncollectedSpans {
public:
    explicit UncollectedSpans(size_t max_spans) : max_(max_spans) {}

    // A row's Attr step_selected (its value), at the row's time.
    void mark(std::string_view step_selected, uint64_t ts) {
        if (step_selected == "false" && !dropping_) {
            dropping_ = true;
            since_ = ts;
        } else if (step_selected == "true" && dropping_) {
            dropping_ = false;
            if (spans_.size() < max_) spans_.emplace_back(since_, ts);
        }
    }

    // [from, to] spans not collected, the last one still open at `end`.
    std::vector<Span> spans(uint64_t end) const {
        std::vector<Span> out = spans_;
        if (dropping_ && out.size() < max_) out.emplace_back(since_, std::max(since_, end));
        return out;
    }

private:
    size_t max_;
    std::vector<Span> spans_;
    bool dropping_ = false;
    uint64_t since_ = 0;
};

}  // namespace msmemscope::html
