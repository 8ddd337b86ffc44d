#include "counter_series.h"

#include <algorithm>

namespace msms_trace {

namespace {
constexpr uint64_t kMaxWidth = 1ull << 62;
}

size_t CounterSeries::add_track(std::string name) {
    Track tr;
    tr.name = std::move(name);
    tracks_.push_back(std::move(tr));
    budget_ = std::max(budget_, 3 * static_cast<uint64_t>(tracks_.size()));
    return tracks_.size() - 1;
}

uint64_t CounterSeries::count(const Bucket& b) {
    // distinct points among lo, hi, last (equal times are one point)
    uint64_t n = 1;
    if (b.hi.ts != b.lo.ts) ++n;
    if (b.last.ts != b.lo.ts && b.last.ts != b.hi.ts) ++n;
    return n;
}

bool CounterSeries::widened() const {
    for (const Track& tr : tracks_)
        if (tr.width > 1) return true;
    return false;
}

void CounterSeries::add(size_t t, uint64_t ts, int64_t value) {
    Track& tr = tracks_[t];
    ++samples_;
    ++tr.samples;
    uint64_t index = (ts > base_ ? ts - base_ : 0) / tr.width;
    CounterPoint p{ts, value};
    uint64_t before = tr.points;
    if (!tr.buckets.empty() && tr.buckets.back().index >= index) {
        Bucket& b = tr.buckets.back();  // same bucket (a late sample joins the last one)
        tr.points -= count(b);
        if (value < b.lo.value) b.lo = p;
        if (value > b.hi.value) b.hi = p;
        b.last = p;
        tr.points += count(b);
    } else {
        tr.buckets.push_back(Bucket{index, p, p, p});
        tr.points += 1;
    }
    points_ += tr.points - before;
    if (points_ > budget_) shrink();
}

void CounterSeries::halve(Track& tr) {
    tr.width *= 2;
    std::vector<Bucket> merged;
    merged.reserve(tr.buckets.size() / 2 + 1);
    for (const Bucket& b : tr.buckets) {
        uint64_t index = b.index / 2;
        if (!merged.empty() && merged.back().index >= index) {
            Bucket& m = merged.back();
            if (b.lo.value < m.lo.value) m.lo = b.lo;
            if (b.hi.value > m.hi.value) m.hi = b.hi;
            m.last = b.last;
        } else {
            Bucket n = b;
            n.index = index;
            merged.push_back(n);
        }
    }
    tr.buckets.swap(merged);
    points_ -= tr.points;
    tr.points = 0;
    for (const Bucket& b : tr.buckets) tr.points += count(b);
    points_ += tr.points;
}

void CounterSeries::shrink() {
    while (points_ > budget_) {
        Track* most = nullptr;
        for (Track& tr : tracks_)
            if (tr.width < kMaxWidth && tr.points > 3 && (!most || tr.points > most->points)) most = &tr;
        if (!most) return;
        halve(*most);
    }
}

void CounterSeries::fit(uint64_t budget) {
    budget_ = std::max(budget, 3 * static_cast<uint64_t>(tracks_.size()));
    shrink();
}

std::vector<CounterPoint> CounterSeries::points_of(size_t t) const {
    std::vector<CounterPoint> out;
    for (const Bucket& b : tracks_[t].buckets) {
        CounterPoint ps[3] = {b.lo, b.hi, b.last};
        std::sort(ps, ps + 3, [](const CounterPoint& a, const CounterPoint& c) { return a.ts < c.ts; });
        for (int i = 0; i < 3; ++i) {
            if (i && ps[i].ts == ps[i - 1].ts) {
                // the same time twice: the later one (last) wins
                if (ps[i].ts == b.last.ts) out.back() = b.last;
                continue;
            }
            out.push_back(ps[i].ts == b.last.ts ? b.last : ps[i]);
        }
    }
    return out;
}

}  // namespace msms_trace
