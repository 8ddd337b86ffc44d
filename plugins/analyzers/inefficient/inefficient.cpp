// Analyzer `inefficient` (COMPAT §6), upstream's rules:
//
// An "API" is one operator (OP_LAUNCH *_START .. *_END); a MALLOC, FREE or
// ACCESS outside any operator is an API of its own. API numbers are counted
// per process and per framework group (ATB operators and the ATB pool apart
// from the rest, as upstream keeps PTA and ATB apart). An API "frees" /
// "allocates" when it contains a FREE / MALLOC; the latest such API is known
// once the API has ended.
//   early_allocation   some other API that frees lies strictly between the
//                      block's MALLOC API and its first ACCESS API (the
//                      first access in another API than the MALLOC's);
//   late_deallocation  some other API that allocates lies between the
//                      block's last ACCESS API and its FREE's API;
//   temporary_idleness two consecutive ACCESSes of the block are more than
//                      idle_threshold APIs apart.
// Shadow rows (shadow:true: the MALLOC of a block that was there when
// collection started, the FREE of one still live at its end) are skipped,
// as upstream's live analyzer skips them: such a block is not judged.
// Only blocks of the chosen pools (option `pools`) whose MALLOC was seen and
// of at least mem_size bytes are marked, with the chosen types; the mark is
// Attr `inefficient_type` of the block's MALLOC row (Host::annotate). A block
// marked with a second kind is annotated again with both ("early_allocation,
// late_deallocation"): the annotations are not blocks.
// At the end, per device, one report line counts the blocks marked and their
// bytes, each block once, and each kind's blocks (a block of two kinds is in
// both): with --aggregate (no rows to read the marks from) it is all there is.
// State: per live block a few numbers; per group and device a few counters.
#include <msmemscope/plugin.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "../common/analyzer_util.h"

namespace {

using namespace msms_an;
using msmemscope::attr;

constexpr uint64_t kNone = UINT64_MAX;

class InefficientAnalyzer : public msmemscope::IAnalyzer {
public:
    static constexpr const char* kTypeName = "inefficient";
    static constexpr const char* kVersion = "1.0.0";
    static constexpr const char* kDescription =
        "inefficient memory use: early_allocation, late_deallocation, temporary_idleness";
    static constexpr const char* kEvents = "alloc,free,access,launch";

    static const msms_option_spec* options(uint32_t& count) {
        static const msms_option_spec specs[] = {
            {"idle_threshold", MSMS_OPT_INT, "3000", nullptr, 1, INT64_MAX,
             "temporary_idleness: more than this many APIs between two accesses"},
            {"mem_size", MSMS_OPT_INT, "0", nullptr, 0, INT64_MAX, "only blocks of at least this many bytes"},
            {"inefficient_type", MSMS_OPT_LIST, "early_allocation,late_deallocation,temporary_idleness",
             "early_allocation|late_deallocation|temporary_idleness", 0, 0, "the kinds to mark"},
            {"pools", MSMS_OPT_LIST, "PTA,ATB", "PTA|PTA_WORKSPACE|ATB|MINDSPORE|HAL|HOST|HOST_PINNED", 0, 0,
             "the pools whose blocks are analysed"},
        };
        count = sizeof(specs) / sizeof(specs[0]);
        return specs;
    }

    InefficientAnalyzer(msmemscope::Host host, const msmemscope::Options& opts) : host_(host) {
        idle_threshold_ = static_cast<uint64_t>(opts.get_int("idle_threshold", 3000));
        mem_size_ = static_cast<uint64_t>(opts.get_int("mem_size", 0));
        auto types = opts.get_list("inefficient_type");
        if (types.empty() && !opts.has("inefficient_type"))
            types = {"early_allocation", "late_deallocation", "temporary_idleness"};
        for (auto& t : types) kinds_.insert(t);
        auto pools = opts.get_list("pools");
        if (pools.empty() && !opts.has("pools")) pools = {"PTA", "ATB"};
        for (auto& p : pools)
            for (uint16_t t = MSMS_T_HAL; t <= MSMS_T_HOST_PINNED; ++t)
                if (p == pool_name(t)) pools_.insert(t);
    }

