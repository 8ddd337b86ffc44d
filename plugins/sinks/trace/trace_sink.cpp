// Sink `trace`: one Chrome/Perfetto trace-event JSON file per process,
// trace_{ts}.json in the process folder (opens in ui.perfetto.dev and
// chrome://tracing).
//
//   counters  "C"  allocated bytes per pool ("<device> <pool> allocated")
//                  after every MALLOC/FREE, and bytes in use per device when
//                  known. Each byte once, as the console, summary.json and
//                  the html count them (DESIGN §8): a host heap block that a
//                  framework block took over (a CPU tensor's storage is
//                  malloc'ed, then PTA's at the same address) is on the
//                  framework's track only, so "cpu in use" is HOST + PTA.
//                  (The dump's HOST rows keep upstream's `used`, which
//                  counts such a block under HOST too.)
//   spans     "X"  operators (OP_LAUNCH start/end pairs), kernels
//                  (KERNEL_START/END pairs), mstx ranges, Python calls and
//                  RecordFunction ranges (PY_TRACE)
//   metadata  "M"  process_name, and thread_name for each thread with a track
//   instants  "i"  kernel launches, mstx marks, steps, snapshots, the
//                  blocks the oom analysis listed (OOM_DETAIL rows), each
//                  out-of-memory failure once (findings table "oom", with or
//                  without --analysis=oom: "out of memory: CALL of SIZE B on
//                  DEVICE", cat "oom"), and leaks (findings table "leaks") at
//                  their allocation
//
// Timestamps are microseconds since the first event (the absolute start is
// in otherData.start_ns), written with nanosecond digits.
//
// The structure is never dropped: operator, kernel, mstx and RecordFunction
// spans, steps, marks, snapshots, OOM rows and leaks are streamed to the
// file as they come, however many. `max_events` (default 2,000,000) is the
// budget of the rest: Python call spans are written while the trace is
// within it (later ones are counted, not written), and the memory counters
// are kept in memory (counter_series.h; at most `counter_points`, default
// 131,072, so that memory stays bounded) and written at the end, downsampled
// to what is left of the budget (at least a quarter of it) with the same
// resolution over the whole run, each time bucket keeping its lowest,
// highest and last value. otherData.downsampled says what was reduced, the
// log and the end-of-run report too.
#include <msmemscope/plugin.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "counter_series.h"
#include "util/json.h"

namespace {

using msmemscope::view;

using msmemscope::device_name;

class TraceSink : public msmemscope::ISink {
public:
    static constexpr const char* kTypeName = "trace";
    static constexpr const char* kVersion = "1.0.0";
    static constexpr const char* kDescription =
        "trace_{ts}.json: Chrome/Perfetto trace events (op/kernel/Python spans, steps, marks, leaks, memory counters)";

    static const msms_option_spec* options(uint32_t& n) {
        static const msms_option_spec specs[] = {
            {"max_events", MSMS_OPT_INT, "2000000", nullptr, 1000, 1000000000,
             "budget of trace events: past it memory counters are downsampled and Python call spans dropped; "
             "operator/kernel spans, steps, marks and findings are always written"},
            {"counter_points", MSMS_OPT_INT, "131072", nullptr, 1000, 100000000,
             "memory counter points kept (in memory until the end, about 56 bytes each): past it, or past what "
             "max_events leaves, the counters are downsampled"},
        };
        n = 2;
        return specs;
    }

    TraceSink(msmemscope::Host host, const msmemscope::Options& opts)
        : host_(host),
          max_events_(static_cast<uint64_t>(opts.get_int("max_events", 2000000))),
          counter_points_max_(static_cast<uint64_t>(opts.get_int("counter_points", 131072))) {}
    ~TraceSink() override {
        if (f_) std::fclose(f_);
    }

    void begin(const msmemscope::RunInfo& run) override {
        run_ = run;
        python_api_ = run.config_json.find("\"python_api\": true") != std::string::npos;
        name_ = "trace_" + run.timestamp + ".json";
        path_ = run.output_dir + "/" + name_;
        // Created O_EXCL|O_NOFOLLOW in the run folder's descriptor (issue #29 item 4).
        std::string why;
        msmemscope::files::Fd dir(run.open_output_dir(why));
        f_ = dir ? msmemscope::files::create_stream(dir.get(), name_, why) : nullptr;
        if (!f_) throw std::runtime_error("cannot write " + path_ + ": " + why);
        buf_.reserve(kFlushAt + 65536);
        buf_ += "{\"traceEvents\":[\n";
        std::string name = run.command_line.empty() ? "process" : run.command_line;
        if (name.size() > 200) name = name.substr(0, 200) + "...";
        head("M", "process_name", run.pid, 0);
        buf_ += ",\"args\":{\"name\":";
        msms::json_quote(buf_, name + " (pid " + std::to_string(run.pid) + ")");
        buf_ += "}}";
    }

