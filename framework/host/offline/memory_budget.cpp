#include "offline/memory_budget.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace msms {

size_t memory_cgroup_limit(const memory_cgroups::Sources& sources) {
    uint64_t smallest = 0;
    memory_cgroups::for_each_limit(
        sources,
        [](void* ctx, uint64_t limit, uint64_t) {
            uint64_t& s = *static_cast<uint64_t*>(ctx);
            if (!s || limit < s) s = limit;
        },
        &smallest);
    return static_cast<size_t>(std::min<uint64_t>(smallest, SIZE_MAX));
}

size_t default_offline_budget() {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    size_t total = pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : (8ull << 30);
    if (size_t cg = memory_cgroup_limit(); cg && cg < total) total = cg;
    return std::max<size_t>(total / 2, 64u << 20);
}

size_t offline_budget(unsigned long long mib) {
    return mib ? static_cast<size_t>(mib) << 20 : default_offline_budget();
}

size_t sort_memory(size_t budget) {
    return std::clamp<size_t>(budget / 8, 1u << 20, 64u << 20);
}

size_t resident_bytes() {
    std::FILE* f = std::fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long long size = 0, rss = 0;
    int n = std::fscanf(f, "%llu %llu", &size, &rss);
    std::fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    return n == 2 && page > 0 ? static_cast<size_t>(rss) * static_cast<size_t>(page) : 0;
}

bool MemoryGuard::check(size_t rows, std::string& error) {
    if (++count_ % 4096 != 0) return true;
    size_t rss = resident_bytes();
    peak_ = std::max(peak_, rss);
    if (rss <= budget_) return true;
    error = "out of memory: " + mib_text(rss) + " in use after " + std::to_string(rows) +
            " row(s), over the memory budget of " + mib_text(budget_) +
            " (" + setter_ + "; what the input keeps live: blocks, operators, per-step figures)";
    return false;
}

std::string mib_text(size_t bytes) {
    return std::to_string((bytes + (1u << 20) - 1) >> 20) + " MiB";
}

}  // namespace msms
