// memory_bound.h. No allocation anywhere in here: it runs inside malloc's
// hooks right after the real malloc said there is no memory.
#include "memory_bound.h"

#include <string.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "../common/memory_cgroups.h"

namespace msms::agent::memory_bound {

namespace {

using memory_cgroups::parse_u64;
using memory_cgroups::read_text;

constexpr size_t kTextMax = 4096;  // /proc/self/status and /proc/meminfo fit (a few KiB at most)

const char* skip_spaces(const char* p) {
    while (*p == ' ' || *p == '\t') ++p;
    return p;
}

// The soft limit of `resource`, if there is one.
bool soft_limit(int resource, uint64_t& bytes) {
    struct rlimit lim;
    if (getrlimit(resource, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return false;
    bytes = static_cast<uint64_t>(lim.rlim_cur);
    return true;
}

void consider_rlimit_as(Bound& best, char* text) {
    uint64_t limit = 0, pages = 0;
    if (!soft_limit(RLIMIT_AS, limit) || !read_text("/proc/self/statm", text, kTextMax) || !first_number(text, pages))
        return;
    uint64_t used = pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    consider(best, limit, limit > used ? limit - used : 0, "RLIMIT_AS");
}

// RLIMIT_DATA bounds the private writable mappings (what malloc's mmap
// makes) since Linux 4.7; before, the brk heap only, which a large malloc
// does not use: left out there.
bool data_limit_covers_mmap() {
    struct utsname u;
    if (uname(&u) != 0) return false;
    uint64_t major = 0, minor = 0;
    const char* p = u.release;
    if (!parse_u64(p, major, &p) || *p != '.' || !parse_u64(p + 1, minor)) return false;
    return major > 4 || (major == 4 && minor >= 7);
}

void consider_rlimit_data(Bound& best, char* text) {
    uint64_t limit = 0, used = 0;
    if (!soft_limit(RLIMIT_DATA, limit) || !data_limit_covers_mmap()) return;
    if (!read_text("/proc/self/status", text, kTextMax) || !kib_field(text, "VmData", used)) return;
    consider(best, limit, limit > used ? limit - used : 0, "RLIMIT_DATA");
}

// The memory cgroups' limits, found as the host's offline budget finds them
// (common/memory_cgroups.h).
void consider_cgroups(Bound& best) {
    memory_cgroups::for_each_limit(
        memory_cgroups::Sources{},
        [](void* ctx, uint64_t limit, uint64_t usage) {
            consider(*static_cast<Bound*>(ctx), limit, limit > usage ? limit - usage : 0, "cgroup");
        },
        &best);
}

void consider_machine(Bound& best, char* text) {
    uint64_t total = 0, available = 0;
    if (!read_text("/proc/meminfo", text, kTextMax) || !kib_field(text, "MemTotal", total) ||
        !kib_field(text, "MemAvailable", available))
        return;
    consider(best, total, available, "machine");
}

// Appends s at out[n] as far as it fits (one byte kept for the NUL).
void put(char* out, size_t out_size, size_t& n, const char* s) {
    while (*s && n + 1 < out_size) out[n++] = *s++;
}

void put_u64(char* out, size_t out_size, size_t& n, uint64_t v) {
    char digits[21];
    size_t d = sizeof(digits);
    digits[--d] = '\0';
    do {
        digits[--d] = static_cast<char>('0' + v % 10);
        v /= 10;
    } while (v);
    put(out, out_size, n, digits + d);
}

}  // namespace

void consider(Bound& best, uint64_t total, uint64_t free, const char* name) {
    if (free > total) free = total;
    if (best.name && (best.free < free || (best.free == free && best.total <= total))) return;
    best = Bound{total, free, name};
}

bool kib_field(const char* text, const char* key, uint64_t& bytes) {
    size_t klen = strlen(key);
    for (const char* line = text; line && *line;) {
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            uint64_t kib = 0;
            if (!parse_u64(skip_spaces(line + klen + 1), kib) || kib > UINT64_MAX / 1024) return false;
            bytes = kib * 1024;
            return true;
        }
        line = strchr(line, '\n');
        if (line) ++line;
    }
    return false;
}

bool first_number(const char* text, uint64_t& n) { return parse_u64(skip_spaces(text), n); }

Bound read_now() {
    char text[kTextMax];
    Bound best;
    consider_rlimit_as(best, text);
    consider_rlimit_data(best, text);
    consider_cgroups(best);
    consider_machine(best, text);
    return best;
}

void format_attrs(char* out, size_t out_size, const char* extra, const Bound& b) {
    if (!out_size) return;
    size_t n = 0;
    if (extra && *extra) {
        put(out, out_size, n, extra);
        put(out, out_size, n, ",");
    }
    if (b.name) {
        put(out, out_size, n, "total:");
        put_u64(out, out_size, n, b.total);
        put(out, out_size, n, ",free:");
        put_u64(out, out_size, n, b.free);
        put(out, out_size, n, ",limit:");
        put(out, out_size, n, b.name);
    } else {
        put(out, out_size, n, "limit:unknown");
    }
    out[n] = '\0';
}

}  // namespace msms::agent::memory_bound
