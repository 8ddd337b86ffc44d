#include "symbolizer.h"

#include <cstdio>

namespace msms {

const std::string& Symbolizer::text(uint64_t id) {
    static const std::string kEmpty;
    if (id == 0) return kEmpty;
    auto it = cache_.find(id);
    if (it != cache_.end()) return it->second;
    const StackDef* s = reader_.stack(id);
    if (!s) return kEmpty;  // definition not read yet: not cached, retried later
    std::string out;
    for (size_t i = 0; i < s->frames.size(); ++i) {
        if (i) out += '\n';
        if (s->kind == 1) {
            const std::string* f = reader_.string(s->frames[i]);
            out += f ? *f : std::string("?");
        } else {
            out += c_frame(s->frames[i]);
        }
    }
    return cache_.emplace(id, std::move(out)).first->second;
}

std::string Symbolizer::c_frame(uint64_t address) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(address));
    return buf;
}

}  // namespace msms
