// Analyzer `oom[:K]` (COMPAT §2, §4, §6). Collectors report a failed
// allocation as OOM_DETAIL/OOM_TRIGGER (size = requested bytes, name = the
// function, aux1 = the error code). At each one this analyzer emits, on the
// trigger's device, in upstream's order (csrc/event_trace/hal_hooks/
// hal_hooks.cpp HandleOOM: the snapshot first, then the trigger and the
// blocks):
//   SNAPSHOT "OOM_Snapshot"         the device's numbers at the failure, with
//                                   the failing call's stacks
//   OOM_DETAIL/OOM_TRIGGER          (write_trigger: the host hands the
//                                   collectors' trigger to this analyzer in a
//                                   live run instead of writing it)
//   OOM_RECENT_ALLOC x K            the K most recently allocated live blocks
//   OOM_TOP_ALLOC x K               the K largest live blocks
//   SNAPSHOT "OOM_Snapshot_After"   at the next memory event of that device,
//                                   once it has applied (or at the end of
//                                   the run); ours, not upstream's (its docs
//                                   promise snapshots "before and after" the
//                                   failure). Its free is the failure's
//                                   (or a later SNAPSHOT row's) moved by the
//                                   bytes the device's blocks took or gave
//                                   back since (after_free)
// With details=false (what the host loads when `oom` is not selected: the
// rows upstream writes without its oom analysis) only OOM_Snapshot.
// `msmemscope --analyze=oom` of such a dump tells each failure from its
// OOM_Snapshot row alone (follow_failure_snapshots).
// (upstream's row names: the sinks write OOM_DETAIL rows as OOM_Trigger,
// OOM_RecentAlloc, OOM_TopAlloc; SNAPSHOT keys as upstream's dump.cpp.)
// OOM_RECENT/TOP_ALLOC carry Attr pool, ptr, size, timestamp, step, kernel,
// client and the block's stacks. The imports' heap (a shadow MALLOC with
// Attr import:true: the host blocks Python's imports left, written as one
// block at a made-up address, re-written whenever it changes:
// framework/agent/import_fold.h) is memory but no block: it counts in the
// snapshot's numbers and is never listed as a recent or a large block. A
// block that was there when collection started (its MALLOC written then,
// shadow:true) is listed among the largest, with that row's timestamp, but
// not among the recent: when it was allocated is not known. A block --steps
// carried over from a step not selected (a shadow MALLOC with Attr
// allocated_at: framework/host/step_gap.h) is listed with that time and
// the step it was then, as any other block.
// Each byte once (DESIGN §8): a framework
// block at the address of a live host heap block (a CPU tensor's storage)
// is listed and counted under the framework only. The rows of a failure
// carry the failing thread's process and thread id. A failing loop does not
// flood the output: as upstream, the snapshot and the trigger are written at
// every failure, the blocks at most once per `interval_ms` of event time per
// device.
#include <msmemscope/plugin.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "../common/analyzer_util.h"

namespace {

using namespace msms_an;

class OomAnalyzer : public msmemscope::IAnalyzer {
public:
    static constexpr const char* kTypeName = "oom";
    static constexpr const char* kVersion = "1.0.0";
    static constexpr const char* kDescription =
        "out-of-memory details: the K most recent and K largest live blocks and snapshots around the failure";
    static constexpr const char* kEvents = "alloc,free";

    static const msms_option_spec* options(uint32_t& count) {
        static const msms_option_spec specs[] = {
            {"K", MSMS_OPT_INT, "10", nullptr, 1, 1000, "how many recent and largest live blocks to write"},
            {"interval_ms", MSMS_OPT_INT, "1000", nullptr, 0, 3600000,
             "at most one detail dump per device in this much event time"},
            {"details", MSMS_OPT_BOOL, "true", nullptr, 0, 0,
             "false: only the OOM_Snapshot row at a failure (upstream's rows without its oom analysis)"},
            {"write_trigger", MSMS_OPT_BOOL, "false", nullptr, 0, 0,
             "write the OOM_TRIGGER row after OOM_Snapshot (set by the host in a live run, where it hands "
             "the trigger to this analyzer instead of writing it)"},
        };
        count = sizeof(specs) / sizeof(specs[0]);
        return specs;
    }