    void on_event(const msms_event& ev) override {
        if (!base_set_) {
            base_ = ev.kind == MSMS_EV_PY_TRACE && ev.aux0 && ev.aux0 < ev.timestamp_ns ? ev.aux0 : ev.timestamp_ns;
            base_set_ = true;
        }
        last_ts_ = std::max(last_ts_, ev.timestamp_ns);
        switch (ev.kind) {
        case MSMS_EV_MALLOC:
        case MSMS_EV_FREE: memory(ev); break;
        case MSMS_EV_OP_LAUNCH:
            if (ev.type == MSMS_T_ATEN_START || ev.type == MSMS_T_ATB_START) open_span(ev, "op", ev.tid);
            else close_span(ev, "op", ev.tid);
            break;
        case MSMS_EV_KERNEL_LAUNCH:
            if (ev.type == MSMS_T_KERNEL_START) open_span(ev, "kernel", ev.tid);
            else if (ev.type == MSMS_T_KERNEL_END) close_span(ev, "kernel", ev.tid);
            else instant(ev, "kernel", name_or(ev, "kernel"), 't');
            break;
        case MSMS_EV_MSTX:
            if (ev.type == MSMS_T_RANGE_START) open_span(ev, "mstx", ev.aux0 ? ev.aux0 | kRangeKey : ev.tid);
            else if (ev.type == MSMS_T_RANGE_END) close_span(ev, "mstx", ev.aux0 ? ev.aux0 | kRangeKey : ev.tid);
            else instant(ev, "mstx", name_or(ev, "mark"), 't');
            break;
        case MSMS_EV_PY_TRACE: python(ev); break;
        case MSMS_EV_SYSTEM:
            // A STEP row ends the step its Name numbers (COMPAT §2): the
            // mark says so, as the html page's line does.
            if (ev.type == MSMS_T_STEP) instant(ev, "step", "end of step " + std::string(view(ev.name)), 'g');
            else instant(ev, "system", msms_event_type_name(ev.type) ? msms_event_type_name(ev.type) : "SYSTEM", 'p');
            break;
        case MSMS_EV_SNAPSHOT: instant(ev, "memory", name_or(ev, "SNAPSHOT"), 'p'); break;
        case MSMS_EV_OOM_DETAIL:
            // The failure itself is marked from the oom analyzer's finding
            // (on_finding), with or without --analysis=oom: its OOM_TRIGGER
            // row would mark it twice.
            if (ev.type != MSMS_T_OOM_TRIGGER)
                instant(ev, "oom", msms_event_type_name(ev.type) ? msms_event_type_name(ev.type) : "OOM", 'p');
            break;
        default: break;  // ACCESS: too many to draw; the dump has them
        }
        maybe_flush();
    }

    void on_finding(std::string_view table, const msms_kv* cols, uint32_t n) override {
        if (!f_) return;
        if (table == "oom") return oom_failure(cols, n);
        if (table != "leaks") return;
        ++leaks_;
        uint64_t alloc = 0, ts = 0, size = 0;
        uint32_t tid = 0;
        for (uint32_t i = 0; i < n; ++i) {
            std::string_view k = view(cols[i].key), v = view(cols[i].value);
            if (k == "allocation_id") alloc = num(v);
            else if (k == "timestamp" || k == "malloc_ts" || k == "alloc_timestamp") ts = num(v);
            else if (k == "size") size = num(v);
        }
        auto it = alloc ? live_.find(alloc) : live_.end();
        if (it != live_.end()) {
            if (!ts) ts = it->second.ts;
            if (!size) size = it->second.size;
            tid = it->second.tid;
        }
        if (!ts || ts < base_) ts = last_ts_ ? last_ts_ : base_;
        if (!tid) tid = run_.pid;
        head("i", "leak " + std::to_string(size) + " B", run_.pid, tid);
        buf_ += ",\"cat\":\"leak\",\"s\":\"t\",\"ts\":";
        time(ts);
        finding_args(cols, n);
    }

