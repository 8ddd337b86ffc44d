// The host's side of "every file is created O_EXCL|O_NOFOLLOW relative to a
// folder descriptor opened without following links" (issue #29 item 4): the
// --output folder is opened once (its real path, then one component at a
// time with O_NOFOLLOW), each process folder is made and opened below it, and
// everything in it is created through msmemscope/output_files.hpp (the SDK's
// helper, which plugins use too: they get the folder's descriptor in
// msms_run_info.output_dir_fd). Header-only.
#pragma once

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <string>

#include <msmemscope/output_files.hpp>
#include <spdlog/sinks/base_sink.h>

namespace msms {

namespace files = msmemscope::files;

using Fd = msmemscope::files::Fd;

// Opens an existing output folder: links in the path as given are the
// user's own choice and are resolved once (realpath); the resolved path is
// then opened component by component without following links, so that a
// component swapped for a link meanwhile is refused, not followed.
inline Fd open_output_root(const std::string& path, std::string& error) {
    char real[PATH_MAX];
    if (!::realpath(path.empty() ? "." : path.c_str(), real)) {
        error = path + ": " + std::strerror(errno);
        return Fd();
    }
    std::string why;
    int fd = files::open_dir(AT_FDCWD, real, false, why);
    if (fd < 0) error = path + ": " + why;
    return Fd(fd);
}

// The folder `sub` (e.g. "compare") of the output folder `output`: `output`
// is made when missing (the user named it), `sub` is made or opened below
// it without following a link (a link planted at `sub` is refused, ELOOP or
// ENOTDIR, never written through). `error`: "<sub>: why" (or "<output>: why").
// Makes the output folder the user named, and its parents, when it is
// missing (as they gave them: their links are theirs). True when it was made.
inline bool make_output_folder(const std::string& output) {
    struct stat st;
    if (::stat(output.c_str(), &st) == 0) return false;
    std::string path;
    for (size_t pos = 0; pos != std::string::npos;) {
        pos = output.find('/', pos + 1);
        path = output.substr(0, pos);
        if (!path.empty()) ::mkdir(path.c_str(), 0777);
    }
    return ::stat(output.c_str(), &st) == 0;
}

inline Fd open_output_subdir(const std::string& output, const std::string& sub, std::string& error) {
    std::string why;
    make_output_folder(output);
    Fd root = open_output_root(output, why);
    if (!root) {
        error = why;
        return Fd();
    }
    Fd dir(files::open_dir(root.get(), sub, true, why));
    if (!dir) error = why;
    return dir;
}

// Makes a fresh folder `name` in `parent` (never one that was there: else
// name_2, name_3, ... up to 99 variants) and opens it without following
// links. Returns the descriptor and the name used, or an invalid Fd with
// `error` set (in the words of make_fresh_dir).
inline Fd make_fresh_dir_at(int parent, const std::string& shown_parent, const std::string& name,
                            std::string& used, std::string& error) {
    constexpr int kVariants = 100;
    for (int n = 1; n <= kVariants; ++n) {
        std::string p = n == 1 ? name : name + "_" + std::to_string(n);
        if (::mkdirat(parent, p.c_str(), 0777) == 0) {  // the umask applies (main keeps o+w out of it)
            int fd = ::openat(parent, p.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (fd < 0) {
                error = shown_parent + "/" + p + ": cannot open the output folder just made: " + std::strerror(errno);
                return Fd();
            }
            used = p;
            return Fd(fd);
        }
        if (errno != EEXIST) {
            error = shown_parent + "/" + p + ": cannot create the output folder: " + std::strerror(errno);
            return Fd();
        }
    }
    error = shown_parent + "/" + name + ": cannot create the output folder: it and " + std::to_string(kVariants - 1) +
            " numbered variants (_2, _3, ...) exist";
    return Fd();
}

// Renames the folder `from` in `parent` -- the folder open as `dir_fd`, and
// only it: a link or another folder put at `from` is never moved -- to a
// fresh name: `name`, else name_2, name_3, ... (make_fresh_dir_at's
// variants), never over an entry that is there (renameat2 RENAME_NOREPLACE;
// on a filesystem without it, e.g. NFS, an empty folder made for the
// purpose under that name is what the rename replaces). Returns the name
// used, or "" with `error` set (`from` then keeps its name).
inline std::string rename_fresh_at(int parent, const std::string& from, const std::string& name, int dir_fd,
                                   std::string& error) {
    constexpr int kVariants = 100;
    for (int n = 1; n <= kVariants; ++n) {
        std::string p = n == 1 ? name : name + "_" + std::to_string(n);
        if (!files::still_there(parent, from, dir_fd)) {
            error = from + ": not this run's folder any more (replaced, or moved)";
            return "";
        }
        int rc = ::renameat2(parent, from.c_str(), parent, p.c_str(), RENAME_NOREPLACE);
        if (rc != 0 && (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP)) {
            // No RENAME_NOREPLACE here: reserve the name with a folder of
            // our own (mkdir never replaces), then rename over that empty
            // folder (a rename replaces only an empty folder).
            if (::mkdirat(parent, p.c_str(), 0700) != 0) {
                if (errno == EEXIST) continue;
                error = p + ": " + std::strerror(errno);
                return "";
            }
            rc = ::renameat(parent, from.c_str(), parent, p.c_str());
            if (rc != 0) {
                int e = errno;
                ::unlinkat(parent, p.c_str(), AT_REMOVEDIR);  // ours, still empty (else it stays: not ours)
                errno = e;
            }
        }
        if (rc == 0) {
            if (files::still_there(parent, p, dir_fd)) return p;
            // Something else was put at `from` between the check and the
            // rename: it goes back (where that needs no replacing); this
            // run's folder is not where it was.
            ::renameat2(parent, p.c_str(), parent, from.c_str(), RENAME_NOREPLACE);
            error = from + ": not this run's folder any more (replaced during the rename)";
            return "";
        }
        if (errno == EEXIST || errno == ENOTEMPTY) continue;
        error = p + ": " + std::strerror(errno);
        return "";
    }
    error = name + ": it and " + std::to_string(kVariants - 1) + " numbered variants (_2, _3, ...) exist";
    return "";
}

// A log written to a descriptor (a file created by files::create): spdlog's
// own file sinks open by path.
class FdLogSink : public spdlog::sinks::base_sink<std::mutex> {
public:
    explicit FdLogSink(int fd) : fd_(fd) {}

protected:
    void sink_it_(const spdlog::details::log_msg& msg) override {
        spdlog::memory_buf_t buf;
        formatter_->format(msg, buf);
        if (!files::write_all(fd_.get(), std::string_view(buf.data(), buf.size())))
            throw spdlog::spdlog_ex("cannot write the log file", errno);
    }
    void flush_() override {}

private:
    Fd fd_;
};

}  // namespace msms
