#include "pipeline.h"

#include "api_words.h"
#include "run_processes.h"
#include "said_once.h"
#include "sink_lanes.h"

#include <sched.h>
#include <sys/resource.h>

#include <spdlog/spdlog.h>

#include <msmemscope/plugin.hpp>

#include "live/live_state.h"
#include "shadow.h"
#include "supervisor.h"
#include "util/text.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

namespace msms {


// ---- a collector's own pool types (abi.h MSMS_T_CUSTOM_POOL_FIRST..LAST):
// the name each was given by the "pool" Attr of its first MALLOC, for every
// plugin in this process (msms_event_type_name calls msms_host_pool_name).
namespace {
constexpr int kCustomPools = MSMS_T_CUSTOM_POOL_LAST - MSMS_T_CUSTOM_POOL_FIRST + 1;
std::atomic<const char*> g_custom_pool_names[kCustomPools];

bool valid_pool_name(const std::string& n) {
    if (n.empty() || n.size() > 31 || n[0] < 'A' || n[0] > 'Z') return false;
    for (char c : n)
        if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
    for (unsigned t = 0; t < MSMS_T_CUSTOM_POOL_FIRST; ++t) {
        const char* b = msms_event_type_name(static_cast<uint16_t>(t));
        if (b && n == b) return false;  // not a built-in type's name
    }
    return n != "CUSTOM_POOL";
}
}  // namespace

void Pipeline::note_custom_pool(uint16_t type, const std::vector<std::pair<std::string, std::string>>& attrs) {
    auto& slot = g_custom_pool_names[type - MSMS_T_CUSTOM_POOL_FIRST];
    if (slot.load(std::memory_order_acquire)) return;  // named by its first MALLOC
    for (auto& [k, v] : attrs) {
        if (k != "pool") continue;
        if (!valid_pool_name(v)) {
            log(1, "Event Type " + std::to_string(type) + ": pool name '" + escape_controls(v) +
                       "' refused (allowed: [A-Z][A-Z0-9_]*, at most 31 characters, not a built-in type's name); "
                       "shown as CUSTOM_POOL");
            return;
        }
        const char* name = strdup(v.c_str());  // kept for the life of the process
        const char* none = nullptr;
        if (name && !slot.compare_exchange_strong(none, name)) free(const_cast<char*>(name));
        return;
    }
}

bool is_driver_pool(uint16_t type) {
    return type == MSMS_T_HAL || type == MSMS_T_HOST || type == MSMS_T_HOST_PINNED;
}

}  // namespace msms

extern "C" __attribute__((visibility("default"), used)) const char* msms_host_pool_name(uint16_t type) {
    if (!msms_is_custom_pool(type)) return nullptr;
    return msms::g_custom_pool_names[type - MSMS_T_CUSTOM_POOL_FIRST].load(std::memory_order_acquire);
}

namespace msms {

namespace {
std::string to_s(msms_str s) { return std::string(s.data ? s.data : "", s.size); }
}  // namespace

Pipeline::Pipeline(const Config& cfg, const Registry& registry) : cfg_(cfg), registry_(registry) {
    // MSMEMSCOPE_SINK_THREADS=0: every sink on the pipeline's thread, as
    // before issue #30 (a third-party sink that is not safe beside another).
    // =1: a thread for a lone sink too, however few CPUs the host has (tests).
    if (const char* e = std::getenv("MSMEMSCOPE_SINK_THREADS"); e && std::string(e) == "0") sink_threads_ = false;
    if (const char* e = std::getenv("MSMEMSCOPE_SINK_THREADS"); e && std::string(e) == "1") lone_sink_thread_ = true;
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0) host_cpus_ = CPU_COUNT(&cpus);
    // Under an address-space limit (ulimit -v, shared with the program) the
    // host keeps to one thread's stack and one malloc arena
    // (util/host_process.cpp): the sinks stay on the pipeline's thread.
    struct rlimit as {};
    if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) sink_threads_ = false;
}

Pipeline::~Pipeline() { destroy_plugins(); }

void Pipeline::destroy_plugins() {
    lanes_.reset();  // the sinks' threads end first (what they still held is dropped)
    for (auto* list : {&analyzers_, &sinks_})
        for (auto& i : *list)
            if (i.obj) {
                supervisor::CallScope in(i.slot, PluginCall::Destroy);
                i.d->destroy(i.obj);
                i.obj = nullptr;
                i.alive = false;
            }
}

void Pipeline::set_rank(const std::string& rank) {
    std::lock_guard<std::mutex> lk(rank_mu_);
    rank_ = rank;
}

std::string Pipeline::process_named() const {
    std::lock_guard<std::mutex> lk(rank_mu_);
    return run_processes::named(run_.pid, rank_);  // (a second process with a line turns naming on)
}

void Pipeline::log(int level, const std::string& text, bool said_for_the_run) {
    // A Python API user is told in config()'s words (api_words.h), in the
    // log file as on the console.
    const std::string msg = said(cfg_, text);
    const bool shown = level + 1 >= cfg_.stderr_threshold();
    // The console mixes the warnings and errors of every process of the
    // run; the log is this process's own and keeps upstream's words. (Noted
    // as said before the log has it, as plugin_failed does.)
    const std::string who = shown && level >= 1 && !said_for_the_run ? process_named() : "";
    if (run_.log) {
        if (level == 0) run_.log->info(msg);
        else if (level == 1) run_.log->warn(msg);
        else run_.log->error(msg);
    }
    if (shown)
        supervisor::host_stderr(std::string("[msmemscope] ") + (level >= 2 ? "error: " : level == 1 ? "warning: " : "") +
                                who + msg + "\n");
}

void Pipeline::plugin_failed(Instance& inst, const std::string& what, int rc, bool sink_in_finish) {
    inst.alive = false;
    std::lock_guard<std::mutex> lk(api_mu_);
    // (plugins built before MSMS_ERR_OUT_OF_MEMORY said it as an exception)
    static const std::string kBadAlloc = ": std::bad_alloc";
    bool oom = rc == MSMS_ERR_OUT_OF_MEMORY ||
               (what.size() >= kBadAlloc.size() && what.compare(what.size() - kBadAlloc.size(), kBadAlloc.size(), kBadAlloc) == 0);
    if (oom && oom_fatal_) {
        oom_pending_ = true;  // thrown once the plugin's call has returned (throw_if_out_of_memory)
        return;
    }
    std::string msg = "plugin '" + inst.name + "': " + what + (oom ? " (out of memory)" : "") +
                      (sink_in_finish ? kOwnOutputIncomplete : "; continuing without it");
    plugin_errors_.push_back(msg);
    failures_.push_back({inst.name, plugin_kind_name(inst.d ? inst.d->kind : 0), what + (oom ? " (out of memory)" : "")});
    failure_count_ = failures_.size();
    // (noted as said before the log has it: the log is what a reader sees first)
    const std::string who = process_named();
    if (run_.log) run_.log->error(said(cfg_, msg));
    supervisor::host_stderr("msmemscope: error: " + who + said(cfg_, msg) + "\n");
}

