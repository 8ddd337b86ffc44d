// Small helpers shared by the built-in analyzers (header-only, plugin side:
// only the SDK and the standard library).
#pragma once

#include <msmemscope/plugin.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace msms_an {

using msmemscope::view;

using msmemscope::device_label;

struct DevKey {
    uint16_t kind = 0;
    int16_t id = -1;
    bool operator<(const DevKey& o) const { return std::tie(kind, id) < std::tie(o.kind, o.id); }
    bool operator==(const DevKey& o) const { return kind == o.kind && id == o.id; }
};
inline DevKey dev_key(const msms_event& ev) { return DevKey{ev.device_kind, ev.device_id}; }
inline std::string dev_name(const DevKey& d) {
    if (d.kind == MSMS_DEV_CPU) return "cpu";
    if (d.kind == MSMS_DEV_NPU || d.kind == MSMS_DEV_CUDA) return std::to_string(d.id < 0 ? 0 : d.id);
    return "N/A";
}

// A block: its pool and start address (one address may be live in two pools).
struct BlockKey {
    uint16_t dev_kind;
    int16_t dev_id;
    uint16_t type;
    uint64_t ptr;
    bool operator==(const BlockKey& o) const {
        return dev_kind == o.dev_kind && dev_id == o.dev_id && type == o.type && ptr == o.ptr;
    }
};
struct BlockKeyHash {
    size_t operator()(const BlockKey& k) const {
        return std::hash<uint64_t>()(k.ptr * 31 + (uint64_t(k.type) << 40) + (uint64_t(k.dev_kind) << 48) +
                                     uint64_t(uint16_t(k.dev_id)));
    }
};
inline BlockKey block_key(const msms_event& ev) { return BlockKey{ev.device_kind, ev.device_id, ev.type, ev.ptr}; }

inline std::string pool_name(uint16_t type) {
    const char* n = msms_event_type_name(type);
    return n ? n : "UNKNOWN";
}

inline std::string hex(uint64_t v) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
    return buf;
}

// "%f" of bytes in MiB, as upstream prints leak sizes.
inline std::string mb(long double bytes) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%f", static_cast<double>(bytes / (1024.0L * 1024.0L)));
    return buf;
}

inline uint64_t to_u64(std::string_view s, uint64_t fallback = 0) {
    if (s.empty()) return fallback;
    std::string t(s);
    char* end = nullptr;
    unsigned long long v = std::strtoull(t.c_str(), &end, 0);
    return end && *end == '\0' ? v : fallback;
}

// The first line of a stack text ("" when none).
inline std::string first_frame(std::string_view stack) {
    size_t nl = stack.find('\n');
    std::string_view f = nl == std::string_view::npos ? stack : stack.substr(0, nl);
    while (!f.empty() && (f.back() == '\r' || f.back() == ' ')) f.remove_suffix(1);
    while (!f.empty() && f.front() == ' ') f.remove_prefix(1);
    return std::string(f);
}

