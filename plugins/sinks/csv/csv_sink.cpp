// Sink `csv`: memscope_dump_{ts}.csv per device (COMPAT §3, §4) and the
// python_trace CSV (§5). Rows arrive in time order and are written as they
// come, through a large buffer. Attr changes that analyzers make later
// (annotations, e.g. inefficient, decompose's owners) go into the rows while
// they are still in the buffer: the last hold_mib MiB of each file stay
// there (OutputFile::set_hold; given up while no analyzer changes any), and
// the annotated rows among them are rewritten in memory before a block is
// written. Changes to rows already written are applied at the end: the
// sink keeps where every 32nd row of a file starts, finds each such row
// from there, and the file is written again with the kernel copying the
// rows between them (copy_file_range), only the annotated rows parsed
// (issue #30: the rewrite of a 669 MB dump was ~30% of the host's CPU for a
// PyTorch training loop, whose owner tags mostly come soon after the
// allocation).
#include <msmemscope/plugin.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>
#include <unordered_map>

#include "dump_row.h"
#include "output_file.h"
#include "util/csv.h"
#include "util/text.h"
#include "util/unnamed_file.h"
#include "util/written_events.h"

namespace fs = std::filesystem;

namespace {

using msmemscope::view;

using File = msms::OutputFile;

class CsvSink : public msmemscope::ISink {
public:
    static constexpr const char* kTypeName = "csv";
    static constexpr const char* kVersion = "1.0.0";
    static constexpr const char* kDescription =
        "memscope_dump_{ts}.csv per device and python_trace CSV, compatible with msMemScope";

    CsvSink(msmemscope::Host host, const msmemscope::Options& opts)
        : host_(host),
          written_(msms::WrittenEvents::from_option(opts.get("write_events", "all"))),
          hold_(static_cast<size_t>(opts.get_int("hold_mib", 16)) << 20) {}

    static const msms_option_spec* options(uint32_t& count) {
        static const msms_option_spec specs[] = {
            msms::WrittenEvents::kOptionSpec,
            {"hold_mib", MSMS_OPT_INT, "16", nullptr, 0, 4096,
             "MiB of each dump file kept in memory after its rows are built, so that analyzers' later Attr changes "
             "(owners) go in without rewriting the file (given up when a file's first 4x as many MiB bring no change, "
             "taken up again at the next one); 0: every change rewrites the file at the end"}};
        count = 2;
        return specs;
    }

    void begin(const msmemscope::RunInfo& run) override {
        dir_ = run.output_dir;
        ts_ = run.timestamp;
        // Every file is created relative to the run folder's descriptor
        // (issue #29 item 4).
        std::string why;
        dir_fd_.reset(run.open_output_dir(why));
        if (!dir_fd_) throw std::runtime_error("cannot open the run folder " + why);
    }

