// memory_bound.h. No allocation anywhere in here: it runs inside malloc's
// hooks right after the real malloc said there is no memory.
#include "memory_bound.h"

#include <fcntl.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

namespace msms::agent::memory_bound {

namespace {

constexpr size_t kTextMax = 4096;  // /proc/self/status and /proc/self/cgroup fit (a few hundred bytes usually)
constexpr size_t kPathMax = 1024;  // a deeper cgroup is left out (the stack of a failing thread is small)

// The file's first out_size - 1 bytes, NUL-terminated; false if it cannot
// be opened or is empty.
bool read_text(const char* path, char* out, size_t out_size) {
    int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    size_t n = 0;
    while (n + 1 < out_size) {
        ssize_t got = ::read(fd, out + n, out_size - 1 - n);
        if (got <= 0) break;
        n += static_cast<size_t>(got);
    }
    ::close(fd);
    out[n] = '\0';
    return n > 0;
}

const char* skip_spaces(const char* p) {
    while (*p == ' ' || *p == '\t') ++p;
    return p;
}

// A decimal number at p; false if none (or it overflows).
bool parse_u64(const char* p, uint64_t& n, const char** end = nullptr) {
    if (*p < '0' || *p > '9') return false;
    uint64_t v = 0;
    for (; *p >= '0' && *p <= '9'; ++p) {
        uint64_t d = static_cast<uint64_t>(*p - '0');
        if (v > (UINT64_MAX - d) / 10) return false;
        v = v * 10 + d;
    }
    n = v;
    if (end) *end = p;
    return true;
}

// The start of the line beginning with `prefix`, else nullptr.
const char* line_starting(const char* text, const char* prefix) {
    size_t len = strlen(prefix);
    for (const char* line = text; line && *line;) {
        if (strncmp(line, prefix, len) == 0) return line;
        line = strchr(line, '\n');
        if (line) ++line;
    }
    return nullptr;
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

// A cgroup v2 file holding one number ("max": no limit).
bool cgroup_number(char* path, size_t dir_len, const char* file, char* text, uint64_t& n) {
    size_t flen = strlen(file);
    if (dir_len + flen + 1 > kPathMax) return false;
    memcpy(path + dir_len, file, flen + 1);
    bool ok = read_text(path, text, kTextMax) && parse_u64(text, n);
    path[dir_len] = '\0';
    return ok;
}

// Each cgroup from the process's up to the hierarchy's root (as this
// process sees it): a limit above it binds as well as its own.
void consider_cgroups_under(Bound& best, const char* mount, const char* cgroup, char* text) {
    char path[kPathMax];
    size_t mlen = strlen(mount), clen = strlen(cgroup);
    if (mlen + clen + 1 > kPathMax) return;
    memcpy(path, mount, mlen);
    memcpy(path + mlen, cgroup, clen + 1);
    size_t len = mlen + clen;
    while (len > mlen && path[len - 1] == '/') path[--len] = '\0';
    for (;;) {
        uint64_t max = 0, current = 0;
        if (cgroup_number(path, len, "/memory.max", text, max) &&
            cgroup_number(path, len, "/memory.current", text, current))
            consider(best, max, max > current ? max - current : 0, "cgroup");
        if (len == mlen) break;
        while (len > mlen && path[len - 1] != '/') --len;  // up one cgroup
        if (len > mlen) --len;
        path[len] = '\0';
    }
}

void consider_cgroup(Bound& best, char* text) {
    char cgroup[kPathMax];
    if (!read_text("/proc/self/cgroup", text, kTextMax) || !cgroup_v2_path(text, cgroup, sizeof(cgroup))) return;
    // the v2 hierarchy: /sys/fs/cgroup alone, or beside v1's (systemd's
    // "hybrid" layout) at /sys/fs/cgroup/unified
    consider_cgroups_under(best, "/sys/fs/cgroup", cgroup, text);
    consider_cgroups_under(best, "/sys/fs/cgroup/unified", cgroup, text);
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

bool cgroup_v2_path(const char* text, char* out, size_t out_size) {
    const char* line = line_starting(text, "0::");
    if (!line) return false;
    line += 3;
    const char* end = strchr(line, '\n');
    size_t len = end ? static_cast<size_t>(end - line) : strlen(line);
    if (len == 0 || line[0] != '/' || len + 1 > out_size) return false;
    memcpy(out, line, len);
    out[len] = '\0';
    return true;
}

Bound read_now() {
    char text[kTextMax];
    Bound best;
    consider_rlimit_as(best, text);
    consider_rlimit_data(best, text);
    consider_cgroup(best, text);
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