std::string Pipeline::with_reason(const Instance& inst, const std::string& what) const {
    std::string why = plugin_last_error(inst.d, inst.obj);
    return why.empty() ? what : what + ": " + why;
}

void Pipeline::start(const RunContext& run) {
    run_ = run;
    supervisor::writing_into(run_.output_dir);
    // Plugins the supervisor left out after they crashed (supervisor.h):
    // said on stderr by the supervisor already, here in the run's log.
    for (auto& note : supervisor::exclusion_notes())
        if (run_.log) run_.log->error(said(cfg_, note));
    using Opts = std::vector<std::pair<std::string, std::string>>;
    auto make = [&](const std::string& name, int kind, std::vector<Instance>& into, const Opts& host_opts = {}) {
        const LoadedPlugin* p = registry_.find(name, kind);
        if (!p) return;
        if (supervisor::excluded(name)) {
            failures_.push_back({name, plugin_kind_name(kind), supervisor::exclusion_reason(name)});
            failure_count_ = failures_.size();
            return;
        }
        Instance inst;
        inst.name = name;
        inst.slot = supervisor::register_plugin(name);
        inst.d = p->descriptor;
        inst.keep_library = p->library;
        Opts opts;
        auto it = cfg_.plugin_options.find(name);
        if (it != cfg_.plugin_options.end())
            for (auto& kv : it->second) opts.emplace_back(kv.first, kv.second);
        for (auto& h : host_opts) {  // the host's own settings win
            opts.erase(std::remove_if(opts.begin(), opts.end(), [&](auto& o) { return o.first == h.first; }),
                       opts.end());
            opts.push_back(h);
        }
        std::vector<msms_kv> kv;
        for (auto& o : opts)
            kv.push_back({{o.first.data(), static_cast<uint32_t>(o.first.size())},
                          {o.second.data(), static_cast<uint32_t>(o.second.size())}});
        auto api = std::make_unique<HostApi>();
        api->pipeline = this;
        api->plugin = name;
        api->api.struct_size = sizeof(msms_host_api);
        api->api.host = api.get();
        api->api.log = &api_log;
        api->api.add_attr = &api_add_attr;
        api->api.annotate = &api_annotate;
        api->api.emit = &api_emit;
        api->api.add_finding = &api_add_finding;
        api->api.report = &api_report;
        api->api.progress = &api_progress;
        const msms_host_api* host_api = &api->api;
        apis_.push_back(std::move(api));
        msms_error err{};
        int rc;
        {
            supervisor::CallScope in(inst.slot, PluginCall::Create);
            rc = inst.d->create(host_api, kv.data(), static_cast<uint32_t>(kv.size()), &inst.obj, &err);
        }
        if (rc != MSMS_OK || !inst.obj) {
            inst.obj = nullptr;
            inst.alive = false;
            plugin_failed(inst, std::string("create failed: ") + (err.message[0] ? err.message : "no reason given"), rc);
            return;
        }
        into.push_back(std::move(inst));
    };
    // In a live run the oom analyzer writes the rows of an out-of-memory
    // failure: the host hands it the collectors' OOM_TRIGGER (feed()) and it
    // writes OOM_Snapshot first, then the trigger and its details, in
    // upstream's order (csrc/event_trace/hal_hooks/hal_hooks.cpp HandleOOM).
    const Opts oom_live{{"write_trigger", "true"}};
    auto selected = [&](const char* name) {
        return std::find(cfg_.analyzers.begin(), cfg_.analyzers.end(), name) != cfg_.analyzers.end();
    };
    for (auto& a : cfg_.analyzers)
        make(a, MSMS_KIND_ANALYZER, analyzers_, !cfg_.analyze && a == "oom" ? oom_live : Opts{});
    // watcher.watch() in the target sends checkpoints without --watch: the
    // watch analyzer (passive: it only acts on "msmemscope.watch" marks) is
    // always there in a live run to write them.
    if (!cfg_.analyze && !selected("watch")) make("watch", MSMS_KIND_ANALYZER, analyzers_);
    // Upstream writes the OOM_Snapshot row at every failure whatever the
    // analyses; the trigger and the blocks only with its oom analysis. So
    // without `oom` the analyzer is there too, writing the snapshot only.
    if (!cfg_.analyze && !selected("oom"))
        make("oom", MSMS_KIND_ANALYZER, analyzers_, {{"write_trigger", "true"}, {"details", "false"}});
    if (!cfg_.analyze)
        for (size_t i = 0; i < analyzers_.size(); ++i)
            if (analyzers_[i].name == "oom") oom_analyzer_ = i;
    for (auto& s : cfg_.sinks) make(s, MSMS_KIND_SINK, sinks_);

    msms_run_info info{};
    info.struct_size = sizeof(info);
    info.pid = run_.pid;
    info.output_dir = {run_.output_dir.data(), static_cast<uint32_t>(run_.output_dir.size())};
    info.timestamp = {run_.timestamp.data(), static_cast<uint32_t>(run_.timestamp.size())};
    info.config_json = {run_.config_json.data(), static_cast<uint32_t>(run_.config_json.size())};
    info.command_line = {run_.command_line.data(), static_cast<uint32_t>(run_.command_line.size())};
    info.level = static_cast<uint32_t>(cfg_.level);
    info.output_dir_fd = run_.output_dir_fd;  // ABI 1.3 (output_files.hpp)
    // Downstream first: sinks are ready before any analyzer can emit.
    for (auto* list : {&sinks_, &analyzers_}) {
        for (auto& i : *list) {
            if (!i.alive || !i.d->begin) continue;
            msms_error err{};
            supervisor::CallScope in(i.slot, PluginCall::Begin);
            if (int rc = i.d->begin(i.obj, &info, &err); rc != MSMS_OK)
                plugin_failed(i, std::string("begin failed: ") + (err.message[0] ? err.message : "no reason given"), rc);
        }
    }
    supervisor::pipeline_started();
    events_flowing_ = true;
    throw_if_out_of_memory();
    // Lanes pay off when the pipeline's thread has more to do than feed one
    // sink: several sinks, or analyses beside a lone sink when there is a
    // CPU for each (the program's, the pipeline's, the sink's). A lone sink
    // without analyses (a C-stack capture into SQLite) was faster on the
    // pipeline's thread (0.79-0.81 s against 0.84-0.95 s for 1 M rows, c:32,
    // db: the copies and hand-overs cost more than the overlap gains); so
    // was a lone sink with analyses on 2 CPUs (a PyTorch loop, 5 rounds:
    // db 1.24x -> 1.225x, CSV 1.19x -> 1.18x; bench/README.md).
    const bool lone_pays = !cfg_.analyzers.empty() && (host_cpus_ >= 3 || lone_sink_thread_);
    if (sink_threads_ && !sinks_.empty() && (sinks_.size() >= 2 || lone_pays)) {
        std::vector<SinkLanes::Lane> lanes;
        sink_reports_.resize(sinks_.size());
        for (size_t i = 0; i < sinks_.size(); ++i)
            lanes.push_back(SinkLanes::Lane{[this, i](const SinkItem& it) { sink_item(i, it); },
                                            [this, i] { sink_finish(i); }});
        lanes_ = std::make_unique<SinkLanes>(std::move(lanes), 1);
    }
    if (!sinks_.empty()) {
        std::string names;
        for (auto& sk : sinks_) names += (names.empty() ? "" : ", ") + sk.name;
        const char* where = lanes_ ? (sinks_.size() > 1 ? "each on a thread of its own" : "on a thread of its own")
                            : !sink_threads_ ? "on the pipeline's thread (MSMEMSCOPE_SINK_THREADS=0 or an address-space limit)"
                            : cfg_.analyzers.empty() ? "on the pipeline's thread (a lone sink, no analyses)"
                                                     : "on the pipeline's thread (a lone sink, fewer than 3 CPUs for the host)";
        if (run_.log) run_.log->info("sinks: {} {}", names, where);
    }
}

