// Sink `memory_viz`: memory_viz_{ts}.pickle in the process folder, in the
// format of PyTorch's torch.cuda.memory._snapshot() (opens in
// pytorch.org/memory_viz and in torch.cuda._memory_viz):
//
//   {'segments': [{'device', 'address', 'total_size', 'allocated_size',
//                  'active_size', 'requested_size', 'stream', 'segment_type',
//                  'is_expandable', 'frames',
//                  'blocks': [{'address', 'size', 'requested_size', 'state',
//                              'frames', 'history'}]}],
//    'device_traces': [[{'action', 'addr', 'size', 'stream', 'time_us',
//                        'frames'}, ...] per device],
//    'msmemscope': {'devices': [names], 'pid', 'command', 'trace_actions',
//                   'trace_dropped', 'trace_cut'}}
//
// Devices (the index of device_traces and a segment's 'device'), in order
// of first use:
//   - "<device> framework pools (PTA, ...)" for every device with a
//     framework pool (cpu PTA, npu, cuda). Its segments are the driver
//     blocks the pool carved its blocks from: on npu/cuda the HAL block
//     holding the framework block; on cpu the host heap block at the
//     framework block's address (PyTorch's CPU tensors come from malloc;
//     the host's accounting rule, framework/host/pipeline.cpp). A block
//     outside every such driver block is its own segment. Segment space
//     without a live block is an 'inactive' block, as in PyTorch's caching
//     allocator.
//   - "cpu host memory" (malloc and friends) and "<device> driver memory"
//     (HAL): every allocation is a segment holding one block, except the
//     driver blocks that became a framework segment.
// Each byte once (DESIGN §8): a driver block that became a framework
// segment leaves the driver device (its segment, its trace entries and its
// free), so torch's _memory_viz totals of the snapshot are the console's:
// the host device's segments total cpu/HOST's final bytes, the framework
// device's active blocks the pool's.
// The trace of each device is alloc / free_requested / free_completed plus
// segment_alloc / segment_free, with the Python and C frames we collected
// (C frames first, innermost first, then the Python frames). PyTorch keeps
// the most recent trace entries only (trace_alloc_max_entries); so does
// this sink, past `max_trace_entries` per device, and says so, with one
// exception: once two steps have ended (SYSTEM STEP), when the entries after
// the end of the last step would fill more than half of it (an interpreter's teardown after
// training), the trace is the entries before the end of the last step and
// the first ones after it, half of the limit each, so the steps stay in
// view; the later entries are left out (meta 'trace_cut').
#include <msmemscope/plugin.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "frames.h"
#include "util/addr_map.h"
#include "pickle_writer.h"

namespace {

using msmemscope::view;
using msms_viz::Frame;
using msms_viz::PickleWriter;

enum Action : uint8_t { kAlloc, kFreeRequested, kFreeCompleted, kSegmentAlloc, kSegmentFree };
const char* const kActionNames[] = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free"};

struct Entry {
    uint64_t addr, size, ts;
    uint32_t stack;
    uint8_t action;
};

struct Block {
    uint64_t addr, size, ts;
    uint32_t stack;
    uint16_t type;
};

struct Segment {
    uint64_t size;
    uint32_t stack;
    bool synthetic;  // no driver block known: the block itself
};

struct Device {
    std::string base;  // "cpu", "npu:0"
    bool framework = false;
    std::set<std::string> pools;
    // The trace kept (see the top of the file): before the first step, the
    // most recent entries in `pre`; after a step's end, `pre` holds what was
    // kept before it and `post` what came after, up to the limit, and
    // `spill` the most recent entries past that (the next step's `pre`).
    std::deque<Entry> pre, post, spill;
    bool stepped = false, spill_lost = false;
    uint32_t steps = 0;  // step ends seen while not `stepped`
    uint64_t actions = 0;
    uint64_t spilled = 0;  // entries past `post` since the last step's end (the cut, at the end)
    uint64_t kept() const { return stepped ? pre.size() + post.size() : pre.size(); }
    uint64_t dropped() const { return actions > kept() ? actions - kept() : 0; }
    // Per-event tables in open addressing (msms::AddrMap): node-based maps
    // here were ~20% of a PyTorch capture's replay with this sink.
    msms::AddrMap<Block> live;      // allocation id (or address | 1<<63) -> block
    msms::AddrMap<uint64_t> taken;  // driver devices: blocks now a framework segment, key -> address
    // Driver devices, address -> live key: host heap blocks by their exact
    // address (a framework block takes one only there), the others (HAL,
    // pinned) ordered, for the block holding an address.
    msms::AddrMap<uint64_t> heap_at;
    std::map<uint64_t, uint64_t> by_addr;
    std::map<uint64_t, Segment> segs;          // framework devices: address -> segment
    std::string name() const {
        if (!framework) return base + (base == "cpu" ? " host memory" : " driver memory");
        std::string n = base + " framework pools (";
        bool first = true;
        for (auto& p : pools) {
            if (!first) n += ", ";
            first = false;
            n += p;
        }
        return n + ")";
    }
};

class MemoryVizSink : public msmemscope::ISink {
public:
    static constexpr const char* kTypeName = "memory_viz";
    static constexpr const char* kVersion = "1.0.0";
    static constexpr const char* kDescription =
        "memory_viz_{ts}.pickle: PyTorch memory snapshot (segments, device_traces) for pytorch.org/memory_viz";