    // The end of a finding's instant: its columns as args, the event closed.
    void finding_args(const msms_kv* cols, uint32_t n) {
        buf_ += ",\"args\":{";
        for (uint32_t i = 0; i < n; ++i) {
            if (i) buf_ += ',';
            msms::json_quote(buf_, view(cols[i].key));
            buf_ += ':';
            msms::json_attr_value(buf_, view(cols[i].value));
        }
        buf_ += "}}";
        maybe_flush();
    }

    // An allocation that failed for lack of memory: the oom analyzer's
    // finding (table "oom", one at every failure, with or without
    // --analysis=oom; the rows of a run without it are an OOM_Snapshot
    // that names no call). A process-wide instant at the failure, on the
    // failing thread: "out of memory: <call> of <size> B on <device>", the
    // finding's columns in args.
    void oom_failure(const msms_kv* cols, uint32_t n) {
        std::string func, device, short_dev, size;
        uint64_t ts = 0;
        uint32_t tid = 0;
        for (uint32_t i = 0; i < n; ++i) {
            std::string_view k = view(cols[i].key), v = view(cols[i].value);
            if (k == "func") func = v;
            else if (k == "device_name") device = v;
            else if (k == "device") short_dev = v;
            else if (k == "req_size") size = v;
            else if (k == "timestamp") ts = num(v);
            else if (k == "tid") tid = static_cast<uint32_t>(num(v));
        }
        if (device.empty()) device = short_dev;
        if (!ts) ts = last_ts_ ? last_ts_ : base_;
        if (!tid) tid = run_.pid;
        head("i", "out of memory: " + (func.empty() ? std::string("an allocation") : func) + " of " + size +
                      " B on " + device, run_.pid, tid);
        buf_ += ",\"cat\":\"oom\",\"s\":\"p\",\"ts\":";
        time(ts);
        finding_args(cols, n);
    }

    void finish() override {
        if (!f_) return;
        // Spans still open at the end: drawn up to the last event.
        for (auto& [key, stack] : open_)
            for (auto& sp : stack) span(sp.name, sp.cat, sp.tid, sp.start, last_ts_, sp.args, true);
        open_.clear();
        if (pending_.set) settle_pending();
        write_counters();
        buf_ += "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{\"tool\":\"msmemscope\",\"pid\":";
        buf_ += std::to_string(run_.pid);
        buf_ += ",\"start_ns\":";
        buf_ += std::to_string(base_);
        buf_ += ",\"events\":";
        buf_ += std::to_string(written_);
        buf_ += ",\"max_events\":";
        buf_ += std::to_string(max_events_);
        // truncated: events of some kind left out (Python calls); memory
        // counters downsampled are reduced, not truncated
        buf_ += ",\"truncated\":";
        buf_ += py_dropped_ ? "true" : "false";
        buf_ += ",\"downsampled\":{";
        if (counters_downsampled_) {
            buf_ += "\"memory_counters\":{\"samples\":" + std::to_string(series_->samples()) +
                    ",\"written\":" + std::to_string(counter_points_) +
                    ",\"method\":\"per track, time buckets of bucket_ns keep their lowest, highest and last value\""
                    ",\"tracks\":{";
            for (size_t t = 0; t < series_->tracks(); ++t) {
                if (t) buf_ += ',';
                msms::json_quote(buf_, series_->name(t));
                buf_ += ":{\"samples\":" + std::to_string(series_->samples(t)) +
                        ",\"written\":" + std::to_string(series_->points(t)) +
                        ",\"bucket_ns\":" + std::to_string(series_->width_ns(t)) + "}";
            }
            buf_ += "}}";
        }
        if (py_dropped_) {
            if (counters_downsampled_) buf_ += ',';
            buf_ += "\"python_calls\":{\"spans\":" + std::to_string(py_written_ + py_dropped_) +
                    ",\"written\":" + std::to_string(py_written_) + "}";
        }
        buf_ += "},\"complete\":[\"op\",\"kernel\",\"mstx\",\"record_function\",\"step\",\"system\",\"memory\",\"oom\",\"leak\"]";
        std::string n = note();
        if (!n.empty()) {
            buf_ += ",\"downsampled_note\":";
            msms::json_quote(buf_, n);
        }
        buf_ += "}}\n";
        flush();
        if (std::fclose(f_) != 0) {
            f_ = nullptr;
            throw std::runtime_error("cannot write " + path_ + ": " + std::strerror(errno));
        }
        f_ = nullptr;
        host_.progress(file_bytes_, file_bytes_);  // the end: the file's size
        if (!n.empty()) {
            host_.warn("trace: " + n);
            host_.report("trace: " + n);
        }
    }

private:
    static constexpr size_t kFlushAt = 1 << 20;
    static constexpr uint64_t kRangeKey = 1ull << 63;