void Pipeline::idle() {
    tell_live_of_failures();
    if (lanes_) lanes_->publish();
}

void Pipeline::stop_sinks() { lanes_.reset(); }

namespace {
// The sink whose thread this is (sink_lanes.h), -1 on the pipeline's thread.
thread_local long t_sink = -1;
}

void Pipeline::sink_item(size_t i, const SinkItem& it) {
    t_sink = static_cast<long>(i);
    Instance& s = sinks_[i];
    if (!s.alive) return;
    int rc = MSMS_OK;
    switch (it.kind) {
    case SinkItem::Event: {
        supervisor::CallScope in(s.slot, PluginCall::OnEvent);
        rc = s.d->on_event(s.obj, &it.ev);
        break;
    }
    case SinkItem::Annotation:
        if (s.d->on_annotation) {
            supervisor::CallScope in(s.slot, PluginCall::OnAnnotation);
            rc = s.d->on_annotation(s.obj, it.id, it.key, it.value);
        }
        break;
    case SinkItem::Finding:
        if (s.d->on_finding) {
            supervisor::CallScope in(s.slot, PluginCall::OnFinding);
            rc = s.d->on_finding(s.obj, it.key, it.cols, it.n);
        }
        break;
    }
    if (rc == MSMS_OK) return;
    const char* what = it.kind == SinkItem::Event ? nullptr : it.kind == SinkItem::Annotation ? "failed on an annotation" : "failed on a finding";
    plugin_failed(s, with_reason(s, what ? std::string(what) : "failed on event " + std::to_string(it.ev.id)), rc);
}

void Pipeline::sink_finish(size_t i) {
    t_sink = static_cast<long>(i);
    Instance& s = sinks_[i];
    if (!s.alive || !s.d->finish) return;
    tell_sink_of_later_failures(i);
    if (!s.alive) return;  // it failed on being told
    msms_error err{};
    {
        supervisor::CallScope in(s.slot, PluginCall::Finish);
        if (int rc = s.d->finish(s.obj, &err); rc != MSMS_OK) sink_finish_failed(s, err, rc);
    }
    if (progress_) {
        Progress p;
        p.plugin = s.name;
        p.ended = true;
        std::lock_guard<std::mutex> lk(api_mu_);
        progress_(p);
    }
}

void Pipeline::throw_if_out_of_memory() {
    if (oom_pending_) throw std::bad_alloc();
}

bool Pipeline::account(Record& r) {
    msms_event& ev = r.ev;
    if (ev.kind == MSMS_EV_ACCESS) {
        ev.allocation_id = framework_block_at(ev.device_kind, ev.device_id, ev.ptr);
        return true;
    }
    if (ev.kind != MSMS_EV_MALLOC && ev.kind != MSMS_EV_FREE) return true;
    if (ev.kind == MSMS_EV_MALLOC && msms_is_custom_pool(ev.type)) note_custom_pool(ev.type, r.attrs);
    const bool framework = !is_driver_pool(ev.type);
    bool virt = false;
    if (ev.kind == MSMS_EV_MALLOC)
        for (auto& a : r.attrs)
            if (a.first == "virtual" && a.second == "true") virt = true;
    PoolKey key{ev.device_kind, ev.device_id, ev.type, virt};
    if (ev.kind == MSMS_EV_FREE) {
        // A free names no pool flavour: a mapping is freed by its address.
        PoolKey vkey{ev.device_kind, ev.device_id, ev.type, true};
        auto v = live_.find(vkey);
        if (v != live_.end() && v->second.count(ev.ptr)) key = vkey;
    }
    PoolSlot& slot = pool_slot(key, ev);
    auto& live = *slot.live;
    int64_t delta = 0;
    if (ev.kind == MSMS_EV_MALLOC) {
        ev.allocation_id = ++next_alloc_id_;
        auto [it, inserted] = live.emplace(ev.ptr, LiveBlock{ev.allocation_id, ev.size});
        if (!inserted) {
            // The same address again without a FREE in between: the earlier
            // block was released where we could not see it (a shadow FREE).
            shadow_before_.push_back(shadow_free(ev.device_kind, ev.device_id, ev.type, ev.ptr,
                                                 it->second.allocation_id, it->second.size, ev.timestamp_ns, ev.pid,
                                                 key.virt));
            delta -= static_cast<int64_t>(it->second.size);
            it->second = LiveBlock{ev.allocation_id, ev.size};
        }
        delta += static_cast<int64_t>(ev.size);
        if (framework) by_addr_[{ev.device_kind, ev.device_id}][ev.ptr] = LiveBlock{ev.allocation_id, ev.size};
    } else {
        auto it = live.find(ev.ptr);
        if (it != live.end()) {
            ev.allocation_id = it->second.allocation_id;
            ev.size = it->second.size;
            delta = -static_cast<int64_t>(it->second.size);
            live.erase(it);
            if (framework) {
                auto d = by_addr_.find({ev.device_kind, ev.device_id});
                if (d != by_addr_.end()) {
                    auto b = d->second.find(ev.ptr);
                    if (b != d->second.end() && b->second.allocation_id == ev.allocation_id) d->second.erase(b);
                }
            }
        } else {
            return false;  // allocated before collection started: pairs with nothing
        }
    }
    int64_t& used = *slot.used;
    used += delta;
    ev.pool_used = used;
    // A collector's own pool (msms_is_custom_pool) holds memory of its own.
    if ((is_driver_pool(ev.type) || msms_is_custom_pool(ev.type)) && !key.virt) {
        *slot.device_used += delta;
        process_used_ += delta;
    }
    ev.device_used = *slot.device_used;
    ev.process_used = process_used_;
    host_totals(ev, slot, used);
    if (ev.kind == MSMS_EV_MALLOC && ev.type == MSMS_T_HOST && is_import_shadow(r)) {
        auto& t = device_totals_[msmemscope::device_label(ev) + "/HOST"];
        ++t.import_rows;
        t.import_blocks = std::max(t.import_blocks, import_shadow_blocks(r));
        t.import_bytes = std::max(t.import_bytes, ev.size);
    }
    if (is_shadow(r)) {
        // counted, not written; no stacks either (upstream's shadow rows: the
        // block was made before, these would be the reporting call's)
        ev.pool_used = ev.device_used = ev.process_used = -1;
        r.c_stack.clear();
        r.py_stack.clear();
        r.c_ref = r.py_ref = r.caller_ref = std::string_view();
        ev.c_stack_id = ev.py_stack_id = ev.alloc_caller_id = 0;
    }
    return true;
}