    void on_event(const msms_event& ev) override {
        // Shadow rows are bookkeeping, not the program's doing: a block that
        // was there before collection started (its MALLOC written then) has
        // no known allocation, and one still live at the end (its FREE
        // written then) was not freed. Upstream's live analyzer skips them
        // (csrc/analysis/inefficient_analyzer.cpp EventHandle), so a block
        // without its MALLOC is never judged, and they make no API; its
        // offline reader (python/msmemscope/analyzer/inefficient.py) does
        // not, and would call every weight live at stop() late_deallocation.
        if ((ev.kind == MSMS_EV_MALLOC || ev.kind == MSMS_EV_FREE) && msmemscope::attr(ev, "shadow") == "true")
            return forget(ev);
        switch (ev.kind) {
        case MSMS_EV_OP_LAUNCH: return on_op(ev);
        case MSMS_EV_MALLOC:
            if (!pools_.count(ev.type)) return;
            return on_memory(ev, group_key(ev.pid, ev.type == MSMS_T_ATB));
        case MSMS_EV_FREE: {
            if (!pools_.count(ev.type)) return;
            return on_memory(ev, group_key(ev.pid, ev.type == MSMS_T_ATB));
        }
        case MSMS_EV_ACCESS: {
            ++accesses_[dev_key(ev)];
            Block* b = find_block(ev);
            if (!b) return;
            return on_memory(ev, group_key(ev.pid, b->atb));
        }
        default: return;
        }
    }

    // Blocks still live now (a weight, its gradient, the optimizer's state
    // at stop()) were not freed: they are not judged, as upstream's live
    // analyzer never sees a FREE for them (the end-of-dump FREE rows with
    // shadow:true are skipped like every shadow row: on_event).
    void finish() override {
        for (auto& [key, b] : blocks_) count_marks(b);
        report();
    }

private:
    struct Group {
        uint64_t api = 0;
        uint64_t malloc_api = kNone, free_api = kNone;  // latest ended API with a MALLOC / FREE
        bool in_op = false;
        bool tmp_malloc = false, tmp_free = false;     // the current API so far
    };
    struct Block {
        uint64_t ptr = 0, size = 0, malloc_id = 0, malloc_api = 0, allocation_id = 0;
        DevKey dev;
        uint32_t pid = 0;
        uint64_t first_access_api = kNone;
        uint64_t last_api = 0;
        bool last_was_access = false;
        bool atb = false;
        uint16_t pool = 0;
        std::string marks;
    };
    // Per device: the blocks judged (MALLOCs of the chosen pools), and the
    // blocks marked, each once, with their bytes, in total and per kind.
    struct Tally {
        uint64_t judged = 0, blocks = 0, bytes = 0;
        std::map<std::string, std::pair<uint64_t, uint64_t>> kinds;  // kind -> blocks, bytes
    };
    using GroupKey = std::pair<uint32_t, bool>;
    static GroupKey group_key(uint32_t pid, bool atb) { return {pid, atb}; }

    void on_op(const msms_event& ev) {
        bool atb = ev.type == MSMS_T_ATB_START || ev.type == MSMS_T_ATB_END;
        Group& g = groups_[group_key(ev.pid, atb)];
        if (ev.type == MSMS_T_ATEN_START || ev.type == MSMS_T_ATB_START) {
            g.in_op = true;
            ++g.api;
        } else if (ev.type == MSMS_T_ATEN_END || ev.type == MSMS_T_ATB_END) {
            g.in_op = false;
            classify(g);
        }
    }

    static void classify(Group& g) {
        if (g.tmp_malloc) g.malloc_api = g.api;
        if (g.tmp_free) g.free_api = g.api;
        g.tmp_malloc = g.tmp_free = false;
    }

