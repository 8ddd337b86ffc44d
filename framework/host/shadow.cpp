#include "shadow.h"

#include <string>

#include "util/text.h"

namespace msms {

Record shadow_free(uint16_t dev_kind, int16_t dev_id, uint16_t type, uint64_t ptr, uint64_t allocation_id,
                   uint64_t size, uint64_t ts, uint32_t pid, bool mapping, bool image_ended) {
    Record r;
    msms_event& ev = r.ev;
    ev.kind = MSMS_EV_FREE;
    ev.type = type;
    ev.device_kind = dev_kind;
    ev.device_id = dev_id;
    ev.ptr = ptr;
    ev.size = size;
    ev.allocation_id = allocation_id;
    ev.timestamp_ns = ts;
    ev.pid = pid;
    ev.tid = pid;
    std::string addr;
    append_hex_ptr(addr, ptr);
    r.attrs = {{"allocation_id", std::to_string(allocation_id)},
               {"addr", addr},
               {"size", std::to_string(size)},
               {"shadow", "true"}};
    if (mapping) r.attrs.emplace_back("virtual", "true");
    if (image_ended) r.attrs.emplace_back("image_ended", "true");
    r.complete_attrs = true;
    return r;
}

bool is_shadow(const Record& r) { return attr_true(r, "shadow"); }

bool is_image_ended_free(const Record& r) {
    return r.ev.kind == MSMS_EV_FREE && attr_true(r, "shadow") && attr_true(r, "image_ended");
}

bool is_import_shadow(const Record& r) { return attr_true(r, "shadow") && attr_true(r, "import"); }

uint64_t import_shadow_blocks(const Record& r) {
    for (auto& a : r.attrs) {
        unsigned long long n = 0;
        if (a.first == "blocks") return parse_uint(a.second, n) && n > 0 ? n : 1;
    }
    return 1;
}

}  // namespace msms