bool Pipeline::holds_block(uint16_t dev_kind, int16_t dev_id, uint16_t type, bool virt, uint64_t ptr) const {
    auto it = live_.find(PoolKey{dev_kind, dev_id, type, virt});
    return it != live_.end() && it->second.count(ptr);
}

// The console's per-pool figures. A host heap block that a framework block
// took over (same address, e.g. a CPU tensor's storage from malloc) counts
// under the framework only; the HOST peak of a new host block waits for the
// next event, which may be that framework block (rows keep their numbers).
Pipeline::PoolSlot& Pipeline::pool_slot(const PoolKey& key, const msms_event& ev) {
    PoolSlot& s = slot_;
    if (s.valid && !(s.key < key) && !(key < s.key)) return s;
    std::pair<uint16_t, int16_t> dev{key.dev_kind, key.dev_id};
    s.key = key;
    s.live = &live_[key];
    s.used = &pool_used_[key];
    s.device_used = &device_used_[dev];
    s.taken = &host_taken_[dev];
    s.taken_bytes = &host_taken_bytes_[dev];
    s.totals = &device_totals_[msmemscope::device_label(ev) + "/" + msms_event_type_name(ev.type) + (key.virt ? " mapped" : "")];
    s.valid = true;
    return s;
}

void Pipeline::host_totals(const msms_event& ev, const PoolSlot& s, int64_t used) {
    const PoolKey& key = s.key;
    if (host_peak_pending_) {
        // only the block just made can be one the host heap never held
        bool takes = ev.kind == MSMS_EV_MALLOC && !is_driver_pool(ev.type) && ev.ptr == host_peak_pending_ptr_;
        if (!takes) {
            auto& p = *host_peak_pending_;
            p.peak = std::max(p.peak, p.used);
            host_peak_pending_ = nullptr;
        }
    }
    if (ev.type == MSMS_T_HOST && !key.virt) {
        auto& taken = *s.taken;
        int64_t& excluded = *s.taken_bytes;
        if (ev.kind == MSMS_EV_FREE) {
            auto it = taken.find(ev.ptr);
            if (it != taken.end()) {
                excluded -= static_cast<int64_t>(it->second);
                taken.erase(it);
            }
        } else if (taken.erase(ev.ptr)) {
            excluded = 0;  // the address came back without a FREE: recount below
            for (auto& [p, sz] : taken) excluded += static_cast<int64_t>(sz);
        }
        auto& t = *s.totals;
        t.used = used - excluded;
        if (ev.kind == MSMS_EV_MALLOC) {
            host_peak_pending_ = &t;
            host_peak_pending_ptr_ = ev.ptr;
        }
        else t.peak = std::max(t.peak, t.used);
        return;
    }
    if (ev.kind == MSMS_EV_MALLOC && !is_driver_pool(ev.type)) {
        PoolKey hk{ev.device_kind, ev.device_id, MSMS_T_HOST, false};
        auto h = live_.find(hk);
        if (h != live_.end()) {
            auto b = h->second.find(ev.ptr);
            auto& taken = *s.taken;
            if (b != h->second.end() && !taken.count(ev.ptr)) {
                taken[ev.ptr] = b->second.size;
                *s.taken_bytes += static_cast<int64_t>(b->second.size);
                auto& ht = device_totals_[msmemscope::device_label(ev) + "/HOST"];
                ht.used -= static_cast<int64_t>(b->second.size);
                if (host_peak_pending_ == &ht) host_peak_pending_ = nullptr;  // never held by HOST
            }
        }
        if (host_peak_pending_) {
            auto& p = *host_peak_pending_;
            p.peak = std::max(p.peak, p.used);
            host_peak_pending_ = nullptr;
        }
    }
    auto& t = *s.totals;
    t.used = used;
    t.peak = std::max(t.peak, used);
}

// The process image was replaced by exec: its whole address space went with
// it, so every block still live is freed for the analyzers too (a shell's
// pre-exec image holds no leaks).
void Pipeline::release_all_by_exec() {
    if (accounting_ && !finished_) shadow_frees_at_end(0, true);
}