    struct Span {
        std::string name, cat, args;
        uint64_t start;
        uint32_t tid;
    };
    struct Block {
        uint64_t ts, size;
        uint32_t tid;
    };
    struct Counter {
        size_t track;
        int64_t value = -1;
    };

    static uint64_t num(std::string_view v) {
        uint64_t x = 0;
        for (char c : v) {
            if (c < '0' || c > '9') return x;
            x = x * 10 + static_cast<uint64_t>(c - '0');
        }
        return x;
    }
    static std::string name_or(const msms_event& ev, const char* fallback) {
        return ev.name.size ? std::string(view(ev.name)) : std::string(fallback);
    }
    // What was reduced, for the log, the report and otherData ("" if nothing).
    std::string note() const {
        std::string n;
        if (counters_downsampled_) {
            n = "memory counters downsampled to " + std::to_string(counter_points_) + " of " +
                std::to_string(series_->samples()) + " samples (";
            bool first = true;
            for (size_t t = 0; t < series_->tracks(); ++t) {
                if (series_->width_ns(t) == 1) continue;
                n += first ? "" : ", ";
                first = false;
                n += "'" + series_->name(t) + "' in buckets of " + std::to_string(series_->width_ns(t)) + " ns";
            }
            n += ", each keeping its lowest, highest and last value)";
        }
        if (py_dropped_) {
            if (!n.empty()) n += "; ";
            n += std::to_string(py_dropped_) + " Python call spans past the budget not written";
        }
        if (n.empty()) return n;
        return "the run is over the trace's budget (options max_events=" + std::to_string(max_events_) +
               ", counter_points=" + std::to_string(counter_points_max_) + "): " + n +
               // the file by its name in the process folder: the note is
               // written into it, and the folder may be renamed at the end
               // (a rank learned late)
               "; every operator, kernel and mstx span, step, mark and leak is in " + name_ +
               // --aggregate (config.json "aggregate": true) writes no dump to point to;
               // a Python API session (config.json "python_api": true) is told
               // the options in config()'s words, as the host tells it (api_words.h)
               (run_.config_json.find("\"aggregate\": true") != std::string::npos
                    ? (python_api_ ? " ('aggregate': no per-event rows were kept)" : " (--aggregate: no per-event rows were kept)")
                    : (python_api_ ? ", every event in the dump (data_format=\"db\" for indexed queries)"
                           : ", every event in the dump (--data-format=db for indexed queries)"));
    }

    // The counters, downsampled to what is left of the budget.
    void write_counters() {
        if (!series_) return;
        uint64_t used = written_;
        uint64_t left = used < max_events_ ? max_events_ - used : 0;
        uint64_t budget = std::min(std::max(left, max_events_ / 4), counter_points_max_);
        series_->fit(budget);
        counters_downsampled_ = series_->widened();
        for (size_t t = 0; t < series_->tracks(); ++t) {
            for (const auto& p : series_->points_of(t)) {
                counter_event(series_->name(t), p.ts, p.value);
                ++counter_points_;
                maybe_flush();
            }
        }
    }

    void head(const char* ph, std::string_view name, uint32_t pid, uint32_t tid) {
        // Each thread that has a track is named once, before its first event:
        // without thread_name metadata Perfetto and chrome://tracing show a
        // bare number (counters are the process's, tid 0 is no thread)
        if (tid && ph[0] != 'M' && ph[0] != 'C' && named_.insert(tid).second) {
            head("M", "thread_name", pid, tid);
            buf_ += ",\"args\":{\"name\":";
            msms::json_quote(buf_, (tid == pid ? "main thread " : "thread ") + std::to_string(tid));
            buf_ += "}}";
        }
        buf_ += first_ ? "{\"ph\":\"" : ",\n{\"ph\":\"";
        first_ = false;
        buf_ += ph;
        buf_ += "\",\"name\":";
        msms::json_quote(buf_, name);
        buf_ += ",\"pid\":";
        buf_ += std::to_string(pid);
        buf_ += ",\"tid\":";
        buf_ += std::to_string(tid);
        ++written_;
    }

