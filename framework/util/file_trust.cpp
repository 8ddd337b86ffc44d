#include "file_trust.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

namespace msms {
namespace {

// Why `st` (of `what`) is not safe for a root host, or "".
std::string unsafe(const std::string& what, const struct stat& st, bool own_folder_or_file) {
    if (st.st_uid != 0) return what + " belongs to user id " + std::to_string(st.st_uid) + ", not root";
    bool others = st.st_mode & S_IWOTH;
    bool group = (st.st_mode & S_IWGRP) && st.st_gid != 0;
    bool sticky_dir = S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX);
    if ((others || group) && (own_folder_or_file || !sticky_dir))
        return what + " is writable by " + (others ? "all users" : "group id " + std::to_string(st.st_gid));
    return "";
}

// The first of `path` and the folders above it that another user could
// write (or own), or "". A path that does not exist: "". `strict_parent`:
// the folder holding `path` may not be sticky-writable either (a plugin's
// folder); else only `path` itself must be (an output folder in /tmp).
std::string walk(const std::string& path, bool strict_parent) {
    char* real = realpath(path.c_str(), nullptr);
    if (!real) return "";  // nothing there to load: the loader says so
    std::string p = real;
    free(real);
    struct stat st;
    if (stat(p.c_str(), &st) != 0) return "cannot stat " + p + ": " + strerror(errno);
    std::string why = unsafe(p, st, true);
    bool own_folder = strict_parent;
    std::string dir = p;
    while (why.empty() && dir != "/") {
        size_t slash = dir.rfind('/');
        dir = slash == 0 ? "/" : dir.substr(0, slash);
        if (stat(dir.c_str(), &st) != 0) return "cannot stat " + dir + ": " + strerror(errno);
        why = unsafe("its folder " + dir, st, own_folder);
        own_folder = false;
    }
    return why;
}

}  // namespace

std::string untrusted_reason_for(const std::string& path, unsigned uid) {
    if (uid != 0) return "";
    std::string why = walk(path, true);
    return why.empty() ? "" : "not loaded as root: " + why;
}

std::string unsafe_output_reason_for(const std::string& folder, unsigned uid) {
    return uid == 0 ? walk(folder, false) : "";
}

std::string unsafe_output_reason(const std::string& folder) { return unsafe_output_reason_for(folder, geteuid()); }

std::string untrusted_reason(const std::string& path) { return untrusted_reason_for(path, geteuid()); }

}  // namespace msms