// A FREE with shadow:true for every block still live, to the sinks only:
// the analyzers have finished and still hold those blocks as live (leaks).
void Pipeline::shadow_frees_at_end(size_t first_consumer, bool image_ended) {
    std::vector<std::pair<uint64_t, Record>> frees;
    for (auto& [key, blocks] : live_)
        for (auto& [ptr, b] : blocks)
            frees.emplace_back(b.allocation_id, shadow_free(key.dev_kind, key.dev_id, key.type, ptr, b.allocation_id,
                                                            b.size, last_ts_, run_.pid, key.virt, image_ended));
    std::sort(frees.begin(), frees.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [id, r] : frees) {  // synthetic: not counted as events
        r.ev.id = ++next_id_;
        dispatch(r, first_consumer == SIZE_MAX ? analyzers_.size() : first_consumer);
    }
    live_.clear();
    slot_.valid = false;
    if (unseen_frees_)
        log(0, std::to_string(unseen_frees_) + " free(s) of blocks allocated before collection started were not "
               "written (no MALLOC to pair with)");
    // How such a block was made unseen: before an attach; with the Python
    // API alone, before the hooks went in at start(); under the CLI, whose
    // hooks are in from the program's start, through an entry point they do
    // not cover (a function looked up in the driver's own handle). After a
    // while with collection off, also then: the hooks remember the blocks
    // made while it is off (shadow MALLOCs at the next start), all but those
    // the agent could not hold (it says so) and those made through an entry
    // point they do not cover; which of them, the host cannot tell.
    const char* made = cfg_.attach_pid ? "made before the attach"
                       : !cfg_.serve_session.empty()
                           ? "made before the hooks went in: without the CLI, before the first msmemscope.start()"
                           : "made through an entry point the hooks do not cover";
    const char* made_off =
        cfg_.attach_pid ? "made before the attach, through an entry point the hooks do not cover, or while "
                          "collection was off and the agent could not remember them"
        : !cfg_.serve_session.empty()
            ? "made before the hooks went in (without the CLI, before the first msmemscope.start()), through an "
              "entry point the hooks do not cover, or while collection was off and the agent could not remember them"
            : "made through an entry point the hooks do not cover, or while collection was off and the agent could "
              "not remember them";
    for (auto& [pool, n] : unseen_device_frees_)
        log(1, pool + ": " + std::to_string(n) + " free(s) of block(s) whose allocation was never recorded (" +
                   (unseen_after_off_.count(pool) ? made_off : made) +
                   ") were not written; the pool's figures and the leak analysis leave those blocks out");
    unseen_device_frees_.clear();
    unseen_after_off_.clear();
}

// The allocation id of the live framework-pool block (PTA, ATB, ...) on that
// device whose range holds ptr, 0 when none (ACCESS rows: COMPAT §4).
uint64_t Pipeline::framework_block_at(uint16_t dev_kind, int16_t dev_id, uint64_t ptr) const {
    if (ptr == 0) return 0;
    auto d = by_addr_.find({dev_kind, dev_id});
    if (d == by_addr_.end() || d->second.empty()) return 0;
    auto it = d->second.upper_bound(ptr);
    if (it == d->second.begin()) return 0;
    --it;
    const uint64_t base = it->first, size = it->second.size;
    if (ptr == base || ptr - base < size) return it->second.allocation_id;
    return 0;
}


// Builds the Attr entries of the event into one text buffer (no allocation
// per event once the buffers have grown): the numbers of the event first,
// then the source's extras and analyzers' additions, a key given by the
// source overriding the computed one.
void Pipeline::build_views(Record& r) {
    attr_text_.clear();
    attr_spans_.clear();
    auto has_extra = [&](std::string_view k) {
        for (auto& kv : r.attrs)
            if (kv.first == k) return true;
        return false;
    };
    auto begin_entry = [&](std::string_view k) -> bool {
        if (!r.complete_attrs && has_extra(k)) return false;
        attr_spans_.push_back({attr_text_.size(), k.size(), 0, 0});
        attr_text_.append(k.data(), k.size());
        attr_spans_.back().value_off = attr_text_.size();
        return true;
    };
    auto end_entry = [&]() { attr_spans_.back().value_len = attr_text_.size() - attr_spans_.back().value_off; };
    const msms_event& ev = r.ev;
    if (!r.complete_attrs) {
        if (ev.kind == MSMS_EV_MALLOC || ev.kind == MSMS_EV_FREE) {
            // Every row has these (a hot path): formatted into one buffer,
            // appended once. At most 53 bytes of keys and 7 values of at
            // most 20 characters: 193 bytes.
            char buf[256];
            char* p = buf;
            // Inlined: each key's copy is then a few moves of a known size
            // (the lambda as a function was ~6% of the host's samples on a
            // PyTorch loop, a libc memcpy call per key among them).
            // The entries' places in a local array, handed over at once
            // (a vector's push_back per entry was ~3% of the host's samples).
            AttrSpan spans[7];
            size_t n = 0;
            auto entry = [&](std::string_view k) __attribute__((always_inline)) -> bool {
                if (!r.attrs.empty() && has_extra(k)) return false;
                spans[n] = {static_cast<size_t>(p - buf), k.size(), static_cast<size_t>(p - buf) + k.size(), 0};
                std::memcpy(p, k.data(), k.size());
                p += k.size();
                return true;
            };
            auto done = [&]() __attribute__((always_inline)) {
                spans[n].value_len = static_cast<size_t>(p - buf) - spans[n].value_off;
                ++n;
            };
            auto signed_value = [&](int64_t v) __attribute__((always_inline)) {
                if (v < 0) *p++ = '-';
                p = format_uint(p, v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v));
                done();
            };
            if (entry("allocation_id")) { p = format_uint(p, ev.allocation_id); done(); }
            if (entry("addr")) { p = format_hex_ptr(p, ev.ptr); done(); }
            if (entry("size")) { p = format_uint(p, ev.size); done(); }
            if (ev.pool_used >= 0 && entry("used")) signed_value(ev.pool_used);
            if (ev.pool_total >= 0 && entry("total")) signed_value(ev.pool_total);
            if (ev.process_used >= 0 && entry("process_used")) signed_value(ev.process_used);
            if (ev.device_used >= 0 && entry("device_used")) signed_value(ev.device_used);
            attr_text_.append(buf, static_cast<size_t>(p - buf));
            attr_spans_.assign(spans, spans + n);
        } else if (ev.kind == MSMS_EV_ACCESS) {
            if (ev.allocation_id && begin_entry("allocation_id")) { append_uint(attr_text_, ev.allocation_id); end_entry(); }
        } else if (ev.kind == MSMS_EV_OOM_DETAIL && ev.type == MSMS_T_OOM_TRIGGER) {
            if (begin_entry("func")) { attr_text_ += r.name; end_entry(); }
            if (begin_entry("req_size")) { append_uint(attr_text_, ev.size); end_entry(); }
            if (begin_entry("flag")) { append_uint(attr_text_, ev.aux0); end_entry(); }
            if (begin_entry("ret")) { append_uint(attr_text_, ev.aux1); end_entry(); }
        } else if (ev.kind == MSMS_EV_KERNEL_LAUNCH && ev.aux0) {
            if (begin_entry("streamId")) { append_uint(attr_text_, ev.aux0); end_entry(); }
            if (begin_entry("taskId")) { append_uint(attr_text_, ev.aux1); end_entry(); }
        }
    }
    kv_.resize(attr_spans_.size() + r.attrs.size());
    msms_kv* out = kv_.data();
    for (auto& sp : attr_spans_)
        *out++ = {{attr_text_.data() + sp.key_off, static_cast<uint32_t>(sp.key_len)},
                  {attr_text_.data() + sp.value_off, static_cast<uint32_t>(sp.value_len)}};
    for (auto& kv : r.attrs)
        *out++ = {{kv.first.data(), static_cast<uint32_t>(kv.first.size())},
                  {kv.second.data(), static_cast<uint32_t>(kv.second.size())}};
    r.ev.attrs = kv_.data();
    r.ev.attr_count = static_cast<uint32_t>(kv_.size());
    r.ev.name = {r.name.data(), static_cast<uint32_t>(r.name.size())};
    std::string_view py = r.py_text(), c = r.c_text();
    r.ev.py_stack = {py.data(), static_cast<uint32_t>(py.size())};
    r.ev.c_stack = {c.data(), static_cast<uint32_t>(c.size())};
    r.ev.alloc_caller = {r.caller_ref.data(), static_cast<uint32_t>(r.caller_ref.size())};
}