    Block* find_block(const msms_event& ev) {
        std::string_view aid = attr(ev, "allocation_id");
        if (!aid.empty()) {
            auto it = by_alloc_id_.find(to_u64(aid));
            if (it != by_alloc_id_.end()) {
                auto b = blocks_.find(it->second);
                if (b != blocks_.end()) return &b->second;
            }
        }
        // the block that contains the address (same device)
        DevKey dk = dev_key(ev);
        auto& m = by_addr_[dk];
        auto it = m.upper_bound(ev.ptr);
        if (it == m.begin()) return nullptr;
        --it;
        auto b = blocks_.find(it->second);
        if (b == blocks_.end()) return nullptr;
        if (ev.ptr >= b->second.ptr + std::max<uint64_t>(b->second.size, 1)) return nullptr;
        return &b->second;
    }

    void on_memory(const msms_event& ev, GroupKey gk) {
        Group& g = groups_[gk];
        bool lone = !g.in_op;
        if (lone) ++g.api;
        if (ev.kind == MSMS_EV_MALLOC) g.tmp_malloc = true;
        if (ev.kind == MSMS_EV_FREE) g.tmp_free = true;
        uint64_t api = g.api;
        if (lone) classify(g);

        if (ev.kind == MSMS_EV_MALLOC) {
            uint64_t key = next_key_++;
            Block b;
            b.ptr = ev.ptr;
            b.size = ev.size;
            b.malloc_id = ev.id;
            b.malloc_api = api;
            b.last_api = api;
            b.atb = gk.second;
            b.pool = ev.type;
            b.allocation_id = ev.allocation_id;
            b.dev = dev_key(ev);
            b.pid = ev.pid;
            DevKey dk = dev_key(ev);
            auto& m = by_addr_[dk];
            auto old = m.find(ev.ptr);
            if (old != m.end()) {
                erase_block(old->second);
            }
            m[ev.ptr] = key;
            ++tally_[b.dev].judged;
            blocks_.emplace(key, b);
            if (ev.allocation_id) {
                by_alloc_id_[ev.allocation_id] = key;
                alloc_id_of_[key] = ev.allocation_id;
            }
            return;
        }
        Block* b = nullptr;
        uint64_t key = 0;
        if (ev.kind == MSMS_EV_FREE) {
            auto& m = by_addr_[dev_key(ev)];
            auto it = m.find(ev.ptr);
            if (it == m.end()) return;
            key = it->second;
            auto bi = blocks_.find(key);
            if (bi == blocks_.end() || bi->second.pool != ev.type) return;
            b = &bi->second;
            // late_deallocation: the event before the FREE was an ACCESS in another API
            if (g.malloc_api != kNone && b->last_was_access && b->last_api != g.api) {
                uint64_t la = b->last_api;
                if (la < g.malloc_api && g.api > g.malloc_api) mark(*b, "late_deallocation");
            }
            erase_block(key);
            return;
        }
        // ACCESS
        b = find_block(ev);
        if (!b) return;
        // temporary_idleness: two consecutive accesses far apart
        if (b->last_was_access && api > b->last_api && api - b->last_api > idle_threshold_)
            mark(*b, "temporary_idleness");
        if (b->first_access_api == kNone && api != b->malloc_api) b->first_access_api = api;
        // early_allocation: a freeing API strictly between MALLOC API and first access API
        if (g.free_api != kNone && b->first_access_api != kNone && b->malloc_api != g.free_api &&
            b->first_access_api > g.free_api && b->malloc_api < g.free_api)
            mark(*b, "early_allocation");
        b->last_api = api;
        b->last_was_access = true;
    }

    // A shadow row: the block that was at its address (freed while
    // collection was off, or still live at the end) leaves the table with
    // the marks it earned, unjudged, so that the accesses of whatever is
    // there now are not counted to it.
    void forget(const msms_event& ev) {
        if (!pools_.count(ev.type)) return;
        auto dm = by_addr_.find(dev_key(ev));
        if (dm == by_addr_.end()) return;
        auto it = dm->second.find(ev.ptr);
        if (it == dm->second.end()) return;
        auto b = blocks_.find(it->second);
        if (b != blocks_.end() && b->second.pool == ev.type) erase_block(it->second);
    }

