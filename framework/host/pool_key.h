// A memory pool of one device, as the host keeps its blocks apart: the
// pipeline's live tables and --steps' record of dropped blocks (step_gap.h)
// key them alike.
#pragma once

#include <cstdint>
#include <tuple>

namespace msms {

struct PoolKey {
    uint16_t dev_kind;
    int16_t dev_id;
    uint16_t type;
    // Mappings of memory another block already accounts for (collector
    // Attr "virtual:true", e.g. cuMemMap of a cuMemCreate handle): kept
    // in a pool of their own and not added to device/process totals.
    bool virt;
    bool operator<(const PoolKey& o) const {
        return std::tie(dev_kind, dev_id, type, virt) < std::tie(o.dev_kind, o.dev_id, o.type, o.virt);
    }
};

}  // namespace msms
