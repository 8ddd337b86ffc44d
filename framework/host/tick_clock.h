// Converts a capture's timestamps to CLOCK_MONOTONIC ns (capture_format.h,
// "The capture's clock"). A kClockMonotonic capture is already in ns (the
// identity). A kClockTsc capture stamps TSC ticks; the host converts each
// event when it delivers it, in delivery (tick) order, from the calibration
// pairs (tick, ns) seen before it: the header's first pair and the kClock
// records of the stream. An event at tick t gets
//     ns = ns_k + (t - tick_k) * rate
// where (tick_k, ns_k) is the last pair delivered before it and rate the
// ns per tick measured between the two last pairs (the header's first
// measure until a pair comes far enough from the first). Every pair re-anchors
// the conversion, so the error never accumulates: it is the clock reads'
// jitter plus the rate's error over one interval (about a microsecond at
// most, on the first milliseconds; tens of ns later). Deterministic: a live
// run and a replay of the same capture convert every event the same way.
#pragma once

#include <cmath>
#include <cstdint>

namespace msms {

class TickClock {
public:
    // The identity (CLOCK_MONOTONIC ns captures).
    void reset_identity() { *this = TickClock(); }
    // A TSC capture: tick0 read at ns0, ns_per_tick the agent's first measure.
    void reset_tsc(uint64_t tick0, uint64_t ns0, double ns_per_tick) {
        *this = TickClock();
        tsc_ = true;
        tick_ = prev_tick_ = tick0;
        ns_ = prev_ns_ = ns0;
        rate_ = rate0_ = ns_per_tick > 0 ? ns_per_tick : 1.0;
    }
    bool is_tsc() const { return tsc_; }
    double ns_per_tick() const { return rate_; }

    // A calibration pair, in stream order. A pair that goes back in either
    // clock, or whose rate is not within a factor 2 of the first measure
    // (damage, or a clock that jumped), is ignored.
    void add_point(uint64_t tick, uint64_t ns) {
        if (!tsc_ || tick <= tick_ || ns < ns_) return;
        double r = static_cast<double>(ns - ns_) / static_cast<double>(tick - tick_);
        if (!(r > rate0_ / 2 && r < rate0_ * 2)) return;
        // The rate comes from the last two pairs when they are far enough
        // apart for the clock reads' jitter (~100 ns) not to matter much.
        double span_ns = static_cast<double>(tick - prev_tick_) * rate_;
        if (span_ns >= kMinSpanNs) {
            double pr = static_cast<double>(ns - prev_ns_) / static_cast<double>(tick - prev_tick_);
            if (pr > rate0_ / 2 && pr < rate0_ * 2) rate_ = pr;
            prev_tick_ = tick;
            prev_ns_ = ns;
        }
        tick_ = tick;
        ns_ = ns;
    }

    uint64_t to_ns(uint64_t t) const {
        if (!tsc_) return t;
        double d = (static_cast<double>(static_cast<int64_t>(t - tick_))) * rate_;
        int64_t off = static_cast<int64_t>(std::llround(d));
        if (off < 0 && static_cast<uint64_t>(-off) > ns_) return 0;
        return ns_ + static_cast<uint64_t>(off);
    }
    // A duration in ns as ticks (rounded up; at least 1 for a non-zero ns).
    uint64_t ns_to_ticks(uint64_t ns) const {
        if (!tsc_ || ns == 0) return ns;
        return static_cast<uint64_t>(std::ceil(static_cast<double>(ns) / rate_));
    }

    static constexpr double kMinSpanNs = 20000;  // 20 us

private:
    bool tsc_ = false;
    uint64_t tick_ = 0, ns_ = 0;            // the last pair
    uint64_t prev_tick_ = 0, prev_ns_ = 0;  // the pair the rate is measured from
    double rate_ = 1.0, rate0_ = 1.0;
};

}  // namespace msms
