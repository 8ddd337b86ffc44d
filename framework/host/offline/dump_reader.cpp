#include "offline/dump_reader.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>

#include "util/csv.h"
#include "util/text.h"
#include "util/unnamed_file.h"

namespace fs = std::filesystem;

namespace msms {
namespace {

const char* const kColumns[] = {"ID", "Event", "Event Type", "Name", "Timestamp(ns)", "Process Id",
                                "Thread Id", "Device Id", "Ptr", "Attr", "Call Stack(Python)", "Call Stack(C)"};
constexpr size_t kNumColumns = 12;

bool ends_with(const std::string& s, const char* suffix) {
    size_t n = std::strlen(suffix);
    return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// Inputs are bounded (#16): the size of one record (CsvReader::kMaxRecord);
// rows are streamed (DumpStream), so their number costs no memory (#29).

std::string unquote(std::string s) {
    s = trim(s);
    if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
    return s;
}

bool to_u64(const std::string& s, uint64_t& out) {
    unsigned long long v;
    if (!parse_uint(trim(s), v)) return false;
    out = v;
    return true;
}

// A whole signed decimal int64, as upstream's StrToInt64 (std::stoll, the
// whole string consumed) reads the Attr size: an optional sign, digits, no
// overflow, nothing after.
bool to_i64_strict(const std::string& s, int64_t& out) {
    std::string t = trim(s);
    size_t i = (!t.empty() && (t[0] == '-' || t[0] == '+')) ? 1 : 0;
    if (i >= t.size() || t.find_first_not_of("0123456789", i) != std::string::npos) return false;
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(t.c_str(), &end, 10);
    if (errno == ERANGE || !end || *end) return false;
    out = v;
    return true;
}

int64_t to_i64(const std::string& s, int64_t fallback) {
    std::string t = trim(s);
    if (t.empty()) return fallback;
    char* end = nullptr;
    long long v = std::strtoll(t.c_str(), &end, 10);
    return end && *end == '\0' ? v : fallback;
}

uint16_t kind_of(const std::string& s, bool& ok) {
    for (uint16_t k = 0; k < MSMS_EV_KIND_COUNT; ++k)
        if (const char* n = msms_event_kind_name(k); n && s == n) return ok = true, k;
    ok = false;
    return 0;
}

uint16_t type_of(const std::string& s) {
    if (s == "PTA_CACHING") return MSMS_T_PTA;  // older upstream spelling
    if (s == "acl init") return MSMS_T_ACL_INIT;  // upstream's builds before 2025-04-29
    if (s == "acl finalize") return MSMS_T_ACL_FINI;
    for (uint16_t t = 1; t < MSMS_T_TYPE_LIMIT; ++t)
        if (const char* n = msms_event_type_name(t); n && s == n) return t;
    return MSMS_T_NONE;
}

// Fills a Record from the 12 fields; false with `what` on a bad value.
bool make_row(const std::vector<std::string>& f, DumpRow& row, std::string& what) {
    Record& r = row.rec;
    msms_event& ev = r.ev;
    if (!to_u64(f[0], row.file_id)) return what = "invalid ID '" + f[0] + "' (expected a number)", false;
    bool ok = false;
    ev.kind = kind_of(trim(f[1]), ok);
    if (!ok) return what = "unknown Event '" + f[1] + "'", false;
    ev.type = type_of(trim(f[2]));
    r.name = f[3] == "N/A" ? std::string() : f[3];
    if (!to_u64(f[4], ev.timestamp_ns)) return what = "invalid Timestamp(ns) '" + f[4] + "'", false;
    uint64_t v = 0;
    ev.pid = to_u64(f[5], v) ? static_cast<uint32_t>(v) : 0;
    ev.tid = to_u64(f[6], v) ? static_cast<uint32_t>(v) : 0;
    row.device = trim(f[7]);
    if (row.device == "cpu" || row.device == "host") {
        ev.device_kind = MSMS_DEV_CPU;
        ev.device_id = -1;
    } else if (to_u64(row.device, v) && v < 4096) {
        ev.device_kind = MSMS_DEV_NPU;
        ev.device_id = static_cast<int16_t>(v);
    } else {
        ev.device_kind = MSMS_DEV_NA;
        ev.device_id = -1;
    }
    std::string ptr = trim(f[8]);
    if (!ptr.empty() && ptr != "N/A") {
        char* end = nullptr;
        errno = 0;
        ev.ptr = std::strtoull(ptr.c_str(), &end, 0);
        if (ptr[0] == '-' || !end || *end || errno == ERANGE) return what = "invalid Ptr '" + ptr + "'", false;
    }
    for (auto& [k, val] : parse_attr_list(trim(f[9]))) r.attrs.emplace_back(unquote(k), unquote(val));
    r.complete_attrs = true;
    auto get = [&](const char* key) -> const std::string* {
        for (auto& kv : r.attrs)
            if (kv.first == key) return &kv.second;
        return nullptr;
    };
    if (auto s = get("size")) {
        // Signed, as upstream reads it: its 2025 builds write a PTA FREE's
        // size as the negative change (size:-512). The Record keeps the
        // bytes (the magnitude); the row keeps the value as written.
        int64_t v = 0;
        if (!to_i64_strict(*s, v)) return what = "invalid size '" + *s + "' in Attr (expected a number of bytes)", false;
        row.attr_size = v;
        ev.size = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
    }
    if (auto s = get("allocation_id")) ev.allocation_id = static_cast<uint64_t>(to_i64(*s, 0));
    if (auto s = get("used")) ev.pool_used = to_i64(*s, -1);
    if (auto s = get("total")) ev.pool_total = to_i64(*s, -1);
    if (auto s = get("process_used")) ev.process_used = to_i64(*s, -1);
    if (auto s = get("device_used")) ev.device_used = to_i64(*s, -1);
    if (ev.kind == MSMS_EV_SYSTEM && ev.type == MSMS_T_STEP) ev.aux0 = static_cast<uint64_t>(to_i64(r.name, 0));
    if (ev.kind == MSMS_EV_OOM_DETAIL && ev.type == MSMS_T_OOM_TRIGGER) {
        // The row's Name is upstream's fixed "OOM_Trigger"; the failing
        // call (malloc, cuMemAlloc_v2) is its Attr func, which is what a
        // live run's trigger event carries as its name: the offline oom
        // analysis names the call as the run did.
        if (auto s = get("func"); s && !s->empty()) r.name = *s;
        if (auto s = get("req_size")) ev.size = static_cast<uint64_t>(to_i64(*s, 0));
        if (auto s = get("flag")) ev.aux0 = static_cast<uint64_t>(to_i64(*s, 0));
        if (auto s = get("ret")) ev.aux1 = static_cast<uint64_t>(to_i64(*s, 0));
    }
    if (ev.kind == MSMS_EV_KERNEL_LAUNCH) {
        if (auto s = get("streamId")) ev.aux0 = static_cast<uint64_t>(to_i64(*s, 0));
        if (auto s = get("taskId")) ev.aux1 = static_cast<uint64_t>(to_i64(*s, 0));
    }
    if (ev.kind == MSMS_EV_MSTX) {
        for (const char* key : {"range_id", "rangeId", "id"})
            if (auto s = get(key)) {
                ev.aux0 = static_cast<uint64_t>(to_i64(*s, 0));
                break;
            }
    }
    // Upstream writes "NA" for the Python stack of a thread without Python
    // (csrc/utility/cpython.cpp): no stack.
    r.py_stack = trim(f[10]) == "NA" ? std::string() : f[10];
    r.c_stack = f[11];
    return true;
}

std::string header_error(const std::vector<std::string>& header) {
    std::vector<std::string> missing;
    for (auto* c : kColumns)
        if (std::find(header.begin(), header.end(), c) == header.end()) missing.push_back(c);
    if (!missing.empty()) return "missing column(s) " + join(missing, ", ") + " in the header";
    return "the header must be exactly: " + join(std::vector<std::string>(kColumns, kColumns + kNumColumns), ",");
}

std::string render_attrs(const std::vector<std::pair<std::string, std::string>>& attrs, bool json) {
    std::string s = "{";
    for (size_t i = 0; i < attrs.size(); ++i) {
        if (i) s += ',';
        if (json) {
            s += '"' + attrs[i].first + "\":";
            const std::string& v = attrs[i].second;
            bool number = !v.empty() && v.find_first_not_of("0123456789-.") == std::string::npos;
            s += number ? v : '"' + v + '"';
        } else {
            s += attrs[i].first + ':' + attrs[i].second;
        }
    }
    return s + "}";
}

void apply(std::vector<std::pair<std::string, std::string>>& attrs, const std::string& key, const std::string& value) {
    for (auto& a : attrs)
        if (a.first == key) {
            a.second = value;
            return;
        }
    attrs.emplace_back(key, value);
}

}  // namespace

RowScanner::~RowScanner() { close(); }

void RowScanner::close() {
    if (st_) sqlite3_finalize(st_);
    if (db_) sqlite3_close(db_);
    if (f_) std::fclose(f_);
    st_ = nullptr;
    db_ = nullptr;
    f_ = nullptr;
    reader_.reset();
}

bool RowScanner::open(const std::string& path, std::string& error, int format) {
    close();
    path_ = path;
    n_ = 0;
    if (format == kDb || (format == kAuto && ends_with(path, ".db"))) return open_db(error);
    // Opened without blocking on a FIFO and read only when it is a regular file.
    int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
        ::close(fd);
        error = path + ": not a regular file";
        return false;
    }
    if (fd >= 0) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    f_ = fd >= 0 ? fdopen(fd, "r") : nullptr;
    if (!f_) {
        error = path + ": cannot read the file: " + std::strerror(errno);
        if (fd >= 0) ::close(fd);
        return false;
    }
    reader_ = std::make_unique<CsvReader>(f_);
    if (!reader_->next(fields_)) {
        error = path + ":1: empty file (expected the memscope_dump header)";
        return false;
    }
    if (reader_->too_long()) {
        error = path + ":1: not a memscope_dump CSV (no header line in the first " +
                std::to_string(CsvReader::kMaxRecord >> 20) + " MiB)";
        return false;
    }
    if (!fields_.empty() && fields_[0].rfind("\xEF\xBB\xBF", 0) == 0) fields_[0] = fields_[0].substr(3);
    for (auto& h : fields_) h = trim(h);
    if (fields_.size() != kNumColumns || !std::equal(fields_.begin(), fields_.end(), kColumns)) {
        error = path + ":1: not a memscope_dump CSV: " + header_error(fields_);
        return false;
    }
    return true;
}

bool RowScanner::open_db(std::string& error) {
    const std::string& path = path_;
    {
        // SQLite would block opening a FIFO: a non-regular file is refused first.
        int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
        struct stat st;
        bool regular = fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
        if (fd >= 0) ::close(fd);
        if (fd >= 0 && !regular) {
            error = path + ": not a regular file";
            return false;
        }
    }
    if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
        error = path + ": cannot open the database: " + (db_ ? sqlite3_errmsg(db_) : "out of memory");
        return false;
    }
    std::string sql = "SELECT ";
    for (size_t i = 0; i < kNumColumns; ++i) sql += std::string(i ? ", " : "") + "\"" + kColumns[i] + "\"";
    sql += " FROM memscope_dump";
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st_, nullptr) != SQLITE_OK) {
        error = path + ": not a memscope_dump database (" + sqlite3_errmsg(db_) + ")";
        return false;
    }
    fields_.assign(kNumColumns, std::string());
    return true;
}

