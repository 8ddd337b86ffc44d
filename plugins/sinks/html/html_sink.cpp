// Sink `html`: report_{ts}.html in the process folder, one self-contained
// page (inline CSS and script, no network): per device, memory over time
// stacked by owner category (Attr `owner`, first two levels, else the pool
// type) with the peak marked; the live blocks at the peak grouped by stack;
// the top allocation sites; and the findings tables (leaks, inefficient...).
//
// Everything is aggregated while the events stream by, so that a capture of
// tens of millions of events gives a page of a few hundred kilobytes:
//   - curves: buckets of adaptive width, at most kMaxPoints per device; a
//     bucket keeps the state at its highest total, so peaks survive;
//   - live blocks: state per live block only; the blocks live at the peak
//     are the live ones allocated before it plus those freed since (a list
//     bounded by the number of blocks live at the peak);
//   - sites: one entry per distinct stack;
//   - lifetimes (start, end, size, site, owner) of the largest blocks, at
//     most kMaxLives per device (all of them in a small run): the page lists
//     what was live at a clicked time and recomputes its tables for a
//     selected time range from them;
//   - per device and site: bytes allocated, live at the peak, leaked (the
//     blocks and bytes of the leaks analyzer's findings, found by their
//     MALLOC's event id; when the analysis did not run, the blocks live at
//     the end, and the page says that is what they are) for the flame graph;
//   - owners: the MALLOC's Attr `owner` (decompose's owner names); the
//     owner annotation of a later relabel (weights, gradients tagged after
//     their allocation) moves a live block's bytes to that series from its
//     MALLOC on, as the decomposition's table counts them;
//   - inefficient memory: the inefficient analyzer's annotations (Attr
//     `inefficient_type` of a block's MALLOC, annotated again with both kinds
//     when a second one is found) counted per block while it is live: its
//     blocks and bytes once in the total and once in each of its kinds, per
//     device, and the kMaxIneff largest marked blocks with their site.
#include <msmemscope/plugin.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "report_template.h"
#include "uncollected_spans.h"
#include "util/addr_map.h"
#include "util/json.h"
#include "util/written_events.h"

namespace {

using msmemscope::view;

constexpr size_t kMaxPoints = 4000;      // per device, after downsampling
constexpr size_t kMaxCategories = 12;    // per device, then "other"
constexpr size_t kMaxSites = 200000;     // distinct stacks, then "(other sites)"
constexpr size_t kMaxFindingRows = 5000;  // per table
constexpr size_t kTopRows = 100;          // rows in the peak / site tables
constexpr size_t kMaxMarks = 1000;        // steps drawn on the charts
constexpr size_t kMaxLives = 20000;       // block lifetimes per device in the page
constexpr size_t kFlameSites = 2000;      // flame graph sites per device and measure
constexpr size_t kMaxGone = 4000000;      // freed blocks a leak finding may name (24 bytes each)
constexpr size_t kMaxIneff = 100;         // the largest blocks the inefficient analysis marked, listed
constexpr size_t kMaxOom = 1000;          // out-of-memory failures listed (marks and hover), then counted only
constexpr size_t kOomStacks = 100;        // ... the first of them with their stacks
constexpr size_t kOomDumps = 20;          // ... with the oom analysis's blocks live at the failure


// JSON string safe inside <script>: no "</" can close the element.
void jstr(std::string& out, std::string_view s) {
    size_t at = out.size();
    msms::json_quote(out, s);
    for (size_t i = at; i < out.size(); ++i)
        if (out[i] == '<') out.replace(i, 1, "\\u003c");
}

// The page as it is rendered: its text gathers in one buffer that goes to
// the file each time it passes kSpill, so that a page of megabytes never
// lives whole in memory. On this project's 2-vCPU VM a fresh page of memory
// costs ~16 us at its first touch: rendering a 1.8 MB page into a growing
// string and then copying it into the template took 10-14 ms for the copy
// alone; a replay of a 1.4 MB page ends ~25 ms sooner this way (medians of
// 15 interleaved pairs).
class PageWriter {
public:
    static constexpr size_t kSpill = 256 << 10;

    PageWriter(std::FILE* f, const msmemscope::Host& host) : f_(f), host_(host) { buf_.reserve(kSpill + (64 << 10)); }
    std::string& text() { return buf_; }
    // Between items of a long list: the buffer goes out once it is full.
    void spill() {
        if (buf_.size() >= kSpill) flush();
    }
    void flush() {
        if (buf_.empty()) return;
        if (ok_ && std::fwrite(buf_.data(), 1, buf_.size(), f_) != buf_.size()) {
            ok_ = false;
            errno_ = errno;
        }
        written_ += buf_.size();
        buf_.clear();
        host_.progress(written_, 0);  // the page's size is known at its end
    }
    bool ok() const { return ok_; }
    int error() const { return errno_; }
    uint64_t written() const { return written_; }

private:
    std::FILE* f_;
    const msmemscope::Host& host_;
    std::string buf_;
    uint64_t written_ = 0;
    bool ok_ = true;
    int errno_ = 0;
};

struct Site {
    std::string text;  // stack text (Python frames first), or "(no stack) POOL"
    uint32_t py_lines = 0;  // how many of its lines are Python frames
    uint64_t count = 0, bytes = 0, live_bytes = 0, live_count = 0;
};

struct Life {
    uint64_t start, end, size;  // end 0: live at the end
    uint32_t site;
    uint16_t cat;
};

struct Block {
    uint64_t size, ts, seq;
    uint64_t id;     // the MALLOC's event id (what analyzers' findings and annotations name)
    uint32_t site;
    uint32_t bound;  // step and mark boundaries seen before the MALLOC
    uint16_t cat;
    uint8_t ineff;   // the inefficient kinds marked on it (bits: HtmlSink::ineff_kinds_; in cat's padding)
    uint32_t n;      // the blocks it stands for: the imports' heap is one row for many (Attr blocks)
};


// A row of the leaks analyzer's findings, as the page needs it.
struct LeakRow {
    std::string kind, device, pool, stack, site;
    uint64_t event_id = 0, allocation_id = 0, size = 0, count = 1;
};

// What a device's leaked view shows: the leak analysis's blocks and bytes.
struct LeakSum {
    uint64_t blocks = 0, bytes = 0;
    std::map<std::string, std::pair<uint64_t, uint64_t>> kinds;  // kind -> blocks, bytes
    std::unordered_map<uint32_t, uint64_t> site_bytes;
};

struct Point {
    uint64_t ts;
    int64_t total;
    std::vector<int64_t> v;
};

struct Device {
    std::string label;
    uint16_t kind = 0;
    int16_t id = -1;
    bool framework = false;
    std::vector<std::string> cats;
    std::map<std::string, uint16_t> cat_index;
    std::vector<int64_t> cur;
    int64_t total = 0;
    // curve
    std::vector<Point> points;
    bool have_bucket = false;
    uint64_t width = 1000, bucket = 0;  // bucket index = (ts - base) / width
    Point best;                         // the bucket's state at its highest total
    // peak
    int64_t peak = 0;
    uint64_t peak_ts = 0, peak_seq = 0;
    std::vector<Block> freed_since_peak;
    msms::AddrMap<Block> live;  // allocation id (or address | 1<<63) -> block
    uint64_t mallocs = 0, frees = 0;
    // lifetimes of the largest blocks; blocks under lives_min are not kept
    std::vector<Life> lives;
    uint64_t lives_min = 0;
    std::unordered_map<uint32_t, uint64_t> site_bytes;  // allocated per site
};

// What the inefficient analysis marked on a device: blocks and bytes, each
// block once; per kind, the blocks marked with it.
struct IneffSum {
    uint64_t blocks = 0, bytes = 0;
    std::map<std::string, std::pair<uint64_t, uint64_t>> kinds;  // kind -> blocks, bytes
};

// A block the oom analysis listed as live at a failure (an OOM_RECENT_ALLOC
// or OOM_TOP_ALLOC row), as the row has it.
struct OomBlock {
    std::string pool, ptr, step;
    uint64_t size = 0, ts = 0;
    std::string stack;
};

// An out-of-memory failure: the oom analyzer's finding (table "oom", one at
// every failure, with or without --analysis=oom) and, when that analysis
// listed them, the blocks live then.
struct OomFailure {
    uint64_t ts = 0, req_size = 0, allocated = 0;
    uint64_t total = 0, free = 0;  // the memory the failure ran into (0: not known), as OOM_Snapshot has it
    std::string device, func, flag, ret, stack;
    std::string limit;             // which bound total/free are (a cpu failure's); empty: the device's
    bool details = false;
    std::vector<OomBlock> recent, top;
};

// One of the largest marked blocks.
struct IneffBlock {
    uint64_t size;
    uint32_t site;
    uint8_t kinds;
    const Device* dev;
};

class HtmlSink : public msmemscope::ISink {
public:
    static constexpr const char* kTypeName = "html";
    static constexpr const char* kVersion = "1.0.0";
    static constexpr const char* kDescription =
        "report_{ts}.html: self-contained page with memory over time by owner, peak blocks, top sites, findings";

