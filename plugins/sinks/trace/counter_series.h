// Memory counters of the trace sink, kept in memory until the end of the run
// and downsampled to a budget.
//
// Every track's samples fall into time buckets of the track's width (1 ns at
// first: every sample kept). A bucket keeps its lowest and highest value and
// its last value, each with its time, so a peak or a dip survives any amount
// of downsampling and the level after the bucket is right. Past the budget
// the track with the most points doubles its width (neighbouring buckets
// merge), and again, until the points fit: a busy track (the host heap
// during `import torch`) is reduced first and alone, a quiet one (a
// framework pool during the training steps) keeps every sample as long as
// its fair share allows. Within a track the resolution is the same over the
// whole run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace msms_trace {

struct CounterPoint {
    uint64_t ts;
    int64_t value;
};

class CounterSeries {
public:
    // base: the time buckets count from; budget: points kept at most
    // (at least 3 per track are always kept).
    CounterSeries(uint64_t base, uint64_t budget) : base_(base), budget_(budget) {}

    // A new track; returns its index.
    size_t add_track(std::string name);
    // A sample of track t (time order within a track).
    void add(size_t t, uint64_t ts, int64_t value);

    // Downsamples until at most `budget` points are kept.
    void fit(uint64_t budget);

    uint64_t samples() const { return samples_; }
    uint64_t points() const { return points_; }
    size_t tracks() const { return tracks_.size(); }
    const std::string& name(size_t t) const { return tracks_[t].name; }
    uint64_t samples(size_t t) const { return tracks_[t].samples; }
    uint64_t points(size_t t) const { return tracks_[t].points; }
    uint64_t width_ns(size_t t) const { return tracks_[t].width; }
    // Whether the budget widened any track's buckets. Samples of the same
    // nanosecond share a bucket from the start (--steps writes a selected
    // step's shadow rows at its start): fewer points than samples then is
    // no reduction a reader should be warned of.
    bool widened() const;
    // The points of track t in time order (lowest, highest, last of each bucket).
    std::vector<CounterPoint> points_of(size_t t) const;

private:
    struct Bucket {
        uint64_t index;
        CounterPoint lo, hi, last;
    };
    struct Track {
        std::string name;
        std::vector<Bucket> buckets;
        uint64_t width = 1, samples = 0, points = 0;
    };
    static uint64_t count(const Bucket& b);
    void halve(Track& tr);
    // Halves the track with the most points while over the budget.
    void shrink();

    uint64_t base_, budget_, samples_ = 0, points_ = 0;
    std::vector<Track> tracks_;
};

}  // namespace msms_trace
