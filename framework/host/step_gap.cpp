#include "step_gap.h"

#include <algorithm>
#include <cstdlib>

#include "shadow.h"

namespace msms {

namespace {
constexpr size_t kMaxExtras = 4096;  // distinct extras lists kept; past it a shadow row carries none

}  // namespace

void StepGap::dropped(const Record& r) {
    if (r.ev.kind == MSMS_EV_MALLOC) dropped_malloc(r);
    else if (r.ev.kind == MSMS_EV_FREE) dropped_free(r);
}

void StepGap::pipeline_block_gone(const Pool& pool, uint64_t ptr) {
    if (holds_(pool.dev_kind, pool.dev_id, pool.type, pool.virt, ptr)) freed_.emplace(std::make_pair(pool, ptr), ++order_);
}

void StepGap::dropped_malloc(const Record& r) {
    const msms_event& ev = r.ev;
    Pool pool{ev.device_kind, ev.device_id, ev.type, attr_true(r, "virtual")};
    // The address allocated again: a block the pipeline holds there was
    // released unseen (emplace keeps the first: it is freed once).
    pipeline_block_gone(pool, ev.ptr);
    // When it was allocated: the row's time; a row that stands for an
    // earlier event says so (its own allocated_at), a shadow row of the
    // agent's (collection started) knows no time.
    uint64_t at = ev.timestamp_ns;
    if (is_shadow(r)) {
        const std::string* a = attr_of(r, "allocated_at");
        at = a ? std::strtoull(a->c_str(), nullptr, 10) : 0;
    }
    made_[pool][ev.ptr] = Made{ev.size, ++order_, extras_of(r), at};
}

void StepGap::dropped_free(const Record& r) {
    const msms_event& ev = r.ev;
    // A free names no pool flavour: a mapping's pool first, as the pipeline does.
    for (bool virt : {true, false}) {
        Pool pool{ev.device_kind, ev.device_id, ev.type, virt};
        auto m = made_.find(pool);
        if (m != made_.end() && m->second.erase(ev.ptr)) return;  // made and freed unseen: nothing to say
    }
    for (bool virt : {true, false}) {
        Pool pool{ev.device_kind, ev.device_id, ev.type, virt};
        if (freed_.count({pool, ev.ptr})) return;
        if (holds_(pool.dev_kind, pool.dev_id, pool.type, pool.virt, ev.ptr)) {
            freed_.emplace(std::make_pair(pool, ev.ptr), ++order_);
            return;
        }
    }
    // a block from before collection started: the pipeline would not pair it either
}

uint32_t StepGap::extras_of(const Record& r) {
    std::vector<std::pair<std::string, std::string>> extras;
    for (auto& a : r.attrs)
        if (a.first != "shadow" && a.first != "allocated_at") extras.push_back(a);
    if (extras.empty()) return 0;
    auto it = extras_index_.find(extras);
    if (it != extras_index_.end()) return it->second;
    if (extras_.size() >= kMaxExtras) return 0;
    uint32_t i = static_cast<uint32_t>(extras_.size());
    extras_.push_back(extras);
    extras_index_.emplace(std::move(extras), i);
    return i;
}

std::vector<Record> StepGap::catch_up(uint64_t ts, uint32_t pid) {
    auto row = [&](uint16_t kind, const Pool& pool, uint64_t ptr) {
        Record r;
        r.ev.kind = kind;
        r.ev.type = pool.type;
        r.ev.device_kind = pool.dev_kind;
        r.ev.device_id = pool.dev_id;
        r.ev.ptr = ptr;
        r.ev.timestamp_ns = ts;
        r.ev.pid = r.ev.tid = pid;
        r.attrs.emplace_back("shadow", "true");
        // a mapping's rows say so, its FREE as its MALLOC (shadow.h shadow_free)
        if (kind == MSMS_EV_FREE && pool.virt) r.attrs.emplace_back("virtual", "true");
        return r;
    };
    std::vector<std::pair<uint64_t, Record>> frees, mallocs;
    // The pipeline pairs each FREE with its block and fills in its
    // allocation_id and size (Pipeline::account).
    for (auto& [where, order] : freed_) frees.emplace_back(order, row(MSMS_EV_FREE, where.first, where.second));
    for (auto& [pool, blocks] : made_)
        for (auto& [ptr, b] : blocks) {
            Record r = row(MSMS_EV_MALLOC, pool, ptr);
            r.ev.size = b.size;
            if (b.at) r.attrs.emplace_back("allocated_at", std::to_string(b.at));
            for (auto& a : extras_[b.extras]) r.attrs.push_back(a);
            if (pool.virt && !attr_true(r, "virtual")) r.attrs.emplace_back("virtual", "true");
            mallocs.emplace_back(b.order, std::move(r));
        }
    auto by_order = [](const auto& a, const auto& b) { return a.first < b.first; };
    std::sort(frees.begin(), frees.end(), by_order);
    std::sort(mallocs.begin(), mallocs.end(), by_order);
    std::vector<Record> out;
    out.reserve(frees.size() + mallocs.size());
    for (auto& f : frees) out.push_back(std::move(f.second));
    for (auto& m : mallocs) out.push_back(std::move(m.second));
    freed_.clear();
    made_.clear();
    return out;
}

}  // namespace msms