    HtmlSink(msmemscope::Host host, const msmemscope::Options& opts)
        : host_(host), written_(msms::WrittenEvents::from_option(opts.get("write_events", "all"))) {}

    // The dump's rows (the card "rows"): what --events writes, as the csv
    // and db sinks do; the page itself draws from every event it is given.
    static const msms_option_spec* options(uint32_t& count) {
        static const msms_option_spec specs[] = {msms::WrittenEvents::kOptionSpec};
        count = 1;
        return specs;
    }

    void begin(const msmemscope::RunInfo& run) override {
        run_ = run;
        // The leaks analyzer turns itself off under --steps (only those
        // steps' events come): the page must not call that "no leak".
        selected_steps_ = steps_of(run.config_json);
        leaks_off_for_steps_ = analysis_listed(run.config_json, "leaks") && !selected_steps_.empty();
        leaks_ran_ = analysis_listed(run.config_json, "leaks") && !leaks_off_for_steps_;
        ineff_listed_ = analysis_listed(run.config_json, "inefficient");
        oom_listed_ = analysis_listed(run.config_json, "oom") || analysis_listed(run.config_json, "oom:", true);
        keep_gone_ = leaks_ran_ || leaks_off_for_steps_ || run.config_json.find("\"analysis\"") == std::string::npos;
        // A Python API session (config.json "python_api": true): the page
        // names config()'s keys where it names an option (D.api).
        api_ = run.config_json.find("\"python_api\": true") != std::string::npos;
    }

    void on_event(const msms_event& ev) override {
        ++events_;
        if (ev.kind != MSMS_EV_PY_TRACE && written_.wants(ev)) ++rows_;  // python_trace rows have their own file
        if (!base_set_) {
            base_ = ev.timestamp_ns;
            base_set_ = true;
        }
        last_ts_ = std::max(last_ts_, ev.timestamp_ns);
        ++kinds_[ev.kind < MSMS_EV_KIND_COUNT ? ev.kind : 0];
        if (ev.kind == MSMS_EV_MALLOC || ev.kind == MSMS_EV_FREE) {
            if (ev.kind == MSMS_EV_FREE && msmemscope::attr(ev, "image_ended") == "true") {
                // The image ended with it (exec, or _exit after fork): its
                // memory went with it, judged by no leak analysis.
                ++image_ended_.first;
                image_ended_.second += ev.size;
            }
            if (ev.kind == MSMS_EV_FREE && msmemscope::attr(ev, "shadow") == "true") {
                // Shadow FREEs (framework/host/shadow.h) close the blocks
                // still live when collection ends: the report keeps them
                // live (final, live at the end, leaked). A later MALLOC or
                // FREE shows they were real (an address reused unseen).
                msms_event f = ev;
                f.attrs = nullptr;
                f.attr_count = 0;
                f.name = f.py_stack = f.c_stack = msms_str{nullptr, 0};
                shadow_frees_.push_back(f);
                return;
            }
            for (const msms_event& f : shadow_frees_) memory(f);
            shadow_frees_.clear();
            memory(ev);
        } else if (ev.kind == MSMS_EV_OOM_DETAIL && (ev.type == MSMS_T_OOM_RECENT_ALLOC || ev.type == MSMS_T_OOM_TOP_ALLOC)) {
            oom_block(ev);
        } else if (ev.kind == MSMS_EV_MSTX) {
            ++bounds_;
        } else if (ev.kind == MSMS_EV_SYSTEM && ev.type == MSMS_T_STEP) {
            ++bounds_;
            // msmemscope.step() ends a step (COMPAT §2, §4: its row's Name is the
            // step that ended; the next one begins there): the label says
            // which, so "step 3" at the line is not read as step 3's start
            if (marks_.size() < kMaxMarks)
                marks_.emplace_back(ev.timestamp_ns, "end of step " + std::string(view(ev.name)));
        } else if (ev.kind == MSMS_EV_SYSTEM && ev.type == MSMS_T_STOP_TRACE) {
            off_since_ = ev.timestamp_ns;
            off_open_ = true;
        } else if (ev.kind == MSMS_EV_SYSTEM && ev.type == MSMS_T_START_TRACE && off_open_) {
            // stop() ... start(): nothing was recorded between them; the
            // charts shade the span instead of drawing a level held through it
            if (off_.size() < kMaxMarks) off_.emplace_back(off_since_, ev.timestamp_ns);
            off_open_ = false;
        }
        // --steps: the host says on these rows where it dropped the program's events
        if ((ev.kind == MSMS_EV_SYSTEM || ev.kind == MSMS_EV_MSTX) && ev.attr_count)
            if (std::string_view v = msmemscope::attr(ev, "step_selected"); !v.empty()) uncollected_.mark(v, ev.timestamp_ns);
    }

    void on_annotation(uint64_t id, std::string_view key, std::string_view value) override {
        if (key == "inefficient_type") inefficient(id, value);
        else if (key == "owner") relabel(id, value);
    }

    void on_finding(std::string_view table, const msms_kv* cols, uint32_t n) override {
        if (table == "oom") return oom_failure(cols, n);  // its own section and the charts' marks
        if (table == "plugin_failure") return plugin_failure(cols, n);
        if (table == "leaks") {
            LeakRow r;
            auto number = [](std::string_view v) { return std::strtoull(std::string(v).c_str(), nullptr, 10); };
            for (uint32_t i = 0; i < n; ++i) {
                std::string_view k = view(cols[i].key), v = view(cols[i].value);
                if (k == "kind") r.kind = v;
                else if (k == "device") r.device = v;
                else if (k == "pool") r.pool = v;
                else if (k == "stack") r.stack = v;
                else if (k == "site") r.site = v;
                else if (k == "event_id") r.event_id = number(v);
                else if (k == "allocation_id") r.allocation_id = number(v);
                else if (k == "size") r.size = number(v);
                else if (k == "count") r.count = number(v);
            }
            leak_rows_.push_back(std::move(r));
        }
        auto& t = findings_[std::string(table)];
        ++t.total;
        if (t.rows.size() >= kMaxFindingRows) return;
        std::vector<std::string> row(t.cols.size());
        for (uint32_t i = 0; i < n; ++i) {
            std::string k(view(cols[i].key));
            auto it = std::find(t.cols.begin(), t.cols.end(), k);
            size_t at = static_cast<size_t>(it - t.cols.begin());
            if (it == t.cols.end()) {
                t.cols.push_back(k);
                row.emplace_back();
            }
            row[at] = std::string(view(cols[i].value));
        }
        t.rows.push_back(std::move(row));
    }

    void finish() override {
        settle_host_pending();
        std::string path = run_.output_dir + "/report_" + run_.timestamp + ".html";
        // Created O_EXCL|O_NOFOLLOW in the run folder's descriptor (issue #29
        // item 4): a folder swapped for a link is never written through.
        std::string why;
        msmemscope::files::Fd dir(run_.open_output_dir(why));
        std::FILE* f = dir ? msmemscope::files::create_stream(dir.get(), "report_" + run_.timestamp + ".html", why) : nullptr;
        if (!f) throw std::runtime_error("cannot write " + path + ": " + why);
        // The template around the data, the data rendered straight into the
        // file (PageWriter), each spill said on the status line (ABI 1.2
        // progress).
        std::string_view tpl = msms_html::kReportTemplate;
        size_t at = tpl.find("@DATA@");
        size_t t_at = tpl.find("@TITLE@");
        PageWriter page(f, host_);
        std::string& o = page.text();
        o.append(tpl.substr(0, t_at));
        o += html_escape("msmemscope report: pid " + std::to_string(run_.pid));
        o.append(tpl.substr(t_at + 7, at - t_at - 7));
        render_data(page);
        o.append(tpl.substr(at + 6));
        page.flush();
        host_.progress(page.written(), page.written());
        int err = page.ok() ? 0 : page.error();
        if (std::fclose(f) != 0 && err == 0) err = errno ? errno : EIO;
        if (err != 0) throw std::runtime_error("cannot write " + path + ": " + std::strerror(err));
    }

private:
    struct Gone {  // a freed block a finding may name
        uint64_t id, allocation_id;
        uint32_t site;
        Device* dev;
    };

