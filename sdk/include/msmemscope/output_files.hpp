// Creating files in a run's folder without following links (issue #29 item 4).
//
// Every file msmemscope writes -- the host's and every plugin's -- is created
// O_CREAT|O_EXCL|O_NOFOLLOW relative to a directory descriptor, and every
// folder on the way is opened O_DIRECTORY|O_NOFOLLOW from the one above it
// (an openat chain). A folder swapped for a symbolic link after the run began,
// or a link planted at a file's name, is never written through: the call
// fails (ELOOP, ENOTDIR, EEXIST) instead.
//
// Plugins get the descriptor of their run's folder in msms_run_info
// (output_dir_fd, ABI 1.3; msmemscope::RunInfo::output_dir_fd). Typical use:
//
//     FILE* open_my_csv(int output_dir_fd) {  // msms_run_info.output_dir_fd
//         std::string err;
//         int fd = msmemscope::files::create(output_dir_fd, "device_0/dump/x.csv", err);
//         if (fd < 0) {
//             fprintf(stderr, "%s\n", err.c_str());  // err names the file and errno
//             return nullptr;
//         }
//         return fdopen(fd, "w");
//     }
//
// Header-only, POSIX; the host uses the same functions (framework/util).
#pragma once

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <string_view>

namespace msmemscope {
namespace files {

// An owned descriptor.
class Fd {
public:
    Fd() = default;
    explicit Fd(int fd) : fd_(fd) {}
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    Fd(Fd&& o) noexcept : fd_(o.release()) {}
    Fd& operator=(Fd&& o) noexcept {
        if (this != &o) reset(o.release());
        return *this;
    }
    ~Fd() { reset(); }
    int get() const { return fd_; }
    explicit operator bool() const { return fd_ >= 0; }
    int release() {
        int f = fd_;
        fd_ = -1;
        return f;
    }
    void reset(int fd = -1) {
        if (fd_ >= 0) ::close(fd_);
        fd_ = fd;
    }

private:
    int fd_ = -1;
};

namespace detail {
inline std::string shown(std::string_view rel) { return std::string(rel.empty() ? "." : rel); }
inline std::string why(std::string_view rel, int err) { return shown(rel) + ": " + std::strerror(err); }
}  // namespace detail

// Opens the folder `rel` below the folder `at` (AT_FDCWD: the working folder;
// an absolute `rel` starts at "/"), one component at a time, each opened
// O_DIRECTORY|O_NOFOLLOW from the one before; with `create`, missing folders
// are made (mode 0777, the umask applies). "" and "." give a new descriptor of
// `at` itself. Returns the descriptor (O_CLOEXEC) or -1 with `error` set to
// "<rel>: <strerror>" ("..." components are refused: EINVAL).
inline int open_dir(int at, std::string_view rel, bool create, std::string& error) {
    int cur;
    size_t pos = 0;
    if (!rel.empty() && rel[0] == '/') {
        cur = ::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        pos = 1;
    } else {
        cur = ::openat(at, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    }
    if (cur < 0) {
        error = detail::why(rel, errno);
        return -1;
    }
    while (pos < rel.size()) {
        size_t end = rel.find('/', pos);
        if (end == std::string_view::npos) end = rel.size();
        std::string part(rel.substr(pos, end - pos));
        pos = end + 1;
        if (part.empty() || part == ".") continue;
        if (part == "..") {
            ::close(cur);
            error = detail::why(rel, EINVAL);
            return -1;
        }
        if (create && ::mkdirat(cur, part.c_str(), 0777) != 0 && errno != EEXIST) {
            int e = errno;
            ::close(cur);
            error = detail::why(rel, e);
            return -1;
        }
        int next = ::openat(cur, part.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int e = errno;
        ::close(cur);
        if (next < 0) {
            // A link where a folder should be: say so plainly.
            error = detail::why(rel, e) + (e == ELOOP || e == ENOTDIR ? " (not a folder, or a symbolic link)" : "");
            return -1;
        }
        cur = next;
    }
    return cur;
}

// Creates the new file `rel` ("name" or "sub/folders/name": the folders are
// made as needed, through open_dir) below the folder `dir_fd`:
// O_WRONLY|O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC. A file or link already at
// that name is an error (EEXIST), never opened. Returns the descriptor or -1
// with `error` set.
inline int create(int dir_fd, std::string_view rel, std::string& error, mode_t mode = 0666) {
    size_t slash = rel.rfind('/');
    std::string_view parent = slash == std::string_view::npos ? std::string_view() : rel.substr(0, slash);
    std::string name(slash == std::string_view::npos ? rel : rel.substr(slash + 1));
    if (name.empty() || name == "." || name == "..") {
        error = detail::why(rel, EINVAL);
        return -1;
    }
    int dir = open_dir(dir_fd, parent, true, error);
    if (dir < 0) return -1;
    int fd = ::openat(dir, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    int e = errno;
    ::close(dir);
    if (fd < 0) {
        error = detail::why(rel, e) + (e == EEXIST ? " (created anew only; something is already there)" : "");
        return -1;
    }
    return fd;
}

// create(), as a stdio stream opened "w" (NULL and `error` on failure).
inline FILE* create_stream(int dir_fd, std::string_view rel, std::string& error, mode_t mode = 0666) {
    int fd = create(dir_fd, rel, error, mode);
    if (fd < 0) return nullptr;
    FILE* f = ::fdopen(fd, "w");
    if (!f) {
        error = detail::why(rel, errno);
        ::close(fd);
    }
    return f;
}

// Writes all of `text` to `fd`; false (errno set) on a short write.
inline bool write_all(int fd, std::string_view text) {
    size_t off = 0;
    while (off < text.size()) {
        ssize_t n = ::write(fd, text.data() + off, text.size() - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            if (n == 0) errno = EIO;
            return false;
        }
        off += static_cast<size_t>(n);
    }
    return true;
}

// A new file `rel` holding `text` (create(), then written and closed).
inline bool write_new(int dir_fd, std::string_view rel, std::string_view text, std::string& error,
                      mode_t mode = 0666) {
    int fd = create(dir_fd, rel, error, mode);
    if (fd < 0) return false;
    bool ok = write_all(fd, text);
    int e = errno;
    if (::close(fd) != 0 && ok) {
        ok = false;
        e = errno;
    }
    if (!ok) error = detail::why(rel, e);
    return ok;
}

// Replaces `name` (a plain name in the folder `dir_fd`) with `text`: a new
// file `name`.tmp.<pid> created as above, then renamed over `name` (a link
// at `name` is replaced, never followed). For a file the tool rewrites
// (index.html, a patched CSV).
inline bool replace(int dir_fd, const std::string& name, std::string_view text, std::string& error,
                    mode_t mode = 0666) {
    std::string tmp = name + ".tmp." + std::to_string(::getpid());
    ::unlinkat(dir_fd, tmp.c_str(), 0);  // our own leftover (same pid: an earlier attempt)
    if (!write_new(dir_fd, tmp, text, error, mode)) {
        ::unlinkat(dir_fd, tmp.c_str(), 0);
        return false;
    }
    if (::renameat(dir_fd, tmp.c_str(), dir_fd, name.c_str()) != 0) {
        error = detail::why(name, errno);
        ::unlinkat(dir_fd, tmp.c_str(), 0);
        return false;
    }
    return true;
}

// True when `name` in `parent_fd` is still the folder `dir_fd` (same device
// and inode, and not a link): a run's folder swapped for a link or another
// folder during the run is told apart from the one the run writes into.
inline bool still_there(int parent_fd, const std::string& name, int dir_fd) {
    struct stat a, b;
    if (::fstat(dir_fd, &a) != 0) return false;
    if (::fstatat(parent_fd, name.c_str(), &b, AT_SYMLINK_NOFOLLOW) != 0) return false;
    return S_ISDIR(b.st_mode) && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

}  // namespace files
}  // namespace msmemscope