    static const msms_option_spec* options(uint32_t& n) {
        static const msms_option_spec specs[] = {
            {"max_trace_entries", MSMS_OPT_INT, "1000000", nullptr, 0, 1000000000,
             "trace entries kept per device, the most recent ones (PyTorch's trace_alloc_max_entries); when those "
             "after the last step's end would fill more than half, half before it and half after"},
        };
        n = 1;
        return specs;
    }

    MemoryVizSink(msmemscope::Host host, const msmemscope::Options& opts)
        : host_(host), max_entries_(static_cast<uint64_t>(opts.get_int("max_trace_entries", 1000000))) {
        stacks_.push_back(StackEntry{});  // 0: no frames
    }
    ~MemoryVizSink() override {
        if (out_) std::fclose(out_);
    }

    void begin(const msmemscope::RunInfo& run) override {
        run_ = run;
        path_ = run.output_dir + "/memory_viz_" + run.timestamp + ".pickle";
        // Fail now rather than after the run if the file cannot be written:
        // created here, O_EXCL|O_NOFOLLOW in the run folder's descriptor
        // (issue #29 item 4), and kept open until write().
        std::string why;
        msmemscope::files::Fd dir(run.open_output_dir(why));
        out_ = dir ? msmemscope::files::create_stream(dir.get(), "memory_viz_" + run.timestamp + ".pickle", why) : nullptr;
        if (!out_) throw std::runtime_error("cannot write " + path_ + ": " + why);
    }

    void on_event(const msms_event& ev) override {
        if (ev.kind == MSMS_EV_SYSTEM && ev.type == MSMS_T_STEP) {
            for (auto& d : devices_) step_end(*d);
            return;
        }
        if (ev.kind != MSMS_EV_MALLOC && ev.kind != MSMS_EV_FREE) return;
        if (ev.kind == MSMS_EV_FREE && msmemscope::attr(ev, "shadow") == "true") {
            // Shadow FREEs (framework/host/shadow.h) close the blocks still
            // live when collection ends: those stay live in the snapshot.
            // Any later MALLOC or FREE shows they were real (an address
            // reused without a FREE seen): then they are frees.
            pending_.push_back(Free{ev.device_kind, ev.device_id, ev.type, key_of(ev), ev.ptr, ev.timestamp_ns, 0});
            return;
        }
        for (const Free& f : pending_) free_(f);
        pending_.clear();
        if (ev.kind == MSMS_EV_MALLOC) malloc_(ev);
        else free_(Free{ev.device_kind, ev.device_id, ev.type, key_of(ev), ev.ptr, ev.timestamp_ns, stack(ev)});
    }