    OomAnalyzer(msmemscope::Host host, const msmemscope::Options& opts) : host_(host) {
        k_ = static_cast<size_t>(opts.get_int("K", 10));
        interval_ns_ = static_cast<uint64_t>(opts.get_int("interval_ms", 1000)) * 1000000ull;
        details_ = opts.get_bool("details", true);
        write_trigger_ = opts.get_bool("write_trigger", false);
    }

    void begin(const msmemscope::RunInfo& run) override { offline_ = offline_analysis(run.config_json); }

    void on_event(const msms_event& ev) override {
        if (offline_) follow_failure_snapshots(&ev);
        if (!details_) {
            if (ev.kind == MSMS_EV_MALLOC || ev.kind == MSMS_EV_FREE)
                light(devices_[dev_key(ev)], ev, !driver_pool(ev.type));
            else if (ev.kind == MSMS_EV_SNAPSHOT)
                remember_device_memory(ev);
            else if (ev.kind == MSMS_EV_OOM_DETAIL && ev.type == MSMS_T_OOM_TRIGGER)
                on_trigger(ev);
            return;
        }
        uint64_t ended = 0;
        steps_.feed(ev, ended);
        if (ev.kind == MSMS_EV_KERNEL_LAUNCH ||
            (ev.kind == MSMS_EV_OP_LAUNCH && (ev.type == MSMS_T_ATEN_START || ev.type == MSMS_T_ATB_START))) {
            ++launches_[dev_key(ev)];
            return;
        }
        if (ev.kind == MSMS_EV_MALLOC || ev.kind == MSMS_EV_FREE) {
            Device& d = devices_[dev_key(ev)];
            apply_memory_event(d, ev);
            if (d.after_pending) {  // the program's first step after the failure is in its numbers
                d.after_pending = false;
                snapshot(dev_key(ev), d, "OOM_Snapshot_After", ev.timestamp_ns, d.trigger_pid, d.trigger_tid);
            }
            return;
        }
        if (ev.kind == MSMS_EV_SNAPSHOT) return remember_device_memory(ev);
        if (ev.kind == MSMS_EV_OOM_DETAIL && ev.type == MSMS_T_OOM_TRIGGER) on_trigger(ev);
    }

