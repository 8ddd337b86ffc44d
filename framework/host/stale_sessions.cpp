#include "stale_sessions.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace msms {

namespace {
const char kMagic[] = "msmemscope-session";
const char kPrefix[] = ".msmemscope_session_";
}  // namespace

unsigned long long process_start_time(long pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    size_t paren = text.rfind(')');
    if (paren == std::string::npos) return 0;
    std::istringstream in(text.substr(paren + 1));
    std::string field;
    // fields 3 .. 22 follow the command's closing parenthesis
    for (int i = 3; i <= 22; ++i)
        if (!(in >> field)) return 0;
    return std::strtoull(field.c_str(), nullptr, 10);
}

std::string write_session_owner(const std::string& dir) {
    // Relative to the session folder opened without following a link (#29 item 4).
    int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) return dir + ": " + strerror(errno);
    int fd = openat(dfd, "owner", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    int open_errno = errno;
    close(dfd);
    if (fd < 0) return dir + "/owner: " + strerror(open_errno);
    char line[128];
    int n = snprintf(line, sizeof(line), "%s %ld %llu\n", kMagic, static_cast<long>(getpid()),
                     process_start_time(getpid()));
    bool ok = write(fd, line, static_cast<size_t>(n)) == n;
    close(fd);
    return ok ? "" : dir + "/owner: cannot write";
}

size_t remove_stale_sessions(const std::string& output) {
    int out = open(output.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (out < 0) return 0;
    DIR* d = fdopendir(out);
    if (!d) {
        close(out);
        return 0;
    }
    size_t removed = 0;
    while (dirent* e = readdir(d)) {
        if (strncmp(e->d_name, kPrefix, sizeof(kPrefix) - 1) != 0) continue;
        struct stat st;
        if (fstatat(out, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode) ||
            st.st_uid != geteuid() || (st.st_mode & 077))
            continue;
        int dir = openat(out, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dir < 0) continue;
        int fd = openat(dir, "owner", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        close(dir);
        if (fd < 0) continue;  // no owner (yet): never judged
        char buf[128] = {0};
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        char magic[32] = {0};
        long pid = 0;
        unsigned long long start = 0;
        if (n <= 0 || sscanf(buf, "%31s %ld %llu", magic, &pid, &start) != 3 || strcmp(magic, kMagic) != 0 ||
            pid <= 0)
            continue;
        if (process_start_time(pid) == start) continue;  // its host is alive
        std::error_code ec;
        // remove_all removes links, never what they point to
        std::filesystem::remove_all(std::filesystem::path(output) / e->d_name, ec);
        if (!ec) ++removed;
    }
    closedir(d);
    return removed;
}

}  // namespace msms
