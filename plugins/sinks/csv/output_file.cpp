#include "output_file.h"

#include <msmemscope/output_files.hpp>

#include "util/unnamed_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <utility>
#include <vector>

namespace fs = std::filesystem;

namespace msms {

OutputFile::OutputFile(int dir_fd, const std::string& rel, const std::string& shown, const char* header)
    : path_(shown), rel_(rel) {
    buf_.reserve(kBlock + kSlack);
    buf_ += header;
    buf_ += '\n';
    // The file gets its name with its header in it: a host killed in
    // between (SIGKILL as the first rows arrive) left a 0-byte CSV, which
    // upstream's checkers and readers refuse. The header stays in the
    // buffer: the first direct write starts at offset 0.
    std::string why;
    size_t slash = rel.rfind('/');
    std::string name = slash == std::string::npos ? rel : rel.substr(slash + 1);
    int dir = msmemscope::files::open_dir(dir_fd, slash == std::string::npos ? std::string() : rel.substr(0, slash),
                                          true, why);
    if (dir < 0) throw std::runtime_error("cannot write " + shown + ": " + why);
    UnnamedFile f;
    fd_ = f.open(dir, name, 0666);  // the mode create() gives (umask applies)
    int e = errno;
    if (fd_ >= 0) {
        try {
            write_all(buf_.data(), buf_.size(), 0);
        } catch (...) {
            ::close(dir);
            throw;  // (f discards the file)
        }
        if (f.publish_new(name)) fd_ = f.release();
        else fd_ = -1, e = errno;
    }
    ::close(dir);
    if (fd_ < 0) {
        throw std::runtime_error("cannot write " + shown + ": " + msmemscope::files::detail::why(rel, e) +
                                 (e == EEXIST ? " (created anew only; something is already there)" : ""));
    }
    int fl = ::fcntl(fd_, F_GETFL);
    if (fl >= 0 && ::fcntl(fd_, F_SETFL, fl | O_DIRECT) == 0) {
        void* p = nullptr;
        void* q = nullptr;
        if (::posix_memalign(&p, kHugeAlign, kBlock) == 0 && ::posix_memalign(&q, kHugeAlign, kBlock) == 0) {
            // Whole huge pages where the kernel has them (transparent huge
            // pages are often `madvise` only): a direct write pins its
            // buffer's pages and its completion unpins them, in the
            // interrupt of whichever CPU takes the disk's -- often the
            // program's. Small pages (at best, with the host's
            // glibc.malloc.hugetlb, the 2 MiB stretches an unaligned
            // mapping happens to cover) put that work on a PyTorch loop
            // beside it (bench/README.md, "Direct writes from whole huge
            // pages"). Refused: small pages, as before.
            ::madvise(p, kBlock, MADV_HUGEPAGE);
            ::madvise(q, kBlock, MADV_HUGEPAGE);
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

void OutputFile::set_hold(size_t bytes) {
    hold_ = bytes;
    if (buf_.capacity() < room()) buf_.reserve(room());
}

bool OutputFile::maybe_flush() {
    if (!flush_due()) return false;
    flush(buf_.size() - hold_);
    return true;
}

namespace {

// The bytes to write: the buffer's, with some ranges changed -- read in
// order, piece after piece, without building them in one place.
class Pieces {
public:
    Pieces(const std::string& buf, size_t from, size_t cut, const OutputFile::Patch* p, size_t count) {
        size_t at = from;
        for (size_t i = 0; i < count; ++i) {
            if (p[i].begin < at || p[i].end < p[i].begin || p[i].end > cut)
                throw std::logic_error("output file: a change outside the part written, or out of order");
            add(buf.data() + at, p[i].begin - at);
            add(p[i].text.data(), p[i].text.size());
            at = p[i].end;
        }
        add(buf.data() + at, cut - at);
    }
    uint64_t size() const { return size_; }
    // The next n bytes (n <= what is left) into dst.
    void take(char* dst, size_t n) {
        while (n) {
            auto& [p, len] = parts_[i_];
            size_t k = std::min(n, len - off_);
            std::memcpy(dst, p + off_, k);
            dst += k;
            n -= k;
            off_ += k;
            if (off_ == len) ++i_, off_ = 0;
        }
    }
    // The rest, piece by piece.
    template <class F>
    void rest(F f) {
        for (; i_ < parts_.size(); ++i_, off_ = 0) f(parts_[i_].first + off_, parts_[i_].second - off_);
    }

private:
    void add(const char* p, size_t n) {
        if (n) parts_.emplace_back(p, n), size_ += n;
    }
    std::vector<std::pair<const char*, size_t>> parts_;
    size_t i_ = 0, off_ = 0;
    uint64_t size_ = 0;
};

}  // namespace

void OutputFile::flush(size_t cut, const Patch* patches, size_t count) {
    if (fd_ < 0) return;
    cut = std::min(cut, buf_.size());
    if (cut <= head_ && !count) return;
    Pieces src(buf_, head_, std::max(cut, head_), patches, count);
    const uint64_t total = src.size();
    uint64_t done = 0;
    if (direct_) {
        uint64_t whole = total / kAlign * kAlign;
        // A block short of kBlock is written only when no row follows it
        // in the buffer: otherwise it waits to be filled, as writing it
        // would wait for the block in flight first, and the disk would then
        // stand idle while the next rows are built (a flush of two blocks
        // and a bit cost the c:32 CSV benchmark 35 % of its wall time).
        const bool rows_follow = cut < buf_.size();
        while (direct_ && done < whole) {
            size_t n = static_cast<size_t>(std::min<uint64_t>(whole - done, kBlock));
            if (n < kBlock && rows_follow) break;
            // Copied while the block before is still being written (the
            // writer has the other buffer): the disk waits for no copy.
            src.take(spare_, n);
            wait_block();  // the block before: written (or gone on through the page cache)
            if (!direct_) {
                write_all(spare_, n, base_ + done);
                done += n;
                break;
            }
            submit_block(n, base_ + done);
            done += n;
        }
        if (direct_) {
            // The partial block waits in the buffer, just before `cut`.
            std::string tail(static_cast<size_t>(total - done), '\0');
            src.take(tail.data(), tail.size());
            if (tail.size() <= cut - head_) {
                std::memmove(&buf_[cut - tail.size()], tail.data(), tail.size());
                head_ = cut - tail.size();
            } else {
                buf_.replace(head_, cut - head_, tail);  // a few changed rows made it longer than their place
            }
            base_ += done;
            compact();
            return;
        }
    }
    wait_block();
    uint64_t at = base_ + done;
    src.rest([&](const char* p, size_t n) {
        write_all(p, n, at);
        at += n;
    });
    base_ += total;
    head_ = std::max(cut, head_);
    compact();
}

// The written part is dropped (the rest moves to the front) when the room
// left would not take the rows until the next flush without the string
// growing (a new, larger copy), or when there is little to move.
void OutputFile::compact() {
    if (!head_) return;
    size_t left = buf_.capacity() - buf_.size();
    size_t to_come = due() > pending() ? due() - pending() : 0;
    if (left < to_come + kSlack || pending() <= head_ / 8) {
        buf_.erase(0, head_);
        head_ = 0;
    }
    if (buf_.capacity() > 2 * room() && pending() < room()) {
        // A hold given up (set_hold(0)): its room goes back. The c:32 CSV
        // benchmark, whose hold is given up after 64 MiB, took ~1.1x the
        // time of a build that never held while the 33 MiB stayed (more
        // system time: fresh huge pages zeroed), ~1.04x once they went.
        std::string smaller;
        smaller.reserve(room());
        smaller.append(buf_, head_, std::string::npos);
        buf_.swap(smaller);
        head_ = 0;
    }
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