    void finish() override {
        if (offline_) follow_failure_snapshots(nullptr);
        for (auto& [dk, d] : devices_)
            if (d.after_pending) {
                d.after_pending = false;
                snapshot(dk, d, "OOM_Snapshot_After", 0, d.trigger_pid, d.trigger_tid);
            }
        if (!triggers_) return;
        // `msmemscope --analyze` writes no row (the dump already has the
        // run's): the failures are all there is to say
        if (offline_ && snapshot_only_)
            host_.report("oom: " + std::to_string(triggers_) + " out-of-memory failure(s), " +
                         std::to_string(snapshot_only_) +
                         " of them known from an OOM_Snapshot row alone: the dump was recorded without "
                         "--analysis=oom, so it does not say which call failed nor for how many bytes");
        else if (offline_)
            host_.report("oom: " + std::to_string(triggers_) + " out-of-memory failure(s)");
        else if (details_)
            host_.report("oom: " + std::to_string(triggers_) + " out-of-memory failure(s), " +
                         std::to_string(dumps_) + " detail dump(s) written (OOM_DETAIL rows)");
        else
            host_.report("oom: " + std::to_string(triggers_) +
                         " out-of-memory failure(s), an OOM_Snapshot row each; --analysis=oom adds the failing "
                         "call and the most recent and largest live blocks (OOM_DETAIL rows)");
    }

private:
    struct Block {
        uint64_t size, ts, id, step, kernel;
        uint32_t pid;
        std::string py_stack, c_stack;
        bool taken = false;  // a host heap block that a framework block took over
        bool fold = false;   // the imports' heap: many blocks as one, listed never
        bool shadow = false; // there when collection started: allocated when, is not known
        bool mapping = false; // Attr virtual:true: its handle's memory, counted and listed there
    };
    struct Device {
        std::unordered_map<BlockKey, Block, BlockKeyHash> live;
        int64_t allocated = 0, peak = 0, device_used = -1, device_peak = 0;
        std::map<uint16_t, int64_t> fw_used;  // details=false: each framework pool's running live bytes
        std::map<uint16_t, int64_t> reserved;
        int64_t peak_reserved = 0, fw_peak_reserved = 0;
        // The framework pools' live bytes (PTA, MindSpore, ATB ...): what
        // upstream's snapshot calls allocated (torch's memory_allocated)
        // once the device has any; the driver and host blocks under them
        // are not counted again.
        bool fw_seen = false;
        int64_t fw_allocated = 0, fw_peak = 0;
        uint64_t total = 0, free = 0;  // the device's memory, from its last SNAPSHOT row (0: not known)
        // The live bytes of each driver pool (HAL, HOST, HOST_PINNED: what
        // the device's memory gave; framework blocks sit inside them, so
        // each byte once) now, and their sum when free was read: what the
        // device took or gave back since moves the after snapshot's free.
        std::map<uint16_t, int64_t> driver_bytes;
        int64_t driver_bytes_when_free_read = 0;
        // cpu: which of the process's memory bounds total/free are (the
        // failure's trigger says: RLIMIT_AS, RLIMIT_DATA, cgroup, machine,
        // unknown); empty on a device whose driver gives them.
        std::string limit;
        bool after_pending = false;
        bool peak_pending = false;
        uint32_t trigger_pid = 0, trigger_tid = 0;  // the failing thread: the rows it causes carry it
        bool dumped = false;
        uint64_t last_dump_ts = 0;
    };

    // An OOM_Snapshot row read back from a dump (follow_failure_snapshots).
    struct FailureSnapshot {
        DevKey dk;
        uint64_t ts;
        std::string allocated;  // the row's Attr allocated, as the run computed it
    };

    static bool has_true(const msms_event& ev, std::string_view key) {
        return msmemscope::attr(ev, key) == "true";
    }

    static bool driver_pool(uint16_t type) {
        return type == MSMS_T_HAL || type == MSMS_T_HOST || type == MSMS_T_HOST_PINNED;
    }

    msms_event base(const DevKey& dk, uint16_t kind, uint16_t type, uint64_t ts, uint32_t pid, uint32_t tid) {
        msms_event e{};
        e.struct_size = sizeof(e);
        e.kind = kind;
        e.type = type;
        e.timestamp_ns = ts;
        e.pid = pid;
        e.tid = tid;
        e.device_kind = dk.kind;
        e.device_id = dk.id;
        e.pool_used = e.pool_total = e.process_used = e.device_used = -1;
        return e;
    }

    // details=false (every live run, so it must be cheap): no block list;
    // the numbers come from the host's running totals (the framework pools'
    // live bytes, the device's driver bytes without mappings of them).
    void light(Device& d, const msms_event& ev, bool fw) {
        if (fw && (ev.pool_used >= 0 || has_true(ev, "shadow"))) {
            d.fw_seen = true;
            // Shadow rows carry no `used` (framework/host/shadow.h): they
            // move the pool by their size. --steps starts a selected step,
            // and a failure kept outside them, with such rows for the blocks
            // live then: the failure's numbers are the program's.
            int64_t& used = d.fw_used[ev.type];
            if (ev.pool_used >= 0) used = ev.pool_used;
            else used += ev.kind == MSMS_EV_MALLOC ? static_cast<int64_t>(ev.size) : -static_cast<int64_t>(ev.size);
            d.fw_allocated = 0;
            for (auto& [t, u] : d.fw_used) d.fw_allocated += u;
            d.fw_peak = std::max(d.fw_peak, d.fw_allocated);
        }
        if (ev.device_used >= 0) {
            d.device_used = ev.device_used;
            d.device_peak = std::max(d.device_peak, ev.device_used);
        } else if (!fw && has_true(ev, "shadow") && !has_true(ev, "virtual")) {
            // a driver pool's shadow row moves the device's bytes (not a
            // mapping's: its memory is another block's)
            int64_t by = ev.kind == MSMS_EV_MALLOC ? static_cast<int64_t>(ev.size) : -static_cast<int64_t>(ev.size);
            d.device_used = std::max<int64_t>(d.device_used, 0) + by;
            d.device_peak = std::max(d.device_peak, d.device_used);
        }
        remember_reserved(d, ev, fw);
    }