int RowScanner::next(DumpRow& row, std::string& error) {
    const std::string& path = path_;
    if (st_) {
        int rc = sqlite3_step(st_);
        if (rc != SQLITE_ROW) {
            if (rc == SQLITE_DONE) return 0;
            error = path + ": reading memscope_dump failed: " + sqlite3_errmsg(db_);
            return -1;
        }
        ++n_;
        for (size_t i = 0; i < kNumColumns; ++i) {
            const unsigned char* t = sqlite3_column_text(st_, static_cast<int>(i));
            int len = sqlite3_column_bytes(st_, static_cast<int>(i));
            if (len > static_cast<int>(CsvReader::kMaxRecord)) {
                error = path + ": row " + std::to_string(n_) + ": a value longer than " +
                        std::to_string(CsvReader::kMaxRecord >> 20) + " MiB";
                return -1;
            }
            fields_[i].assign(t ? reinterpret_cast<const char*>(t) : "", t ? static_cast<size_t>(len) : 0);
        }
        // Upstream's DB writer stores an MSTX name and the call stacks inside
        // the double quotes its CSV writer relies on ("step start"): the
        // value is what is inside, as in its CSV.
        auto unwrap = [](std::string& v) {
            if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
        };
        if (trim(fields_[1]) == "MSTX") unwrap(fields_[3]);
        unwrap(fields_[10]);
        unwrap(fields_[11]);
        row = DumpRow();
        row.line = n_;
        std::string what;
        if (!make_row(fields_, row, what)) {
            error = path + ": row " + std::to_string(n_) + ": " + what;
            return -1;
        }
        return 1;
    }
    if (!reader_) return 0;
    while (reader_->next(fields_)) {
        std::string at = path + ":" + std::to_string(reader_->line()) + ": ";
        if (reader_->too_long()) {
            error = at + "a record longer than " + std::to_string(CsvReader::kMaxRecord >> 20) +
                    " MiB (not a memscope_dump file?)";
            return -1;
        }
        if (fields_.size() == 1 && trim(fields_[0]).empty()) continue;  // blank line
        if (reader_->malformed()) {
            error = at + "unterminated quoted field";
            return -1;
        }
        if (fields_.size() != kNumColumns) {
            error = at + "expected " + std::to_string(kNumColumns) + " fields, found " + std::to_string(fields_.size());
            return -1;
        }
        ++n_;
        row = DumpRow();
        row.line = reader_->line();
        std::string what;
        if (!make_row(fields_, row, what)) {
            error = at + what;
            return -1;
        }
        return 1;
    }
    if (std::ferror(f_)) {
        error = path + ": cannot read the file: " + std::strerror(errno);
        return -1;
    }
    return 0;
}

