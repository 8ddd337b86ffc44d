// SQLite opens its files by name (the database and, beside it, its rollback
// journal). So that neither is ever reached through a link (issue #29 item
// 4), the name given to SQLite is /proc/self/fd/<folder descriptor>/<file>:
// the kernel resolves /proc/self/fd/N to the folder the caller opened through
// an openat chain, whatever its path names now. The VFS named by
// sqlite_fd_path_vfs() is the default one with one change: it keeps such a
// name as given (the default resolves symbolic links in the name, which
// would turn it back into a path). Header-only: the db sink (a plugin) and
// the host (--merge) each register their own copy; nullptr when SQLite has
// no default VFS.
#pragma once

#include <sqlite3.h>

#include <cstring>
#include <string>

namespace msms {

namespace sqlite_fd_path_detail {
inline int keep_pathname(sqlite3_vfs*, const char* name, int n, char* out) {
    size_t len = std::strlen(name);
    if (len + 1 > static_cast<size_t>(n)) return SQLITE_CANTOPEN;
    std::memcpy(out, name, len + 1);
    return SQLITE_OK;
}
}  // namespace sqlite_fd_path_detail

inline const char* sqlite_fd_path_vfs() {
    static const char* name = [] {
        static sqlite3_vfs vfs;
        sqlite3_vfs* base = sqlite3_vfs_find(nullptr);
        if (!base) return static_cast<const char*>(nullptr);
        vfs = *base;
        vfs.pNext = nullptr;
        vfs.zName = "msmemscope_fd_path";
        vfs.xFullPathname = sqlite_fd_path_detail::keep_pathname;
        return sqlite3_vfs_register(&vfs, 0) == SQLITE_OK ? vfs.zName : static_cast<const char*>(nullptr);
    }();
    return name;
}

// The name to give SQLite for `file` in the folder open as `dir_fd`.
inline std::string sqlite_fd_path(int dir_fd, const std::string& file) {
    return "/proc/self/fd/" + std::to_string(dir_fd) + "/" + file;
}

}  // namespace msms
