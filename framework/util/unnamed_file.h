// A file that gets its name only once it is complete, for a file the tool
// rewrites in place over seconds (--analyze writing its results back into
// a dump of gigabytes): made with O_TMPFILE in the target's folder, it has no
// name while it is written, so a run interrupted then (Ctrl-C, a kill, even
// SIGKILL or a crash) leaves nothing behind in the user's folder. publish()
// links it under a fresh name and renames that over the target in the
// same breath. Where the filesystem has no O_TMPFILE, a named temporary
// (created exclusively, never through a link) is the fallback, removed
// on every error.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>

namespace msms {

class UnnamedFile {
public:
    UnnamedFile() = default;
    UnnamedFile(const UnnamedFile&) = delete;
    UnnamedFile& operator=(const UnnamedFile&) = delete;
    ~UnnamedFile() { discard(); }

    // A new file in the folder `dir_fd` (which the caller keeps open until
    // publish or discard), `hint` naming the fallback's temporary. Returns
    // its descriptor (O_WRONLY, mode 0600 until the caller sets its own;
    // owned by this object: write through it, or through stream()) or -1
    // with errno set.
    int open(int dir_fd, const std::string& hint, mode_t mode = 0600) {
        discard();
        dir_fd_ = dir_fd;
        fd_ = ::openat(dir_fd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, mode);
        if (fd_ >= 0) return fd_;
        if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL && errno != ENOENT) return -1;
        for (int attempt = 0; attempt < 100; ++attempt) {
            tmp_ = hint + ".msmemscope." + std::to_string(::getpid()) + "." + std::to_string(attempt);
            fd_ = ::openat(dir_fd, tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
            if (fd_ >= 0 || errno != EEXIST) break;
        }
        if (fd_ < 0) tmp_.clear();
        return fd_;
    }

    // A stdio stream on the file (its own descriptor: fclose it before
    // publish); NULL with errno set.
    std::FILE* stream() {
        int fd = ::fcntl(fd_, F_DUPFD_CLOEXEC, 0);
        std::FILE* f = fd < 0 ? nullptr : ::fdopen(fd, "w");
        if (!f && fd >= 0) {
            int e = errno;
            ::close(fd);
            errno = e;
        }
        return f;
    }

    // Gives the complete file the name `name` in its folder, replacing what
    // is there (a link there is replaced, never followed); false with errno
    // set, and then nothing of the file stays.
    bool publish(const std::string& name) {
        for (int attempt = 0; tmp_.empty() && attempt < 100; ++attempt) {  // unnamed: a fresh name first
            std::string t = "." + name + ".msmemscope." + std::to_string(::getpid()) + "." + std::to_string(attempt);
            if (link_to(t)) tmp_ = t;
            else if (errno != EEXIST) break;
        }
        if (tmp_.empty() || ::renameat(dir_fd_, tmp_.c_str(), dir_fd_, name.c_str()) != 0) {
            int e = tmp_.empty() && errno == 0 ? EEXIST : errno;
            discard();
            errno = e;
            return false;
        }
        tmp_.clear();
        discard();
        return true;
    }

    // Gives the file the name `name` in its folder only where nothing is
    // (never replacing anything, never through a link), for a file that
    // must never be seen without its first bytes (a CSV's header): it stays
    // open, its descriptor the caller's with release(). false with errno
    // set (EEXIST: something is there), and then nothing of it stays.
    bool publish_new(const std::string& name) {
        bool ok = tmp_.empty() ? link_to(name) : ::linkat(dir_fd_, tmp_.c_str(), dir_fd_, name.c_str(), 0) == 0;
        int e = errno;
        if (!tmp_.empty()) ::unlinkat(dir_fd_, tmp_.c_str(), 0);
        tmp_.clear();
        if (!ok) {
            discard();
            errno = e;
            return false;
        }
        return true;
    }
    // The descriptor, now the caller's (after publish_new).
    int release() {
        int fd = fd_;
        fd_ = -1;
        tmp_.clear();
        return fd;
    }

    // Nothing of it stays (its name, if it has one, is removed).
    void discard() {
        int e = errno;
        if (!tmp_.empty()) ::unlinkat(dir_fd_, tmp_.c_str(), 0);
        tmp_.clear();
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
        errno = e;
    }

private:
    bool link_to(const std::string& t) {
        // AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; the /proc/self/fd link
        // is an ordinary user's way.
        if (::linkat(fd_, "", dir_fd_, t.c_str(), AT_EMPTY_PATH) == 0) return true;
        if (errno == EEXIST) return false;
        std::string proc = "/proc/self/fd/" + std::to_string(fd_);
        return ::linkat(AT_FDCWD, proc.c_str(), dir_fd_, t.c_str(), AT_SYMLINK_FOLLOW) == 0;
    }

    int dir_fd_ = -1, fd_ = -1;
    std::string tmp_;  // the file's temporary name, when it has one
};

}  // namespace msms