namespace {
bool read_all(const std::string& path, std::vector<DumpRow>& rows, std::string& error, int format) {
    RowScanner scan;
    if (!scan.open(path, error, format)) return false;
    DumpRow row;
    int rc;
    while ((rc = scan.next(row, error)) > 0) rows.push_back(std::move(row));
    return rc == 0;
}
}  // namespace

bool read_dump(const std::string& path, std::vector<DumpRow>& rows, std::string& error) {
    return read_all(path, rows, error, RowScanner::kAuto);
}

bool read_dump_csv(const std::string& path, std::vector<DumpRow>& rows, std::string& error) {
    return read_all(path, rows, error, RowScanner::kCsv);
}

bool read_dump_db(const std::string& path, std::vector<DumpRow>& rows, std::string& error) {
    return read_all(path, rows, error, RowScanner::kDb);
}

void sort_by_time(std::vector<DumpRow>& rows) {
    std::stable_sort(rows.begin(), rows.end(), [](const DumpRow& a, const DumpRow& b) {
        if (a.rec.ev.timestamp_ns != b.rec.ev.timestamp_ns) return a.rec.ev.timestamp_ns < b.rec.ev.timestamp_ns;
        return a.file_id < b.file_id;
    });
}

// ---- DumpStream ------------------------------------------------------------