void Pipeline::dispatch(Record& r, size_t first_analyzer, size_t end_analyzer, bool to_sinks) {
    Record* saved = current_;
    current_ = &r;
    build_views(r);
    for (size_t i = first_analyzer; i < std::min(end_analyzer, analyzers_.size()); ++i) {
        Instance& a = analyzers_[i];
        if (!a.alive) continue;
        current_analyzer_ = i;
        int rc;
        {
            supervisor::CallScope in(a.slot, PluginCall::OnEvent);
            rc = a.d->on_event(a.obj, &r.ev);
        }
        if (rc != MSMS_OK) plugin_failed(a, with_reason(a, "failed on event " + std::to_string(r.ev.id)), rc);
        // its add_attr entries, now that it no longer holds the views
        if (!r.added.empty()) {
            apply_added(r);
            build_views(r);
        }
    }
    // stacks from the symbolizer's cache (py_ref, c_ref) outlive the lanes
    if (lanes_ && to_sinks) lanes_->event(r.ev, r.py_ref.data() != nullptr, r.c_ref.data() != nullptr);
    for (auto& s : sinks_) {
        if (lanes_ || !s.alive || !to_sinks) continue;
        int rc;
        {
            supervisor::CallScope in(s.slot, PluginCall::OnEvent);
            rc = s.d->on_event(s.obj, &r.ev);
        }
        if (rc != MSMS_OK) plugin_failed(s, with_reason(s, "failed on event " + std::to_string(r.ev.id)), rc);
    }
    if (live_view_ && to_sinks) live_view_->on_event(r.ev);
    current_ = saved;
}

// Whether collection was off, with the hooks in, for a while before now: a
// STOP_TRACE came, or the program started with it off (the CLI's
// --collect-mode=deferred, until its first start()). Not after an attach:
// collection starts at the attach whatever --collect-mode says, and before
// it the hooks were not in (the "made before the attach" of the warning).
bool Pipeline::collection_was_off() const {
    const bool started_off = cfg_.collect_mode == "deferred" && cfg_.serve_session.empty() && cfg_.attach_pid == 0;
    return collection_was_off_ || started_off;
}

void Pipeline::feed(Record& r) {
    if (finished_) return;
    if (r.ev.timestamp_ns < last_ts_) r.ev.timestamp_ns = last_ts_;  // keep the output ordered
    last_ts_ = r.ev.timestamp_ns;
    if (accounting_ && !r.complete_attrs && !account(r)) {
        ++unseen_frees_;
        if (r.ev.device_kind != MSMS_DEV_CPU) {
            const char* pool = msms_event_type_name(r.ev.type);
            std::string label = msmemscope::device_label(r.ev) + "/" + (pool ? pool : "?");
            ++unseen_device_frees_[label];
            if (collection_was_off()) unseen_after_off_.insert(std::move(label));
        }
        ++events_;  // received, not written
        return;
    }
    for (auto& s : shadow_before_) {  // synthetic: not counted as events
        s.ev.id = ++next_id_;
        dispatch(s, 0);
    }
    shadow_before_.clear();
    ++events_;
    if (r.ev.kind == MSMS_EV_SYSTEM && (r.ev.type == MSMS_T_START_TRACE || r.ev.type == MSMS_T_STOP_TRACE)) {
        ++trace_marks_;
        if (r.ev.type == MSMS_T_STOP_TRACE) collection_was_off_ = true;
    }
    if (r.ev.kind == MSMS_EV_OOM_DETAIL && r.ev.type == MSMS_T_OOM_TRIGGER && oom_analyzer_ < analyzers_.size() &&
        analyzers_[oom_analyzer_].alive) {
        // A collector's out-of-memory failure: the analyzers up to oom see
        // it (ID 0: not a row), oom writes the rows (start()).
        r.ev.id = 0;
        dispatch(r, 0, oom_analyzer_ + 1, false);
        if (!analyzers_[oom_analyzer_].alive) {  // it failed on it: the trigger is written as it came
            r.ev.id = ++next_id_;
            dispatch(r, oom_analyzer_ + 1);
        }
    } else {
        if (r.ev.id == 0 || accounting_) r.ev.id = ++next_id_;
        else if (r.ev.id > next_id_) next_id_ = r.ev.id;  // the source's own IDs (offline): annotate/emit stay valid
        dispatch(r, 0);
    }
    while (!emitted_.empty()) {
        auto item = std::move(emitted_.front());
        emitted_.pop_front();
        ++events_;
        dispatch(item.first, item.second);
    }
    tell_live_of_failures();
    throw_if_out_of_memory();
}