    // Whether the run's configuration lists the analyzer (config.json's
    // "analysis" array); an empty or foreign configuration lists none.
    static bool analysis_listed(std::string_view config, std::string_view name, bool prefix = false) {
        size_t k = config.find("\"analysis\"");
        if (k == std::string_view::npos) return false;
        size_t a = config.find('[', k), b = config.find(']', k);
        if (a == std::string_view::npos || b == std::string_view::npos || a > b) return false;
        std::string quoted = "\"" + std::string(name) + (prefix ? "" : "\"");
        return config.substr(a, b - a).find(quoted) != std::string_view::npos;
    }
    // The steps --steps selected (config.json "steps": [2, 3]); empty without.
    static std::vector<long long> steps_of(std::string_view config) {
        std::vector<long long> out;
        size_t k = config.find("\"steps\"");
        if (k == std::string_view::npos) return out;
        size_t a = config.find('[', k), b = config.find(']', k);
        if (a == std::string_view::npos || b == std::string_view::npos || a > b) return out;
        std::string list(config.substr(a + 1, b - a - 1));
        for (const char* p = list.c_str(); *p;) {
            char* e = nullptr;
            long long v = std::strtoll(p, &e, 10);
            if (e == p) {
                ++p;
                continue;
            }
            out.push_back(v);
            p = e;
        }
        return out;
    }
    bool leaks_ran() const { return (leaks_ran_ || !leak_rows_.empty()) && !failed("leaks"); }

    // A plugin of this run that failed, or was left out after it crashed
    // (the host's table "plugin_failure", at the end): the page says so at
    // its top, and the views of a stopped analysis say it did not finish
    // instead of presenting what it found until then as its answer.
    void plugin_failure(const msms_kv* cols, uint32_t n) {
        Failure f;
        for (uint32_t i = 0; i < n; ++i) {
            std::string_view k = view(cols[i].key), v = view(cols[i].value);
            if (k == "plugin") f.plugin = v;
            else if (k == "kind") f.kind = v;
            else if (k == "what") f.what = v;
        }
        if (!f.plugin.empty()) failures_.push_back(std::move(f));
    }
    bool failed(std::string_view plugin) const {
        return std::any_of(failures_.begin(), failures_.end(), [&](const Failure& f) { return f.plugin == plugin; });
    }
    void failures_json(std::string& o) const {
        o += ",\"plugin_failures\":[";
        for (size_t i = 0; i < failures_.size(); ++i) {
            if (i) o += ',';
            o += "{\"plugin\":";
            jstr(o, failures_[i].plugin);
            o += ",\"kind\":";
            jstr(o, failures_[i].kind);
            o += ",\"what\":";
            jstr(o, failures_[i].what);
            o += '}';
        }
        o += ']';
    }

    // decompose gave a live block another owner (a later tag: weight,
    // gradient...): the block is that owner's for its whole life, as its
    // MALLOC row (annotated) and the decomposition's table count it, so the
    // curve's points since its MALLOC move its bytes too. (A bucket keeps
    // the state at its highest total, which a relabel does not change; the
    // block was live at every point taken since its MALLOC.)
    void relabel(uint64_t id, std::string_view owner) {
        auto it = live_id_.find(id);
        if (it == live_id_.end() || owner.empty()) return;
        Device& d = *it->second.first;
        auto b = d.live.find(it->second.second);
        if (b == d.live.end()) return;
        uint16_t c = category(d, std::string(owner));
        Block& blk = b->second;
        if (c == blk.cat) return;
        auto move = [&](std::vector<int64_t>& v) {
            if (v.size() <= c) v.resize(c + 1, 0);
            v[blk.cat] -= static_cast<int64_t>(blk.size);
            v[c] += static_cast<int64_t>(blk.size);
        };
        move(d.cur);
        if (d.have_bucket && d.best.ts >= blk.ts) move(d.best.v);
        for (auto p = d.points.rbegin(); p != d.points.rend() && p->ts >= blk.ts; ++p) move(p->v);
        blk.cat = c;
    }

    // The inefficient analysis marked a live block (value: all its kinds so
    // far, "early_allocation,late_deallocation"): each block counts once in
    // the device's total and once in each of its kinds, however many
    // annotations it gets. (The analyzer annotates a block while it is
    // live, before its FREE reaches the sinks.)
    void inefficient(uint64_t id, std::string_view value) {
        ++ineff_annotations_;
        uint8_t bits = 0;
        size_t start = 0;
        while (start <= value.size()) {
            size_t comma = value.find(',', start);
            if (comma == std::string_view::npos) comma = value.size();
            std::string kind(value.substr(start, comma - start));
            start = comma + 1;
            if (kind.empty()) continue;
            auto k = std::find(ineff_kinds_.begin(), ineff_kinds_.end(), kind);
            if (k == ineff_kinds_.end()) {
                if (ineff_kinds_.size() >= 8) continue;  // (the analyzer has three)
                k = ineff_kinds_.insert(ineff_kinds_.end(), kind);
            }
            bits |= static_cast<uint8_t>(1u << (k - ineff_kinds_.begin()));
        }
        auto it = live_id_.find(id);
        if (it == live_id_.end()) return;
        Device& d = *it->second.first;
        auto b = d.live.find(it->second.second);
        if (b == d.live.end()) return;
        Block& blk = b->second;
        uint8_t added = bits & static_cast<uint8_t>(~blk.ineff);
        if (!added) return;
        IneffSum& sum = ineff_[&d];
        if (!blk.ineff) {
            ++sum.blocks;
            sum.bytes += blk.size;
        }
        for (size_t i = 0; i < ineff_kinds_.size(); ++i)
            if (added & (1u << i)) {
                auto& k = sum.kinds[ineff_kinds_[i]];
                ++k.first;
                k.second += blk.size;
            }
        blk.ineff |= added;
        // the largest marked blocks (ties: the earlier event)
        auto t = ineff_top_.find(id);
        if (t != ineff_top_.end()) {
            t->second.kinds = blk.ineff;
        } else if (blk.size >= ineff_min_) {
            ineff_top_.emplace(id, IneffBlock{blk.size, blk.site, blk.ineff, &d});
            if (ineff_top_.size() >= 2 * kMaxIneff) prune_ineff();
        }
    }
    std::vector<std::pair<uint64_t, IneffBlock>> largest_ineff() const {
        std::vector<std::pair<uint64_t, IneffBlock>> v(ineff_top_.begin(), ineff_top_.end());
        std::sort(v.begin(), v.end(), [](auto& x, auto& y) {
            return x.second.size != y.second.size ? x.second.size > y.second.size : x.first < y.first;
        });
        return v;
    }
    void prune_ineff() {
        auto v = largest_ineff();
        if (v.size() <= kMaxIneff) return;
        v.resize(kMaxIneff);
        ineff_min_ = v.back().second.size;
        ineff_top_.clear();
        ineff_top_.insert(v.begin(), v.end());
    }
    void ineff_json(std::string& o) {
        auto sum_json = [&](const IneffSum& s) {
            o += "\"blocks\":" + std::to_string(s.blocks) + ",\"bytes\":" + std::to_string(s.bytes) + ",\"kinds\":";
            kinds_json(o, s.kinds);
        };
        IneffSum all;
        for (auto& [dev, s] : ineff_) {
            all.blocks += s.blocks;
            all.bytes += s.bytes;
            for (auto& [k, v] : s.kinds) {
                all.kinds[k].first += v.first;
                all.kinds[k].second += v.second;
            }
        }
        o += "\"inefficient\":{\"ran\":";
        o += ineff_listed_ || ineff_annotations_ ? "true" : "false";
        o += ',';
        sum_json(all);
        o += ",\"devices\":[";
        bool first = true;
        for (auto& dp : devices_) {  // in the page's device order
            auto s = ineff_.find(dp.get());
            if (s == ineff_.end()) continue;
            if (!first) o += ',';
            first = false;
            o += "{\"label\":";
            jstr(o, dp->label);
            o += ',';
            sum_json(s->second);
            o += '}';
        }
        o += "],\"largest\":[";
        auto v = largest_ineff();
        if (v.size() > kMaxIneff) v.resize(kMaxIneff);
        for (size_t i = 0; i < v.size(); ++i) {
            const IneffBlock& b = v[i].second;
            std::string kinds;
            for (size_t k = 0; k < ineff_kinds_.size(); ++k)
                if (b.kinds & (1u << k)) kinds += (kinds.empty() ? "" : ",") + ineff_kinds_[k];
            if (i) o += ',';
            o += "{\"device\":";
            jstr(o, b.dev->label);
            o += ",\"kinds\":";
            jstr(o, kinds);
            o += ",\"size\":" + std::to_string(b.size) + ",\"event_id\":" + std::to_string(v[i].first) + ",\"stack\":";
            jstr(o, sites_[b.site].text);
            o += '}';
        }
        o += "]}";
    }