    // A MALLOC or FREE into the device's live blocks and running numbers.
    void apply_memory_event(Device& d, const msms_event& ev) {
        const bool fw = !driver_pool(ev.type);
        bool framework_malloc = ev.kind == MSMS_EV_MALLOC && fw;
        if (d.peak_pending && !framework_malloc) d.peak = std::max(d.peak, d.allocated);
        d.peak_pending = false;
        BlockKey k = block_key(ev);
        if (ev.kind == MSMS_EV_MALLOC && has_true(ev, "virtual")) {
            // Each byte once (DESIGN §8): a mapping (cuMemMap of a
            // cuMemCreate handle) is memory its handle's block holds, which
            // counts and is listed; the mapping is kept so that its FREE
            // takes nothing off (the host counts the device's bytes so too).
            auto old = d.live.find(k);
            if (old != d.live.end()) forget_bytes(d, ev.type, old->second);
            Block b{ev.size, ev.timestamp_ns, ev.id, steps_.current(), launches_[dev_key(ev)], ev.pid, {}, {}};
            b.mapping = true;
            d.live[k] = std::move(b);
        } else if (ev.kind == MSMS_EV_MALLOC) {
            auto old = d.live.find(k);
            if (old != d.live.end()) forget_bytes(d, ev.type, old->second);
            if (!fw) d.driver_bytes[ev.type] += static_cast<int64_t>(ev.size);
            Block b{ev.size, ev.timestamp_ns, ev.id, steps_.current(), launches_[dev_key(ev)], ev.pid,
                    std::string(view(ev.py_stack)), std::string(view(ev.c_stack))};
            b.shadow = has_true(ev, "shadow");
            b.fold = b.shadow && has_true(ev, "import");
            // --steps: a block allocated in a step not selected, still live
            // when a selected one starts, is written then (shadow MALLOC,
            // framework/host/step_gap.h) with the time its MALLOC happened:
            // listed with that time and the step it was then
            if (uint64_t at = b.shadow ? to_u64(msmemscope::attr(ev, "allocated_at")) : 0) {
                b.ts = at;
                b.step = steps_.at(at);
                b.shadow = false;  // when it was allocated is known
            }
            d.live[k] = std::move(b);
            d.allocated += static_cast<int64_t>(ev.size);
            if (fw) {
                d.fw_seen = true;
                d.fw_allocated += static_cast<int64_t>(ev.size);
                d.fw_peak = std::max(d.fw_peak, d.fw_allocated);
            }
            // Each byte once (DESIGN §8): a framework block at the address
            // of a live host heap block (a CPU tensor's storage from
            // malloc) is that block; it counts and is listed under the
            // framework only, until the host block is freed.
            if (framework_malloc) {
                auto h = d.live.find(BlockKey{ev.device_kind, ev.device_id, MSMS_T_HOST, ev.ptr});
                if (h != d.live.end() && !h->second.taken) {
                    h->second.taken = true;
                    d.allocated -= static_cast<int64_t>(h->second.size);
                }
            }
            // a new host block may be taken by the next event: its peak waits
            if (ev.type == MSMS_T_HOST) d.peak_pending = true;
            else d.peak = std::max(d.peak, d.allocated);
        } else {
            auto it = d.live.find(k);
            if (it != d.live.end()) {
                forget_bytes(d, ev.type, it->second);
                d.live.erase(it);
            }
        }
        remember_reserved(d, ev, fw);
        if (ev.device_used >= 0) d.device_used = ev.device_used;
    }