void Pipeline::finish() {
    if (host_peak_pending_) {
        auto& p = *host_peak_pending_;
        p.peak = std::max(p.peak, p.used);
        host_peak_pending_ = nullptr;
    }
    if (finished_) return;
    finishing_ = true;
    for (size_t i = 0; i < analyzers_.size(); ++i) {
        Instance& a = analyzers_[i];
        if (!a.alive || !a.d->finish) continue;
        current_analyzer_ = i;
        msms_error err{};
        int rc;
        {
            supervisor::CallScope in(a.slot, PluginCall::Finish);
            rc = a.d->finish(a.obj, &err);
        }
        if (rc != MSMS_OK)
            plugin_failed(a, std::string("finish failed: ") + (err.message[0] ? err.message : "no reason given"), rc);
        throw_if_out_of_memory();
        if (progress_) {
            Progress p;
            p.plugin = a.name;
            p.ended = true;
            progress_(p);
        }
        while (!emitted_.empty()) {
            auto item = std::move(emitted_.front());
            emitted_.pop_front();
            ++events_;
            dispatch(item.first, item.second);
        }
    }
    tell_live_of_failures();
    live_view_ = nullptr;  // the live view ends with what the analyses found, before the end's shadow FREEs
    if (accounting_) shadow_frees_at_end();
    tell_sinks_of_failures();
    finished_ = true;
    if (lanes_) {
        lanes_->finish();
        lanes_.reset();
        for (auto& lines : sink_reports_) report_.insert(report_.end(), lines.begin(), lines.end());
        sink_reports_.clear();
        throw_if_out_of_memory();
        return;
    }
    for (size_t i = 0; i < sinks_.size(); ++i) {
        Instance& s = sinks_[i];
        if (!s.alive || !s.d->finish) continue;
        tell_sink_of_later_failures(i);  // a sink before it failed in its finish
        if (!s.alive) continue;
        msms_error err{};
        {
            supervisor::CallScope in(s.slot, PluginCall::Finish);
            if (int rc = s.d->finish(s.obj, &err); rc != MSMS_OK) sink_finish_failed(s, err, rc);
        }
        throw_if_out_of_memory();
        if (progress_) {
            Progress p;
            p.plugin = s.name;
            p.ended = true;
            progress_(p);
        }
    }
}

// ---------------------------------------------------------------- host API

void Pipeline::api_log(void* h, int level, msms_str m) {
    Pipeline* self = of(h);
    std::string msg = escape_controls(to_s(m));  // a plugin's text never drives the terminal
    std::lock_guard<std::mutex> lk(self->api_mu_);
    if (level >= 2) {
        const std::string& plugin = static_cast<HostApi*>(h)->plugin;
        auto it = std::find_if(self->reported_.begin(), self->reported_.end(),
                               [&](const Reported& r) { return r.plugin == plugin; });
        if (it == self->reported_.end()) self->reported_.push_back(Reported{plugin, msg, 1});
        else ++it->count;
    }
    // (the live view is the pipeline thread's: a sink's thread does not reach it)
    if (t_sink < 0 && self->live_view_) self->live_view_->on_log(static_cast<HostApi*>(h)->plugin, level, msg);
    const bool setup = !self->events_flowing_;
    if (level == 1 && self->group_setup_warnings_ && (setup || self->finishing_)) {
        // The first process of the run to say it says it at once; the others
        // keep it in their log (the session names them all at the end).
        const std::string text = said(self->cfg_, msg);
        if (std::find(self->setup_warnings_.begin(), self->setup_warnings_.end(), text) == self->setup_warnings_.end())
            self->setup_warnings_.push_back(text);
        if (!said_once::first_to_say(text)) {
            if (self->run_.log) self->run_.log->warn(text);
            return;
        }
        // (the end's warning names its process: no other may say it)
        self->log(level, msg, setup);
        return;
    }
    self->log(level, msg);
}

std::vector<std::string> Pipeline::setup_warnings() const {
    std::lock_guard<std::mutex> lk(api_mu_);
    return setup_warnings_;
}

std::vector<std::string> Pipeline::reported_errors() const {
    std::vector<std::string> out;
    for (auto& r : reported_) {
        // A plugin that was dropped is named by its drop already (71).
        bool dropped = std::any_of(plugin_errors_.begin(), plugin_errors_.end(),
                                   [&](const std::string& e) { return e.rfind("plugin '" + r.plugin + "':", 0) == 0; });
        if (dropped) continue;
        std::string first = r.first.substr(0, 1000);
        std::replace(first.begin(), first.end(), '\n', ' ');
        std::string line = "plugin '" + r.plugin + "' reported an error: " + first;
        if (r.count > 1) line += " (and " + std::to_string(r.count - 1) + " more)";
        out.push_back(line);
    }
    return out;
}

int Pipeline::api_progress(void* h, const msms_progress* p) {
    Pipeline* self = of(h);
    if (!p || p->struct_size < offsetof(msms_progress, flags) + sizeof(p->flags)) return MSMS_ERR_INVALID_ARGUMENT;
    if (p->unit > MSMS_PROGRESS_ITEMS) return MSMS_ERR_INVALID_ARGUMENT;
    if (!self->progress_) return MSMS_OK;
    Progress r;
    r.plugin = static_cast<HostApi*>(h)->plugin;
    r.what = escape_controls(to_s(p->what).substr(0, 64));
    r.done = p->done;
    r.total = p->total;
    r.unit = p->unit;
    r.estimate = (p->flags & MSMS_PROGRESS_ESTIMATE) != 0;
    std::lock_guard<std::mutex> lk(self->api_mu_);
    self->progress_(r);
    return MSMS_OK;
}

// Kept aside until the analyzer's on_event returns (Record::added): the
// event it was given points into the entries it would change or move.
int Pipeline::api_add_attr(void* h, msms_str k, msms_str v) {
    auto* p = of(h);
    if (!p->current_ || t_sink >= 0) return MSMS_ERR_INVALID_ARGUMENT;  // analyzers' calls (sinks have their own threads)
    std::string key = to_s(k);
    for (auto& kv : p->current_->added)
        if (kv.first == key) {
            kv.second = to_s(v);
            return MSMS_OK;
        }
    p->current_->added.emplace_back(std::move(key), to_s(v));
    return MSMS_OK;
}

void Pipeline::apply_added(Record& r) {
    for (auto& [key, value] : r.added) {
        auto it = std::find_if(r.attrs.begin(), r.attrs.end(), [&](const auto& kv) { return kv.first == key; });
        // A computed entry of the same key (e.g. "size") is replaced, not repeated.
        if (it != r.attrs.end()) it->second = std::move(value);
        else r.attrs.emplace_back(std::move(key), std::move(value));
    }
    r.added.clear();
}

int Pipeline::api_annotate(void* h, uint64_t id, msms_str k, msms_str v) {
    auto* p = of(h);
    if (id == 0 || id > p->next_id_ || t_sink >= 0) return MSMS_ERR_INVALID_ARGUMENT;
    if (p->lanes_) {
        p->lanes_->annotation(id, k, v);
        return MSMS_OK;
    }
    for (auto& s : p->sinks_) {
        if (!s.alive || !s.d->on_annotation) continue;
        int rc;
        {
            supervisor::CallScope in(s.slot, PluginCall::OnAnnotation);
            rc = s.d->on_annotation(s.obj, id, k, v);
        }
        if (rc != MSMS_OK) p->plugin_failed(s, p->with_reason(s, "failed on an annotation"), rc);
    }
    return MSMS_OK;
}

