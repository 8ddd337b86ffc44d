#include "capture_disk.h"

#include <cstdlib>

#include "../common/capture_format.h"

namespace msms {

namespace {

uint64_t env_mib(const char* name, uint64_t default_mib) {
    const char* v = std::getenv(name);
    if (!v || !*v) return default_mib << 20;
    char* end = nullptr;
    unsigned long long n = std::strtoull(v, &end, 10);
    if (*end || n > (1ull << 40)) return default_mib << 20;
    return static_cast<uint64_t>(n) << 20;
}

}  // namespace

uint64_t capture_keep_bytes() { return env_mib("MSMEMSCOPE_CAPTURE_KEEP_MIB", 64); }

uint64_t capture_unread_bytes(bool aggregate) {
    return env_mib("MSMEMSCOPE_CAPTURE_UNREAD_MIB", aggregate ? 64 : 256);
}

uint32_t capture_budget_chunks(bool aggregate) {
    uint64_t unread = capture_unread_bytes(aggregate);
    if (unread == 0) return 0;
    // --aggregate releases at once: nothing kept, only the unread part.
    uint64_t chunks = ((aggregate ? 0 : capture_keep_bytes()) + unread) / capture::kChunkSize;
    if (chunks < 96) chunks = 96;
    return chunks > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(chunks);
}

}  // namespace msms