    // Microseconds since base_, with three decimals (nanoseconds).
    void time(uint64_t ts) {
        uint64_t d = ts > base_ ? ts - base_ : 0;
        char b[32];
        int n = std::snprintf(b, sizeof(b), "%llu.%03llu", static_cast<unsigned long long>(d / 1000),
                              static_cast<unsigned long long>(d % 1000));
        buf_.append(b, static_cast<size_t>(n));
    }

    void counter_event(const std::string& name, uint64_t ts, int64_t value) {
        head("C", name, run_.pid, 0);
        buf_ += ",\"cat\":\"memory\",\"ts\":";
        time(ts);
        buf_ += ",\"args\":{\"bytes\":";
        buf_ += std::to_string(value);
        buf_ += "}}";
    }

    // key: device kind, device id, pool type (0x10000 = the device total)
    // The track of `key`, made at its first event (tracks are listed in that order).
    Counter& track(uint64_t key, const msms_event& ev) {
        // Bounded memory: the series holds at most counter_points_max_ points.
        if (!series_)
            series_ = std::make_unique<msms_trace::CounterSeries>(base_, std::min(max_events_, counter_points_max_));
        auto it = counters_.find(key);
        if (it == counters_.end()) {
            std::string name = device_name(ev.device_kind, ev.device_id);
            const char* pool = msms_event_type_name(ev.type);
            name += key & 0x10000 ? std::string(" in use") : std::string(" ") + (pool ? pool : "pool") + " allocated";
            it = counters_.emplace(key, Counter{series_->add_track(std::move(name))}).first;
        }
        return it->second;
    }

    // A track's last value; 0 before its first point (a run's first rows
    // may be shadow rows, which carry no level of their own).
    int64_t level_of(uint64_t key) const {
        auto c = counters_.find(key);
        return c != counters_.end() && c->second.value >= 0 ? c->second.value : 0;
    }

    void counter(uint64_t key, const msms_event& ev, int64_t value) {
        Counter& c = track(key, ev);
        if (c.value == value) return;
        c.value = value;
        series_->add(c.track, ev.timestamp_ns, value);
    }

    void memory(const msms_event& ev) {
        uint64_t dev = (static_cast<uint64_t>(ev.device_kind) << 32) | (static_cast<uint64_t>(static_cast<uint16_t>(ev.device_id)) << 17);
        bool takes = ev.kind == MSMS_EV_MALLOC && msms_is_framework_pool(ev.type);
        if (pending_.set && !(takes && hkey(ev) == pending_.hkey)) settle_pending();
        if (takes) take_host_block(ev, dev);
        if (msms_is_framework_pool(ev.type)) count_unbacked(ev, dev);
        if (ev.type == MSMS_T_HOST) host_heap(ev, dev);
        else if (ev.pool_used >= 0) pool_level(dev | ev.type, ev, ev.pool_used);
        else shadow_row(dev | ev.type, ev);
        // (count_unbacked: a Python API session's tensors made before its first start())
        if (ev.device_used >= 0) pool_level(dev | 0x10000, ev, ev.device_used + unbacked_bytes_[dev]);
        else if (ev.pool_used < 0 && in_device_use(ev) && msmemscope::attr(ev, "import") != "true")
            shadow_row(dev | 0x10000, ev);  // (the imports' heap moves it itself: imports_heap_changed)
        if (ev.kind == MSMS_EV_MALLOC) {
            if (ev.allocation_id) live_[ev.allocation_id] = Block{ev.timestamp_ns, ev.size, ev.tid};
        } else if (ev.allocation_id) {
            live_.erase(ev.allocation_id);
        }
    }

    // Whether a pool's bytes count in its device's "in use" (the rows'
    // device_used): the driver's and the host heap's pools, and a
    // collector's own pool (abi.h: its memory is its own); not a mapping,
    // whose memory is another block's, nor a framework's pool, which holds
    // the driver's blocks.
    static bool in_device_use(const msms_event& ev) {
        return (!msms_is_framework_pool(ev.type) || msms_is_custom_pool(ev.type)) &&
               msmemscope::attr(ev, "virtual") != "true";
    }