    // An out-of-memory failure (the oom analyzer's finding, at every one):
    // counted per device; the first kMaxOom kept for the charts' marks and
    // the table, kOomStacks of them with their stack.
    void oom_failure(const msms_kv* cols, uint32_t n) {
        OomFailure f;
        std::string short_dev;
        auto number = [](std::string_view v) { return std::strtoull(std::string(v).c_str(), nullptr, 10); };
        for (uint32_t i = 0; i < n; ++i) {
            std::string_view k = view(cols[i].key), v = view(cols[i].value);
            if (k == "device_name") f.device = v;
            else if (k == "device") short_dev = v;
            else if (k == "timestamp") f.ts = number(v);
            else if (k == "func") f.func = v;
            else if (k == "req_size") f.req_size = number(v);
            else if (k == "allocated") f.allocated = number(v);
            else if (k == "total") f.total = number(v);
            else if (k == "free") f.free = number(v);
            else if (k == "limit") f.limit = v;
            else if (k == "flag") f.flag = v;
            else if (k == "ret") f.ret = v;
            else if (k == "details") f.details = v == "true";
            else if (k == "stack" && oom_.size() < kOomStacks) f.stack = v;
        }
        if (f.device.empty()) f.device = short_dev;
        auto& c = oom_devices_[f.device];
        if (!c.count) c.first = f.ts;
        ++c.count;
        c.last = f.ts;
        ++oom_total_;
        oom_details_ |= f.details;
        oom_open_.erase(f.device);
        if (oom_.size() >= kMaxOom) return;
        if (f.details && oom_dumps_ < kOomDumps) {
            ++oom_dumps_;
            oom_open_[f.device] = oom_.size();
        }
        oom_.push_back(std::move(f));
    }
    // A block the oom analysis listed at the last failure of its device.
    void oom_block(const msms_event& ev) {
        auto o = oom_open_.find(msmemscope::device_name(ev.device_kind, ev.device_id));
        if (o == oom_open_.end()) return;
        OomFailure& f = oom_[o->second];
        OomBlock b;
        b.pool = msmemscope::attr(ev, "pool");
        b.ptr = msmemscope::attr(ev, "ptr");
        b.step = msmemscope::attr(ev, "step");
        b.size = std::strtoull(std::string(msmemscope::attr(ev, "size")).c_str(), nullptr, 10);
        b.ts = std::strtoull(std::string(msmemscope::attr(ev, "timestamp")).c_str(), nullptr, 10);
        b.stack = std::string(view(ev.py_stack));
        while (!b.stack.empty() && b.stack.back() == '\n') b.stack.pop_back();
        if (!b.stack.empty() && ev.c_stack.size) b.stack += '\n';
        b.stack += view(ev.c_stack);
        (ev.type == MSMS_T_OOM_TOP_ALLOC ? f.top : f.recent).push_back(std::move(b));
    }
    void oom_json(PageWriter& page) {
        std::string& o = page.text();
        auto rel = [this](uint64_t t) { return std::to_string(t - std::min(t, base_)); };
        o += "\"oom\":{\"failures\":" + std::to_string(oom_total_) + ",\"analysis\":";
        o += oom_listed_ || oom_details_ ? "true" : "false";
        o += ",\"devices\":[";
        bool first = true;
        for (auto& [dev, c] : oom_devices_) {
            if (!first) o += ',';
            first = false;
            o += "{\"device\":";
            jstr(o, dev);
            o += ",\"count\":" + std::to_string(c.count) + ",\"first_t\":" + rel(c.first) + ",\"last_t\":" + rel(c.last) + '}';
        }
        o += "],\"stacks\":" + std::to_string(kOomStacks) + ",\"listed\":[";
        auto blocks = [&](const std::vector<OomBlock>& v) {
            o += '[';
            for (size_t i = 0; i < v.size(); ++i) {
                if (i) o += ',';
                o += "{\"pool\":";
                jstr(o, v[i].pool);
                o += ",\"ptr\":";
                jstr(o, v[i].ptr);
                o += ",\"size\":" + std::to_string(v[i].size) + ",\"t\":" + rel(v[i].ts) + ",\"step\":";
                jstr(o, v[i].step);
                o += ",\"stack\":";
                jstr(o, v[i].stack);
                o += '}';
            }
            o += ']';
        };
        for (size_t i = 0; i < oom_.size(); ++i) {
            const OomFailure& f = oom_[i];
            if (i) o += ',';
            o += "{\"t\":" + rel(f.ts) + ",\"device\":";
            jstr(o, f.device);
            o += ",\"func\":";
            jstr(o, f.func);
            o += ",\"req_size\":" + std::to_string(f.req_size) + ",\"allocated\":" + std::to_string(f.allocated) +
                 ",\"total\":" + std::to_string(f.total) + ",\"free\":" + std::to_string(f.free) + ",\"limit\":";
            jstr(o, f.limit);
            o += ",\"flag\":";
            jstr(o, f.flag);
            o += ",\"ret\":";
            jstr(o, f.ret);
            o += ",\"details\":";
            o += f.details ? "true" : "false";
            o += ",\"stack\":";
            jstr(o, f.stack);
            o += ",\"top\":";
            blocks(f.top);
            o += ",\"recent\":";
            blocks(f.recent);
            o += '}';
            page.spill();
        }
        o += "]}";
    }

    // A site made from a finding's own stack text (a group of host blocks
    // the leaks analyzer reported by site, without their ids).
    uint32_t text_site(const std::string& stack, const std::string& where, const std::string& pool) {
        std::string text = stack;
        while (!text.empty() && text.back() == '\n') text.pop_back();
        if (text.empty()) text = "(no stack) " + (where.empty() ? pool.empty() ? std::string("(a block not in this capture)") : pool : where);
        auto it = text_sites_.find(text);
        if (it != text_sites_.end()) return it->second;
        Site s;
        s.text = text;
        // Python frames ("file(line): function") come first.
        size_t start = 0;
        while (start < text.size()) {
            size_t nl = text.find('\n', start);
            if (nl == std::string::npos) nl = text.size();
            std::string_view line(text.data() + start, nl - start);
            size_t c = line.find("): ");
            size_t o = c == std::string_view::npos ? c : line.rfind('(', c);
            bool py = o != std::string_view::npos && o + 1 < c &&
                      std::all_of(line.begin() + static_cast<long>(o) + 1, line.begin() + static_cast<long>(c),
                                  [](char ch) { return ch >= '0' && ch <= '9'; });
            if (!py) break;
            ++s.py_lines;
            start = nl + 1;
        }
        sites_.push_back(std::move(s));
        uint32_t i = static_cast<uint32_t>(sites_.size() - 1);
        text_sites_.emplace(text, i);
        return i;
    }

    static std::string short_device(const Device& d) {  // the analyzers' device names
        if (d.kind == MSMS_DEV_CPU) return "cpu";
        if (d.kind == MSMS_DEV_NPU || d.kind == MSMS_DEV_CUDA) return std::to_string(d.id < 0 ? 0 : d.id);
        return "N/A";
    }

