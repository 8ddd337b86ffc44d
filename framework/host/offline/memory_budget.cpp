#include "offline/memory_budget.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace msms {
namespace {

// memory.max of this process's cgroup (v2) or memory.limit_in_bytes (v1); 0: none.
size_t cgroup_limit() {
    std::ifstream in("/proc/self/cgroup");
    std::string line;
    while (std::getline(in, line)) {
        size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
        if (b == std::string::npos) continue;
        std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
        std::string file;
        if (controllers.empty()) file = "/sys/fs/cgroup" + path + "/memory.max";
        else if (("," + controllers + ",").find(",memory,") != std::string::npos)
            file = "/sys/fs/cgroup/memory" + path + "/memory.limit_in_bytes";
        else continue;
        std::ifstream f(file);
        unsigned long long v = 0;
        if (f >> v && v > 0 && v < (1ull << 60)) return static_cast<size_t>(v);
    }
    return 0;
}

}  // namespace

size_t default_offline_budget() {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    size_t total = pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : (8ull << 30);
    if (size_t cg = cgroup_limit(); cg && cg < total) total = cg;
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