namespace {

// A row as sorted and spilled: u64 timestamp, u64 ID, u64 sequence (its place
// in the files, which makes the order total and the sort stable), u32 file,
// u64 line, then the 12 fields (u32 length, bytes).
constexpr size_t kKeyBytes = 24;

template <class T>
void put(std::string& out, T v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
template <class T>
T get_at(const char* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

std::string encode_row(const DumpRow& row, const std::vector<std::string>& fields, uint64_t seq, uint32_t file) {
    std::string out;
    size_t n = kKeyBytes + 12;
    for (auto& f : fields) n += 4 + f.size();
    out.reserve(n);
    put<uint64_t>(out, row.rec.ev.timestamp_ns);
    put<uint64_t>(out, row.file_id);
    put<uint64_t>(out, seq);
    put<uint32_t>(out, file);
    put<uint64_t>(out, row.line);
    for (auto& f : fields) {
        put<uint32_t>(out, static_cast<uint32_t>(f.size()));
        out += f;
    }
    return out;
}

bool key_less(const char* a, const char* b) {
    for (size_t i = 0; i < 3; ++i) {
        uint64_t x = get_at<uint64_t>(a + 8 * i), y = get_at<uint64_t>(b + 8 * i);
        if (x != y) return x < y;
    }
    return false;
}

// Back into a DumpRow (the row was checked when it was first read).
bool decode_row(const char* p, size_t size, const std::vector<std::string>& files, DumpRow& row, size_t& file,
                std::vector<std::string>& fields, std::string& error) {
    if (size < kKeyBytes + 12) return error = "a corrupt temporary sort file", false;
    file = get_at<uint32_t>(p + kKeyBytes);
    size_t line = get_at<uint64_t>(p + kKeyBytes + 4);
    size_t off = kKeyBytes + 12;
    fields.resize(kNumColumns);
    for (size_t i = 0; i < kNumColumns; ++i) {
        if (off + 4 > size) return error = "a corrupt temporary sort file", false;
        uint32_t n = get_at<uint32_t>(p + off);
        off += 4;
        if (off + n > size) return error = "a corrupt temporary sort file", false;
        fields[i].assign(p + off, n);
        off += n;
    }
    row = DumpRow();
    row.line = line;
    std::string what;
    if (file >= files.size() || !make_row(fields, row, what))
        return error = (file < files.size() ? files[file] : std::string("?")) + ": changed while it was read", false;
    return true;
}

bool write_all(int fd, const char* p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= static_cast<size_t>(w);
    }
    return true;
}

}  // namespace

struct DumpStream::Run {
    uint64_t pos = 0, end = 0;  // what is left of the run in the spill file
    std::string buf;
    size_t off = 0;
    std::string rec;  // the current row, encoded
};

DumpStream::DumpStream(std::vector<std::string> files, size_t sort_memory)
    : files_(std::move(files)), sort_memory_(std::max<size_t>(sort_memory, 1u << 20)) {}

DumpStream::~DumpStream() {
    if (spill_fd_ >= 0) ::close(spill_fd_);
}

bool DumpStream::open(std::string& error) {
    uint64_t last_ts = 0, last_id = 0;
    DumpRow row;
    for (size_t i = 0; i < files_.size(); ++i) {
        RowScanner scan;
        if (!scan.open(files_[i], error)) return false;
        int rc;
        while ((rc = scan.next(row, error)) > 0) {
            uint64_t ts = row.rec.ev.timestamp_ns, id = row.file_id;
            if (rows_ && (ts < last_ts || (ts == last_ts && id < last_id))) sorted_ = false;
            last_ts = ts;
            last_id = id;
            ++rows_;
        }
        if (rc < 0) return false;
    }
    return sorted_ || build_runs(error);
}

bool DumpStream::build_runs(std::string& error) {
    std::vector<std::string> chunk;
    size_t bytes = 0;
    uint64_t seq = 0;
    auto sort_chunk = [&] {
        std::sort(chunk.begin(), chunk.end(),
                  [](const std::string& a, const std::string& b) { return key_less(a.data(), b.data()); });
    };
    auto spill_chunk = [&]() -> bool {
        sort_chunk();
        if (spill_fd_ < 0) {
            std::error_code ec;
            std::string dir = fs::temp_directory_path(ec).string();
            if (ec || dir.empty()) dir = "/tmp";
            spill_fd_ = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_EXCL | O_CLOEXEC, 0600);
            if (spill_fd_ < 0) {
                std::string tmpl = dir + "/msmemscope_sort_XXXXXX";
                spill_fd_ = mkostemp(tmpl.data(), O_CLOEXEC);
                if (spill_fd_ >= 0) unlink(tmpl.c_str());
            }
            if (spill_fd_ < 0) {
                error = files_.front() + ": cannot sort its rows by time: no temporary file in " + dir + ": " +
                        std::strerror(errno);
                return false;
            }
        }
        auto run = std::make_unique<Run>();
        run->pos = spill_size_;
        std::string out;
        for (auto& rec : chunk) {
            put<uint32_t>(out, static_cast<uint32_t>(rec.size()));
            out += rec;
            if (out.size() >= (1u << 20)) {
                if (!write_all(spill_fd_, out.data(), out.size())) break;
                spill_size_ += out.size();
                out.clear();
            }
        }
        if (!out.empty() && write_all(spill_fd_, out.data(), out.size())) {
            spill_size_ += out.size();
            out.clear();
        }
        if (!out.empty()) {
            error = files_.front() + ": cannot sort its rows by time: the temporary file: " + std::strerror(errno);
            return false;
        }
        run->end = spill_size_;
        runs_.push_back(std::move(run));
        chunk.clear();
        chunk.shrink_to_fit();
        bytes = 0;
        return true;
    };
    DumpRow row;
    for (size_t i = 0; i < files_.size(); ++i) {
        RowScanner scan;
        if (!scan.open(files_[i], error)) return false;
        int rc;
        while ((rc = scan.next(row, error)) > 0) {
            chunk.push_back(encode_row(row, scan.fields(), seq++, static_cast<uint32_t>(i)));
            bytes += chunk.back().capacity() + sizeof(std::string) + 16;
            if (bytes >= sort_memory_ && !spill_chunk()) return false;
        }
        if (rc < 0) return false;
    }
    if (seq != rows_) return error = files_.front() + ": changed while it was read", false;
    if (runs_.empty()) {
        sort_chunk();
        mem_ = std::move(chunk);
        return true;
    }
    if (!chunk.empty() && !spill_chunk()) return false;
    merging_ = true;
    return true;
}