    // Each finding of the leaks analyzer on its device and site: the block
    // its MALLOC's event id (or allocation id) names, else (host blocks
    // reported per site) the finding's own stack on the device it names.
    void resolve_leaks() {
        std::unordered_map<uint64_t, std::pair<Device*, uint32_t>> by_aid;
        bool want_aid = false;
        for (const LeakRow& r : leak_rows_) want_aid |= r.allocation_id != 0 && r.event_id == 0;
        if (want_aid)
            for (auto& dp : devices_)
                for (auto& [key, b] : dp->live)
                    if (!(key >> 63)) by_aid[key] = {dp.get(), b.site};
        std::unordered_map<uint64_t, const Gone*> gone_id, gone_aid;
        for (const Gone& g : gone_) {
            gone_id[g.id] = &g;
            if (want_aid && g.allocation_id) gone_aid[g.allocation_id] = &g;
        }
        for (const LeakRow& r : leak_rows_) {
            Device* dev = nullptr;
            uint32_t site = 0;
            bool found = false;
            if (r.event_id) {
                auto l = live_id_.find(r.event_id);
                if (l != live_id_.end()) {
                    auto b = l->second.first->live.find(l->second.second);
                    if (b != l->second.first->live.end()) {
                        dev = l->second.first;
                        site = b->second.site;
                        found = true;
                    }
                }
                auto g = found ? gone_id.end() : gone_id.find(r.event_id);
                if (g != gone_id.end()) {
                    dev = g->second->dev;
                    site = g->second->site;
                    found = true;
                }
            } else if (r.allocation_id) {
                auto a = by_aid.find(r.allocation_id);
                if (a != by_aid.end()) {
                    dev = a->second.first;
                    site = a->second.second;
                    found = true;
                } else if (auto g = gone_aid.find(r.allocation_id); g != gone_aid.end()) {
                    dev = g->second->dev;
                    site = g->second->site;
                    found = true;
                }
            }
            if (!found) {
                bool framework = r.pool == "PTA" || r.pool == "PTA_WORKSPACE" || r.pool == "ATB" || r.pool == "MINDSPORE";
                for (auto& dp : devices_)
                    if (dp->framework == framework && short_device(*dp) == r.device) {
                        dev = dp.get();
                        break;
                    }
                if (dev) site = text_site(r.stack, r.site, r.pool);
            }
            uint64_t blocks = r.count, bytes = r.size;
            leak_total_.first += blocks;
            leak_total_.second += bytes;
            auto& k = leak_kinds_[r.kind.empty() ? std::string("leak") : r.kind];
            k.first += blocks;
            k.second += bytes;
            if (!dev) {
                unplaced_.first += blocks;
                unplaced_.second += bytes;
                continue;
            }
            LeakSum& sum = leaked_[dev];
            sum.blocks += blocks;
            sum.bytes += bytes;
            auto& dk = sum.kinds[r.kind.empty() ? std::string("leak") : r.kind];
            dk.first += blocks;
            dk.second += bytes;
            sum.site_bytes[site] += bytes;
        }
    }
    void kinds_json(std::string& o, const std::map<std::string, std::pair<uint64_t, uint64_t>>& kinds) {
        o += '{';
        bool first = true;
        for (auto& [k, v] : kinds) {
            if (!first) o += ',';
            first = false;
            jstr(o, k);
            o += ":[" + std::to_string(v.first) + ',' + std::to_string(v.second) + ']';
        }
        o += '}';
    }

    struct Findings {
        std::vector<std::string> cols;
        std::vector<std::vector<std::string>> rows;
        uint64_t total = 0;
    };

    static std::string html_escape(std::string_view s) {
        std::string o;
        for (char c : s) {
            if (c == '<') o += "&lt;";
            else if (c == '>') o += "&gt;";
            else if (c == '&') o += "&amp;";
            else if (c == '"') o += "&quot;";
            else o += c;
        }
        return o;
    }

    // A device's driver memory (HAL, host heap, pinned) and its framework
    // pools (PTA, ATB, MindSpore: carved out of driver memory) are charted
    // apart, so that no byte is counted twice.
    Device& device(const msms_event& ev) {
        bool framework = msms_is_framework_pool(ev.type);
        uint64_t key = (static_cast<uint64_t>(ev.device_kind) << 17) | (static_cast<uint64_t>(static_cast<uint16_t>(ev.device_id)) << 1) |
                       (framework ? 1u : 0u);
        auto it = dev_index_.find(key);
        if (it != dev_index_.end()) return *devices_[it->second];
        devices_.push_back(std::make_unique<Device>());
        std::string label = msmemscope::device_name(ev.device_kind, ev.device_id);
        if (framework) label += " framework pools";
        else if (ev.device_kind == MSMS_DEV_CPU) label += " host memory";
        else label += " device memory (driver)";
        devices_.back()->label = label;
        devices_.back()->kind = ev.device_kind;
        devices_.back()->id = ev.device_id;
        devices_.back()->framework = framework;
        dev_index_.emplace(key, devices_.size() - 1);
        return *devices_.back();
    }

    // A block's series: its owner as the decomposition names it (Attr
    // `owner`, e.g. PTA@weight, PTA@ops@aten), else its pool type.
    uint16_t category(Device& d, const msms_event& ev) {
        std::string_view owner = msmemscope::attr(ev, "owner");
        if (!owner.empty()) return category(d, std::string(owner));
        const char* t = msms_event_type_name(ev.type);
        return category(d, std::string(t ? t : "N/A"));
    }
    uint16_t category(Device& d, std::string name) {
        auto it = d.cat_index.find(name);
        if (it != d.cat_index.end()) return it->second;
        if (d.cats.size() >= kMaxCategories) {
            name = "other";
            it = d.cat_index.find(name);
            if (it != d.cat_index.end()) return it->second;
        }
        uint16_t i = static_cast<uint16_t>(d.cats.size());
        d.cats.push_back(name);
        d.cat_index.emplace(name, i);
        d.cur.push_back(0);
        return i;
    }

    uint32_t site(const msms_event& ev) {
        uint64_t key;
        if (ev.c_stack_id || ev.py_stack_id) key = (ev.c_stack_id * 0x9E3779B97F4A7C15ull) ^ (ev.py_stack_id << 1) ^ 1;
        else if (ev.c_stack.size || ev.py_stack.size) key = std::hash<std::string_view>()(view(ev.c_stack)) ^
                                                           (std::hash<std::string_view>()(view(ev.py_stack)) << 1);
        else if (import_heap(ev)) key = 0x2000 + ev.type;  // the imports' heap: a site of its own
        else key = 0x1000 + ev.type;  // no stack: one site per pool
        auto it = site_index_.find(key);
        if (it != site_index_.end()) return it->second;
        if (sites_.size() >= kMaxSites) {
            auto o = site_index_.find(~0ull);
            if (o != site_index_.end()) return o->second;
            key = ~0ull;
        }
        Site s;
        if (key == ~0ull) s.text = "(other sites)";
        else if (key == 0x2000u + ev.type) s.text = "(no stack) while importing Python modules";
        else if (!ev.c_stack.size && !ev.py_stack.size) {
            const char* t = msms_event_type_name(ev.type);
            s.text = std::string("(no stack) ") + (t ? t : "");
        } else {
            s.text = std::string(view(ev.py_stack));
            while (!s.text.empty() && s.text.back() == '\n') s.text.pop_back();
            if (!s.text.empty()) s.py_lines = static_cast<uint32_t>(std::count(s.text.begin(), s.text.end(), '\n') + 1);
            if (!s.text.empty() && ev.c_stack.size) s.text += "\n";
            s.text += std::string(view(ev.c_stack));
        }
        sites_.push_back(std::move(s));
        uint32_t i = static_cast<uint32_t>(sites_.size() - 1);
        site_index_.emplace(key, i);
        return i;
    }

    // Each byte once (DESIGN §8): a framework block carved at the address
    // of a live host heap block (PyTorch's CPU tensors come from malloc) is
    // charted with the framework pools only. The host block's peak and
    // sample wait for the next memory event, which may be that block.
    bool host_heap(const msms_event& ev) const { return ev.type == MSMS_T_HOST; }
    static bool import_heap(const msms_event& ev) {
        return ev.type == MSMS_T_HOST && msmemscope::attr(ev, "import") == "true";
    }
    void settle_host_pending() {
        if (!pending_host_) return;
        Device* d = pending_host_;
        pending_host_ = nullptr;
        note_peak(*d, pending_ts_, pending_seq_);
        sample(*d, pending_ts_);
    }
    void note_peak(Device& d, uint64_t ts, uint64_t seq) {
        if (d.total > d.peak) {
            d.peak = d.total;
            d.peak_ts = ts;
            d.peak_seq = seq;
            d.freed_since_peak.clear();
        }
    }
    void take_host_block(const msms_event& ev) {
        auto h = host_ptr_.find(hkey(ev));
        if (h == host_ptr_.end()) return;
        Device* hd = h->second.first;
        auto it = hd->live.find(h->second.second);
        host_ptr_.erase(h);
        if (it == hd->live.end()) return;
        Block b = it->second;
        hd->live.erase(it);
        live_id_.erase(b.id);
        release(*hd, b);
        sites_[b.site].count -= b.n;
        sites_[b.site].bytes -= b.size;
        hd->site_bytes[b.site] -= b.size;
        if (hd->mallocs) --hd->mallocs;
        if (pending_host_ == hd) pending_host_ = nullptr;  // never held by the host heap
        else if (b.seq <= hd->peak_seq) hd->freed_since_peak.push_back(b);
    }
    static uint64_t hkey(const msms_event& ev) {
        return ev.ptr ^ (static_cast<uint64_t>(ev.device_kind) << 56) ^ (static_cast<uint64_t>(static_cast<uint16_t>(ev.device_id)) << 40);
    }