    void finish() override { write(); }

private:
    struct StackEntry {
        std::vector<Frame> frames;
        int64_t memo = -1;
    };

    struct Free {
        uint16_t device_kind;
        int16_t device_id;
        uint16_t type;
        uint64_t key, ptr, ts;
        uint32_t stack;
    };

    static uint64_t key_of(const msms_event& ev) { return ev.allocation_id ? ev.allocation_id : (ev.ptr | (1ull << 63)); }

    Device& device(const msms_event& ev, bool framework) {
        uint64_t k = (static_cast<uint64_t>(ev.device_kind) << 20) | (static_cast<uint64_t>(static_cast<uint16_t>(ev.device_id)) << 1) |
                     (framework ? 1u : 0u);
        auto it = dev_index_.find(k);
        if (it != dev_index_.end()) return *devices_[it->second];
        devices_.push_back(std::make_unique<Device>());
        devices_.back()->base = msmemscope::device_name(ev.device_kind, ev.device_id);
        devices_.back()->framework = framework;
        dev_index_.emplace(k, devices_.size() - 1);
        return *devices_.back();
    }
    Device* find_device(const msms_event& ev, bool framework) { return find_device(ev.device_kind, ev.device_id, framework); }
    Device* find_device(uint16_t kind, int16_t id, bool framework) {
        uint64_t k = (static_cast<uint64_t>(kind) << 20) | (static_cast<uint64_t>(static_cast<uint16_t>(id)) << 1) |
                     (framework ? 1u : 0u);
        auto it = dev_index_.find(k);
        return it == dev_index_.end() ? nullptr : devices_[it->second].get();
    }

    uint32_t stack(const msms_event& ev) {
        if (!ev.c_stack.size && !ev.py_stack.size) return 0;
        uint64_t key;
        if (ev.c_stack_id || ev.py_stack_id) key = (ev.c_stack_id * 0x9E3779B97F4A7C15ull) ^ (ev.py_stack_id << 1) ^ 1;
        else key = std::hash<std::string_view>()(view(ev.c_stack)) ^ (std::hash<std::string_view>()(view(ev.py_stack)) << 1);
        auto it = stack_index_.find(key);
        if (it != stack_index_.end()) return it->second;
        StackEntry s;
        s.frames = msms_viz::frames_of(view(ev.c_stack), view(ev.py_stack));
        stacks_.push_back(std::move(s));
        uint32_t i = static_cast<uint32_t>(stacks_.size() - 1);
        stack_index_.emplace(key, i);
        return i;
    }

    void record(Device& d, Action a, uint64_t addr, uint64_t size, uint64_t ts, uint32_t st) {
        ++d.actions;
        if (max_entries_ == 0) return;
        Entry e{addr, size, ts, st, static_cast<uint8_t>(a)};
        if (!d.stepped) {  // no step yet: the most recent entries
            d.pre.push_back(e);
            if (d.pre.size() > max_entries_) d.pre.pop_front();
            return;
        }
        if (d.spill.empty()) {
            if (d.pre.size() + d.post.size() < max_entries_) {
                d.post.push_back(e);
                return;
            }
            if (d.pre.size() > max_entries_ / 2) {  // still more than half before the step's end
                d.pre.pop_front();
                d.post.push_back(e);
                return;
            }
        }
        d.spill.push_back(e);
        ++d.spilled;
        if (d.spill.size() > max_entries_) {
            d.spill.pop_front();
            d.spill_lost = true;
        }
    }

    // The end of a step: what is kept before it is the most recent entries.
    void step_end(Device& d) {
        if (!d.stepped) {  // steps from the second step's end on (one end alone is no loop)
            d.stepped = ++d.steps >= 2;
            return;
        }
        if (d.spill_lost) {
            d.pre.swap(d.spill);
        } else {
            for (const Entry& e : d.post) d.pre.push_back(e);
            for (const Entry& e : d.spill) d.pre.push_back(e);
            while (d.pre.size() > max_entries_) d.pre.pop_front();
        }
        d.post.clear();
        d.spill.clear();
        d.spill_lost = false;
        d.spilled = 0;
    }

