// The spans of a --steps run that were not collected (the host keeps the
// selected steps' events only: framework/host/step_filter.h). The page
// shades them as it shades collection off between stop() and start():
// without the shading a chart reads 0 B before the first selected step and
// a flat level after the last, where the program went on unseen.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace msmemscope::html {

using Span = std::pair<uint64_t, uint64_t>;

// The steps of a run as its rows mark them: STEP rows (msmemscope.step():
// the row numbered N ends step N, events before the first are step 1), or
// mstx "step start" ranges (each kept one a selected step).
struct StepMarks {
    std::map<uint64_t, uint64_t> step_end;  // STEP row number -> its time
    std::vector<Span> ranges;               // kept "step start" ranges
    std::map<uint64_t, uint64_t> open;      // range id -> its start, not yet ended
};

// [from, to] spans within [start, end] outside every selected step.
inline std::vector<Span> uncollected_spans(const std::vector<long long>& selected, const StepMarks& m, uint64_t start,
                                           uint64_t end) {
    std::vector<Span> collected;
    if (!m.ranges.empty() || !m.open.empty()) {
        collected = m.ranges;
        for (auto& [id, from] : m.open) collected.emplace_back(from, end);  // still open at the end
    } else {
        for (long long k : selected) {
            if (k < 1) continue;
            uint64_t from = start;
            if (k > 1) {
                auto it = m.step_end.find(static_cast<uint64_t>(k - 1));
                if (it == m.step_end.end()) continue;  // never reached
                from = it->second;
            }
            auto it = m.step_end.find(static_cast<uint64_t>(k));
            collected.emplace_back(from, it == m.step_end.end() ? end : it->second);
        }
    }
    std::sort(collected.begin(), collected.end());
    std::vector<Span> out;
    uint64_t at = start;
    for (auto& [from, to] : collected) {
        if (from > at) out.emplace_back(at, std::min(from, end));
        at = std::max(at, to);
    }
    if (at < end) out.emplace_back(at, end);
    return out;
}

}  // namespace msmemscope::html