    // A live block of pool `type` goes (freed, or its address allocated
    // again): its bytes leave the device's numbers it counted in.
    static void forget_bytes(Device& d, uint16_t type, const Block& b) {
        if (b.mapping) return;
        const int64_t size = static_cast<int64_t>(b.size);
        if (!b.taken) d.allocated -= size;
        if (!driver_pool(type)) d.fw_allocated -= size;
        else d.driver_bytes[type] -= size;
    }

    int64_t allocated_now(const Device& d) const {
        return d.fw_seen ? d.fw_allocated : details_ ? d.allocated : std::max<int64_t>(d.device_used, 0);
    }

    static int64_t reserved_sum(const Device& d, bool framework_only) {
        int64_t sum = 0;
        for (auto& [t, r] : d.reserved)
            if (!framework_only || !driver_pool(t)) sum += r;
        return sum;
    }

    // A pool's reserved bytes: the event's pool total, or the collector's
    // Attr total (a framework pool's rows carry the allocator's reserved).
    void remember_reserved(Device& d, const msms_event& ev, bool fw) {
        int64_t total = ev.pool_total;
        if (total < 0 && fw) {
            std::string v(msmemscope::attr(ev, "total"));
            char* end = nullptr;
            long long n = std::strtoll(v.c_str(), &end, 10);
            if (!v.empty() && !*end && n >= 0) total = n;
        }
        if (total < 0) return;
        d.reserved[ev.type] = total;
        d.peak_reserved = std::max(d.peak_reserved, reserved_sum(d, false));
        d.fw_peak_reserved = std::max(d.fw_peak_reserved, reserved_sum(d, true));
    }

    // The device's total and free memory as its last SNAPSHOT row gave them
    // (native rows: aux0/aux1; the Python package's: Attr total/free).
    void remember_device_memory(const msms_event& ev) {
        uint64_t total = ev.aux0, free = ev.aux1;
        if (total == 0) {
            for (uint32_t i = 0; i < ev.attr_count; ++i) {
                std::string k(view(ev.attrs[i].key)), v(view(ev.attrs[i].value));
                char* end = nullptr;
                unsigned long long n = std::strtoull(v.c_str(), &end, 10);
                if (v.empty() || *end) continue;
                if (k == "total") total = n;
                else if (k == "free") free = n;
            }
        }
        if (total == 0 || free > total) return;
        Device& d = devices_[dev_key(ev)];
        d.total = total;
        d.free = free;
        d.driver_bytes_when_free_read = bytes_against_bound(d);
        d.limit = std::string(msmemscope::attr(ev, "limit"));  // an OOM_Snapshot row read back from a dump
    }

    // A cpu failure's trigger carries the memory bound the process ran into
    // (the agent reads it at the failure: framework/agent/memory_bound.h):
    // Attr total, free and limit, or limit:unknown alone when none could be
    // read. A trigger without them (a device's, an older agent's, a dump's
    // OOM_Trigger row) leaves what the device's SNAPSHOT rows said.
    static void remember_memory_bound(Device& d, const msms_event& trigger) {
        std::string_view limit = msmemscope::attr(trigger, "limit");
        if (limit.empty()) return;
        auto number = [&](std::string_view key) {
            std::string v(msmemscope::attr(trigger, key));
            char* end = nullptr;
            unsigned long long n = std::strtoull(v.c_str(), &end, 10);
            return v.empty() || *end ? 0ull : n;
        };
        d.total = number("total");
        d.free = std::min<uint64_t>(number("free"), d.total);
        d.limit = std::string(limit);
    }