    void on_event(const msms_event& ev) override {
        if (!written_.wants(ev)) return;  // --events is what is written (frees still reach the analyzers)
        if (ev.kind == MSMS_EV_PY_TRACE) {
            if (!trace_) {
                std::string dev = first_device_.empty() ? "cpu" : first_device_;
                std::string rel = "device_" + dev + "/dump/python_trace_" + ts_ + ".csv";
                trace_ = std::make_unique<File>(dir_fd_.get(), rel, dir_ + "/" + rel, msms::kPythonTraceHeader);
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
            for (auto& [dev, f] : files_) {
                note_row(*f, ev.id);
                f->buffer() += head;
                f->buffer() += dev;
                f->buffer() += tail;
                after_row(*f);
            }
            if (history_.size() < kMaxHistory) {
                history_.emplace_back(std::move(head), std::move(tail));
                history_ids_.push_back(ev.id);
            } else if (!history_full_) {
                history_full_ = true;
                host_.warn("csv: more than " + std::to_string(kMaxHistory) +
                           " rows without a device; the files of devices first seen from now on miss the earlier ones");
            }
            if (files_.empty() && history_.size() >= kMaxHistory) open("cpu");
            return;
        }
        File& f = open(msmemscope::device_label(ev));
        note_row(f, ev.id);
        msms::append_dump_row(f.buffer(), ev);
        after_row(f);
    }

    void on_annotation(uint64_t id, std::string_view key, std::string_view value) override {
        changed_ = true;
        if (!holding_ && hold_) {
            // Rows were given up on (below, after_row): held again from now on.
            holding_ = true;
            for (auto& [dev, f] : files_) f->set_hold(hold_);
        }
        auto& list = patches_[id];
        if (list.empty()) fresh_.push_back(id);
        list.emplace_back(std::string(key), std::string(value));
    }

    void finish() override {
        if (files_.empty()) open("cpu");  // an empty run still leaves a valid file
        uint64_t total = 0;
        for_each_file([&](File& f) { total += f.written() + f.pending(); });
        progress(total);
        // What is still buffered gets its changes in memory.
        for (auto& [dev, f] : files_) write_out(*f, SIZE_MAX);
        for (auto& [dev, f] : files_) f->close();
        if (trace_) trace_->close();
        if (patched_in_memory_ || !patches_.empty())
            host_.info("csv: " + std::to_string(patched_in_memory_) + " row(s) got analyzers' Attr changes in memory, " +
                       std::to_string(patches_.size()) + " after they were written (the files are rewritten for those)");
        if (!patches_.empty()) {
            // Analyzers' later Attr changes: every dump file is read and written again.
            uint64_t rewrite = 0, done = 0;
            for (auto& [dev, f] : files_) rewrite += file_size(f->path());
            for (auto& [dev, f] : files_) {
                RowIndex& ix = index_[f.get()];
                if (ix.ordered) apply_patches_indexed(*f, ix, done, rewrite);
                else apply_patches(*f, done, rewrite);
            }
        }
        // The end: the files' final sizes.
        uint64_t final_size = 0;
        for_each_file([&](File& f) { final_size += file_size(f.path()); });
        host_.progress(final_size, final_size);
    }

private:
    static constexpr size_t kMaxHistory = 100000;

    // Writes f's oldest rows once it holds enough, after the annotated rows
    // among them got their changes. True when it wrote.
    bool flush(File& f) {
        if (!f.flush_due()) return false;
        write_out(f, f.buffer().size() - f.hold());
        return true;
    }

    // Where row `id` is in f's buffer: [start, end) (indices in the buffer),
    // or false when it is not there (written already, even in part, or in
    // another file). Every row not yet written has its offset noted
    // (note_row): a row just after a written one is found as surely as any
    // (with only every 32nd row's offset, the rows of a group whose first
    // row was written were lost to the rewrite at the end).
    bool locate(File& f, uint64_t id, uint64_t& start, uint64_t& end) {
        RowIndex& ix = index_[&f];
        if (!ix.ordered) return false;
        // file offset - base = index in the buffer
        const uint64_t written = f.written(), base = written - f.start();
        auto first = ix.unwritten.begin() + static_cast<std::ptrdiff_t>(ix.first), last = ix.unwritten.end();
        auto it = std::lower_bound(first, last, std::make_pair(id, uint64_t{0}));
        if (it == last || it->first != id || it->second < written) return false;
        start = it->second - base;
        end = (it + 1 != last) ? (it + 1)->second - base : f.buffer().size();
        return true;
    }

    // Writes f's buffer up to index `cut` (SIZE_MAX: all of it), with the
    // Attr changes that came since they were last looked at applied to
    // their rows there, as they are written (OutputFile::flush's patches:
    // the rows around them are not moved). A row after the cut, or in
    // another file's buffer, waits for its own flush; a row in no buffer was
    // written already and waits for the rewrite at the end. Applied ones
    // leave patches_. f's later rows move: its row index follows.
    void write_out(File& f, size_t cut) {
        if (hold_ == 0) fresh_.clear();  // hold_mib=0: every change by the rewrite
        cut = std::min(cut, f.buffer().size());
        if (fresh_.empty()) return f.flush(cut);
        struct Hit {
            uint64_t start, end, id;
        };
        std::vector<Hit> hits;
        std::vector<uint64_t> keep;
        std::sort(fresh_.begin(), fresh_.end());
        fresh_.erase(std::unique(fresh_.begin(), fresh_.end()), fresh_.end());
        for (uint64_t id : fresh_) {
            uint64_t start = 0, end = 0;
            if (locate(f, id, start, end)) {
                if (end <= cut) hits.push_back(Hit{start, end, id});
                else keep.push_back(id);
                continue;
            }
            for (auto& [dev, g] : files_)
                if (g.get() != &f && locate(*g, id, start, end)) {
                    keep.push_back(id);
                    break;
                }
        }
        fresh_.swap(keep);
        if (hits.empty()) return f.flush(cut);
        const std::string& buf = f.buffer();
        const uint64_t base = f.written() - f.start();  // file offset of buf[0]
        std::string rec;
        std::vector<std::string> fields;
        std::vector<std::string> lines;  // the changed rows (the patches point into them)
        lines.reserve(hits.size());
        std::vector<File::Patch> changes;
        std::vector<std::pair<uint64_t, int64_t>> shifts;  // (old end of a rewritten row, delta after it)
        int64_t delta = 0;
        for (const Hit& h : hits) {
            rec.assign(buf, static_cast<size_t>(h.start), static_cast<size_t>(h.end - h.start));
            if (!rec.empty() && rec.back() == '\n') rec.pop_back();
            std::string line;
            if (!patch_record(rec, fields, line, true)) continue;
            line += '\n';
            delta += static_cast<int64_t>(line.size()) - static_cast<int64_t>(h.end - h.start);
            shifts.emplace_back(base + h.end, delta);
            lines.push_back(std::move(line));
            changes.push_back(File::Patch{static_cast<size_t>(h.start), static_cast<size_t>(h.end), {}});
            patches_.erase(h.id);
            ++patched_in_memory_;
        }
        for (size_t i = 0; i < changes.size(); ++i) changes[i].text = lines[i];
        if (!shifts.empty()) {
            RowIndex& ix = index_[&f];
            size_t k = 0;
            int64_t d = 0;
            auto follow = [&](std::pair<uint64_t, uint64_t>& row) {
                if (row.second < f.written()) return;
                while (k < shifts.size() && shifts[k].first <= row.second) d = shifts[k++].second;
                row.second = static_cast<uint64_t>(static_cast<int64_t>(row.second) + d);
            };
            for (auto& mark : ix.marks) follow(mark);
            k = 0;
            d = 0;
            for (size_t i = ix.first; i < ix.unwritten.size(); ++i) follow(ix.unwritten[i]);
        }
        f.flush(cut, changes.data(), changes.size());
    }

    // Where rows start in one file: every kEvery-th row's ID and offset.
    // The fast rewrite needs IDs rising through the file (rows come in time
    // order with rising IDs); a file where they do not falls back to the
    // full parse.
    struct RowIndex {
        static constexpr uint64_t kEvery = 32;
        std::vector<std::pair<uint64_t, uint64_t>> marks;
        // Every row from [first] on: ID and offset, the rows not yet written
        // (locate; the ones written are dropped as rows come).
        std::vector<std::pair<uint64_t, uint64_t>> unwritten;
        size_t first = 0;
        uint64_t rows = 0, last_id = 0;
        uint64_t next_report = 0;  // bytes built when the progress line is told next (after_row)
        bool ordered = true;
    };
    void note_row(File& f, uint64_t id) {
        RowIndex& ix = index_[&f];
        if (ix.rows && id <= ix.last_id) ix.ordered = false;
        const uint64_t at = f.written() + f.pending();
        if (ix.rows % RowIndex::kEvery == 0) ix.marks.emplace_back(id, at);
        if (ix.ordered && hold_) {  // hold_mib=0: nothing is looked for in the buffer (write_out)
            auto& u = ix.unwritten;
            while (ix.first < u.size() && u[ix.first].second < f.written()) ++ix.first;
            if (ix.first >= 4096 && 2 * ix.first >= u.size()) {
                u.erase(u.begin(), u.begin() + static_cast<std::ptrdiff_t>(ix.first));
                ix.first = 0;
            }
            u.emplace_back(id, at);
        } else if (!ix.unwritten.empty()) {
            ix.unwritten = {};  // found by nothing now (locate)
            ix.first = 0;
        }
        ix.last_id = id;
        ++ix.rows;
    }

    // A file read from arbitrary offsets through a window.
    class Window {
    public:
        Window(int fd, uint64_t size) : fd_(fd), size_(size) {}
        uint64_t size() const { return size_; }
        // The byte at `off` (< size()).
        char at(uint64_t off) {
            if (off < at_ || off >= at_ + buf_.size()) fill(off);
            return buf_[off - at_];
        }
        // The first `c` in [off, end) or `end`.
        uint64_t find(uint64_t off, uint64_t end, char c) {
            while (off < end) {
                if (off < at_ || off >= at_ + buf_.size()) fill(off);
                size_t n = static_cast<size_t>(std::min<uint64_t>(end, at_ + buf_.size()) - off);
                const char* b = buf_.data() + (off - at_);
                if (const void* q = std::memchr(b, c, n)) return off + static_cast<uint64_t>(static_cast<const char*>(q) - b);
                off += n;
            }
            return end;
        }
        void read(uint64_t off, uint64_t end, std::string& out) {
            out.resize(static_cast<size_t>(end - off));
            size_t got = 0;
            while (got < out.size()) {
                ssize_t r = ::pread(fd_, &out[got], out.size() - got, static_cast<off_t>(off + got));
                if (r <= 0) throw std::runtime_error("cannot reread a csv file: " + std::string(std::strerror(errno)));
                got += static_cast<size_t>(r);
            }
        }

    private:
        void fill(uint64_t off) {
            size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, size_ - off));
            at_ = off;
            read(off, off + n, buf_);
        }
        static constexpr size_t kChunk = 1 << 20;
        int fd_;
        uint64_t size_, at_ = 0;
        std::string buf_;
    };