int Pipeline::api_emit(void* h, const msms_event* ev) {
    auto* p = of(h);
    if (!ev || ev->struct_size < offsetof(msms_event, c_stack_id) || t_sink >= 0) return MSMS_ERR_INVALID_ARGUMENT;
    Record r;
    std::memcpy(&r.ev, ev, std::min<size_t>(sizeof(msms_event), ev->struct_size));
    r.ev.struct_size = sizeof(msms_event);
    r.name = to_s(ev->name);
    for (uint32_t i = 0; i < ev->attr_count; ++i) r.attrs.emplace_back(to_s(ev->attrs[i].key), to_s(ev->attrs[i].value));
    r.complete_attrs = true;
    r.py_stack = to_s(ev->py_stack);
    r.c_stack = to_s(ev->c_stack);
    r.ev.alloc_caller = {};  // (a view of the caller's event; not an emitted row's)
    r.ev.alloc_caller_id = 0;
    if (r.ev.timestamp_ns == 0 || r.ev.timestamp_ns < p->last_ts_) r.ev.timestamp_ns = p->last_ts_;
    r.ev.id = ++p->next_id_;
    if (r.ev.pid == 0) r.ev.pid = p->run_.pid;
    p->emitted_.emplace_back(std::move(r), p->current_analyzer_ + 1);
    return MSMS_OK;
}

int Pipeline::api_add_finding(void* h, msms_str table, const msms_kv* cols, uint32_t n) {
    auto* p = of(h);
    if (t_sink >= 0) return MSMS_ERR_INVALID_ARGUMENT;  // analyzers' findings
    // the host's own table: an analyzer cannot say another plugin failed
    if (msmemscope::view(table) == kFailureTable) return MSMS_ERR_INVALID_ARGUMENT;
    if (p->live_view_) p->live_view_->on_finding(msmemscope::view(table), cols, n);
    p->finding_to_sinks(table, cols, n);
    return MSMS_OK;
}

void Pipeline::finding_to_sinks(msms_str table, const msms_kv* cols, uint32_t n) {
    if (lanes_) {
        lanes_->finding(table, cols, n);
        return;
    }
    for (auto& s : sinks_) {
        if (!s.alive || !s.d->on_finding) continue;
        int rc;
        {
            supervisor::CallScope in(s.slot, PluginCall::OnFinding);
            rc = s.d->on_finding(s.obj, table, cols, n);
        }
        if (rc != MSMS_OK) plugin_failed(s, with_reason(s, "failed on a finding"), rc);
    }
}

// One row of table "plugin_failure" per plugin that failed (or was left
// out after a crash), after the analyzers' last findings: columns plugin,
// kind (analyzer, sink) and what (the console's words). A sink that failed
// itself is not told. One failing later (on a sink's thread, or in a sink's
// finish) is told to each sink not finished yet (tell_sink_of_later_failures):
// the sinks finish one after another in --sinks order, on their threads too
// (SinkLanes::finish), so each names the failures of the sinks before it; the
// log, the console and summary.json name every one.
void Pipeline::tell_sinks_of_failures() {
    std::vector<Failure> failures;
    {
        std::lock_guard<std::mutex> lk(api_mu_);  // sinks' threads add theirs
        failures = failures_;
        failures_told_.assign(sinks_.size(), failures.size());
    }
    for (const Failure& f : failures) {
        const std::string what = said(cfg_, f.what);
        const msms_kv cols[] = {{msms_str{"plugin", 6}, {f.plugin.data(), static_cast<uint32_t>(f.plugin.size())}},
                                {msms_str{"kind", 4}, {f.kind.data(), static_cast<uint32_t>(f.kind.size())}},
                                {msms_str{"what", 4}, {what.data(), static_cast<uint32_t>(what.size())}}};
        finding_to_sinks({kFailureTable.data(), static_cast<uint32_t>(kFailureTable.size())}, cols, 3);
    }
}

void Pipeline::tell_sink_of_later_failures(size_t i) {
    std::vector<Failure> later;
    {
        std::lock_guard<std::mutex> lk(api_mu_);
        if (i >= failures_told_.size()) return;  // finish() was not reached (an exception)
        later.assign(failures_.begin() + static_cast<std::ptrdiff_t>(failures_told_[i]), failures_.end());
        failures_told_[i] = failures_.size();
    }
    for (const Failure& f : later)
        if (sinks_[i].alive) failure_to_sink(sinks_[i], f);
}

// On the sink's own thread (or the pipeline's without sink threads).
void Pipeline::failure_to_sink(Instance& s, const Failure& f) {
    if (!s.d->on_finding) return;
    const std::string what = said(cfg_, f.what);
    const msms_kv cols[] = {{msms_str{"plugin", 6}, {f.plugin.data(), static_cast<uint32_t>(f.plugin.size())}},
                            {msms_str{"kind", 4}, {f.kind.data(), static_cast<uint32_t>(f.kind.size())}},
                            {msms_str{"what", 4}, {what.data(), static_cast<uint32_t>(what.size())}}};
    int rc;
    {
        supervisor::CallScope in(s.slot, PluginCall::OnFinding);
        rc = s.d->on_finding(s.obj, {kFailureTable.data(), static_cast<uint32_t>(kFailureTable.size())}, cols, 3);
    }
    if (rc != MSMS_OK) plugin_failed(s, with_reason(s, "failed on a finding"), rc);
}

void Pipeline::sink_finish_failed(Instance& s, const msms_error& err, int rc) {
    plugin_failed(s, std::string("finish failed: ") + (err.message[0] ? err.message : "no reason given"), rc, true);
}

std::vector<Pipeline::Failure> Pipeline::failures() const {
    std::lock_guard<std::mutex> lk(api_mu_);
    return failures_;
}

void Pipeline::tell_live_of_failures() {
    if (!live_view_ || failure_count_.load(std::memory_order_relaxed) == live_told_) return;
    std::vector<Failure> fresh;
    {
        std::lock_guard<std::mutex> lk(api_mu_);
        fresh.assign(failures_.begin() + static_cast<std::ptrdiff_t>(live_told_), failures_.end());
        live_told_ = failures_.size();
    }
    for (const Failure& f : fresh) live_view_->on_plugin_failure(f.plugin, f.kind, said(cfg_, f.what));
}

void Pipeline::api_report(void* h, msms_str line) {
    Pipeline* p = of(h);
    std::string text = escape_controls(to_s(line), true);
    std::lock_guard<std::mutex> lk(p->api_mu_);
    if (t_sink >= 0 && static_cast<size_t>(t_sink) < p->sink_reports_.size()) p->sink_reports_[static_cast<size_t>(t_sink)].push_back(std::move(text));
    else p->report_.push_back(std::move(text));
}

}  // namespace msms