    // The bytes the device's blocks hold against its bound: all of them
    // (pinned host memory too: the CUDA driver pins it in RAM without
    // counting it in RLIMIT_MEMLOCK, so RAM's bounds are its bounds).
    static int64_t bytes_against_bound(const Device& d) {
        int64_t sum = 0;
        for (auto& [type, bytes] : d.driver_bytes) sum += bytes;
        return sum;
    }

    // The free memory now: the last known free, less what the device's
    // blocks took since, plus what they gave back (0 to total). Only the
    // device's own blocks are seen: another process's use (a shared cgroup,
    // the machine) is not, nor memory the allocator keeps after a free.
    static uint64_t after_free(const Device& d) {
        if (d.total == 0) return 0;  // not known: upstream's 0
        int64_t gave_back = d.driver_bytes_when_free_read - bytes_against_bound(d);
        int64_t now = static_cast<int64_t>(d.free) + gave_back;
        return static_cast<uint64_t>(std::clamp<int64_t>(now, 0, static_cast<int64_t>(d.total)));
    }

    static bool memory_bound_key(std::string_view k) { return k == "total" || k == "free" || k == "limit"; }

    void snapshot(const DevKey& dk, Device& d, const std::string& name, uint64_t ts, uint32_t pid, uint32_t tid,
                  const msms_event* failure = nullptr) {
        // upstream's numbers are the framework's (torch_npu memory_reserved,
        // memory_allocated and their peaks); a device with no framework
        // block (a native program) gets all its blocks, each byte once.
        int64_t reserved = reserved_sum(d, d.fw_seen);
        int64_t allocated = allocated_now(d);
        int64_t peak_allocated = d.fw_seen ? d.fw_peak : details_ ? d.peak : d.device_peak;
        int64_t peak_reserved = d.fw_seen ? d.fw_peak_reserved : d.peak_reserved;
        const uint64_t free = after_free(d);  // at the failure: the failure's own
        // upstream's keys, order and number formats (csrc/analysis/dump.cpp
        // DumpSnapshotEvent): what is not known is 0, a rate over 0 is 0.
        auto rate = [](double part, double whole) {
            char buf[32];
            std::snprintf(buf, sizeof(buf), "%f", whole > 0 ? 100.0 * part / whole : 0.0);
            return std::string(buf);
        };
        std::vector<std::pair<std::string, std::string>> attrs{
            {"reserved", std::to_string(reserved)},
            {"max_reserved", std::to_string(peak_reserved)},
            {"allocated", std::to_string(allocated)},
            {"max_allocated", std::to_string(peak_allocated)},
            {"total", std::to_string(d.total)},
            {"free", std::to_string(free)},
            {"device_rate", rate(static_cast<double>(d.total - free), static_cast<double>(d.total))},
            {"reserved_rate", rate(static_cast<double>(allocated), static_cast<double>(reserved))}};
        // ours, after upstream's keys: which memory bound total and free are
        // (a cpu failure's: the process has no driver to ask)
        if (!d.limit.empty()) attrs.emplace_back("limit", d.limit);
        std::vector<msms_kv> kv;
        for (auto& a : attrs) kv.push_back({msmemscope::str(a.first), msmemscope::str(a.second)});
        msms_event e = base(dk, MSMS_EV_SNAPSHOT, MSMS_T_SNAPSHOT, ts, pid, tid);
        e.name = msmemscope::str(name);
        e.attrs = kv.data();
        e.attr_count = static_cast<uint32_t>(kv.size());
        if (failure) {  // upstream's OOM snapshot carries the failing call's stacks
            e.py_stack = failure->py_stack;
            e.c_stack = failure->c_stack;
        }
        host_.emit(e);
    }

