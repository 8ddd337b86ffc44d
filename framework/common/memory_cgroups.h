// The memory cgroups that bound a process: the memory limit of its memory
// cgroup and of each cgroup above it, as the kernel applies them:
//   cgroup v2     memory.max, in use memory.current; a limit above binds
//                 its children always
//   cgroup v1     (the memory controller's own hierarchy, as on hosts with
//                 the v1 or the "hybrid" layout: docker --memory there)
//                 memory.limit_in_bytes, in use memory.usage_in_bytes; a
//                 limit above binds while that cgroup counts its children
//                 (memory.use_hierarchy)
// The process's cgroups come from /proc/self/cgroup; where each hierarchy is
// mounted from /proc/self/mountinfo (a container mounts only its part of the
// tree: the mount's root maps to its mount point), else systemd's places.
// The walk up stops at the top of the tree this process sees.
//
// Shared by the agent (framework/agent/memory_bound.h: inside malloc's hooks
// after a failed allocation) and the host (framework/host/offline/
// memory_budget.h: the offline modes' memory budget), so both find the
// same limits. Hence: no allocation, no exceptions, libc only; raw
// open/read of small files into bounded buffers on the stack; a file that
// cannot be read leaves its limit out (errno may change: the caller's to
// keep).
#pragma once

#include <cstddef>
#include <cstdint>

namespace msms::memory_cgroups {

// The two kinds of cgroup hierarchy that can hold a memory limit.
enum class Hierarchy {
    v2,         // the unified one: "0::<path>" in /proc/self/cgroup, fstype cgroup2
    v1_memory,  // v1's memory controller: "<n>:<controllers>:<path>" with memory among
                // the comma-separated controllers, fstype cgroup with memory among its options
};

// Where the walk reads the process's cgroups and the mounts (tests point
// them at fixtures; the mount points in the mountinfo say where the trees are).
struct Sources {
    const char* proc_cgroup = "/proc/self/cgroup";
    const char* mountinfo = "/proc/self/mountinfo";
    // when the mountinfo does not list a hierarchy: look where systemd mounts it
    bool systemd_places = true;
};

// Calls on_limit(ctx, limit, usage) for each memory cgroup limit that bounds
// the process (its own cgroup's and those above it, both hierarchies), in
// bytes; cgroups without a limit are passed over.
using OnLimit = void (*)(void* ctx, uint64_t limit, uint64_t usage);
void for_each_limit(const Sources& sources, OnLimit on_limit, void* ctx);

// ---- the parsers, for the tests as well

// The process's cgroup path in hierarchy h, from /proc/self/cgroup's text, into out.
bool cgroup_path(const char* text, Hierarchy h, char* out, size_t out_size);
// If one /proc/self/mountinfo line (len bytes, no '\n') mounts hierarchy h
// with a root that holds `cgroup`: the cgroup's directory into out (the mount
// point, then the part of `cgroup` below the mount's root; mountinfo's octal
// escapes such as \040 undone) and the mount point's length into mount_len
// (the walk up to the parents stops there).
bool cgroup_dir_in_mount(const char* line, size_t len, Hierarchy h, const char* cgroup, char* out, size_t out_size,
                         size_t& mount_len);
// The same over the whole text of /proc/self/mountinfo: the first mount that
// holds the cgroup.
bool cgroup_dir(const char* mountinfo, Hierarchy h, const char* cgroup, char* out, size_t out_size,
                size_t& mount_len);
// The same over the mountinfo file at path, read a line at a time into
// line_buf (the file has no size limit; a line longer than the buffer is
// passed over).
bool cgroup_dir_in_file(const char* path, Hierarchy h, const char* cgroup, char* line_buf, size_t line_buf_size,
                        char* out, size_t out_size, size_t& mount_len);
// A cgroup v1 memory.limit_in_bytes this large means no limit: the kernel
// shows "none" as LONG_MAX rounded down to its page size (up to 64 KiB).
bool is_no_limit(uint64_t bytes);

// ---- small file and text helpers the agent's other bounds read with

// The file's first out_size - 1 bytes, NUL-terminated; false if it cannot
// be opened or is empty.
bool read_text(const char* path, char* out, size_t out_size);
// A decimal number at p; false if none (or it overflows); *end after it.
bool parse_u64(const char* p, uint64_t& n, const char** end = nullptr);
// Whether the comma-separated list (len bytes) holds item as a whole.
bool list_has(const char* list, size_t len, const char* item);

}  // namespace msms::memory_cgroups