    void memory(const msms_event& ev) {
        bool takes = ev.kind == MSMS_EV_MALLOC && msms_is_framework_pool(ev.type);
        if (pending_host_ && !(takes && hkey(ev) == pending_hkey_)) settle_host_pending();
        // A mapping (Attr virtual:true: cuMemMap of a cuMemCreate handle) is
        // memory its handle's block holds: charted there, once.
        if (ev.kind == MSMS_EV_MALLOC && msmemscope::attr(ev, "virtual") == "true") {
            if (ev.allocation_id) mappings_.insert(ev.allocation_id);
            return;
        }
        if (ev.kind == MSMS_EV_FREE && ev.allocation_id && mappings_.erase(ev.allocation_id)) return;
        if (takes) take_host_block(ev);
        Device& d = device(ev);
        ++seq_;
        if (ev.kind == MSMS_EV_MALLOC) {
            ++d.mallocs;
            uint16_t c = category(d, ev);
            uint32_t s = site(ev);
            Block b{ev.size, ev.timestamp_ns, seq_, ev.id, s, bounds_, c, 0, import_heap(ev) ? msmemscope::attr_blocks(ev) : 1u};
            auto key = ev.allocation_id ? ev.allocation_id : (ev.ptr | (1ull << 63));
            auto [it, inserted] = d.live.emplace(key, b);
            if (!inserted) {  // an id seen twice: replace the old state
                release(d, it->second);
                live_id_.erase(it->second.id);
                it->second = b;
            }
            if (ev.id) live_id_[ev.id] = {&d, key};
            d.cur[c] += static_cast<int64_t>(ev.size);
            d.total += static_cast<int64_t>(ev.size);
            sites_[s].count += b.n;
            sites_[s].bytes += ev.size;
            d.site_bytes[s] += ev.size;
            sites_[s].live_bytes += ev.size;
            sites_[s].live_count += b.n;
            if (host_heap(ev)) {
                host_ptr_[hkey(ev)] = {&d, key};
                pending_host_ = &d;
                pending_hkey_ = hkey(ev);
                pending_ts_ = ev.timestamp_ns;
                pending_seq_ = seq_;
                return;
            }
        } else {
            ++d.frees;
            auto key = ev.allocation_id ? ev.allocation_id : (ev.ptr | (1ull << 63));
            if (host_heap(ev)) {
                auto h = host_ptr_.find(hkey(ev));
                if (h != host_ptr_.end() && h->second.second == key) host_ptr_.erase(h);
            }
            auto it = d.live.find(key);
            if (it == d.live.end()) return;  // allocated before collection started (or taken by a framework block)
            Block b = it->second;
            d.live.erase(it);
            live_id_.erase(b.id);
            release(d, b);
            if (b.seq <= d.peak_seq) d.freed_since_peak.push_back(b);
            life(d, b, ev.timestamp_ns);
            // A leak finding may name a block freed later (a step leak freed
            // at teardown, a HAL block freed after the third mark): kept
            // when a step or mark boundary passed in its life.
            // (Only when the leak analysis runs or the configuration is not
            // known; past kMaxGone such blocks a finding falls back to its
            // own stack on its device: same blocks and bytes, its own site.)
            if (ev.type != MSMS_T_HOST && bounds_ > b.bound && keep_gone_ && gone_.size() < kMaxGone)
                gone_.push_back(Gone{b.id, key >> 63 ? 0 : key, b.site, &d});
        }
        note_peak(d, ev.timestamp_ns, seq_);
        sample(d, ev.timestamp_ns);
    }

    // A block's lifetime, if it is among the largest (end 0: live at the end).
    void life(Device& d, const Block& b, uint64_t end) {
        if (b.size < d.lives_min) return;
        d.lives.push_back(Life{b.ts, end, b.size, b.site, b.cat});
        if (d.lives.size() < 2 * kMaxLives) return;
        // keep the kMaxLives largest; smaller blocks are not kept from now on
        prune_lives(d);
    }
    static void prune_lives(Device& d) {
        if (d.lives.size() <= kMaxLives) return;
        // The largest, in a total order (ties: the earlier, then the rest of
        // the lifetime), so that which of equal blocks are kept does not
        // depend on the order the live ones are visited in at the end.
        std::nth_element(d.lives.begin(), d.lives.begin() + static_cast<long>(kMaxLives - 1), d.lives.end(),
                         [](const Life& x, const Life& y) {
                             return std::make_tuple(y.size, x.start, x.end, x.site, x.cat) <
                                    std::make_tuple(x.size, y.start, y.end, y.site, y.cat);
                         });
        d.lives.resize(kMaxLives);
        d.lives_min = std::max(d.lives_min, d.lives[kMaxLives - 1].size);
        for (const Life& l : d.lives) d.lives_min = std::min(d.lives_min, l.size);
    }

    void release(Device& d, const Block& b) {
        d.cur[b.cat] -= static_cast<int64_t>(b.size);
        d.total -= static_cast<int64_t>(b.size);
        sites_[b.site].live_bytes -= b.size;
        sites_[b.site].live_count -= b.n;
    }

    void sample(Device& d, uint64_t ts) {
        uint64_t rel = ts > base_ ? ts - base_ : 0;
        uint64_t bucket = rel / d.width;
        if (d.have_bucket && bucket == d.bucket) {
            if (d.total > d.best.total) keep(d, ts);
            return;
        }
        if (d.have_bucket) {
            push(d);
            bucket = rel / d.width;  // the width may have doubled
        }
        d.bucket = bucket;
        d.have_bucket = true;
        keep(d, ts);
    }
    void keep(Device& d, uint64_t ts) {
        d.best.ts = ts;
        d.best.total = d.total;
        d.best.v = d.cur;
    }
    void push(Device& d) {
        d.points.push_back(d.best);
        if (d.points.size() < 2 * kMaxPoints) return;
        // Twice the width: merge pairs of buckets, keeping the higher state.
        d.width *= 2;
        std::vector<Point> merged;
        merged.reserve(kMaxPoints + 1);
        for (size_t i = 0; i < d.points.size();) {
            uint64_t b = (d.points[i].ts - std::min(d.points[i].ts, base_)) / d.width;
            Point p = std::move(d.points[i++]);
            while (i < d.points.size() && (d.points[i].ts - std::min(d.points[i].ts, base_)) / d.width == b) {
                if (d.points[i].total > p.total) p = std::move(d.points[i]);
                ++i;
            }
            merged.push_back(std::move(p));
        }
        d.points.swap(merged);
    }