    void detail(const DevKey& dk, uint16_t type, const BlockKey& k, const Block& b, const msms_event& trigger) {
        std::vector<std::pair<std::string, std::string>> attrs{
            {"pool", pool_name(k.type)},      {"ptr", hex(k.ptr)},
            {"size", std::to_string(b.size)}, {"timestamp", std::to_string(b.ts)},
            {"step", std::to_string(b.step)}, {"kernel", std::to_string(b.kernel)},
            {"client", std::to_string(b.pid)}};
        std::vector<msms_kv> kv;
        for (auto& a : attrs) kv.push_back({msmemscope::str(a.first), msmemscope::str(a.second)});
        msms_event e = base(dk, MSMS_EV_OOM_DETAIL, type, trigger.timestamp_ns, trigger.pid, trigger.tid);
        e.attrs = kv.data();
        e.attr_count = static_cast<uint32_t>(kv.size());
        e.py_stack = msmemscope::str(b.py_stack);
        e.c_stack = msmemscope::str(b.c_stack);
        host_.emit(e);
    }

    // A failing loop is told (and dumped) once per interval per device.
    bool first_in_interval(Device& d, uint64_t ts) const {
        if (d.dumped && ts - d.last_dump_ts < interval_ns_) return false;
        d.dumped = true;
        d.last_dump_ts = ts;
        return true;
    }

    // A failure as a dump read back holds it. Recorded with --analysis=oom:
    // its OOM_Snapshot row, then its OOM_Trigger row (same device, same
    // time), which tells it (on_trigger). Recorded without (the default
    // analysis is leaks): the OOM_Snapshot row alone, as upstream writes a
    // failure without its oom analysis; then the snapshot is all there is
    // to tell, or `--analyze=oom` would be silent about a failure the run
    // hit. `next` is the row after the snapshot, nullptr at the end.
    void follow_failure_snapshots(const msms_event* next) {
        if (failure_snapshot_) {
            const FailureSnapshot& f = *failure_snapshot_;
            bool told_by_trigger = next && next->kind == MSMS_EV_OOM_DETAIL && next->type == MSMS_T_OOM_TRIGGER &&
                                   dev_key(*next) == f.dk && next->timestamp_ns == f.ts;
            if (!told_by_trigger) on_snapshot_alone(f);
            failure_snapshot_.reset();
        }
        if (next && next->kind == MSMS_EV_SNAPSHOT && view(next->name) == "OOM_Snapshot")
            failure_snapshot_ = FailureSnapshot{dev_key(*next), next->timestamp_ns,
                                                std::string(msmemscope::attr(*next, "allocated"))};
    }

    // The snapshot names neither the failing call nor its size: the warning
    // says what it can, with the allocated bytes the run said (the row's).
    // No finding: an offline analysis writes nothing it could go into.
    void on_snapshot_alone(const FailureSnapshot& f) {
        ++triggers_;
        ++snapshot_only_;
        if (first_in_interval(devices_[f.dk], f.ts))
            host_.warn("oom: an allocation failed on device " + dev_name(f.dk) + " with " +
                       (f.allocated.empty() ? std::string("0") : f.allocated) + " bytes allocated");
    }