    // A driver block became a framework segment: its segment_alloc and
    // alloc leave the driver device's trace (found from the most recent
    // entry back to the block's time; already left out if not found).
    void retract(Device& d, const Block& b) {
        d.actions = d.actions >= 2 ? d.actions - 2 : 0;
        int left = 2;
        for (std::deque<Entry>* q : {&d.spill, &d.post, &d.pre}) {
            for (size_t i = q->size(); i-- > 0 && left;) {
                const Entry& e = (*q)[i];
                if (e.ts < b.ts) return;
                if (e.addr == b.addr && (e.action == kAlloc || e.action == kSegmentAlloc)) {
                    q->erase(q->begin() + static_cast<std::ptrdiff_t>(i));
                    if (q == &d.spill && d.spilled) --d.spilled;
                    --left;
                }
            }
            if (!left) return;
        }
    }

    void malloc_(const msms_event& ev) {
        uint32_t st = stack(ev);
        bool fw = msms_is_framework_pool(ev.type);
        Device& d = device(ev, fw);
        const char* pool = msms_event_type_name(ev.type);
        d.pools.insert(pool ? pool : "?");
        uint64_t key = key_of(ev);
        if (auto old = d.live.find(key); old != d.live.end()) drop_block(d, old->first, ev.timestamp_ns, 0);
        if (fw) {
            if (!segment_of(d, ev.ptr, ev.size)) {
                Device* drv = find_device(ev, false);
                uint64_t bkey = drv ? driver_block_at(*drv, ev.ptr, ev.size) : 0;
                if (bkey) {
                    // The driver block is this pool's segment now, and the
                    // driver device's no more (each byte once).
                    auto bit = drv->live.find(bkey);
                    Block backing = bit->second;
                    drv->live.erase(bit);
                    forget_addr(*drv, backing, bkey);
                    drv->taken[bkey] = backing.addr;
                    retract(*drv, backing);
                    d.segs[backing.addr] = Segment{backing.size, backing.stack, false};
                    record(d, kSegmentAlloc, backing.addr, backing.size, ev.timestamp_ns, backing.stack);
                } else {
                    d.segs[ev.ptr] = Segment{ev.size, st, true};
                    record(d, kSegmentAlloc, ev.ptr, ev.size, ev.timestamp_ns, st);
                }
            }
            d.live[key] = Block{ev.ptr, ev.size, ev.timestamp_ns, st, ev.type};
            record(d, kAlloc, ev.ptr, ev.size, ev.timestamp_ns, st);
        } else {
            d.taken.erase(key);
            d.live[key] = Block{ev.ptr, ev.size, ev.timestamp_ns, st, ev.type};
            if (ev.type == MSMS_T_HOST) d.heap_at[ev.ptr] = key;
            else d.by_addr[ev.ptr] = key;
            record(d, kSegmentAlloc, ev.ptr, ev.size, ev.timestamp_ns, st);
            record(d, kAlloc, ev.ptr, ev.size, ev.timestamp_ns, st);
        }
    }

    void free_(const Free& fr) {
        bool fw = msms_is_framework_pool(fr.type);
        Device* d = find_device(fr.device_kind, fr.device_id, fw);
        if (!d) return;  // allocated before collection started
        if (fw) {
            auto it = d->live.find(fr.key);
            if (it != d->live.end()) drop_block(*d, it->first, fr.ts, fr.stack);
            return;
        }
        uint64_t addr;
        if (auto t = d->taken.find(fr.key); t != d->taken.end()) {
            addr = t->second;  // a framework segment: its free is the pool's only
            d->taken.erase(t);
        } else {
            auto it = d->live.find(fr.key);
            if (it == d->live.end()) return;
            addr = it->second.addr;
            drop_block(*d, it->first, fr.ts, fr.stack);
        }
        // A framework segment carved from this driver block ends with it.
        if (Device* f = find_device(fr.device_kind, fr.device_id, true)) {
            auto s = f->segs.find(addr);
            if (s != f->segs.end() && !s->second.synthetic) {
                record(*f, kSegmentFree, addr, s->second.size, fr.ts, fr.stack);
                f->segs.erase(s);
            }
        }
    }