int DumpStream::next(DumpRow& row, std::string& error) {
    std::vector<std::string> fields;
    if (sorted_) {
        for (;;) {
            if (!scan_open_) {
                if (scan_file_ >= files_.size()) break;
                if (!scan_.open(files_[scan_file_], error)) return -1;
                scan_open_ = true;
            }
            int rc = scan_.next(row, error);
            if (rc < 0) return -1;
            if (rc > 0) {
                if (++delivered_ > rows_) return error = files_[scan_file_] + ": changed while it was read", -1;
                file_ = scan_file_;
                return 1;
            }
            scan_.close();
            scan_open_ = false;
            ++scan_file_;
        }
        if (delivered_ != rows_) return error = files_.back() + ": changed while it was read", -1;
        return 0;
    }
    if (!merging_) {
        if (mem_pos_ >= mem_.size()) {
            mem_.clear();
            mem_.shrink_to_fit();
            return 0;
        }
        std::string rec = std::move(mem_[mem_pos_++]);
        return decode_row(rec.data(), rec.size(), files_, row, file_, fields, error) ? 1 : -1;
    }
    // k-way merge of the runs
    auto load = [&](Run& r) -> int {  // the run's next row into r.rec; 0 at its end
        auto have = [&] { return r.buf.size() - r.off; };
        auto fill = [&](size_t need) -> bool {
            if (have() >= need) return true;
            r.buf.erase(0, r.off);
            r.off = 0;
            size_t want = std::max<size_t>(need - r.buf.size(), 64u << 10);
            want = static_cast<size_t>(std::min<uint64_t>(want, r.end - r.pos));
            size_t old = r.buf.size();
            r.buf.resize(old + want);
            size_t got = 0;
            while (got < want) {
                ssize_t n = pread(spill_fd_, &r.buf[old + got], want - got, static_cast<off_t>(r.pos + got));
                if (n < 0 && errno == EINTR) continue;
                if (n <= 0) break;
                got += static_cast<size_t>(n);
            }
            r.buf.resize(old + got);
            r.pos += got;
            return have() >= need;
        };
        if (!fill(1)) return 0;
        if (!fill(4)) return -1;
        uint32_t n = get_at<uint32_t>(r.buf.data() + r.off);
        if (!fill(4 + size_t(n)) || n < kKeyBytes) return -1;
        r.rec.assign(r.buf.data() + r.off + 4, n);
        r.off += 4 + n;
        return 1;
    };
    auto greater = [&](size_t a, size_t b) { return key_less(runs_[b]->rec.data(), runs_[a]->rec.data()); };
    if (heap_.empty() && delivered_ == 0) {
        for (size_t i = 0; i < runs_.size(); ++i) {
            int rc = load(*runs_[i]);
            if (rc < 0) return error = files_.front() + ": cannot read back the temporary sort file", -1;
            if (rc > 0) heap_.push_back(i);
        }
        std::make_heap(heap_.begin(), heap_.end(), greater);
    }
    if (heap_.empty()) return 0;
    std::pop_heap(heap_.begin(), heap_.end(), greater);
    size_t i = heap_.back();
    Run& r = *runs_[i];
    if (!decode_row(r.rec.data(), r.rec.size(), files_, row, file_, fields, error)) return -1;
    ++delivered_;
    int rc = load(r);
    if (rc < 0) return error = files_.front() + ": cannot read back the temporary sort file", -1;
    if (rc > 0) std::push_heap(heap_.begin(), heap_.end(), greater);
    else heap_.pop_back();
    return 1;
}