    void on_trigger(const msms_event& ev) {
        ++triggers_;
        DevKey dk = dev_key(ev);
        Device& d = devices_[dk];
        bool dump = first_in_interval(d, ev.timestamp_ns);
        if (d.peak_pending) d.peak = std::max(d.peak, d.allocated);
        d.peak_pending = false;
        remember_memory_bound(d, ev);
        // the after snapshot's free moves from the failure's (a device's may
        // come from an older SNAPSHOT row: what it took before is not moved)
        d.driver_bytes_when_free_read = bytes_against_bound(d);
        if (dump)  // once per interval: a failing loop does not flood stderr
            host_.warn("oom: " + std::string(view(ev.name).empty() ? "an allocation" : view(ev.name)) + " of " +
                       std::to_string(ev.size) + " bytes failed on device " + dev_name(dk) + " with " +
                       std::to_string(allocated_now(d)) + " bytes allocated");
        snapshot(dk, d, "OOM_Snapshot", ev.timestamp_ns, ev.pid, ev.tid, &ev);
        // The failure as a finding (table "oom"), with or without the
        // details: the rows upstream writes without its oom analysis do not
        // name the failing call, and the html report must (the db keeps it
        // in msms_findings).
        std::string stack(view(ev.py_stack));
        while (!stack.empty() && stack.back() == '\n') stack.pop_back();
        if (!stack.empty() && ev.c_stack.size) stack += '\n';
        stack += view(ev.c_stack);
        host_.add_finding("oom", {{"device", dev_name(dk)},
                                  {"device_name", msmemscope::device_name(dk.kind, dk.id)},
                                  {"timestamp", std::to_string(ev.timestamp_ns)},
                                  {"func", std::string(view(ev.name))},
                                  {"req_size", std::to_string(ev.size)},
                                  {"flag", std::to_string(ev.aux0)},
                                  {"ret", std::to_string(ev.aux1)},
                                  {"allocated", std::to_string(allocated_now(d))},
                                  {"total", std::to_string(d.total)},
                                  {"free", std::to_string(d.free)},
                                  {"limit", d.limit},
                                  {"details", details_ && dump ? "true" : "false"},
                                  {"tid", std::to_string(ev.tid)},  // (the trace marks it on the thread)
                                  {"stack", stack}});
        if (!details_) return;
        if (write_trigger_) {  // the collector's event as the host would have written it
            msms_event t = ev;
            t.struct_size = sizeof(t);
            t.id = 0;
            // the memory bound is the snapshot's: the OOM_Trigger row keeps
            // upstream's keys (and a collector's own, as driver:cuda)
            std::vector<msms_kv> kept;
            for (uint32_t i = 0; i < ev.attr_count; ++i)
                if (!memory_bound_key(view(ev.attrs[i].key))) kept.push_back(ev.attrs[i]);
            t.attrs = kept.data();
            t.attr_count = static_cast<uint32_t>(kept.size());
            host_.emit(t);
        }
        if (!dump) return;
        ++dumps_;
        d.trigger_pid = ev.pid;
        d.trigger_tid = ev.tid;
        using Item = std::pair<const BlockKey*, const Block*>;
        std::vector<Item> all;
        all.reserve(d.live.size());
        for (auto& [k, b] : d.live)
            if (!b.taken && !b.fold && !b.mapping) all.emplace_back(&k, &b);
        // the recent ones among the blocks whose allocation was seen (a
        // shadow block's row was written when collection started)
        std::vector<Item> seen;
        for (auto& it : all)
            if (!it.second->shadow) seen.push_back(it);
        size_t n = std::min(k_, seen.size());
        std::partial_sort(seen.begin(), seen.begin() + n, seen.end(), [](const Item& a, const Item& b) {
            return a.second->ts != b.second->ts ? a.second->ts > b.second->ts : a.second->id > b.second->id;
        });
        for (size_t i = 0; i < n; ++i) detail(dk, MSMS_T_OOM_RECENT_ALLOC, *seen[i].first, *seen[i].second, ev);
        n = std::min(k_, all.size());
        std::partial_sort(all.begin(), all.begin() + n, all.end(), [](const Item& a, const Item& b) {
            return a.second->size != b.second->size ? a.second->size > b.second->size : a.second->id < b.second->id;
        });
        for (size_t i = 0; i < n; ++i) detail(dk, MSMS_T_OOM_TOP_ALLOC, *all[i].first, *all[i].second, ev);
        d.after_pending = true;
    }

    msmemscope::Host host_;
    size_t k_ = 10;
    uint64_t interval_ns_ = 0;
    bool details_ = true, write_trigger_ = false;
    bool offline_ = false;  // `msmemscope --analyze`: the rows emitted go nowhere
    uint64_t triggers_ = 0, dumps_ = 0;
    uint64_t snapshot_only_ = 0;  // offline: failures known from their OOM_Snapshot row alone
    std::optional<FailureSnapshot> failure_snapshot_;  // offline: read, its OOM_Trigger row not yet
    StepTracker steps_;
    std::map<DevKey, uint64_t> launches_;
    std::map<DevKey, Device> devices_;
};

}  // namespace

MSMEMSCOPE_PLUGIN(OomAnalyzer)