    // A pool's row with `used`: its level, which holds every shadow row before it.
    void pool_level(uint64_t key, const msms_event& ev, int64_t used) {
        shadow_frees_.erase(key);
        counter(key, ev, used);
    }
    // Shadow rows (framework/host/shadow.h) carry no `used`. Their MALLOCs
    // (blocks there when collection started, or when a --steps step
    // started) move the track at once: the peak may be the moment they make.
    // Their FREEs wait, as the html report's do: at the end they close the
    // blocks still live (the track ends at the final bytes); a later MALLOC
    // shows they were real (--steps: the blocks freed in the dropped steps,
    // just before the shadow MALLOCs of those live then). The device's "in
    // use" track moves with them as its pools' tracks do.
    void shadow_row(uint64_t key, const msms_event& ev) {
        if (ev.kind == MSMS_EV_FREE) {
            shadow_frees_[key] += static_cast<int64_t>(ev.size);
            return;
        }
        int64_t freed = 0;
        if (auto f = shadow_frees_.find(key); f != shadow_frees_.end()) {
            freed = f->second;
            shadow_frees_.erase(f);
        }
        counter(key, ev, level_of(key) - freed + static_cast<int64_t>(ev.size));
    }

    // The host heap's track, each byte once: its rows' `used` less the
    // bytes of its live blocks that a framework block took. A new host
    // block's point waits for the next memory event, which may be the
    // framework block that takes it (then the track never held it).
    static uint64_t hkey(const msms_event& ev) {
        return ev.ptr ^ (static_cast<uint64_t>(ev.device_kind) << 56) ^ (static_cast<uint64_t>(static_cast<uint16_t>(ev.device_id)) << 40);
    }
    void host_heap(const msms_event& ev, uint64_t dev) {
        uint64_t k = hkey(ev);
        int64_t& taken = host_taken_bytes_[dev];
        if (auto t = host_taken_.find(k); t != host_taken_.end()) {
            // freed, or its address came back without a FREE: HOST's again
            taken -= static_cast<int64_t>(t->second);
            host_taken_.erase(t);
        }
        if (ev.kind == MSMS_EV_MALLOC) host_live_[k] = ev.size;
        else host_live_.erase(k);
        int64_t used = ev.pool_used;
        if (used < 0) {
            if (msmemscope::attr(ev, "import") == "true") return imports_heap_changed(ev, dev);
            if (!shadow_host_level(ev, dev, used)) return;
        }
        host_used_[dev] = used;
        if (ev.kind == MSMS_EV_MALLOC) {
            track(dev | ev.type, ev);  // before the device's track, as for every pool
            pending_ = Pending{true, k, dev | ev.type, ev.timestamp_ns, used - taken, ev.device_kind, ev.device_id, ev.type};
            return;
        }
        counter(dev | ev.type, ev, used - taken);
    }
    // The host heap's shadow rows (no `used`: the blocks there when
    // collection started, --steps' blocks made or freed in the steps left
    // out, those live at the end) move its level as the pools' do: a MALLOC
    // at once (false: the heap's level, in `used`), a FREE at the next point
    // (the end's FREEs never show: the track ends at the final bytes). A
    // FREE is taken from the level now, as its block leaves the bytes a
    // framework block took now.
    bool shadow_host_level(const msms_event& ev, uint64_t dev, int64_t& used) {
        auto level = host_used_.find(dev);
        if (ev.kind == MSMS_EV_FREE) {
            if (level != host_used_.end()) level->second -= static_cast<int64_t>(ev.size);
            return false;
        }
        used = (level != host_used_.end() ? level->second : 0) + static_cast<int64_t>(ev.size);
        return true;
    }
    // The imports' heap of a Python program (one shadow block for what the
    // interpreter's imports allocated) is written again, a FREE then a
    // MALLOC, when an import ends and once more at exit, and its rows carry
    // no `used`. Later rows' `used` hold its new size, but after the exit's
    // rewrite no row with `used` comes: without this the host track and
    // "in use" would end at its size from before the shutdown, not at the
    // run's final bytes. Its FREE waits for its MALLOC, so that the tracks
    // get one point for the change and no dip between the two rows.
    void imports_heap_changed(const msms_event& ev, uint64_t dev) {
        int64_t& change = imports_change_[dev];
        change += ev.kind == MSMS_EV_MALLOC ? static_cast<int64_t>(ev.size) : -static_cast<int64_t>(ev.size);
        if (ev.kind != MSMS_EV_MALLOC) return;
        int64_t by = change;
        change = 0;
        // (from 0 when it is the device's first row, as the pipeline's
        // figures start: --collect-mode=deferred's start() writes it first)
        int64_t& used = host_used_[dev];
        used += by;
        counter(dev | MSMS_T_HOST, ev, used - host_taken_bytes_[dev]);
        counter(dev | 0x10000, ev, level_of(dev | 0x10000) + by);
    }
    // The rows' `device_used` counts the host heap the agent saw. A Python
    // API session without the CLI puts the heap hooks in at its first
    // start(): the storages of tensors made before it (a model built first)
    // come as shadow framework MALLOCs with no host block behind them, and
    // "in use" (HOST + the pools, each byte once) ended below the PTA track
    // by their bytes. They are added until their FREE; a shadow FREE (freed
    // while collection was off, or still live at the end) waits, as on the
    // pool's track, until a later MALLOC shows it was real. Under the CLI the
    // agent knows every host block (a deferred start writes them first; an
    // import's are in its heap).
    void count_unbacked(const msms_event& ev, uint64_t dev) {
        if (!python_api_) return;
        uint64_t k = hkey(ev);
        bool shadow = msmemscope::attr(ev, "shadow") == "true";
        int64_t by = 0;
        if (ev.kind == MSMS_EV_MALLOC) {
            by = -std::exchange(unbacked_waiting_[dev], 0);
            if (shadow && !host_live_.count(k)) {
                unbacked_[k] = ev.size;
                by += static_cast<int64_t>(ev.size);
            }
        } else if (auto u = unbacked_.find(k); u != unbacked_.end()) {
            if (shadow) unbacked_waiting_[dev] += static_cast<int64_t>(u->second);
            else by = -static_cast<int64_t>(u->second);
            unbacked_.erase(u);
        }
        if (!by) return;
        unbacked_bytes_[dev] += by;
        if (auto d = counters_.find(dev | 0x10000); d != counters_.end()) counter(dev | 0x10000, ev, d->second.value + by);
    }
    void take_host_block(const msms_event& ev, uint64_t dev) {
        auto h = host_live_.find(hkey(ev));
        if (h == host_live_.end() || host_taken_.count(h->first)) return;
        host_taken_[h->first] = h->second;
        int64_t& taken = host_taken_bytes_[dev];
        taken += static_cast<int64_t>(h->second);
        pending_.set = false;  // (only ever this block's) never held by the host heap
        auto u = host_used_.find(dev);
        if (u == host_used_.end()) return;
        msms_event at = ev;  // the host track's point, at this event
        at.type = MSMS_T_HOST;
        counter(dev | MSMS_T_HOST, at, u->second - taken);
    }
    void settle_pending() {
        pending_.set = false;
        msms_event at{};
        at.timestamp_ns = pending_.ts;
        at.device_kind = pending_.device_kind;
        at.device_id = pending_.device_id;
        at.type = pending_.type;
        counter(pending_.key, at, pending_.value);
    }