    // Frees a live block (its FREE, or a MALLOC reusing its id).
    void drop_block(Device& d, uint64_t key, uint64_t ts, uint32_t st) {
        auto it = d.live.find(key);
        Block b = it->second;
        d.live.erase(it);
        record(d, kFreeRequested, b.addr, b.size, ts, st);
        record(d, kFreeCompleted, b.addr, b.size, ts, st);
        if (d.framework) {
            auto s = d.segs.find(b.addr);
            if (s != d.segs.end() && s->second.synthetic) {
                record(d, kSegmentFree, b.addr, s->second.size, ts, st);
                d.segs.erase(s);
            }
        } else {
            forget_addr(d, b, key);
            record(d, kSegmentFree, b.addr, b.size, ts, st);
        }
    }

    // A driver block's address leaves the device's address index (if it is
    // still this block's).
    static void forget_addr(Device& d, const Block& b, uint64_t key) {
        if (b.type == MSMS_T_HOST) {
            auto a = d.heap_at.find(b.addr);
            if (a != d.heap_at.end() && a->second == key) d.heap_at.erase(a);
        } else {
            auto a = d.by_addr.find(b.addr);
            if (a != d.by_addr.end() && a->second == key) d.by_addr.erase(a);
        }
    }

    // The live segment of a framework device holding [addr, addr+size).
    const Segment* segment_of(Device& d, uint64_t addr, uint64_t size) {
        auto it = d.segs.upper_bound(addr);
        if (it == d.segs.begin()) return nullptr;
        --it;
        // a synthetic segment is one block's own, never shared
        if (it->second.synthetic) return nullptr;
        return addr + size <= it->first + it->second.size ? &it->second : nullptr;
    }
    // The key of the live driver block a framework block [addr, addr+size)
    // was carved from, 0 when none: a HAL (or pinned) block holding it; a
    // host heap block only at its very address, as the host accounts it
    // (framework/host/pipeline.cpp: the HOST figures leave exactly those out).
    uint64_t driver_block_at(Device& drv, uint64_t addr, uint64_t size) {
        if (auto h = drv.heap_at.find(addr); h != drv.heap_at.end()) {
            auto b = drv.live.find(h->second);
            if (b != drv.live.end() && addr + size <= b->second.addr + b->second.size) return b->first;
        }
        auto it = drv.by_addr.upper_bound(addr);
        if (it == drv.by_addr.begin()) return 0;
        --it;
        auto b = drv.live.find(it->second);
        if (b == drv.live.end()) return 0;
        if (b->second.type == MSMS_T_HOST && b->second.addr != addr) return 0;
        return addr + size <= b->second.addr + b->second.size ? b->first : 0;
    }

    // ---------------------------------------------------------------- output

    void frames(PickleWriter& w, uint32_t st) {
        StackEntry& s = stacks_[st];
        if (s.memo >= 0) {
            w.get(static_cast<uint32_t>(s.memo));
            return;
        }
        s.memo = w.list_begin_memo();
        for (const Frame& f : s.frames) {
            w.dict_begin();
            w.key("filename");
            w.str(f.filename);
            w.key("line");
            w.integer(f.line);
            w.key("name");
            w.str(f.name);
            w.dict_end();
        }
        w.list_end();
    }

    void block(PickleWriter& w, uint64_t addr, uint64_t size, bool active, uint32_t st) {
        w.dict_begin();
        w.key("address");
        w.unsigned_integer(addr);
        w.key("size");
        w.unsigned_integer(size);
        w.key("requested_size");
        w.unsigned_integer(active ? size : 0);
        w.key("state");
        w.str(active ? "active_allocated" : "inactive");
        w.key("frames");
        frames(w, active ? st : 0);
        if (active) {  // the form torch 1.13's _memory_viz reads
            w.key("history");
            w.list_begin();
            w.dict_begin();
            w.key("addr");
            w.unsigned_integer(addr);
            w.key("real_size");
            w.unsigned_integer(size);
            w.key("frames");
            frames(w, st);
            w.dict_end();
            w.list_end();
        }
        w.dict_end();
    }

