// my_peak: the peak of live bytes per owner within each step.
//
// An owner is the MALLOC's "owner" Attr (set by a collector, or by the
// decompose analyzer when it runs before this one), else the pool type
// (HOST, PTA, ...). A step ends at each SYSTEM/STEP event; the events after
// the last one form a final step, closed at finish. For each step the `top`
// owners with the highest peak are written to the end-of-run report
//
//     my_peak: step 2: mypool@weights 8.0 KiB, mypool@activations 4.0 KiB
//
// and to the findings table "my_peak" (step, rank, owner, peak_bytes), which
// sinks that keep tables (db, html) store.
//
// State: the live blocks and one counter per owner that has live bytes, not
// the history of the stream.
#include <msmemscope/plugin.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

using msmemscope::attr;

class PeakAnalyzer : public msmemscope::IAnalyzer {
public:
    static constexpr const char* kTypeName = "my_peak";
    static constexpr const char* kVersion = "1.0.0";
    static constexpr const char* kDescription = "peak live bytes per step per owner (SDK example)";
    static constexpr const char* kEvents = "alloc,free";

    static const msms_option_spec* options(uint32_t& count) {
        static const msms_option_spec specs[] = {
            {"top", MSMS_OPT_INT, "5", nullptr, 1, 1000, "owners listed per step, highest peak first"},
            {"unit", MSMS_OPT_ENUM, "KiB", "B|KiB|MiB", 0, 0, "unit of the reported sizes"},
        };
        count = sizeof(specs) / sizeof(specs[0]);
        return specs;
    }

    // The host validated the options against the schema above and filled in
    // the defaults, so no checks are needed here.
    PeakAnalyzer(msmemscope::Host host, const msmemscope::Options& opts)
        : host_(host), top_(static_cast<size_t>(opts.get_int("top", 5))), unit_(opts.get("unit", "KiB")) {}

    void on_event(const msms_event& ev) override {
        switch (ev.kind) {
        case MSMS_EV_MALLOC: on_malloc(ev); break;
        case MSMS_EV_FREE: on_free(ev); break;
        case MSMS_EV_SYSTEM:
            if (ev.type == MSMS_T_STEP) close_step(ev.aux0 ? ev.aux0 : step_);
            break;
        default: break;  // everything else, including kinds newer than this plugin
        }
    }

    // finish() may be called more than once: only the first call counts.
    void finish() override {
        if (finished_) return;
        finished_ = true;
        if (seen_in_step_) close_step(step_);
    }

private:
    struct Block {
        std::string owner;
        uint64_t size;
    };
    struct Owner {
        int64_t live = 0;
        int64_t peak = 0;
    };

    // Blocks are keyed by the host's allocation_id (same for a MALLOC and
    // its FREE); 0 when the stream has none, then by address.
    static uint64_t key(const msms_event& ev) {
        return ev.allocation_id ? ev.allocation_id : (ev.ptr ^ (uint64_t(ev.pid) << 48) ^ (uint64_t(ev.type) << 40));
    }

    void on_malloc(const msms_event& ev) {
        std::string owner(attr(ev, "owner"));
        if (owner.empty()) {
            const char* t = msms_event_type_name(ev.type);
            owner = t ? t : "unknown";
        }
        uint64_t k = key(ev);
        auto it = live_.find(k);
        if (it != live_.end()) release(it);  // same block again without a FREE
        Owner& o = owners_[owner];
        o.live += static_cast<int64_t>(ev.size);
        o.peak = std::max(o.peak, o.live);
        live_.emplace(k, Block{std::move(owner), ev.size});
        seen_in_step_ = true;
    }

    void on_free(const msms_event& ev) {
        auto it = live_.find(key(ev));
        if (it == live_.end()) return;  // freed before collection started
        release(it);
        seen_in_step_ = true;
    }

    void release(std::unordered_map<uint64_t, Block>::iterator it) {
        auto o = owners_.find(it->second.owner);
        if (o != owners_.end()) o->second.live -= static_cast<int64_t>(it->second.size);
        live_.erase(it);
    }

    std::string format(int64_t bytes) const {
        char buf[64];
        if (unit_ == "B") std::snprintf(buf, sizeof(buf), "%lld B", static_cast<long long>(bytes));
        else if (unit_ == "MiB") std::snprintf(buf, sizeof(buf), "%.1f MiB", bytes / 1048576.0);
        else std::snprintf(buf, sizeof(buf), "%.1f KiB", bytes / 1024.0);
        return buf;
    }

    void close_step(uint64_t step) {
        std::vector<std::pair<std::string, int64_t>> peaks;
        for (auto& [name, o] : owners_)
            if (o.peak > 0) peaks.emplace_back(name, o.peak);
        std::sort(peaks.begin(), peaks.end(), [](auto& a, auto& b) {
            return a.second != b.second ? a.second > b.second : a.first < b.first;
        });
        if (peaks.size() > top_) peaks.resize(top_);
        std::string line = "my_peak: step " + std::to_string(step) + ":";
        if (peaks.empty()) line += " no allocations";
        for (size_t i = 0; i < peaks.size(); ++i) {
            line += (i ? ", " : " ") + peaks[i].first + " " + format(peaks[i].second);
            host_.add_finding("my_peak", {{"step", std::to_string(step)},
                                          {"rank", std::to_string(i + 1)},
                                          {"owner", peaks[i].first},
                                          {"peak_bytes", std::to_string(peaks[i].second)}});
        }
        host_.report(line);
        // The next step starts from what is live now; owners with nothing
        // live are dropped, so the table stays as small as the live set.
        for (auto it = owners_.begin(); it != owners_.end();) {
            if (it->second.live <= 0) {
                it = owners_.erase(it);
            } else {
                it->second.peak = it->second.live;
                ++it;
            }
        }
        step_ = step + 1;
        seen_in_step_ = false;
    }

    msmemscope::Host host_;
    size_t top_;
    std::string unit_;
    std::unordered_map<uint64_t, Block> live_;
    std::unordered_map<std::string, Owner> owners_;
    uint64_t step_ = 1;
    bool seen_in_step_ = false;
    bool finished_ = false;
};

}  // namespace

MSMEMSCOPE_PLUGIN(PeakAnalyzer)