    void args_of(std::string& out, const msms_event& ev) {
        for (uint32_t i = 0; i < ev.attr_count; ++i) {
            if (!out.empty()) out += ',';
            msms::json_quote(out, view(ev.attrs[i].key));
            out += ':';
            msms::json_attr_value(out, view(ev.attrs[i].value));
        }
    }

    void open_span(const msms_event& ev, const char* cat, uint64_t key) {
        Span s;
        s.name = name_or(ev, cat);
        s.cat = cat;
        s.start = ev.timestamp_ns;
        s.tid = ev.tid;
        args_of(s.args, ev);
        auto& stack = open_[{cat[0], key}];
        if (stack.size() >= 10000) return;  // runaway nesting: no end will come
        stack.push_back(std::move(s));
    }

    void close_span(const msms_event& ev, const char* cat, uint64_t key) {
        auto it = open_.find({cat[0], key});
        if (it == open_.end() || it->second.empty()) {
            // an end without a start: a zero-length mark at the end
            span(name_or(ev, cat), cat, ev.tid, ev.timestamp_ns, ev.timestamp_ns, "", false);
            return;
        }
        auto& stack = it->second;
        // The innermost span of the same name (names may be empty on ends).
        size_t i = stack.size();
        if (ev.name.size) {
            while (i > 0 && stack[i - 1].name != view(ev.name)) --i;
            if (i == 0) i = stack.size();
        }
        Span s = std::move(stack[i - 1]);
        stack.erase(stack.begin() + static_cast<long>(i - 1));
        if (stack.empty()) open_.erase(it);
        span(s.name, s.cat, s.tid, s.start, ev.timestamp_ns, s.args, false);
    }