    void segment(PickleWriter& w, size_t dev, uint64_t addr, const Segment& s, const std::vector<const Block*>& blocks) {
        uint64_t active = 0;
        for (const Block* b : blocks) active += b->size;
        w.dict_begin();
        w.key("device");
        w.integer(static_cast<int64_t>(dev));
        w.key("address");
        w.unsigned_integer(addr);
        w.key("total_size");
        w.unsigned_integer(s.size);
        w.key("allocated_size");
        w.unsigned_integer(active);
        w.key("active_size");
        w.unsigned_integer(active);
        w.key("requested_size");
        w.unsigned_integer(active);
        w.key("stream");
        w.integer(0);
        w.key("segment_type");
        w.str(s.size >= (1u << 20) ? "large" : "small");
        w.key("is_expandable");
        w.boolean(false);
        w.key("frames");
        frames(w, s.stack);
        w.key("blocks");
        w.list_begin();
        uint64_t at = addr;
        for (const Block* b : blocks) {  // sorted, inside, not overlapping
            if (b->addr > at) block(w, at, b->addr - at, false, 0);
            block(w, b->addr, b->size, true, b->stack);
            at = b->addr + b->size;
        }
        if (addr + s.size > at) block(w, at, addr + s.size - at, false, 0);
        w.list_end();
        w.dict_end();
    }

    void device_segments(PickleWriter& w, size_t di) {
        Device& d = *devices_[di];
        if (!d.framework) {
            std::vector<const Block*> blocks;
            std::vector<std::pair<uint64_t, const Block*>> order;
            order.reserve(d.live.size());
            for (auto& [k, b] : d.live) order.emplace_back(b.addr, &b);
            std::sort(order.begin(), order.end(), [](auto& a, auto& b) { return a.first < b.first; });
            for (auto& [addr, b] : order) {
                segment(w, di, addr, Segment{b->size, b->stack, true}, {b});
            }
            return;
        }
        // Live blocks into their segments; a block that fits none (its
        // driver block was freed first, or overlapping data) is its own.
        std::vector<const Block*> all;
        all.reserve(d.live.size());
        for (auto& [k, b] : d.live) all.push_back(&b);
        std::sort(all.begin(), all.end(), [](const Block* a, const Block* b) { return a->addr < b->addr; });
        std::map<uint64_t, std::vector<const Block*>> in;
        std::vector<const Block*> orphans;
        std::map<uint64_t, uint64_t> end_of;  // segment -> end of the last block placed
        for (const Block* b : all) {
            auto it = d.segs.upper_bound(b->addr);
            if (it != d.segs.begin()) {
                --it;
                if (it->second.synthetic && it->first != b->addr) {
                    orphans.push_back(b);
                    continue;
                }
                uint64_t seg_end = it->first + it->second.size;
                uint64_t& last = end_of.emplace(it->first, it->first).first->second;
                if (b->addr >= last && b->addr + b->size <= seg_end) {
                    in[it->first].push_back(b);
                    last = b->addr + b->size;
                    continue;
                }
            }
            orphans.push_back(b);
        }
        for (auto& [addr, s] : d.segs) {
            auto it = in.find(addr);
            static const std::vector<const Block*> none;
            segment(w, di, addr, s, it == in.end() ? none : it->second);
        }
        for (const Block* b : orphans) segment(w, di, b->addr, Segment{b->size, b->stack, true}, {b});
    }

