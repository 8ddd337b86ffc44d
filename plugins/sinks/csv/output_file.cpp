#include "output_file.h"

#include <msmemscope/output_files.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <utility>

namespace fs = std::filesystem;

namespace msms {

OutputFile::OutputFile(int dir_fd, const std::string& rel, const std::string& shown, const char* header)
    : path_(shown), rel_(rel) {
    std::string why;
    fd_ = msmemscope::files::create(dir_fd, rel, why);
    if (fd_ < 0) throw std::runtime_error("cannot write " + shown + ": " + why);
    buf_.reserve(kBlock + (1 << 20));
    buf_ += header;
    buf_ += '\n';
    // The header reaches the file at once. It stays in the buffer: the
    // first direct write starts at offset 0.
    write_all(buf_.data(), buf_.size(), 0);
    int fl = ::fcntl(fd_, F_GETFL);
    if (fl >= 0 && ::fcntl(fd_, F_SETFL, fl | O_DIRECT) == 0) {
        void* p = nullptr;
        void* q = nullptr;
        if (::posix_memalign(&p, kAlign, kBlock) == 0 && ::posix_memalign(&q, kAlign, kBlock) == 0) {
            aligned_ = static_cast<char*>(p);
            spare_ = static_cast<char*>(q);
            direct_ = true;
        } else {
            std::free(p);
            ::fcntl(fd_, F_SETFL, fl);
        }
    }
    if (!direct_) {
        base_ += buf_.size();
        buf_.clear();
    }
}

OutputFile::~OutputFile() {
    close();
    std::free(aligned_);
    std::free(spare_);
}

bool OutputFile::maybe_flush() {
    if (!flush_due()) return false;
    flush(buf_.size() - hold_);
    return true;
}

void OutputFile::flush(size_t limit) {
    if (fd_ < 0 || buf_.empty()) return;
    limit = std::min(limit, buf_.size());
    if (direct_) {
        size_t whole = limit / kAlign * kAlign;
        size_t done = 0;
        while (direct_ && done < whole) {
            size_t n = std::min(whole - done, kBlock);
            // Copied while the block before is still being written (the
            // writer has the other buffer): the disk waits for no copy.
            std::memcpy(spare_, buf_.data() + done, n);
            wait_block();  // the block before: written (or gone on through the page cache)
            if (!direct_) break;
            submit_block(n, base_ + done);
            done += n;
        }
        base_ += done;
        buf_.erase(0, done);
        if (direct_) return;
        limit -= done;
    }
    wait_block();
    write_all(buf_.data(), limit, base_);
    base_ += limit;
    buf_.erase(0, limit);
}

void OutputFile::close() {
    if (fd_ < 0) return;
    try {
        if (direct_) {
            flush();
            wait_block();
            stop_direct();
        }
        flush();
    } catch (...) {
    }
    writer_.stop();
    ::close(fd_);
    fd_ = -1;
}

// Hands spare_ (n bytes for offset `at`) to the writer; the buffers swap.
void OutputFile::submit_block(size_t n, uint64_t at) {
    writer_.wait();
    std::swap(aligned_, spare_);
    ++blocks_;
    job_n_ = n;
    job_at_ = at;
    job_done_ = 0;
    job_errno_ = 0;
    writer_.submit([this] { write_block(); });
}

// Waits for the block in flight. A block the disk refused (EINVAL) or took
// short (the file-size limit) goes on through the page cache from where it
// stopped; any other error is thrown here.
void OutputFile::wait_block() {
    writer_.wait();
    if (job_n_ == 0) return;
    size_t n = std::exchange(job_n_, 0), done = job_done_;
    if (done == n) return;
    if (job_errno_ && job_errno_ != EINVAL)
        throw std::runtime_error("cannot write " + path_ + ": " + std::strerror(job_errno_));
    stop_direct();
    write_all(aligned_ + done, n - done, job_at_ + done);
}

// On the writer thread: the block, or as much as the disk takes.
void OutputFile::write_block() {
    while (job_done_ < job_n_) {
        ssize_t w = ::pwrite(fd_, aligned_ + job_done_, job_n_ - job_done_, static_cast<off_t>(job_at_ + job_done_));
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) job_errno_ = errno;
        if (w <= 0) return;
        job_done_ += static_cast<size_t>(w);
        if (job_done_ < job_n_) return;  // short: the rest through the page cache
    }
}

void OutputFile::stop_direct() {
    if (!direct_) return;
    direct_ = false;
    int fl = ::fcntl(fd_, F_GETFL);
    if (fl >= 0) ::fcntl(fd_, F_SETFL, fl & ~O_DIRECT);
}

void OutputFile::write_all(const char* p, size_t n, uint64_t at) {
    while (n) {
        ssize_t w = ::pwrite(fd_, p, n, static_cast<off_t>(at));
        if (w < 0) {
            if (errno == EINTR) continue;
            throw std::runtime_error("cannot write " + path_ + ": " + std::strerror(errno));
        }
        if (w == 0) throw std::runtime_error("cannot write " + path_ + ": " + std::strerror(ENOSPC));
        p += w;
        n -= static_cast<size_t>(w);
        at += static_cast<uint64_t>(w);
    }
}

}  // namespace msms