    // The blocks live at the device's peak, grouped by (site, category).
    void peak_groups(const Device& d, std::string& out) {
        std::map<std::pair<uint32_t, uint16_t>, std::pair<uint64_t, uint64_t>> groups;  // bytes, count
        uint64_t n = 0;
        auto add = [&](const Block& b) {
            if (b.seq > d.peak_seq) return;
            auto& g = groups[{b.site, b.cat}];
            g.first += b.size;
            g.second += b.n;
            n += b.n;
        };
        for (auto& [id, b] : d.live) add(b);
        for (auto& b : d.freed_since_peak) add(b);
        // bytes at the peak whose allocation has a stack: the page opens on
        // the device with the most of them
        uint64_t attributed = 0;
        for (auto& [k, g] : groups) {
            const std::string& t = sites_[k.first].text;
            if (t.rfind("(no stack)", 0) != 0 && t != "(other sites)") attributed += g.first;
        }
        out += "\"attributed\":" + std::to_string(attributed) + ',';
        std::vector<std::pair<std::pair<uint32_t, uint16_t>, std::pair<uint64_t, uint64_t>>> v(groups.begin(), groups.end());
        std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.second.first > b.second.first; });
        out += "\"peak_blocks\":";
        out += std::to_string(n);
        out += ",\"peak_groups\":";
        out += std::to_string(v.size());
        out += ",\"at_peak\":[";
        for (size_t i = 0; i < v.size() && i < kTopRows; ++i) {
            if (i) out += ',';
            out += "{\"bytes\":" + std::to_string(v[i].second.first) + ",\"count\":" + std::to_string(v[i].second.second) +
                   ",\"cat\":";
            jstr(out, d.cats[v[i].first.second]);
            out += ",\"stack\":";
            jstr(out, sites_[v[i].first.first].text);
            out += '}';
        }
        out += ']';
    }

    // The page's index of a site (its stack as frame ids, root first).
    uint32_t site_ref(uint32_t site) {
        auto [it, inserted] = site_out_.emplace(site, static_cast<uint32_t>(site_order_.size()));
        if (inserted) site_order_.push_back(site);
        return it->second;
    }

    void lives_and_flame(Device& d, PageWriter& page) {
        std::string& o = page.text();
        uint64_t base = base_;
        auto rel = [base](uint64_t t) { return t - std::min(t, base); };
        for (auto& [key, b] : d.live) life(d, b, 0);
        prune_lives(d);
        std::sort(d.lives.begin(), d.lives.end(), [](const Life& x, const Life& y) {
            return std::tie(x.start, x.end, x.size, x.site, x.cat) < std::tie(y.start, y.end, y.size, y.site, y.cat);
        });
        o += "\"lives_min\":" + std::to_string(d.lives_min) + ",\"lives\":[";
        for (size_t i = 0; i < d.lives.size(); ++i) {
            const Life& l = d.lives[i];
            if (i) o += ',';
            o += '[';
            o += std::to_string(rel(l.start));
            o += ',';
            o += l.end ? std::to_string(rel(l.end)) : std::string("-1");
            o += ',';
            o += std::to_string(l.size);
            o += ',';
            o += std::to_string(site_ref(l.site));
            o += ',';
            o += std::to_string(l.cat);
            o += ']';
            page.spill();
        }
        o += "],";
        // flame graph measures per site: allocated, live at the peak, leaked
        std::unordered_map<uint32_t, std::array<uint64_t, 3>> m;
        for (auto& [site, bytes] : d.site_bytes)
            if (bytes) m[site][0] = bytes;
        auto at_peak = [&](const Block& b) {
            if (b.seq <= d.peak_seq) m[b.site][1] += b.size;
        };
        for (auto& [k, b] : d.live) at_peak(b);
        for (auto& b : d.freed_since_peak) at_peak(b);
        bool by_analyzer = leaks_ran();
        if (by_analyzer) {
            auto l = leaked_.find(&d);
            if (l != leaked_.end())
                for (auto& [site, bytes] : l->second.site_bytes) m[site][2] += bytes;
        } else {
            for (auto& [k, b] : d.live) m[b.site][2] += b.size;
        }
        std::vector<std::pair<uint32_t, std::array<uint64_t, 3>>> v(m.begin(), m.end());
        std::sort(v.begin(), v.end(), [](auto& x, auto& y) { return x.first < y.first; });  // not the map's order
        std::vector<bool> keep(v.size(), false);
        for (int measure = 0; measure < 3; ++measure) {
            std::vector<size_t> idx(v.size());
            for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
            size_t top = std::min(idx.size(), kFlameSites);
            std::partial_sort(idx.begin(), idx.begin() + static_cast<long>(top), idx.end(),
                              [&](size_t a, size_t b) {  // ties: the lower site, whatever the map's order
                                  return v[a].second[measure] != v[b].second[measure]
                                             ? v[a].second[measure] > v[b].second[measure]
                                             : v[a].first < v[b].first;
                              });
            for (size_t i = 0; i < top; ++i)
                if (v[idx[i]].second[measure]) keep[idx[i]] = true;
        }
        o += "\"leaked_by\":";
        o += by_analyzer ? "\"leaks\"" : "\"end\"";
        if (by_analyzer) {
            auto l = leaked_.find(&d);
            LeakSum none;
            const LeakSum& ls = l == leaked_.end() ? none : l->second;
            o += ",\"leak_blocks\":" + std::to_string(ls.blocks) + ",\"leak_bytes\":" + std::to_string(ls.bytes) +
                 ",\"leak_kinds\":";
            kinds_json(o, ls.kinds);
        }
        o += ",\"flame\":[";
        bool first = true;
        std::array<uint64_t, 3> rest{0, 0, 0};
        for (size_t i = 0; i < v.size(); ++i) {
            if (!keep[i]) {
                for (int k = 0; k < 3; ++k) rest[k] += v[i].second[k];
                continue;
            }
            if (!first) o += ',';
            first = false;
            o += '[' + std::to_string(site_ref(v[i].first)) + ',' + std::to_string(v[i].second[0]) + ',' +
                 std::to_string(v[i].second[1]) + ',' + std::to_string(v[i].second[2]) + ']';
            page.spill();
        }
        o += "],\"flame_rest\":[" + std::to_string(rest[0]) + ',' + std::to_string(rest[1]) + ',' + std::to_string(rest[2]) + ']';
    }

    // "site_paths": per page site, its frames root first (the Python frames
    // outermost first, then the native ones), as ids into "frames".
    void site_paths(PageWriter& page) {
        std::string& o = page.text();
        std::unordered_map<std::string, uint32_t> ids;
        std::vector<const std::string*> names;
        std::string py_counts = "\"site_py\":[";
        o += "\"site_paths\":[";
        for (size_t i = 0; i < site_order_.size(); ++i) {
            const Site& s = sites_[site_order_[i]];
            std::vector<std::string> lines;
            size_t start = 0;
            while (start <= s.text.size()) {
                size_t nl = s.text.find('\n', start);
                if (nl == std::string::npos) nl = s.text.size();
                if (nl > start) lines.push_back(s.text.substr(start, nl - start));
                start = nl + 1;
            }
            size_t py = std::min<size_t>(s.py_lines, lines.size());
            std::vector<std::string> path(lines.rend() - static_cast<long>(py), lines.rend());  // Python, outermost first
            path.insert(path.end(), lines.rbegin(), lines.rend() - static_cast<long>(py));      // native, outermost first
            if (i) {
                o += ',';
                py_counts += ',';
            }
            py_counts += std::to_string(py);
            o += '[';
            for (size_t k = 0; k < path.size(); ++k) {
                auto [it, inserted] = ids.emplace(path[k], static_cast<uint32_t>(names.size()));
                if (inserted) names.push_back(&it->first);
                if (k) o += ',';
                o += std::to_string(it->second);
            }
            o += ']';
            page.spill();
        }
        o += "],";
        o += py_counts;
        o += "],\"frames\":[";
        for (size_t i = 0; i < names.size(); ++i) {
            if (i) o += ',';
            jstr(o, *names[i]);
            page.spill();
        }
        o += ']';
    }

    // The page's data (one JSON object) into the page.
    void render_data(PageWriter& page) {
        size_t real_sites = sites_.size();  // the sites table lists allocations, not the leak rows' own stacks
        resolve_leaks();
        for (auto& dp : devices_) {
            Device& d = *dp;
            if (d.have_bucket) {
                push(d);
                d.have_bucket = false;
            }
        }
        std::string& o = page.text();
        o += "{\"pid\":" + std::to_string(run_.pid) + ",\"command\":";
        jstr(o, run_.command_line);
        o += ",\"timestamp\":";
        jstr(o, run_.timestamp);
        o += ",\"start_ns\":" + std::to_string(base_) + ",\"end_ns\":" + std::to_string(last_ts_) +
             ",\"events\":" + std::to_string(events_) + ",\"rows\":" + std::to_string(rows_) + ",\"kinds\":{";
        bool first = true;
        for (uint16_t k = 0; k < MSMS_EV_KIND_COUNT; ++k) {
            if (!kinds_[k]) continue;
            if (!first) o += ',';
            first = false;
            jstr(o, msms_event_kind_name(k));
            o += ':' + std::to_string(kinds_[k]);
        }
        o += "},\"api\":";
        o += api_ ? "true" : "false";
        o += ",\"leaks_ran\":";
        o += leaks_ran() ? "true" : "false";
        if (leaks_off_for_steps_) o += ",\"leaks_off\":\"steps\"";
        failures_json(o);
        o += ",\"image_ended\":[" + std::to_string(image_ended_.first) + ',' + std::to_string(image_ended_.second) + ']';
        o += ",\"leak_total\":[" + std::to_string(leak_total_.first) + ',' + std::to_string(leak_total_.second) +
             "],\"leak_unplaced\":[" + std::to_string(unplaced_.first) + ',' + std::to_string(unplaced_.second) +
             "],\"leak_kinds\":";
        kinds_json(o, leak_kinds_);
        o += ",\"marks\":[";
        for (size_t i = 0; i < marks_.size(); ++i) {
            if (i) o += ',';
            o += "[" + std::to_string(marks_[i].first - std::min(marks_[i].first, base_)) + ",";
            jstr(o, marks_[i].second);
            o += ']';
        }
        // [from, to] spans of the run, times from its start
        auto spans_json = [&](const std::vector<std::pair<uint64_t, uint64_t>>& spans) {
            for (size_t i = 0; i < spans.size(); ++i)
                o += std::string(i ? "," : "") + "[" + std::to_string(spans[i].first - std::min(spans[i].first, base_)) +
                     "," + std::to_string(spans[i].second - std::min(spans[i].second, base_)) + "]";
        };
        o += "],\"off\":[";  // collection off, between two collection ranges
        spans_json(off_);
        o += "],\"uncollected\":[";  // --steps did not collect (the host's marks)
        spans_json(uncollected_.spans(last_ts_));
        o += "],\"steps_selected\":[";
        for (size_t i = 0; i < selected_steps_.size(); ++i)
            o += std::string(i ? "," : "") + std::to_string(selected_steps_[i]);
        o += "],\"devices\":[";
        for (size_t di = 0; di < devices_.size(); ++di) {
            Device& d = *devices_[di];
            uint64_t live_blocks = 0;  // the imports' heap counts as the blocks it stands for
            for (auto& [id, b] : d.live) live_blocks += b.n;
            if (di) o += ',';
            o += "{\"label\":";
            jstr(o, d.label);
            o += ",\"device\":";
            jstr(o, msmemscope::device_name(d.kind, d.id));
            o += ",\"peak\":" + std::to_string(d.peak) + ",\"peak_t\":" + std::to_string(d.peak_ts - std::min(d.peak_ts, base_)) +
                 ",\"final\":" + std::to_string(d.total) + ",\"live\":" + std::to_string(live_blocks) +
                 ",\"mallocs\":" + std::to_string(d.mallocs) + ",\"frees\":" + std::to_string(d.frees) + ",\"cats\":[";
            for (size_t c = 0; c < d.cats.size(); ++c) {
                if (c) o += ',';
                jstr(o, d.cats[c]);
            }
            o += "],\"t\":[";
            for (size_t i = 0; i < d.points.size(); ++i) {
                if (i) o += ',';
                o += std::to_string(d.points[i].ts - std::min(d.points[i].ts, base_));
                page.spill();
            }
            o += "],\"v\":[";
            for (size_t c = 0; c < d.cats.size(); ++c) {
                if (c) o += ',';
                o += '[';
                for (size_t i = 0; i < d.points.size(); ++i) {
                    if (i) o += ',';
                    o += std::to_string(c < d.points[i].v.size() ? d.points[i].v[c] : 0);
                    page.spill();
                }
                o += ']';
            }
            o += "],";
            peak_groups(d, o);
            o += ',';
            lives_and_flame(d, page);
            o += '}';
        }
        o += "],\"sites\":[";
        std::vector<uint32_t> order(real_sites);
        for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
        size_t top = std::min(order.size(), kTopRows);
        std::partial_sort(order.begin(), order.begin() + static_cast<long>(top), order.end(),
                          [&](uint32_t a, uint32_t b) { return sites_[a].bytes > sites_[b].bytes; });
        for (size_t i = 0; i < top; ++i) {
            const Site& s = sites_[order[i]];
            if (i) o += ',';
            o += "{\"bytes\":" + std::to_string(s.bytes) + ",\"count\":" + std::to_string(s.count) +
                 ",\"live_bytes\":" + std::to_string(s.live_bytes) + ",\"live_count\":" + std::to_string(s.live_count) +
                 ",\"stack\":";
            jstr(o, s.text);
            o += '}';
            page.spill();
        }
        o += "],\"site_count\":" + std::to_string(real_sites) + ",";
        site_paths(page);
        o += ",\"findings\":{";
        first = true;
        for (auto& [name, t] : findings_) {
            if (!first) o += ',';
            first = false;
            jstr(o, name);
            o += ":{\"total\":" + std::to_string(t.total) + ",\"cols\":[";
            for (size_t c = 0; c < t.cols.size(); ++c) {
                if (c) o += ',';
                jstr(o, t.cols[c]);
            }
            o += "],\"rows\":[";
            for (size_t r = 0; r < t.rows.size(); ++r) {
                if (r) o += ',';
                o += '[';
                for (size_t c = 0; c < t.cols.size(); ++c) {
                    if (c) o += ',';
                    jstr(o, c < t.rows[r].size() ? t.rows[r][c] : std::string());
                }
                o += ']';
                page.spill();
            }
            o += "]}";
        }
        o += "},";
        ineff_json(o);
        o += ',';
        oom_json(page);
        o += '}';
    }

    msmemscope::Host host_;
    msmemscope::RunInfo run_;
    bool base_set_ = false;
    msms::WrittenEvents written_;
    uint64_t base_ = 0, last_ts_ = 0, events_ = 0, rows_ = 0, seq_ = 0;
    uint64_t kinds_[MSMS_EV_KIND_COUNT] = {};
    std::vector<std::unique_ptr<Device>> devices_;
    std::unordered_map<uint64_t, size_t> dev_index_;
    std::vector<Site> sites_;
    std::unordered_map<uint64_t, uint32_t> site_index_;
    std::map<std::string, Findings> findings_;
    msms::AddrMap<std::pair<Device*, uint64_t>> host_ptr_;  // live host heap blocks: device, key
    Device* pending_host_ = nullptr;  // the last memory event was this device's host MALLOC
    uint64_t pending_hkey_ = 0, pending_ts_ = 0, pending_seq_ = 0;
    // inefficient memory: the kinds seen (a block's bits), per device what
    // was marked, the largest marked blocks by their MALLOC's event id
    std::vector<std::string> ineff_kinds_{"early_allocation", "late_deallocation", "temporary_idleness"};
    std::unordered_map<const Device*, IneffSum> ineff_;
    std::unordered_map<uint64_t, IneffBlock> ineff_top_;
    uint64_t ineff_min_ = 0, ineff_annotations_ = 0;
    bool ineff_listed_ = false;  // the configuration lists the inefficient analysis
    // out-of-memory failures: per device (its name, "npu:0") how many, the
    // first and the last; the first kMaxOom; per device the failure whose
    // blocks the oom analysis is listing
    struct OomCount {
        uint64_t count = 0, first = 0, last = 0;
    };
    std::map<std::string, OomCount> oom_devices_;
    std::vector<OomFailure> oom_;
    std::map<std::string, size_t> oom_open_;
    uint64_t oom_total_ = 0;
    size_t oom_dumps_ = 0;
    bool oom_listed_ = false, oom_details_ = false;  // the configuration lists oom; a failure had its blocks listed
    std::vector<std::pair<uint64_t, std::string>> marks_;
    std::vector<std::pair<uint64_t, uint64_t>> off_;  // stop() .. the next start()
    std::vector<long long> selected_steps_;            // --steps (config.json), empty without
    msmemscope::html::UncollectedSpans uncollected_{kMaxMarks};  // --steps: where the host dropped events
    uint64_t off_since_ = 0;
    bool off_open_ = false;
    std::pair<uint64_t, uint64_t> image_ended_{0, 0};  // blocks, bytes live when the image ended (exec, _exit after fork)
    std::vector<msms_event> shadow_frees_;             // not yet known to be real frees
    uint32_t bounds_ = 0;                              // step and mark events seen
    bool api_ = false;                                 // a Python API session: config()'s words
    bool leaks_off_for_steps_ = false;                 // listed, but off: --steps selects steps
    bool leaks_ran_ = false;                           // the configuration lists the leaks analysis
    struct Failure {
        std::string plugin, kind, what;
    };
    std::vector<Failure> failures_;  // plugins that failed (plugin_failure)
    bool keep_gone_ = true;                            // findings may name freed blocks
    std::vector<LeakRow> leak_rows_;                   // every finding of the leaks analyzer
    msms::AddrMap<std::pair<Device*, uint64_t>> live_id_;  // MALLOC event id -> live block
    std::unordered_set<uint64_t> mappings_;  // allocation ids of the live mappings (virtual:true), not charted
    std::vector<Gone> gone_;
    std::unordered_map<std::string, uint32_t> text_sites_;
    std::unordered_map<const Device*, LeakSum> leaked_;
    std::map<std::string, std::pair<uint64_t, uint64_t>> leak_kinds_;
    std::pair<uint64_t, uint64_t> leak_total_{0, 0}, unplaced_{0, 0};
    std::unordered_map<uint32_t, uint32_t> site_out_;  // site -> index in the page
    std::vector<uint32_t> site_order_;
};

}  // namespace

MSMEMSCOPE_PLUGIN(HtmlSink)