// Step boundaries (COMPAT §6): msmemscope.step() -> SYSTEM STEP (Name/aux0 =
// the number; it ends that step and begins the next), or an mstx range
// named exactly "step start" (Range_start .. Range_end with the same id).
// Mirrors upstream: with step(), the step after step(N) is N+1 (before the
// first call: 0); with mstx ranges, the k-th "step start" range is step k.
class StepTracker {
public:
    enum class Boundary { None, End, Start, EndAndStart };
    // Feeds one event; tells whether a step ended and/or a new one began.
    // `ended` receives the number of the step that ended.
    Boundary feed(const msms_event& ev, uint64_t& ended) {
        uint64_t before = current_;
        Boundary b = boundary(ev, ended);
        if (current_ != before) starts_.emplace_back(ev.timestamp_ns, current_);
        return b;
    }
    uint64_t current() const { return current_; }
    // The step that was current at time ts (an event's timestamp_ns), by
    // the boundaries fed so far: a row that stands for an event of the past
    // (a --steps shadow MALLOC's Attr allocated_at, framework/host/
    // step_gap.h) is told its step by the same numbering as the others.
    uint64_t at(uint64_t ts) const {
        auto it = std::upper_bound(starts_.begin(), starts_.end(), ts,
                                   [](uint64_t t, const std::pair<uint64_t, uint64_t>& s) { return t < s.first; });
        return it == starts_.begin() ? 0 : std::prev(it)->second;
    }
    bool conflicting(const msms_event& ev) const {
        if (ev.kind == MSMS_EV_SYSTEM && ev.type == MSMS_T_STEP) return source_ == Source::Mstx;
        if (ev.kind == MSMS_EV_MSTX && ev.type == MSMS_T_RANGE_START)
            return source_ == Source::Python && (view(ev.name) == "step start" || view(ev.name) == "\"step start\"");
        return false;
    }

private:
    Boundary boundary(const msms_event& ev, uint64_t& ended) {
        if (ev.kind == MSMS_EV_SYSTEM && ev.type == MSMS_T_STEP) {
            if (source_ == Source::Mstx) return Boundary::None;
            source_ = Source::Python;
            uint64_t n = ev.aux0;
            if (n == 0) n = to_u64(view(ev.name), current_ + 1);
            ended = n;
            current_ = n + 1;
            return Boundary::EndAndStart;
        }
        if (ev.kind == MSMS_EV_MSTX && ev.type == MSMS_T_RANGE_START) {
            std::string_view name = view(ev.name);
            if (name != "step start" && name != "\"step start\"") return Boundary::None;
            if (source_ == Source::Python) return Boundary::None;
            source_ = Source::Mstx;
            ++mstx_count_;
            current_ = mstx_count_;
            range_id_ = ev.aux0;
            in_range_ = true;
            return Boundary::Start;
        }
        if (ev.kind == MSMS_EV_MSTX && ev.type == MSMS_T_RANGE_END && source_ == Source::Mstx && in_range_ &&
            ev.aux0 == range_id_) {
            in_range_ = false;
            ended = current_;
            return Boundary::End;
        }
        return Boundary::None;
    }

    enum class Source { None, Python, Mstx };
    Source source_ = Source::None;
    uint64_t current_ = 0, mstx_count_ = 0, range_id_ = 0;
    bool in_range_ = false;
    std::vector<std::pair<uint64_t, uint64_t>> starts_;  // (timestamp, the step current from then), in time order
};

// True when the run's config_json lists --steps (analyses that need every
// step are off then, as upstream).
inline bool steps_selected(std::string_view config_json) {
    size_t p = config_json.find("\"steps\"");
    if (p == std::string_view::npos) return false;
    size_t b = config_json.find('[', p);
    if (b == std::string_view::npos) return false;
    for (size_t i = b + 1; i < config_json.size(); ++i) {
        char c = config_json[i];
        if (c == ']') return false;
        if (c != ' ' && c != '\n' && c != '\r' && c != '\t') return true;
    }
    return false;
}

// True in `msmemscope --analyze` (framework/host/offline/offline.cpp):
// its config_json lists no sink but `offline_writeback`, which keeps only
// the analyzers' annotations (written back into the dump) and drops every
// row they emit; nor does its console list the files written. An end-of-run
// line there must not say rows were written, and names where its files
// went. A run without a config_json (a plugin test's harness) is live.
inline bool offline_analysis(std::string_view config_json) {
    if (config_json.empty()) return false;
    size_t p = config_json.find("\"sinks\"");
    if (p == std::string_view::npos) return true;
    size_t open = config_json.find('[', p), close = config_json.find(']', p);
    if (open == std::string_view::npos || close == std::string_view::npos || close < open) return true;
    std::string_view list = config_json.substr(open + 1, close - open - 1);
    for (size_t q = list.find('"'); q != std::string_view::npos; q = list.find('"', q)) {
        size_t end = list.find('"', q + 1);
        if (end == std::string_view::npos) break;
        if (list.substr(q + 1, end - q - 1) != "offline_writeback") return false;
        q = end + 1;
    }
    return true;
}

}  // namespace msms_an