    // The end of the record starting at `off` (after its newline, or the
    // file's end), with CsvReader's rules: a quote opens a quoted field only
    // at the field's start, "" inside is a quote.
    template <class W>
    static uint64_t record_end(W& w, uint64_t off) {
        const uint64_t size = w.size();
        bool field_start = true, was_quoted = false;
        while (off < size) {
            char ch = w.at(off);
            if (ch == '"' && field_start && !was_quoted) {
                // to the closing quote (a doubled one stays inside)
                uint64_t q = off + 1;
                for (;;) {
                    q = w.find(q, size, '"');
                    if (q >= size) return size;
                    if (q + 1 < size && w.at(q + 1) == '"') {
                        q += 2;
                        continue;
                    }
                    break;
                }
                off = q + 1;
                was_quoted = true;
                field_start = false;
                continue;
            }
            if (ch == '\n') return off + 1;
            if (ch == ',') {
                field_start = true;
                was_quoted = false;
            } else {
                field_start = false;
            }
            ++off;
        }
        return size;
    }

    // The leading ID of the record at `off` (0 when it has none).
    template <class W>
    static uint64_t record_id(W& w, uint64_t off) {
        uint64_t id = 0;
        for (int i = 0; i < 20 && off < w.size(); ++i, ++off) {
            char c = w.at(off);
            if (c < '0' || c > '9') break;
            id = id * 10 + static_cast<uint64_t>(c - '0');
        }
        return id;
    }

