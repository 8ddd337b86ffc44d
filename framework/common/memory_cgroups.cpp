// memory_cgroups.h. No allocation anywhere in here: the agent runs it inside
// malloc's hooks right after the real malloc said there is no memory.
#include "memory_cgroups.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

namespace msms::memory_cgroups {

namespace {

constexpr size_t kTextMax = 4096;  // /proc/self/cgroup and a mountinfo line fit (a few hundred bytes usually)
constexpr size_t kPathMax = 1024;  // a deeper cgroup is left out (the stack of a failing thread is small)

// One space-separated field of a line.
struct Field {
    const char* p = nullptr;
    size_t n = 0;
    bool is(const char* s) const { return strlen(s) == n && memcmp(p, s, n) == 0; }
};

// The field at p (before end), p moved past it and its space; false at the end.
bool next_field(const char*& p, const char* end, Field& f) {
    while (p < end && *p == ' ') ++p;
    if (p >= end) return false;
    f.p = p;
    while (p < end && *p != ' ') ++p;
    f.n = static_cast<size_t>(p - f.p);
    return true;
}

bool list_has(Field list, const char* item) { return memory_cgroups::list_has(list.p, list.n, item); }

// A mountinfo path field with its octal escapes ("\040": a space, "\134": a
// backslash) undone, appended at out[n]; false if it does not fit.
bool is_octal_escape(const char* p, size_t left) {
    return left >= 4 && p[0] == '\\' && p[1] >= '0' && p[1] <= '3' && p[2] >= '0' && p[2] <= '7' && p[3] >= '0' &&
           p[3] <= '7';
}

bool put_unescaped(Field f, char* out, size_t out_size, size_t& n) {
    for (size_t i = 0; i < f.n; ++i) {
        char c = f.p[i];
        if (is_octal_escape(f.p + i, f.n - i)) {
            c = static_cast<char>((f.p[i + 1] - '0') * 64 + (f.p[i + 2] - '0') * 8 + (f.p[i + 3] - '0'));
            i += 3;
        }
        if (n + 1 >= out_size) return false;
        out[n++] = c;
    }
    out[n] = '\0';
    return true;
}

// Calls on_line(line, len) for each line of the file (without its '\n')
// until it returns true; true if it did. buf holds a line at a time: a
// longer line is passed over (mountinfo can be long: a host with many
// mounts; its lines are short).
template <class OnLine>
bool find_line(const char* path, char* buf, size_t size, OnLine on_line) {
    int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    size_t have = 0;
    bool too_long = false, found = false;
    for (;;) {
        ssize_t got = ::read(fd, buf + have, size - have);
        bool at_end = got <= 0;
        if (!at_end) have += static_cast<size_t>(got);
        size_t start = 0;
        while (!found) {
            const char* nl = static_cast<const char*>(memchr(buf + start, '\n', have - start));
            if (!nl) break;
            size_t len = static_cast<size_t>(nl - (buf + start));
            found = !too_long && on_line(buf + start, len);
            too_long = false;
            start += len + 1;
        }
        if (found) break;
        memmove(buf, buf + start, have - start);
        have -= start;
        if (at_end) {
            found = have && !too_long && on_line(buf, have);  // a last line without '\n'
            break;
        }
        if (have == size) {  // the buffer holds part of one line only: drop it up to its end
            too_long = true;
            have = 0;
        }
    }
    ::close(fd);
    return found;
}

// A cgroup file holding one number ("max", v2's no limit, is none).
bool cgroup_number(char* path, size_t dir_len, const char* file, char* text, uint64_t& n) {
    size_t flen = strlen(file);
    if (dir_len + flen + 1 > kPathMax) return false;
    memcpy(path + dir_len, file, flen + 1);
    bool ok = read_text(path, text, kTextMax) && parse_u64(text, n);
    path[dir_len] = '\0';
    return ok;
}

// The files of a cgroup that say its memory limit and use.
struct LimitFiles {
    const char* limit;
    const char* usage;
    // the file that says "1" when a cgroup's limit covers its children;
    // nullptr: it always does (v2)
    const char* counts_children;
};
constexpr LimitFiles kV2Files{"/memory.max", "/memory.current", nullptr};
constexpr LimitFiles kV1Files{"/memory.limit_in_bytes", "/memory.usage_in_bytes", "/memory.use_hierarchy"};

const LimitFiles& files_of(Hierarchy h) { return h == Hierarchy::v2 ? kV2Files : kV1Files; }

struct Walk {
    OnLimit on_limit;
    void* ctx;
    char* text;  // a kTextMax buffer
};

// Each cgroup from the one at path (its directory in a kPathMax buffer,
// cut short here on the way up) up to the mount's root (the top of the tree
// this process sees): a limit above it binds as well as its own, in v1 only
// while the cgroup above counts its children's use (memory.use_hierarchy 0:
// it does not, nor does any above).
void limits_up_from(const Walk& walk, char* path, size_t mount_len, const LimitFiles& files) {
    size_t len = strlen(path);
    if (mount_len > len) return;
    while (len > mount_len && path[len - 1] == '/') path[--len] = '\0';
    for (;;) {
        uint64_t limit = 0, usage = 0;
        if (cgroup_number(path, len, files.limit, walk.text, limit) && !is_no_limit(limit) &&
            cgroup_number(path, len, files.usage, walk.text, usage))
            walk.on_limit(walk.ctx, limit, usage);
        if (len <= mount_len) break;
        while (len > mount_len && path[len - 1] != '/') --len;  // up one cgroup
        if (len > mount_len) --len;
        path[len] = '\0';
        uint64_t counts = 1;
        if (files.counts_children && cgroup_number(path, len, files.counts_children, walk.text, counts) &&
            counts == 0)
            break;
    }
}

// mount followed by cgroup (a path from the hierarchy's root) into dir.
bool join_dir(const char* mount, const char* cgroup, char* dir, size_t& mount_len) {
    size_t mlen = strlen(mount), clen = strlen(cgroup);
    if (mlen + clen + 1 > kPathMax) return false;
    memcpy(dir, mount, mlen);
    memcpy(dir + mlen, cgroup, clen + 1);
    mount_len = mlen;
    return true;
}

void limits_in_hierarchy(const Walk& walk, const Sources& sources, Hierarchy h, const char* cgroup) {
    char dir[kPathMax];
    size_t mount_len = 0;
    if (cgroup_dir_in_file(sources.mountinfo, h, cgroup, walk.text, kTextMax, dir, sizeof(dir), mount_len)) {
        limits_up_from(walk, dir, mount_len, files_of(h));
        return;
    }
    if (!sources.systemd_places) return;
    // no mountinfo (or no mount of it listed there): where systemd mounts
    // it; v2 alone at /sys/fs/cgroup, or beside v1's hierarchies
    // ("hybrid") at /sys/fs/cgroup/unified
    bool v2 = h == Hierarchy::v2;
    const char* const places[] = {v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory",
                                  v2 ? "/sys/fs/cgroup/unified" : nullptr};
    for (const char* mount : places)
        if (mount && join_dir(mount, cgroup, dir, mount_len)) limits_up_from(walk, dir, mount_len, files_of(h));
}

}  // namespace

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

bool parse_u64(const char* p, uint64_t& n, const char** end) {
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

bool list_has(const char* list, size_t len, const char* item) {
    size_t ilen = strlen(item);
    const char* p = list;
    const char* end = list + len;
    while (p <= end) {
        const char* comma = static_cast<const char*>(memchr(p, ',', static_cast<size_t>(end - p)));
        const char* stop = comma ? comma : end;
        if (static_cast<size_t>(stop - p) == ilen && memcmp(p, item, ilen) == 0) return true;
        if (!comma) break;
        p = comma + 1;
    }
    return false;
}

void for_each_limit(const Sources& sources, OnLimit on_limit, void* ctx) {
    char text[kTextMax], v2[kPathMax], v1[kPathMax];
    if (!read_text(sources.proc_cgroup, text, sizeof(text))) return;
    bool in_v2 = cgroup_path(text, Hierarchy::v2, v2, sizeof(v2));
    bool in_v1 = cgroup_path(text, Hierarchy::v1_memory, v1, sizeof(v1));
    Walk walk{on_limit, ctx, text};  // text is the walk's buffer from here on
    if (in_v2) limits_in_hierarchy(walk, sources, Hierarchy::v2, v2);
    if (in_v1) limits_in_hierarchy(walk, sources, Hierarchy::v1_memory, v1);
}

bool cgroup_path(const char* text, Hierarchy h, char* out, size_t out_size) {
    for (const char* line = text; line && *line;) {
        const char* end = strchr(line, '\n');
        if (!end) end = line + strlen(line);
        // "<id>:<controllers>:<path>"; the path may hold ':' itself
        const char* c1 = static_cast<const char*>(memchr(line, ':', static_cast<size_t>(end - line)));
        const char* c2 =
            c1 ? static_cast<const char*>(memchr(c1 + 1, ':', static_cast<size_t>(end - c1 - 1))) : nullptr;
        if (c2) {
            Field id{line, static_cast<size_t>(c1 - line)}, controllers{c1 + 1, static_cast<size_t>(c2 - c1 - 1)};
            bool mine = h == Hierarchy::v2 ? id.is("0") && controllers.n == 0
                                           : controllers.n > 0 && list_has(controllers, "memory");
            size_t len = static_cast<size_t>(end - (c2 + 1));
            if (mine) {
                if (len == 0 || c2[1] != '/' || len + 1 > out_size) return false;
                memcpy(out, c2 + 1, len);
                out[len] = '\0';
                return true;
            }
        }
        line = *end ? end + 1 : nullptr;
    }
    return false;
}

bool cgroup_dir_in_mount(const char* line, size_t len, Hierarchy h, const char* cgroup, char* out, size_t out_size,
                         size_t& mount_len) {
    // "<id> <parent> <major:minor> <root> <mount point> <options> [<optional>...] - <fstype> <source> <super options>"
    const char* p = line;
    const char* end = line + len;
    Field f, root, point, fstype, source, super_options;
    for (int i = 0; i < 3; ++i)
        if (!next_field(p, end, f)) return false;
    if (!next_field(p, end, root) || !next_field(p, end, point)) return false;
    do {
        if (!next_field(p, end, f)) return false;
    } while (!f.is("-"));
    if (!next_field(p, end, fstype) || !next_field(p, end, source) || !next_field(p, end, super_options)) return false;
    bool mounts_it = h == Hierarchy::v2 ? fstype.is("cgroup2")
                                        : fstype.is("cgroup") && list_has(super_options, "memory");
    if (!mounts_it) return false;
    // the mount shows the hierarchy from its root down: the cgroup must be
    // that root or below it
    char root_path[kPathMax];
    size_t root_len = 0;
    if (!put_unescaped(root, root_path, sizeof(root_path), root_len)) return false;
    while (root_len > 0 && root_path[root_len - 1] == '/') root_path[--root_len] = '\0';  // "/" is ""
    if (strncmp(cgroup, root_path, root_len) != 0 || (cgroup[root_len] != '\0' && cgroup[root_len] != '/'))
        return false;
    size_t n = 0;
    if (!put_unescaped(point, out, out_size, n)) return false;
    mount_len = n;
    const char* below = cgroup + root_len;
    size_t blen = strlen(below);
    if (n + blen + 1 > out_size) return false;
    memcpy(out + n, below, blen + 1);
    n += blen;
    while (n > mount_len && out[n - 1] == '/') out[--n] = '\0';
    return true;
}

bool cgroup_dir(const char* mountinfo, Hierarchy h, const char* cgroup, char* out, size_t out_size,
                size_t& mount_len) {
    for (const char* line = mountinfo; line && *line;) {
        const char* end = strchr(line, '\n');
        size_t len = end ? static_cast<size_t>(end - line) : strlen(line);
        if (cgroup_dir_in_mount(line, len, h, cgroup, out, out_size, mount_len)) return true;
        line = end ? end + 1 : nullptr;
    }
    return false;
}

bool cgroup_dir_in_file(const char* path, Hierarchy h, const char* cgroup, char* line_buf, size_t line_buf_size,
                        char* out, size_t out_size, size_t& mount_len) {
    return find_line(path, line_buf, line_buf_size, [&](const char* line, size_t len) {
        return cgroup_dir_in_mount(line, len, h, cgroup, out, out_size, mount_len);
    });
}

bool is_no_limit(uint64_t bytes) {
    constexpr uint64_t kLongMax = static_cast<uint64_t>(INT64_MAX);
    return bytes >= (kLongMax & ~static_cast<uint64_t>(0xFFFF));
}

}  // namespace msms::memory_cgroups