    void erase_block(uint64_t key) {
        auto it = blocks_.find(key);
        if (it == blocks_.end()) return;
        count_marks(it->second);
        auto a = alloc_id_of_.find(key);
        if (a != alloc_id_of_.end()) {
            by_alloc_id_.erase(a->second);
            alloc_id_of_.erase(a);
        }
        for (auto& [dk, m] : by_addr_) {
            auto p = m.find(it->second.ptr);
            if (p != m.end() && p->second == key) {
                m.erase(p);
                break;
            }
        }
        blocks_.erase(it);
    }

    // A block leaves the table with its final marks: counted once.
    void count_marks(const Block& b) {
        if (b.marks.empty()) return;
        Tally& t = tally_[b.dev];
        ++t.blocks;
        t.bytes += b.size;
        size_t start = 0;
        while (start <= b.marks.size()) {
            size_t comma = b.marks.find(',', start);
            if (comma == std::string::npos) comma = b.marks.size();
            auto& k = t.kinds[b.marks.substr(start, comma - start)];
            ++k.first;
            k.second += b.size;
            start = comma + 1;
        }
    }

    // "inefficient: 84 block(s), 342528 bytes marked on device cpu, of 1200
    // block(s) judged: early_allocation 72 block(s), 300000 bytes;
    // late_deallocation 24 block(s), 60000 bytes" (summary.json reads it:
    // framework/host/process_summary_json.cpp).
    void report() {
        if (tally_.empty()) {
            std::string pools;
            for (uint16_t p : pools_) pools += (pools.empty() ? "" : ", ") + pool_name(p);
            host_.report("inefficient: no block marked (no block of the pools " + (pools.empty() ? "chosen" : pools) +
                         " was allocated)");
            return;
        }
        for (auto& [dk, t] : tally_) {
            if (t.judged && !accesses_.count(dk)) {
                // Not "of N block(s) judged": with no access to compare its
                // allocation and free with, no block could earn any kind (a
                // dump recorded without access in --events).
                host_.report("inefficient: no block judged on device " + dev_name(dk) + ": none of its " +
                             std::to_string(t.judged) + " block(s) had an access (no ACCESS rows)");
                continue;
            }
            std::string of = ", of " + std::to_string(t.judged) + " block(s) judged";
            if (!t.blocks) {
                host_.report("inefficient: no block marked on device " + dev_name(dk) + of);
                continue;
            }
            std::string line = "inefficient: " + std::to_string(t.blocks) + " block(s), " + std::to_string(t.bytes) +
                               " bytes marked on device " + dev_name(dk) + of + ": ";
            bool first = true;
            for (auto& [kind, v] : t.kinds) {
                line += (first ? "" : "; ") + kind + " " + std::to_string(v.first) + " block(s), " +
                        std::to_string(v.second) + " bytes";
                first = false;
            }
            host_.report(line);
        }
    }

    void mark(Block& b, const char* kind) {
        if (!kinds_.count(kind) || b.size < mem_size_) return;
        if (b.marks.find(kind) != std::string::npos) return;
        if (!b.marks.empty()) b.marks += ',';
        b.marks += kind;
        host_.annotate(b.malloc_id, "inefficient_type", b.marks);
    }

    msmemscope::Host host_;
    uint64_t idle_threshold_ = 3000, mem_size_ = 0;
    std::set<std::string> kinds_;
    std::set<uint16_t> pools_;
    std::map<GroupKey, Group> groups_;
    // ACCESS rows seen per device: every kind compares a block's accesses
    // with its allocation or free, so a device without any had nothing judged.
    std::map<DevKey, uint64_t> accesses_;
    std::unordered_map<uint64_t, Block> blocks_;
    std::map<DevKey, std::map<uint64_t, uint64_t>> by_addr_;  // start address -> block key
    std::unordered_map<uint64_t, uint64_t> by_alloc_id_, alloc_id_of_;
    std::map<DevKey, Tally> tally_;
    uint64_t next_key_ = 1;
};

}  // namespace

MSMEMSCOPE_PLUGIN(InefficientAnalyzer)