    static void copy_range(int in, int out, uint64_t from, uint64_t to) {
        loff_t off = static_cast<loff_t>(from);
        bool kernel = true;
        std::string buf;
        while (static_cast<uint64_t>(off) < to) {
            size_t n = static_cast<size_t>(std::min<uint64_t>(to - static_cast<uint64_t>(off), 64u << 20));
            if (kernel) {
                ssize_t r = ::copy_file_range(in, &off, out, nullptr, n, 0);
                if (r > 0) continue;
                if (r < 0 && errno == EINTR) continue;
                kernel = false;  // not supported here (EXDEV, ENOSYS, EINVAL...): by hand
            }
            buf.resize(std::min<size_t>(n, 1 << 20));
            ssize_t r = ::pread(in, &buf[0], buf.size(), off);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) throw std::runtime_error("cannot reread a csv file: " + std::string(std::strerror(errno)));
            write_all(out, buf.data(), static_cast<size_t>(r));
            off += r;
        }
    }
    static void write_all(int fd, const char* p, size_t n) {
        while (n) {
            ssize_t r = ::write(fd, p, n);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) throw std::runtime_error("cannot write a csv file: " + std::string(std::strerror(errno)));
            p += r;
            n -= static_cast<size_t>(r);
        }
    }

    // The same result as apply_patches, reading only the annotated rows.
    // The file's folder and name, opened without following links: it is
    // reread and replaced there (a new file, unnamed until it is complete,
    // renamed over it: util/unnamed_file.h).
    struct Place {
        msmemscope::files::Fd dir;
        std::string name;
    };
    Place place_of(const File& f) {
        Place p;
        size_t slash = f.rel().rfind('/');
        std::string why;
        p.dir.reset(msmemscope::files::open_dir(dir_fd_.get(), slash == std::string::npos ? "" : f.rel().substr(0, slash),
                                                false, why));
        if (!p.dir) throw std::runtime_error("cannot reread " + f.path() + ": " + why);
        p.name = slash == std::string::npos ? f.rel() : f.rel().substr(slash + 1);
        return p;
    }
    // The rows the index finds get their changes where they are: the file
    // is rewritten in place from the first changed row on (later rows move
    // by what the changed rows grew or shrank), not copied whole. A late
    // change is usually near the end (a block relabeled just after its row
    // left the buffer): a GPT-style loop's 450 MB dump with one such row at
    // 70% took ~1.2 s to copy whole (bench/README.md). Growth is reserved
    // first (posix_fallocate), so a full disk or the file-size limit fails
    // before any byte moves; a host killed while rows move leaves that
    // file's tail inconsistent (the copy it replaces left the old file).
    void apply_patches_indexed(const File& f, const RowIndex& ix, uint64_t& done, uint64_t total) {
        const std::string& path = f.path();
        Place where = place_of(f);
        msmemscope::files::Fd fd(::openat(where.dir.get(), where.name.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC));
        if (!fd) throw std::runtime_error("cannot reread " + path + ": " + std::strerror(errno));
        struct stat st;
        if (::fstat(fd.get(), &st) != 0) throw std::runtime_error("cannot reread " + path + ": " + std::strerror(errno));
        const uint64_t size = static_cast<uint64_t>(st.st_size);
        struct Edit {
            uint64_t start, end;  // the row's bytes now, newline included
            std::string line;     // its new text
        };
        std::vector<Edit> edits;
        {
            std::vector<uint64_t> ids;
            ids.reserve(patches_.size());
            for (auto& [id, kv] : patches_) ids.push_back(id);
            std::sort(ids.begin(), ids.end());
            Window w(fd.get(), size);
            uint64_t pos = 0;  // rows before here are done
            std::string rec;
            std::vector<std::string> fields;
            for (uint64_t id : ids) {
                auto m = std::upper_bound(ix.marks.begin(), ix.marks.end(), std::make_pair(id, UINT64_MAX));
                if (m == ix.marks.begin()) continue;  // before the first row
                --m;
                uint64_t off = std::max(m->second, pos);
                uint64_t stop = (m + 1 != ix.marks.end()) ? (m + 1)->second : size;
                while (off < stop && off < size) {
                    uint64_t rid = record_id(w, off);
                    uint64_t end = record_end(w, off);
                    if (rid > id) break;
                    if (rid == id) {
                        w.read(off, end, rec);
                        if (!rec.empty() && rec.back() == '\n') rec.pop_back();
                        Edit e{off, end, {}};
                        if (patch_record(rec, fields, e.line)) {
                            e.line += '\n';
                            edits.push_back(std::move(e));
                        }
                        pos = end;
                        break;
                    }
                    off = end;
                }
            }
        }
        if (!edits.empty()) {
            int64_t grow = 0;
            for (const Edit& e : edits) grow += static_cast<int64_t>(e.line.size()) - static_cast<int64_t>(e.end - e.start);
            if (grow > 0) {
                int err = ::posix_fallocate(fd.get(), static_cast<off_t>(size), static_cast<off_t>(grow));
                if (err && err != EOPNOTSUPP && err != EINVAL)
                    throw std::runtime_error("cannot write " + path + ": " + std::strerror(err));
            }
            shift_in_place(fd.get(), path, edits, size);
        }
        done += size;
        host_.progress(std::min(done, total), total, "updating csv");
    }
    // Replaces each edit's [start, end) by its line. Edits of the same
    // length as their rows are written where they are (an owner tag that
    // came late, ops@aten -> gradient, is most of them: the rest of the file
    // stays untouched); from the first edit that grows or shrinks its row,
    // what follows moves, to the end of the file, reading ahead of writing:
    // bytes are written only over bytes already read (what the rows grew by
    // waits in `carry`).
    template <class E>
    static void shift_in_place(int fd, const std::string& path, const std::vector<E>& edits, uint64_t size) {
        constexpr uint64_t kChunk = 8 << 20;
        auto fail = [&](const char* what) {
            throw std::runtime_error(std::string("cannot ") + what + " " + path + ": " + std::strerror(errno));
        };
        auto put_at = [&](const char* p, size_t n, uint64_t at) {
            while (n) {
                ssize_t put = ::pwrite(fd, p, n, static_cast<off_t>(at));
                if (put < 0 && errno == EINTR) continue;
                if (put <= 0) fail("write");
                p += put;
                n -= static_cast<size_t>(put);
                at += static_cast<uint64_t>(put);
            }
        };
        size_t k = 0;
        for (; k < edits.size() && edits[k].line.size() == edits[k].end - edits[k].start; ++k)
            put_at(edits[k].line.data(), edits[k].line.size(), edits[k].start);
        if (k == edits.size()) return;
        uint64_t r = edits[k].start, w = r;
        std::string carry, chunk;
        while (r < size || !carry.empty()) {
            if (k < edits.size() && r == edits[k].start) {
                carry += edits[k].line;
                r = edits[k].end;
                ++k;
            } else if (r < size) {
                uint64_t stop = k < edits.size() ? edits[k].start : size;
                chunk.resize(static_cast<size_t>(std::min(stop - r, kChunk)));
                ssize_t n = ::pread(fd, &chunk[0], chunk.size(), static_cast<off_t>(r));
                if (n < 0 && errno == EINTR) continue;
                if (n <= 0) fail("reread");
                carry.append(chunk, 0, static_cast<size_t>(n));
                r += static_cast<uint64_t>(n);
            }
            // over bytes already read only, until the old end is read
            size_t room = r >= size ? carry.size() : static_cast<size_t>(std::min<uint64_t>(carry.size(), r > w ? r - w : 0));
            put_at(carry.data(), room, w);
            w += room;
            carry.erase(0, room);
        }
        if (w < size && ::ftruncate(fd, static_cast<off_t>(w)) != 0) fail("write");
    }

    // One record's text (no newline) with the analyzers' Attr changes in
    // `line`; false when it has none.
    // memory_only: only a MALLOC, FREE or ACCESS row (one device's file
    // holds it; a row without a device is in every file).
    bool patch_record(const std::string& rec, std::vector<std::string>& fields, std::string& line,
                      bool memory_only = false) {
        std::FILE* f = ::fmemopen(const_cast<char*>(rec.data()), rec.size(), "r");
        if (!f) throw std::runtime_error("cannot parse a csv row");
        msms::CsvReader reader(f);
        bool ok = reader.next(fields);
        std::fclose(f);
        if (ok && memory_only && (fields.size() != 12 || !is_memory_event(fields[1]))) return false;
        return ok && patch_fields(fields, line);
    }
    static constexpr uint64_t kReportEvery = 8 << 20;
    uint64_t reported_ = 0;

    File& open(const std::string& dev) {
        auto it = files_.find(dev);
        if (it != files_.end()) return *it->second;
        std::string rel = "device_" + dev + "/dump/memscope_dump_" + ts_ + ".csv";
        auto f = std::make_unique<File>(dir_fd_.get(), rel, dir_ + "/" + rel, msms::kDumpHeader);
        if (holding_) f->set_hold(hold_);  // hold_ 0: nothing held
        if (first_device_.empty()) first_device_ = dev;
        for (size_t i = 0; i < history_.size(); ++i) {
            auto& [head, tail] = history_[i];
            note_row(*f, history_ids_[i]);
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
    // Bytes built: written, and held in the buffers (hold_mib keeps a
    // small dump in memory until the end; the line still moves).
    void progress(uint64_t total = 0) {
        uint64_t done = 0;
        for_each_file([&](File& f) { done += f.written() + f.pending(); });
        host_.progress(done, total);
    }
    // After f got a row: writes what is due, and tells the progress line
    // every kReportEvery bytes built.
    void after_row(File& f) {
        if (holding_ && !changed_ && f.written() + f.pending() >= kGiveUpHolds * hold_) {
            holding_ = false;
            for (auto& [dev, g] : files_) g->set_hold(0);
        }
        RowIndex& ix = index_[&f];
        bool wrote = flush(f);
        uint64_t built = f.written() + f.pending();
        if (wrote || built >= ix.next_report) {
            ix.next_report = built + kReportEvery;
            progress();
        }
    }
    static uint64_t file_size(const std::string& path) {
        struct stat st;
        return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
    }

    static bool is_memory_event(const std::string& e) { return e == "MALLOC" || e == "FREE" || e == "ACCESS"; }

    // A row's fields with the analyzers' Attr changes, as text in `line`;
    // false when the row has none.
    bool patch_fields(std::vector<std::string>& fields, std::string& line) {
        if (fields.size() != 12) return false;
        unsigned long long id = 0;
        auto it = msms::parse_uint(fields[0], id) ? patches_.find(id) : patches_.end();
        if (it == patches_.end()) return false;
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
        return true;
    }

    // The full parse of a file (IDs not rising through it).
    // done/total: bytes rewritten over every file, for the status line.
    void apply_patches(const File& f, uint64_t& done, uint64_t total) {
        const std::string& path = f.path();
        Place where = place_of(f);
        int in_fd = ::openat(where.dir.get(), where.name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        std::FILE* in = in_fd < 0 ? nullptr : ::fdopen(in_fd, "r");
        if (!in) {
            if (in_fd >= 0) ::close(in_fd);
            throw std::runtime_error("cannot reread " + path);
        }
        // No name until it is complete: a run stopped while it is written
        // leaves no partial copy beside the dump.
        msms::UnnamedFile tmp;
        std::FILE* out = tmp.open(where.dir.get(), where.name) >= 0 ? tmp.stream() : nullptr;
        if (!out) {
            int e = errno;
            std::fclose(in);
            throw std::runtime_error("cannot write a new copy of " + path + ": " + std::strerror(e));
        }
        struct stat st;  // the mode the dump was made with (0666 less the umask)
        if (fstat(fileno(in), &st) != 0 || fchmod(fileno(out), st.st_mode & 07777) != 0) {
            int e = errno;
            std::fclose(out);
            std::fclose(in);
            throw std::runtime_error("cannot write a new copy of " + path + ": " + std::strerror(e));
        }
        msms::CsvReader reader(in);
        std::vector<std::string> fields;
        std::string line;
        bool header = true;
        while (reader.next(fields)) {
            if (header || !patch_fields(fields, line)) line = reader.raw();
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
        bool written = !std::ferror(out);
        if (std::fclose(out) != 0 || !written || !tmp.publish(where.name))
            throw std::runtime_error("cannot write a new copy of " + path + ": " + std::strerror(errno ? errno : EIO));
    }

    msmemscope::Host host_;
    msms::WrittenEvents written_;
    // Bytes of each dump file kept in memory after they are built (option
    // hold_mib), for Attr changes that come a little later (most owner tags:
    // a gradient or an optimizer state is tagged within its step; a
    // weight at the end of the first step). Given up when a file's first
    // kGiveUpHolds holds of rows brought no change: a run whose analyzers
    // change no Attr (none selected, or only ones that report) then writes
    // its rows as they come (the held bytes' move to the buffer's front
    // after every second block cost the c:32 CSV benchmark a fifth of its
    // time); the next change takes the hold up again, and rows written
    // before it get their changes by the rewrite at the end.
    static constexpr size_t kGiveUpHolds = 4;
    size_t hold_;
    bool holding_ = true;
    bool changed_ = false;  // an analyzer changed a row's Attr
    std::string dir_, ts_, first_device_;
    msmemscope::files::Fd dir_fd_;  // the run folder (RunInfo::open_output_dir)
    std::map<std::string, std::unique_ptr<File>> files_;
    std::unique_ptr<File> trace_;
    msms::PythonTraceRowWriter trace_rows_;
    // Rows without a device so far, before and after their Device Id.
    std::vector<std::pair<std::string, std::string>> history_;
    std::vector<uint64_t> history_ids_;
    std::unordered_map<const File*, RowIndex> index_;
    bool history_full_ = false;
    std::unordered_map<uint64_t, std::vector<std::pair<std::string, std::string>>> patches_;
    std::vector<uint64_t> fresh_;  // IDs with changes not applied yet that may be in a buffer
    uint64_t patched_in_memory_ = 0;
};

}  // namespace

MSMEMSCOPE_PLUGIN(CsvSink)
