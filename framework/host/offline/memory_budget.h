// The memory budget of the offline modes (--analyze, --compare; issue #29):
// they stream their input, so what they hold is the live blocks, operators
// and per-step aggregates the analyses keep (and one sort run). When that
// grows past the budget (--offline-memory), or an allocation fails, the run
// ends with one "msmemscope: error:" line and exit 70 instead of being
// killed by the kernel's (or a cgroup's) OOM killer without a word.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include "common/memory_cgroups.h"

namespace msms {

// The budget when --offline-memory is not given: half of the machine's
// memory or of the smallest memory cgroup limit that bounds this process,
// whichever is smaller.
size_t default_offline_budget();
// That limit (0: none): its own cgroup's or one above it, cgroup v2 or v1,
// where /proc/self/mountinfo says the hierarchies are (a container's
// --memory on a v1 host too): found as the agent finds a failed
// allocation's bound (common/memory_cgroups.h).
size_t memory_cgroup_limit(const memory_cgroups::Sources& sources = {});
// The budget in bytes: `mib` when given (not 0), else the default.
size_t offline_budget(unsigned long long mib);
// How much of it one sort run may take (rows not in time order).
size_t sort_memory(size_t budget);
// This process's resident memory now, in bytes (0 when unknown).
size_t resident_bytes();

// Checked every few thousand rows: false with `error` once the resident
// memory is over the budget. `setter` is what sets the budget in the words
// of the run's user (the command line's option; for the Python API, which
// has no keyword for it, the command line that runs the analysis with one).
class MemoryGuard {
public:
    explicit MemoryGuard(size_t budget, std::string setter = "--offline-memory")
        : budget_(budget), setter_(std::move(setter)) {}
    bool check(size_t rows, std::string& error);
    size_t budget() const { return budget_; }
    size_t peak() const { return peak_; }

private:
    size_t budget_;
    std::string setter_;
    size_t peak_ = 0;
    size_t count_ = 0;
};

// "<N> MiB" for a number of bytes.
std::string mib_text(size_t bytes);

}  // namespace msms
