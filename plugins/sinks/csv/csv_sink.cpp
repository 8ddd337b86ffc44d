// Sink `csv`: memscope_dump_{ts}.csv per device (COMPAT §3, §4) and the
// python_trace CSV (§5). Rows arrive in time order and are written as they
// come, through a large buffer. Attr changes that analyzers make later
// (annotations, e.g. inefficient) are applied in one pass at the end.
#include <msmemscope/plugin.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>
#include <unordered_map>

#include "dump_row.h"
#include "util/csv.h"
#include "util/job_thread.h"
#include "util/text.h"
#include "util/written_events.h"

namespace fs = std::filesystem;

namespace {

using msmemscope::view;

// One output file, written through a large buffer. The rows of a run with
// call stacks are gigabytes: written through the page cache, the kernel's
// copying and page bookkeeping cost more CPU than building the rows (2.4 GB:
// ~3.5 s of system time on the 2-vCPU VM of bench/README.md, against ~0.5 s
// with O_DIRECT). So whole blocks go to the disk directly (O_DIRECT, from an
// aligned copy), the last partial block through the page cache at close.
// Where O_DIRECT is refused (tmpfs, some network file systems) or a write
// comes back short (file-size limit), the file goes on through the page cache.
// The direct writes run on a writer thread, one 8 MiB block at a time, while
// the sink builds the next rows (double buffered): on the c:32 workload of
// bench/README.md the disk's ~0.8 GB/s took ~3 s of a 5.5 s run, one after
// the other with the rows' ~1.6 s of CPU.
class File {
public:
    File(const std::string& path, const char* header) : path_(path) {
        std::error_code ec;
        fs::create_directories(fs::path(path).parent_path(), ec);
        fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
        if (fd_ < 0) throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
        buf_.reserve(kFlushAt + (1 << 20));
        buf_ += header;
        buf_ += '\n';
        // The header reaches the disk at once: a host killed later (SIGKILL)
        // leaves a readable file with what it had flushed, never a 0-byte one.
        // It stays in the buffer: the first direct write starts at offset 0.
        write_all(buf_.data(), buf_.size(), 0);
        int fl = ::fcntl(fd_, F_GETFL);
        if (fl >= 0 && ::fcntl(fd_, F_SETFL, fl | O_DIRECT) == 0) {
            void* p = nullptr;
            void* q = nullptr;
            if (::posix_memalign(&p, kAlign, kFlushAt + kAlign) == 0 && ::posix_memalign(&q, kAlign, kFlushAt + kAlign) == 0) {
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
    ~File() {
        close();
        std::free(aligned_);
        std::free(spare_);
    }
    std::string& buffer() { return buf_; }
    // True when it wrote (the progress line is told then).
    bool maybe_flush() {
        if (buf_.size() < kFlushAt) return false;
        flush();
        return true;
    }
    // Bytes in the file so far, and once what is buffered is written too.
    uint64_t written() const { return base_; }
    uint64_t pending() const { return buf_.size(); }
    // Writes what the buffer holds: whole blocks (direct), or everything.
    void flush() {
        if (fd_ < 0 || buf_.empty()) return;
        if (direct_) {
            size_t whole = buf_.size() / kAlign * kAlign;
            size_t done = 0;
            while (direct_ && done < whole) {
                size_t n = std::min(whole - done, static_cast<size_t>(kFlushAt));
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
        }
        wait_block();
        write_all(buf_.data(), buf_.size(), base_);
        base_ += buf_.size();
        buf_.clear();
    }
    void close() {
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
    const std::string& path() const { return path_; }

private:
    static constexpr size_t kFlushAt = 8 << 20;
    static constexpr size_t kAlign = 4096;
    // ---- the direct writer thread (writer_): at most one block in flight.
    // Hands spare_ (n bytes for offset `at`) to the writer; the buffers swap.
    void submit_block(size_t n, uint64_t at) {
        writer_.wait();
        std::swap(aligned_, spare_);
        job_n_ = n;
        job_at_ = at;
        job_done_ = 0;
        job_errno_ = 0;
        writer_.submit([this] { write_block(); });
    }
    // Waits for the block in flight. A block the disk refused (EINVAL) or
    // took short (the file-size limit) goes on through the page cache from
    // where it stopped; any other error is thrown here.
    void wait_block() {
        writer_.wait();
        if (job_n_ == 0) return;
        size_t n = job_n_, done = job_done_;
        job_n_ = 0;
        if (done == n) return;
        if (job_errno_ && job_errno_ != EINVAL)
            throw std::runtime_error("cannot write " + path_ + ": " + std::strerror(job_errno_));
        stop_direct();
        write_all(aligned_ + done, n - done, job_at_ + done);
    }
    // On the writer thread: the block, or as much as the disk takes.
    void write_block() {
        while (job_done_ < job_n_) {
            ssize_t w = ::pwrite(fd_, aligned_ + job_done_, job_n_ - job_done_, static_cast<off_t>(job_at_ + job_done_));
            if (w < 0 && errno == EINTR) continue;
            if (w < 0) job_errno_ = errno;
            if (w <= 0) return;
            job_done_ += static_cast<size_t>(w);
            if (job_done_ < job_n_) return;  // short: the rest through the page cache
        }
    }
    void stop_direct() {
        if (!direct_) return;
        direct_ = false;
        int fl = ::fcntl(fd_, F_GETFL);
        if (fl >= 0) ::fcntl(fd_, F_SETFL, fl & ~O_DIRECT);
    }
    void write_all(const char* p, size_t n, uint64_t at) {
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
    std::string path_;
    int fd_ = -1;
    bool direct_ = false;
    char* aligned_ = nullptr;  // the block in flight (the writer's)
    char* spare_ = nullptr;    // the next block
    uint64_t base_ = 0;  // file offset of buf_[0]
    std::string buf_;
    // The block in flight (set before it is handed over, read after wait()).
    size_t job_n_ = 0, job_done_ = 0;
    uint64_t job_at_ = 0;
    int job_errno_ = 0;
    msms::JobThread writer_;  // last: stopped first
};

class CsvSink : public msmemscope::ISink {
public:
    static constexpr const char* kTypeName = "csv";
    static constexpr const char* kVersion = "1.0.0";
    static constexpr const char* kDescription =
        "memscope_dump_{ts}.csv per device and python_trace CSV, compatible with msMemScope";

    CsvSink(msmemscope::Host host, const msmemscope::Options& opts)
        : host_(host), written_(msms::WrittenEvents::from_option(opts.get("write_events", "all"))) {}

    static const msms_option_spec* options(uint32_t& count) {
        static const msms_option_spec specs[] = {msms::WrittenEvents::kOptionSpec};
        count = 1;
        return specs;
    }

    void begin(const msmemscope::RunInfo& run) override {
        dir_ = run.output_dir;
        ts_ = run.timestamp;
    }

    void on_event(const msms_event& ev) override {
        if (!written_.wants(ev)) return;  // --events is what is written (frees still reach the analyzers)
        if (ev.kind == MSMS_EV_PY_TRACE) {
            if (!trace_) {
                std::string dev = first_device_.empty() ? "cpu" : first_device_;
                trace_ = std::make_unique<File>(dir_ + "/device_" + dev + "/dump/python_trace_" + ts_ + ".csv",
                                                msms::kPythonTraceHeader);
            }
            trace_rows_.append(trace_->buffer(), ev);
            if (trace_->maybe_flush()) progress();
            return;
        }
        if (ev.device_kind == MSMS_DEV_NA) {
            // A row without a device (SYSTEM, MSTX, steps...) goes into every
            // device's file with that file's Device Id, as upstream writes the
            // device current on the thread; files of devices seen later get
            // the earlier ones first.
            std::string head, tail;
            msms::append_dump_row_head(head, ev);
            msms::append_dump_row_tail(tail, ev);
            bool wrote = false;
            for (auto& [dev, f] : files_) {
                f->buffer() += head;
                f->buffer() += dev;
                f->buffer() += tail;
                wrote |= f->maybe_flush();
            }
            if (wrote) progress();
            if (history_.size() < kMaxHistory) {
                history_.emplace_back(std::move(head), std::move(tail));
            } else if (!history_full_) {
                history_full_ = true;
                host_.warn("csv: more than " + std::to_string(kMaxHistory) +
                           " rows without a device; the files of devices first seen from now on miss the earlier ones");
            }
            if (files_.empty() && history_.size() >= kMaxHistory) open("cpu");
            return;
        }
        File& f = open(msmemscope::device_label(ev));
        msms::append_dump_row(f.buffer(), ev);
        if (f.maybe_flush()) progress();
    }

    void on_annotation(uint64_t id, std::string_view key, std::string_view value) override {
        patches_[id].emplace_back(std::string(key), std::string(value));
    }

    void finish() override {
        if (files_.empty()) open("cpu");  // an empty run still leaves a valid file
        uint64_t total = 0;
        for_each_file([&](File& f) { total += f.written() + f.pending(); });
        progress(total);
        for (auto& [dev, f] : files_) f->close();
        if (trace_) trace_->close();
        if (!patches_.empty()) {
            // Analyzers' later Attr changes: every dump file is read and written again.
            uint64_t rewrite = 0, done = 0;
            for (auto& [dev, f] : files_) rewrite += file_size(f->path());
            for (auto& [dev, f] : files_) apply_patches(f->path(), done, rewrite);
        }
        // The end: the files' final sizes.
        uint64_t final_size = 0;
        for_each_file([&](File& f) { final_size += file_size(f.path()); });
        host_.progress(final_size, final_size);
    }

private:
    static constexpr size_t kMaxHistory = 100000;
    static constexpr uint64_t kReportEvery = 8 << 20;
    uint64_t reported_ = 0;

    File& open(const std::string& dev) {
        auto it = files_.find(dev);
        if (it != files_.end()) return *it->second;
        auto f = std::make_unique<File>(dir_ + "/device_" + dev + "/dump/memscope_dump_" + ts_ + ".csv", msms::kDumpHeader);
        if (first_device_.empty()) first_device_ = dev;
        for (auto& [head, tail] : history_) {
            f->buffer() += head;
            f->buffer() += dev;
            f->buffer() += tail;
            f->maybe_flush();
        }
        return *files_.emplace(dev, std::move(f)).first->second;
    }

    template <class F>
    void for_each_file(F f) {
        for (auto& [dev, file] : files_) f(*file);
        if (trace_) f(*trace_);
    }
    // Bytes written so far, for the status line (ABI 1.2 progress).
    void progress(uint64_t total = 0) {
        uint64_t done = 0;
        for_each_file([&](File& f) { done += f.written(); });
        host_.progress(done, total);
    }
    static uint64_t file_size(const std::string& path) {
        struct stat st;
        return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
    }

    static bool is_memory_event(const std::string& e) { return e == "MALLOC" || e == "FREE" || e == "ACCESS"; }

    // done/total: bytes rewritten over every file, for the status line.
    void apply_patches(const std::string& path, uint64_t& done, uint64_t total) {
        std::FILE* in = std::fopen(path.c_str(), "r");
        if (!in) throw std::runtime_error("cannot reread " + path);
        std::string tmp = path + ".tmp";
        std::FILE* out = std::fopen(tmp.c_str(), "w");
        if (!out) {
            std::fclose(in);
            throw std::runtime_error("cannot write " + tmp);
        }
        msms::CsvReader reader(in);
        std::vector<std::string> fields;
        std::string line;
        bool header = true;
        while (reader.next(fields)) {
            line = reader.raw();
            if (!header && fields.size() == 12) {
                unsigned long long id = 0;
                auto it = msms::parse_uint(fields[0], id) ? patches_.find(id) : patches_.end();
                if (it != patches_.end()) {
                    auto attrs = msms::parse_attr_list(fields[9]);
                    for (auto& [k, v] : it->second) {
                        bool set = false;
                        for (auto& a : attrs)
                            if (a.first == k) {
                                a.second = v;
                                set = true;
                            }
                        if (!set) attrs.emplace_back(k, v);
                    }
                    if (is_memory_event(fields[1])) msms::order_memory_attrs(attrs);
                    fields[9] = msms::render_attr(attrs);
                    line.clear();
                    for (size_t i = 0; i < fields.size(); ++i) {
                        if (i) line += ',';
                        msms::csv_field(line, fields[i], i >= 9 && !fields[i].empty());
                    }
                }
            }
            header = false;
            line += '\n';
            std::fwrite(line.data(), 1, line.size(), out);
            done += reader.raw().size() + 1;
            if (done - reported_ >= kReportEvery) {
                reported_ = done;
                host_.progress(std::min(done, total), total, "updating csv");
            }
        }
        std::fclose(in);
        if (std::fclose(out) != 0) throw std::runtime_error("cannot write " + tmp);
        std::rename(tmp.c_str(), path.c_str());
    }

    msmemscope::Host host_;
    msms::WrittenEvents written_;
    std::string dir_, ts_, first_device_;
    std::map<std::string, std::unique_ptr<File>> files_;
    std::unique_ptr<File> trace_;
    msms::PythonTraceRowWriter trace_rows_;
    // Rows without a device so far, before and after their Device Id.
    std::vector<std::pair<std::string, std::string>> history_;
    bool history_full_ = false;
    std::unordered_map<uint64_t, std::vector<std::pair<std::string, std::string>>> patches_;
};

}  // namespace

MSMEMSCOPE_PLUGIN(CsvSink)