    void write() {
        std::FILE* f = out_;
        out_ = nullptr;
        if (!f) throw std::runtime_error("cannot write " + path_ + ": not created at begin()");
        bool failed = false;
        // The status line (ABI 1.2 progress): bytes written, and the total
        // estimated from the trace entries written so far (most of the file).
        uint64_t written = 0, reported = 0, entries = 0, entries_total = 0;
        for (auto& dp : devices_) entries_total += dp->kept();
        PickleWriter w([&](const char* p, size_t n) {
            if (!failed && std::fwrite(p, 1, n, f) != n) failed = true;
            written += n;
            if (written - reported >= (4u << 20)) {
                reported = written;
                bool est = entries && entries < entries_total;
                host_.progress(written, est ? written * entries_total / entries : 0, {}, MSMS_PROGRESS_BYTES, est);
            }
        });
        for (auto& s : stacks_) s.memo = -1;
        w.dict_begin();
        w.key("segments");
        w.list_begin();
        for (size_t di = 0; di < devices_.size(); ++di) device_segments(w, di);
        w.list_end();
        w.key("device_traces");
        w.list_begin();
        for (auto& dp : devices_) {
            w.list_begin();
            auto entry = [&](const Entry& e) {
                ++entries;
                w.dict_begin();
                w.key("action");
                w.str(kActionNames[e.action]);
                w.key("addr");
                w.unsigned_integer(e.addr);
                w.key("size");
                w.unsigned_integer(e.size);
                w.key("stream");
                w.integer(0);
                w.key("time_us");
                w.unsigned_integer(e.ts / 1000);
                w.key("frames");
                frames(w, e.stack);
                w.dict_end();
            };
            for (const Entry& e : dp->pre) entry(e);
            if (dp->stepped)
                for (const Entry& e : dp->post) entry(e);
            w.list_end();
        }
        w.list_end();
        w.key("msmemscope");
        w.dict_begin();
        w.key("pid");
        w.integer(run_.pid);
        w.key("command");
        w.str(run_.command_line);
        w.key("devices");
        w.list_begin();
        for (auto& dp : devices_) w.str(dp->name());
        w.list_end();
        w.key("trace_actions");
        w.list_begin();
        for (auto& dp : devices_) w.unsigned_integer(dp->actions);
        w.list_end();
        w.key("trace_dropped");
        w.list_begin();
        for (auto& dp : devices_) w.unsigned_integer(dp->dropped());
        w.list_end();
        w.key("trace_cut");  // of those, the most recent ones (after the window kept around the last step's end)
        w.list_begin();
        for (auto& dp : devices_) w.unsigned_integer(dp->stepped ? dp->spilled : 0);
        w.list_end();
        w.dict_end();
        w.dict_end();
        w.finish();
        int err = failed ? (errno ? errno : EIO) : 0;
        if (std::fclose(f) != 0 && !err) err = errno ? errno : EIO;
        if (err) throw std::runtime_error("cannot write " + path_ + ": " + std::strerror(err));
        host_.progress(written, written);  // the end: the file's size
        for (auto& dp : devices_) {
            if (!dp->dropped()) continue;
            if (dp->stepped && dp->spilled)
                host_.report("memory_viz: " + dp->name() + ": the trace keeps " + std::to_string(dp->kept()) + " of " +
                             std::to_string(dp->actions) + " actions: the last " + std::to_string(dp->pre.size()) +
                             " before the end of the last step and the " + std::to_string(dp->post.size()) +
                             " after it; the last " + std::to_string(dp->spilled) +
                             " are left out (option max_trace_entries)");
            else
                host_.report("memory_viz: " + dp->name() + ": the trace keeps the last " + std::to_string(dp->kept()) +
                             " of " + std::to_string(dp->actions) + " actions (option max_trace_entries)");
        }
    }

    msmemscope::Host host_;
    msmemscope::RunInfo run_;
    uint64_t max_entries_;
    std::string path_;
    std::FILE* out_ = nullptr;  // created at begin(), written at the end
    std::vector<std::unique_ptr<Device>> devices_;
    std::unordered_map<uint64_t, size_t> dev_index_;
    std::vector<StackEntry> stacks_;
    std::unordered_map<uint64_t, uint32_t> stack_index_;
    std::vector<Free> pending_;  // shadow FREEs not yet known to be real
};

}  // namespace

MSMEMSCOPE_PLUGIN(MemoryVizSink)