std::vector<std::string> dump_files(const std::string& path, std::string& error) {
    std::vector<std::string> out;
    std::error_code ec;
    if (!fs::exists(path, ec)) {
        error = path + ": no such file or folder";
        return out;
    }
    if (!fs::is_directory(path, ec)) {
        if (!fs::is_regular_file(path, ec)) {
            error = path + ": not a regular file";
            return out;
        }
        out.push_back(path);
        return out;
    }
    for (auto it = fs::recursive_directory_iterator(path, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
        std::string name = it->path().filename().string();
        if (name.rfind("memscope_dump", 0) != 0 || !(ends_with(name, ".csv") || ends_with(name, ".db"))) continue;
        if (it->is_directory()) continue;
        struct stat st;
        if (!it->is_regular_file()) {
            // A dump's name on a FIFO, socket or device (or a link to one) is
            // refused, never opened (a FIFO would block, a device never end).
            std::string kind = stat(it->path().c_str(), &st) == 0 ? file_kind(st.st_mode) : "a dangling link";
            error = escape_controls(it->path().string()) + ": not a regular file (" + kind + ")";
            return {};
        }
        out.push_back(it->path().string());
    }

    std::sort(out.begin(), out.end());
    if (out.empty()) error = path + ": no memscope_dump_*.csv or .db file in this folder";
    return out;
}

bool patch_dump(const std::string& path, const std::vector<AttrPatch>& patches, std::string& error) {
    std::map<std::pair<uint64_t, uint32_t>, std::vector<const AttrPatch*>> by_row;
    for (auto& p : patches) by_row[{p.id, p.pid}].push_back(&p);
    if (by_row.empty()) return true;
    if (ends_with(path, ".db")) {
        struct stat lst;
        if (lstat(path.c_str(), &lst) != 0 || !S_ISREG(lst.st_mode)) {
            error = path + ": cannot write the results back: not a regular file";
            return false;
        }
        sqlite3* db = nullptr;
        if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW, nullptr) != SQLITE_OK) {
            error = path + ": cannot open the database for writing: " + (db ? sqlite3_errmsg(db) : "out of memory");
            sqlite3_close(db);
            return false;
        }
        std::unique_ptr<sqlite3, int (*)(sqlite3*)> guard(db, &sqlite3_close);
        sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr);
        sqlite3_stmt *sel = nullptr, *upd = nullptr;
        sqlite3_prepare_v2(db, "SELECT \"Attr\" FROM memscope_dump WHERE \"ID\" = ? AND \"Process Id\" = ?", -1, &sel,
                           nullptr);
        sqlite3_prepare_v2(db, "UPDATE memscope_dump SET \"Attr\" = ? WHERE \"ID\" = ? AND \"Process Id\" = ?", -1,
                           &upd, nullptr);
        if (!sel || !upd) {
            error = path + ": not a memscope_dump database (" + sqlite3_errmsg(db) + ")";
            sqlite3_finalize(sel);
            sqlite3_finalize(upd);
            return false;
        }
        for (auto& [key, list] : by_row) {
            sqlite3_reset(sel);
            sqlite3_bind_int64(sel, 1, static_cast<sqlite3_int64>(key.first));
            sqlite3_bind_int64(sel, 2, key.second);
            if (sqlite3_step(sel) != SQLITE_ROW) continue;
            const unsigned char* t = sqlite3_column_text(sel, 0);
            std::vector<std::pair<std::string, std::string>> attrs;
            for (auto& [k, v] : parse_attr_list(trim(t ? reinterpret_cast<const char*>(t) : "")))
                attrs.emplace_back(unquote(k), unquote(v));
            for (auto* p : list) apply(attrs, p->key, p->value);
            std::string text = render_attrs(attrs, true);
            sqlite3_reset(upd);
            sqlite3_bind_text(upd, 1, text.c_str(), -1, SQLITE_TRANSIENT);
            sqlite3_bind_int64(upd, 2, static_cast<sqlite3_int64>(key.first));
            sqlite3_bind_int64(upd, 3, key.second);
            if (sqlite3_step(upd) != SQLITE_DONE) {
                error = path + ": cannot update row ID " + std::to_string(key.first) + ": " + sqlite3_errmsg(db);
                sqlite3_finalize(sel);
                sqlite3_finalize(upd);
                sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
                return false;
            }
        }
        sqlite3_finalize(sel);
        sqlite3_finalize(upd);
        sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
        return true;
    }
    // Written to a new file next to it (created exclusively, with the input's
    // mode and owner) and renamed over it, all relative to the input's folder
    // opened once (#29 item 4): never through a link, and a folder swapped
    // meanwhile is not where the new file lands.
    std::string folder = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/') + 1);
    std::string base = path.substr(path.rfind('/') + 1);
    int dir_fd = open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0) {
        error = path + ": cannot write the results back: " + folder + ": " + std::strerror(errno);
        return false;
    }
    struct DirCloser {
        int fd;
        ~DirCloser() { close(fd); }
    } dir_closer{dir_fd};
    int in_fd = openat(dir_fd, base.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (in_fd < 0 || fstat(in_fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        error = path + ": cannot write the results back: " +
                (in_fd < 0 ? std::strerror(errno) : "not a regular file");
        if (in_fd >= 0) close(in_fd);
        return false;
    }
    std::FILE* in = fdopen(in_fd, "r");
    if (!in) {
        close(in_fd);
        error = path + ": cannot read the file: " + std::strerror(errno);
        return false;
    }
    // The new file has no name until it is complete (unnamed_file.h): an
    // --analyze interrupted while it writes leaves nothing in the folder.
    UnnamedFile tmp;
    int out_fd = tmp.open(dir_fd, base);
    std::FILE* out = out_fd >= 0 ? tmp.stream() : nullptr;
    if (!out) {
        error = path + ": cannot write the results back: " + folder + ": " + std::strerror(errno);
        std::fclose(in);
        return false;
    }
    if (fchmod(out_fd, st.st_mode & 07777) != 0 ||
        ((st.st_uid != geteuid() || st.st_gid != getegid()) && fchown(out_fd, st.st_uid, st.st_gid) != 0)) {
        error = path + ": cannot give the rewritten file the input's mode and owner: " + std::strerror(errno);
        std::fclose(out);
        std::fclose(in);
        return false;
    }
    CsvReader reader(in);
    std::vector<std::string> fields;
    bool header = true;
    std::string line;
    while (reader.next(fields)) {
        line = reader.raw();
        uint64_t id = 0, pid = 0;
        if (!header && fields.size() == kNumColumns && to_u64(fields[0], id) && to_u64(fields[5], pid)) {
            auto it = by_row.find({id, static_cast<uint32_t>(pid)});
            if (it != by_row.end()) {
                std::vector<std::pair<std::string, std::string>> attrs;
                for (auto& [k, v] : parse_attr_list(trim(fields[9]))) attrs.emplace_back(k, v);
                for (auto* p : it->second) apply(attrs, p->key, p->value);
                fields[9] = render_attrs(attrs, false);
                line.clear();
                for (size_t i = 0; i < fields.size(); ++i) {
                    if (i) line += ',';
                    csv_field(line, fields[i], i >= 9 && !fields[i].empty());
                }
            }
        }
        header = false;
        line += '\n';
        std::fwrite(line.data(), 1, line.size(), out);
    }
    bool read_ok = !reader.too_long() && !std::ferror(in);
    std::fclose(in);
    if (!read_ok) {
        std::fclose(out);
        error = path + ": cannot reread the file to write the results back";
        return false;
    }
    bool written = !std::ferror(out);
    if (std::fclose(out) != 0 || !written || !tmp.publish(base)) {
        if (!written && errno == 0) errno = EIO;
        error = path + ": cannot write the results back: " + std::strerror(errno);
        return false;
    }
    return true;
}

}  // namespace msms
