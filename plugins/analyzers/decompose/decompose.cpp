// Analyzer `decompose` (COMPAT §6): every MALLOC gets Attr `owner` = the
// non-empty owner levels joined by '@': framework (HOST, HOST_PINNED,
// CANN@<module> for HAL, PTA, PTA_WORKSPACE, ATB, MINDSPORE), then what the
// collector already put in the MALLOC's `owner` (the Python collector: weight,
// gradient, optimizer_state, ops@aten, the user's describer labels).
// A later event that carries an `owner` Attr for a live block's address, or
// an address inside it (an ACCESS of an aten op, or a describer tag)
// relabels the block: its MALLOC
// row is annotated, and the table counts the block under the owner it ended
// with for its whole life, as its row and `--analyze` of the dump do
// (owner_ledger.h).
// At exit: a table of live and peak bytes per owner and device (report lines
// and findings "owners").
// Each byte once: a framework block carved at the address of a live host
// heap block (PyTorch's CPU tensors come from malloc) is the framework
// owner's; the HOST owner leaves those bytes and that allocation out.
#include <msmemscope/plugin.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "../common/analyzer_util.h"
#include "../common/block_table.h"
#include "owner_ledger.h"

namespace {

using namespace msms_an;
using msmemscope::attr;

// Module ids of the Ascend driver's module table (flag bits 56-63).
const char* module_name(unsigned id) {
    static const char* const kNames[] = {
        "SLOG", "IDEDD", "IDEDH", "HCCL", "FMK", "HIAIENGINE", "DVPP", "RUNTIME", "CCE", "HDC", "DRV",
        "MDCFUSION", "MDCLOCATION", "MDCPERCEPTION", "MDCFSM", "MDCCOMMON", "MDCMONITOR", "MDCBSWP",
        "MDCDEFAULT", "MDCSC", "MDCPNC", "MLL", "DEVMM", "KERNEL", "LIBMEDIA", "CCECPU", "ASCENDDK", "ROS",
        "HCCP", "ROCE", "TEFUSION", "PROFILING", "DP", "APP", "TS", "TSDUMP", "AICPU", "LP", "TDT", "FE", "MD",
        "MB", "ME", "IMU", "IMP", "GE", "MDCFUSA", "CAMERA", "ASCENDCL", "TEEOS", "ISP", "SIS", "HSM", "DSS",
        "PROCMGR", "BBOX", "AIVECTOR", "TBE", "FV", "MDCMAP", "TUNE", "HSS", "FFTS", "OP", "UDF", "HICAID",
        "TSYNC", "AUDIO", "TPRT", "ASCENDCKERNEL", "ASYS", "ATRACE", "RTC", "SYSMONITOR", "AML"};
    return id < sizeof(kNames) / sizeof(kNames[0]) ? kNames[id] : nullptr;
}

// "CANN@<module>" for Ascend driver blocks, "CUDA" for CUDA's (the cuda
// collector writes them as HAL rows; their flag word holds no Ascend
// module), else the Event Type name (PTA, ATB, HOST...).
std::string framework_of(const msms_event& ev) {
    if (ev.type != MSMS_T_HAL) return pool_name(ev.type);
    if (ev.device_kind == MSMS_DEV_CUDA) return "CUDA";
    const char* m = module_name(static_cast<unsigned>(ev.aux0 >> 56));
    return std::string("CANN@") + (m ? m : "UNKNOWN");
}

bool driver_pool(uint16_t type) { return type == MSMS_T_HAL || type == MSMS_T_HOST || type == MSMS_T_HOST_PINNED; }

bool starts_with_level(const std::string& s, const std::string& prefix) {
    return s == prefix || (s.size() > prefix.size() && s.compare(0, prefix.size(), prefix) == 0 && s[prefix.size()] == '@');
}

// framework + the given levels, without empty levels and without repeating
// the framework when the collector already wrote it.
std::string owner_of(const msms_event& ev, std::string_view given) {
    std::string fw = framework_of(ev);
    std::string g(given);
    if (ev.type == MSMS_T_HAL && (starts_with_level(g, "CANN") || starts_with_level(g, "HAL"))) return g;
    if (starts_with_level(g, fw)) return g;
    std::string out = fw;
    size_t start = 0;
    while (start <= g.size() && !g.empty()) {
        size_t at = g.find('@', start);
        if (at == std::string::npos) at = g.size();
        if (at > start) out += "@" + g.substr(start, at - start);
        start = at + 1;
    }
    return out;
}

class DecomposeAnalyzer : public msmemscope::IAnalyzer {
public:
    static constexpr const char* kTypeName = "decompose";
    static constexpr const char* kVersion = "1.0.0";
    static constexpr const char* kDescription = "memory decomposition: owner of every allocation, live/peak per owner";
    static constexpr const char* kEvents = "alloc,free,access";  // as msMemScope (3757ec2): decompose turns on access