    void span(const std::string& name, const std::string& cat, uint32_t tid, uint64_t start, uint64_t end,
              const std::string& args, bool unfinished) {
        head("X", name, run_.pid, tid);
        buf_ += ",\"cat\":\"";
        buf_ += cat;
        buf_ += "\",\"ts\":";
        time(start);
        buf_ += ",\"dur\":";
        uint64_t d = end > start ? end - start : 0;
        char b[32];
        int n = std::snprintf(b, sizeof(b), "%llu.%03llu", static_cast<unsigned long long>(d / 1000),
                              static_cast<unsigned long long>(d % 1000));
        buf_.append(b, static_cast<size_t>(n));
        if (!args.empty() || unfinished) {
            buf_ += ",\"args\":{";
            buf_ += args;
            if (unfinished) buf_ += args.empty() ? "\"unfinished\":true" : ",\"unfinished\":true";
            buf_ += '}';
        }
        buf_ += '}';
    }

    void python(const msms_event& ev) {
        // RecordFunction ranges are the user's structure; Python calls are
        // written while the trace is within its budget
        if (ev.type != MSMS_T_PY_RECORD_FUNCTION) {
            if (written_ >= max_events_) {
                ++py_dropped_;
                return;
            }
            ++py_written_;
        }
        uint64_t start = ev.aux0 && ev.aux0 <= ev.timestamp_ns ? ev.aux0 : ev.timestamp_ns;
        span(name_or(ev, "python"), ev.type == MSMS_T_PY_RECORD_FUNCTION ? "record_function" : "python", ev.tid, start,
             ev.timestamp_ns, "", false);
    }

    void instant(const msms_event& ev, const char* cat, const std::string& name, char scope) {
        head("i", name, run_.pid, ev.tid);
        buf_ += ",\"cat\":\"";
        buf_ += cat;
        buf_ += "\",\"s\":\"";
        buf_ += scope;
        buf_ += "\",\"ts\":";
        time(ev.timestamp_ns);
        if (ev.attr_count) {
            std::string a;
            args_of(a, ev);
            buf_ += ",\"args\":{";
            buf_ += a;
            buf_ += '}';
        }
        buf_ += '}';
    }

    void maybe_flush() {
        if (buf_.size() >= kFlushAt) flush();
    }
    void flush() {
        if (!f_ || buf_.empty()) return;
        if (std::fwrite(buf_.data(), 1, buf_.size(), f_) != buf_.size())
            throw std::runtime_error("cannot write " + path_ + ": " + std::strerror(errno));
        file_bytes_ += buf_.size();
        buf_.clear();
        host_.progress(file_bytes_);  // the status line (ABI 1.2): bytes so far
    }

    msmemscope::Host host_;
    msmemscope::RunInfo run_;
    uint64_t max_events_;
    uint64_t counter_points_max_;
    std::string name_, path_;  // the file's name, and its path for the messages of a failure
    std::FILE* f_ = nullptr;
    std::string buf_;
    uint64_t file_bytes_ = 0;  // written to f_ so far
    uint64_t base_ = 0, last_ts_ = 0, written_ = 0, leaks_ = 0;
    uint64_t py_written_ = 0, py_dropped_ = 0, counter_points_ = 0;
    bool base_set_ = false, counters_downsampled_ = false, first_ = true;
    std::unique_ptr<msms_trace::CounterSeries> series_;
    std::map<std::pair<char, uint64_t>, std::vector<Span>> open_;
    std::unordered_map<uint64_t, Block> live_;
    std::unordered_set<uint32_t> named_;  // threads given their thread_name
    std::map<uint64_t, Counter> counters_;
    // the host heap's track (host_heap()): live blocks and those taken, by hkey
    struct Pending {
        bool set = false;
        uint64_t hkey = 0, key = 0, ts = 0;
        int64_t value = 0;
        uint16_t device_kind = 0;
        int16_t device_id = 0;
        uint16_t type = 0;
    };
    Pending pending_;
    std::unordered_map<uint64_t, uint64_t> host_live_, host_taken_;
    std::unordered_map<uint64_t, int64_t> host_taken_bytes_, host_used_;  // by device key
    std::unordered_map<uint64_t, int64_t> shadow_frees_;  // pool key -> bytes of shadow FREEs not yet applied
    std::unordered_map<uint64_t, int64_t> imports_change_;  // by device key: an imports' heap FREE awaiting its MALLOC
    // count_unbacked(): framework blocks with no host block behind them (by hkey), their bytes by device key
    bool python_api_ = false;
    std::unordered_map<uint64_t, uint64_t> unbacked_;
    std::unordered_map<uint64_t, int64_t> unbacked_bytes_, unbacked_waiting_;  // waiting: their shadow FREEs
};

}  // namespace

MSMEMSCOPE_PLUGIN(TraceSink)
