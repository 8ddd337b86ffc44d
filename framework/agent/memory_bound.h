// The memory bound a process ran into when one of its host (cpu)
// allocations failed: how much memory it could have had and how much of that
// was free at the failure. Upstream's OOM_Snapshot gives a device's total and
// free from its driver; a cpu allocation has no driver to ask, so the agent
// reads the limits that apply to the process, at the failure, in the failing
// thread:
//   RLIMIT_AS     the address space: free = limit - VmSize (/proc/self/statm)
//   RLIMIT_DATA   the data segment and private writable mappings (Linux 4.7
//                 and later): free = limit - VmData (/proc/self/status)
//   cgroup        the memory limit of the process's memory cgroup and of each
//                 cgroup above it: cgroup v2 memory.max, free = memory.max -
//                 memory.current; cgroup v1 memory.limit_in_bytes, free = it
//                 - memory.usage_in_bytes; found as common/memory_cgroups.h
//                 says (the host's offline budget finds them the same way)
//   machine       /proc/meminfo: total = MemTotal, free = MemAvailable
// The binding one is the one with the least free memory (the one a request
// runs into first); of two with as much free, the smaller.
//
// Called inside malloc's hooks after the real allocation failed: no
// allocation, raw open/read of small /proc and /sys files into bounded
// buffers on the stack, nothing that can block; a file that cannot be read
// leaves its bound out (errno is the caller's to keep).
#pragma once

#include <cstddef>
#include <cstdint>

namespace msms::agent::memory_bound {

struct Bound {
    uint64_t total = 0;           // bytes
    uint64_t free = 0;            // bytes
    const char* name = nullptr;   // "RLIMIT_AS", "RLIMIT_DATA", "cgroup", "machine"; nullptr: none known
};

// Keeps in `best` whichever of it and (total, free, name) binds: the least
// free, then the smaller total. free is clamped to total.
void consider(Bound& best, uint64_t total, uint64_t free, const char* name);

// Parsers of the files' text (NUL-terminated), for the tests as well.
// "<Key>:   <n> kB" lines of /proc/meminfo and /proc/self/status, in bytes.
bool kib_field(const char* text, const char* key, uint64_t& bytes);
// The first number of /proc/self/statm (VmSize in pages).
bool first_number(const char* text, uint64_t& n);

// The bounds that apply to this process now; name nullptr when none could
// be read.
Bound read_now();

// Writes `extra` (may be null or empty), then the bound as Attr entries:
// "total:<bytes>,free:<bytes>,limit:<name>", or "limit:unknown" when no bound
// could be read. NUL-terminated, cut short (never overrun) if out is small.
void format_attrs(char* out, size_t out_size, const char* extra, const Bound& b);

}  // namespace msms::agent::memory_bound