    DecomposeAnalyzer(msmemscope::Host host, const msmemscope::Options&)
        : host_(host), ledger_([this](uint32_t owner) -> OwnerFigures& { return owners_[owner].fig; }) {}

    void on_event(const msms_event& ev) override {
        // A host heap block's peak waits for the next event: when that one is
        // the framework block carved at its address, the bytes are the
        // framework's and the host owner never held them.
        if (pending_host_ && !covers_pending(ev)) settle_pending();
        if (ev.kind == MSMS_EV_MALLOC) {
            // A mapping (Attr virtual:true: cuMemMap of a cuMemCreate handle)
            // is memory its handle's block holds: counted there, once.
            const bool mapping = attr(ev, "virtual") == "true";
            std::string owner = owner_of(ev, attr(ev, "owner"));
            host_.add_attr("owner", owner);
            if (mapping) return;
            BlockKey k = block_key(ev);
            if (const Block* old = live_.find(k)) {
                release(*old);
                if (old->allocation_id) by_id_.erase(old->allocation_id);
            }
            Block b{ev.size, ev.id, ev.allocation_id, owner_index(dev_key(ev), owner), kNoHandle};
            bool host = ev.type == MSMS_T_HOST;
            if (driver_pool(ev.type))
                acquire(b, !host);
            else
                b.handle = ledger_.open(b.size, b.owner);
            live_.put(k, b);
            if (host) {
                pending_host_ = true;
                pending_key_ = k;
            } else if (!driver_pool(ev.type)) {
                cover_host_block(ev);
            }
            // Relabels (below) reach framework-pool blocks only: the host heap
            // block under a PTA block has the same address and keeps HOST.
            if (!driver_pool(ev.type)) {
                by_ptr_.put(at_address(ev), ev.type);
                if (ev.allocation_id) by_id_[ev.allocation_id] = k;
            }
        } else if (ev.kind == MSMS_EV_FREE) {
            // The image ended with the block live (exec, _exit after fork):
            // the table says what was live then, as the pool's final figure.
            if (attr(ev, "image_ended") == "true" && attr(ev, "shadow") == "true") return;
            BlockKey k = block_key(ev);
            const Block* b = live_.find(k);
            if (!b) return;
            release(*b);
            if (b->allocation_id) by_id_.erase(b->allocation_id);
            const uint16_t* type = by_ptr_.find(at_address(ev));
            if (type && *type == ev.type) by_ptr_.erase(at_address(ev));
            live_.erase(k);
        } else {
            std::string_view label = attr(ev, "owner");
            if (label.empty() || ev.ptr == 0) return;
            BlockKey k{};
            Block* found = nullptr;
            if (const uint16_t* type = by_ptr_.find(at_address(ev))) {
                k = BlockKey{ev.device_kind, ev.device_id, *type, ev.ptr};
                found = live_.find(k);
            }
            // An address inside a block (the host gave the event the id of
            // the framework block that holds it): a storage with torch's
            // file_system header lies 64 bytes into its mapping.
            if (!found && ev.allocation_id) {
                auto it = by_id_.find(ev.allocation_id);
                if (it != by_id_.end()) {
                    k = it->second;
                    found = live_.find(k);
                }
            }
            if (!found) return;
            msms_event as_malloc = ev;
            as_malloc.type = k.type;
            std::string owner = owner_of(as_malloc, label);
            Block& b = *found;
            if (owners_[b.owner].name == owner) return;
            b.owner = owner_index(DevKey{k.dev_kind, k.dev_id}, owner);
            ledger_.relabel(b.handle, b.owner);
            host_.annotate(b.malloc_id, "owner", owner);
        }
    }

    void finish() override {
        if (pending_host_) settle_pending();
        ledger_.flush();
        std::map<DevKey, std::vector<const Owner*>> by_dev;
        for (auto& o : owners_)
            // a label a block held on its way to its last one
            if (o.fig.allocations || o.fig.peak || o.fig.live) by_dev[o.dev].push_back(&o);
        for (auto& [dk, list] : by_dev) {
            std::sort(list.begin(), list.end(), [](const Owner* a, const Owner* b) {
                return a->fig.peak != b->fig.peak ? a->fig.peak > b->fig.peak : a->name < b->name;
            });
            // Ours (upstream's decompose prints nothing): a header of our own,
            // never upstream's "======" shape, then the table indented.
            host_.report("decompose: memory by owner on device " + dev_name(dk) + ":");
            char buf[512];
            std::snprintf(buf, sizeof(buf), "  %-40s %16s %16s %12s", "Owner", "Live(bytes)", "Peak(bytes)",
                          "Allocations");
            host_.report(buf);
            for (const Owner* o : list) {
                const OwnerFigures& f = o->fig;
                std::snprintf(buf, sizeof(buf), "  %-40s %16lld %16lld %12llu", o->name.c_str(),
                              static_cast<long long>(f.live), static_cast<long long>(f.peak),
                              static_cast<unsigned long long>(f.allocations));
                host_.report(buf);
                host_.add_finding("owners", {{"device", dev_name(dk)},
                                             {"owner", o->name},
                                             {"live_bytes", std::to_string(f.live)},
                                             {"peak_bytes", std::to_string(f.peak)},
                                             {"allocations", std::to_string(f.allocations)}});
            }
        }
    }

private:
    struct Owner {
        DevKey dev;
        std::string name;
        OwnerFigures fig;
    };
    static constexpr uint32_t kNoHandle = UINT32_MAX;
    struct Block {
        uint64_t size, malloc_id;
        uint64_t allocation_id;  // the host's (Event.allocation_id), 0 if none
        uint32_t owner;
        uint32_t handle;  // the ledger's, for a framework-pool block; kNoHandle for a driver pool's
    };
    // A device address as a key of by_ptr_ (one pseudo-pool per device).
    static BlockKey at_address(const msms_event& ev) { return BlockKey{ev.device_kind, ev.device_id, 0, ev.ptr}; }

    uint32_t owner_index(const DevKey& dev, const std::string& name) {
        auto key = std::make_pair(dev, name);
        auto it = owner_ids_.find(key);
        if (it != owner_ids_.end()) return it->second;
        owners_.push_back(Owner{dev, name, OwnerFigures{}});
        uint32_t id = static_cast<uint32_t>(owners_.size() - 1);
        owner_ids_.emplace(key, id);
        return id;
    }
    // A driver pool's block (its owner never changes): counted now.
    void acquire(const Block& b, bool peak) {
        OwnerFigures& o = owners_[b.owner].fig;
        o.live += static_cast<int64_t>(b.size);
        if (peak) o.peak = std::max(o.peak, o.live);
        ++o.allocations;
    }
    bool covers_pending(const msms_event& ev) const {
        return ev.kind == MSMS_EV_MALLOC && !driver_pool(ev.type) && ev.device_kind == pending_key_.dev_kind &&
               ev.device_id == pending_key_.dev_id && ev.ptr == pending_key_.ptr;
    }
    void settle_pending() {
        pending_host_ = false;
        const Block* b = live_.find(pending_key_);
        if (!b) return;
        OwnerFigures& o = owners_[b->owner].fig;
        o.peak = std::max(o.peak, o.live);
    }
    // Each byte once (DESIGN §8): the host heap block at a framework block's
    // address is the framework's memory: it leaves the host owner (bytes and
    // allocation) and its FREE changes nothing there.
    void cover_host_block(const msms_event& ev) {
        BlockKey hk{ev.device_kind, ev.device_id, MSMS_T_HOST, ev.ptr};
        const Block* b = live_.find(hk);
        if (!b) return;
        release(*b);
        OwnerFigures& o = owners_[b->owner].fig;
        if (o.allocations) --o.allocations;
        live_.erase(hk);
        if (pending_host_ && pending_key_ == hk) pending_host_ = false;
    }
    void release(const Block& b) {
        if (b.handle == kNoHandle)
            owners_[b.owner].fig.live -= static_cast<int64_t>(b.size);
        else
            ledger_.close(b.handle);
    }

    msmemscope::Host host_;
    std::vector<Owner> owners_;
    std::map<std::pair<DevKey, std::string>, uint32_t> owner_ids_;
    OwnerLedger ledger_;  // framework-pool owners' figures, under each block's last owner
    BlockTable<Block> live_;
    // The framework-pool block live at each device address, by its pool
    // type (relabels name an address, not a pool).
    BlockTable<uint16_t> by_ptr_;
    // The same blocks by allocation id: a relabel of an address inside one.
    msms::AddrMap<BlockKey> by_id_;
    bool pending_host_ = false;  // the last event was a host MALLOC (peak not yet counted)
    BlockKey pending_key_{};
};

}  // namespace

MSMEMSCOPE_PLUGIN(DecomposeAnalyzer)
