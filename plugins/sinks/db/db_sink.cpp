// Sink `db` (--data-format=db): one SQLite file per device,
// device_{id}/dump/memscope_dump_{ts}.db (COMPAT §3, §5).
//
// What readers of upstream's DB expect (MindStudio Insight, msMemScope's
// python analyzer):
//   memscope_dump          the 12 columns of the CSV, same values; Attr is real JSON
//   python_trace_{PID}     FuncInfo, StartTime(ns), EndTime(ns), Thread Id, Process Id
//
// Layout "view" (the default, schema version 2): each distinct call stack,
// each (Event, Event Type, Name, pid, tid, Device Id) and each Attr layout is
// stored once; memscope_dump is a VIEW that gives back every row's 12 values:
//   msms_dump_rows         one row per memscope_dump row: ID, context id,
//                          time, ptr, allocation id, size, malloc row of a
//                          FREE, Attr layout id + up to kSlots values (or the
//                          Attr text itself), stack ids
//   msms_dump_ctx          id -> Event, Event Type, Name, Process Id, Thread Id, Device Id
//   msms_attr_formats      id -> the SQL expression that renders that Attr layout
//   msms_stacks            interned call stacks (kind, id) -> text
// A 20-frame C stack (~2 KB of text) costs a row ~2 bytes instead of 2 KB:
// 1M rows with stacks make ~50 MB instead of ~2.4 GB. An INSTEAD OF UPDATE
// trigger lets `UPDATE memscope_dump SET Attr=...` (upstream's inefficient
// write-back, ours) work on the view. Readers that demand a *table* named
// memscope_dump (upstream's python analyzer checks sqlite_master for
// type='table') get one with --plugin-option=db.layout=table: the old
// layout, every row's text in full (schema version 1).
//
// Ours, in both layouts, for fast queries (schema version in PRAGMA user_version):
//   msms_meta              key/value: schema version, pid, command line, config, state
//   msms_blocks            one row per allocation: ids, device, pool, size, times, stacks
//                          (a view over the rows in layout "view")
//   msms_findings          analyzer findings: table name, sequence, columns as JSON
// Rows are written through prepared statements inside large transactions,
// committed every kBatch changes, so that the file is consistent at every
// commit; the journal mode is set to DELETE at the end so that the result is
// one self-contained file.
#include <msmemscope/plugin.hpp>

#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "../csv/dump_row.h"
#include "util/job_thread.h"
#include "util/sqlite_fd_path.h"
#include "util/json.h"
#include "util/written_events.h"

namespace fs = std::filesystem;

namespace {

using msmemscope::view;

constexpr int kSchemaVersion = 2;  // layout "view"; "table" keeps 1
constexpr uint64_t kBatch = 200000;
constexpr uint64_t kPageSize = 16384;
// The status line (ABI 1.2 progress) hears of the files' size every so many rows.
constexpr uint64_t kProgressRows = 16384;

using msmemscope::device_label;

// {"key":"value",...}: every value a JSON string, as upstream's DB writer
// (FixJson in csrc/analysis/data_handler.cpp); memory rows in upstream's key
// order, an ACCESS row with its `addr` (as the csv sink, dump_row.h).
void attr_json(std::string& out, const msms_event& ev) {
    const msms_kv* kv = ev.attrs;
    uint32_t n = ev.attr_count;
    std::vector<uint32_t> order(n);
    for (uint32_t i = 0; i < n; ++i) order[i] = i;
    bool memory = msms::is_memory_row(ev.kind), has_addr = false;
    if (memory) {
        std::stable_sort(order.begin(), order.end(), [kv](uint32_t a, uint32_t b) {
            return msms::memory_attr_rank(view(kv[a].key)) < msms::memory_attr_rank(view(kv[b].key));
        });
        for (uint32_t i = 0; i < n; ++i) has_addr |= view(kv[i].key) == "addr";
    }
    out += '{';
    bool first = true;
    auto put = [&](std::string_view k, std::string_view v) {
        if (!first) out += ',';
        first = false;
        msms::json_quote(out, k);
        out += ':';
        msms::json_quote(out, v);
    };
    bool addr_done = !(ev.kind == MSMS_EV_ACCESS && !has_addr);
    for (uint32_t i : order) {
        if (!addr_done && msms::memory_attr_rank(view(kv[i].key)) > 1) {
            char hex[24];
            std::snprintf(hex, sizeof(hex), "0x%016llx", static_cast<unsigned long long>(ev.ptr));
            put("addr", hex);
            addr_done = true;
        }
        put(view(kv[i].key), view(kv[i].value));
    }
    if (!addr_done) {
        char hex[24];
        std::snprintf(hex, sizeof(hex), "0x%016llx", static_cast<unsigned long long>(ev.ptr));
        put("addr", hex);
    }
    out += '}';
}

class Stmt {
public:
    Stmt() = default;
    Stmt(sqlite3* db, const std::string& sql) {
        if (sqlite3_prepare_v3(db, sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &s_, nullptr) != SQLITE_OK)
            throw std::runtime_error("SQLite: cannot prepare '" + sql + "': " + sqlite3_errmsg(db));
    }
    Stmt(const Stmt&) = delete;
    Stmt& operator=(const Stmt&) = delete;
    Stmt(Stmt&& o) noexcept : s_(o.s_) { o.s_ = nullptr; }
    Stmt& operator=(Stmt&& o) noexcept {
        std::swap(s_, o.s_);
        return *this;
    }
    ~Stmt() {
        if (s_) sqlite3_finalize(s_);
    }
    Stmt& i64(int col, int64_t v) {
        sqlite3_bind_int64(s_, col, v);
        return *this;
    }
    Stmt& text(int col, std::string_view v) {
        sqlite3_bind_text(s_, col, v.data() ? v.data() : "", static_cast<int>(v.size()), SQLITE_STATIC);
        return *this;
    }
    Stmt& null(int col) {
        sqlite3_bind_null(s_, col);
        return *this;
    }
    void run(sqlite3* db) { step(db, nullptr); }
    // The first column of the first row (0 when there is none).
    int64_t value(sqlite3* db) {
        int64_t v = 0;
        step(db, &v);
        return v;
    }

private:
    // One step, then reset; `first`: the first column of a row it gave.
    void step(sqlite3* db, int64_t* first) {
        int rc = sqlite3_step(s_);
        if (first && rc == SQLITE_ROW) *first = sqlite3_column_int64(s_, 0);
        sqlite3_reset(s_);
        if (rc != SQLITE_DONE && rc != SQLITE_ROW)
            throw std::runtime_error(std::string("SQLite: ") + sqlite3_errmsg(db));
    }
    sqlite3_stmt* s_ = nullptr;
};

// Which columns an Attr value is rendered from (layout "view").
enum class Src : char {
    Ptr = 'P',    // the row's ptr, 0x%016x
    Link = 'L',   // the row's allocation id, decimal
    Size = 'S',   // the row's size, decimal
    Dec = 'D',    // slot k, an integer, decimal
    Hex = 'X',    // slot k, an integer, 0x%016x
    Text = 'T',   // slot k, text already JSON-escaped
};

// "0" or -?[1-9][0-9]{0,17}: the text an integer renders back to exactly.
bool canonical_decimal(std::string_view v, int64_t& out) {
    if (v.empty() || v.size() > 19) return false;
    size_t i = v[0] == '-' ? 1 : 0;
    if (i == v.size() || v.size() - i > 18) return false;
    if (v[i] == '0' && (v.size() - i > 1 || i)) return false;  // "0" only, never "-0" or "01"
    int64_t n = 0;
    for (; i < v.size(); ++i) {
        if (v[i] < '0' || v[i] > '9') return false;
        n = n * 10 + (v[i] - '0');
    }
    out = v[0] == '-' ? -n : n;
    return true;
}

// "0x" + 16 lower-case hex digits (how pointers are written).
bool hex16(std::string_view v, uint64_t& out) {
    if (v.size() != 18 || v[0] != '0' || v[1] != 'x') return false;
    uint64_t n = 0;
    for (size_t i = 2; i < 18; ++i) {
        char c = v[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return false;
        n = n << 4 | static_cast<uint64_t>(d);
    }
    out = n;
    return true;
}

void sql_literal(std::string& out, std::string_view s) {
    out += '\'';
    for (char c : s) {
        if (c == '\'') out += '\'';
        out += c;
    }
    out += '\'';
}

class Database {
public:
    static constexpr int kSlots = 6;        // Attr values per row besides ptr, allocation id and size
    static constexpr size_t kMaxFormats = 1000;  // Attr layouts; rows of further ones keep their text

    // `rel_dir`/`name` below the run folder `run_fd`; `path` is for messages.
    Database(int run_fd, const std::string& rel_dir, const std::string& name, const std::string& path,
             const msmemscope::RunInfo& run, const std::string& device, bool table_layout)
        : path_(path), dev_(device), table_(table_layout) {
        // The folder through an openat chain, the file created anew
        // (O_EXCL|O_NOFOLLOW), then opened by SQLite through the folder's
        // descriptor (fd_path_vfs).
        std::string why;
        dir_.reset(msmemscope::files::open_dir(run_fd, rel_dir, true, why));
        if (!dir_) throw std::runtime_error("cannot create " + path + ": " + why);
        int fd = msmemscope::files::create(dir_.get(), name, why);
        if (fd < 0) throw std::runtime_error("cannot create " + path + ": " + why);
        ::close(fd);
        const char* vfs = msms::sqlite_fd_path_vfs();
        if (!vfs) throw std::runtime_error("cannot create " + path + ": SQLite has no default VFS");
        std::string via = msms::sqlite_fd_path(dir_.get(), name);
        if (sqlite3_open_v2(via.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, vfs) != SQLITE_OK) {
            std::string why = db_ ? sqlite3_errmsg(db_) : "out of memory";
            sqlite3_close(db_);
            db_ = nullptr;
            throw std::runtime_error("cannot create " + path + ": " + why);
        }
        // 16 KiB pages; a rollback journal, not WAL: rows are appended to
        // new pages, which need no journal, so it writes each page once where
        // WAL writes it twice (measured: 20% less CPU, half the I/O on 4M
        // rows); commits stay atomic. No fsync: a killed host leaves a
        // consistent file at the last commit; only an OS crash could lose more.
        exec("PRAGMA page_size=" + std::to_string(kPageSize));
        exec("PRAGMA journal_mode=TRUNCATE");
        exec("PRAGMA synchronous=OFF");
        // A large cache helps the table layout build its indexes at the end;
        // the view layout only appends (fresh cache pages cost page faults).
        exec(table_ ? "PRAGMA cache_size=-65536" : "PRAGMA cache_size=-8192");
        int version = table_ ? 1 : kSchemaVersion;
        exec("PRAGMA user_version=" + std::to_string(version));
        exec("CREATE TABLE msms_meta (key TEXT PRIMARY KEY, value TEXT)");
        exec("CREATE TABLE msms_stacks (kind TEXT, id INTEGER, text TEXT, PRIMARY KEY (kind, id)) WITHOUT ROWID");
        exec("CREATE TABLE msms_findings (\"table\" TEXT, seq INTEGER, cols TEXT)");
        if (table_) {
            exec("CREATE TABLE memscope_dump (\"ID\" INTEGER PRIMARY KEY, \"Event\" TEXT, \"Event Type\" TEXT, "
                 "\"Name\" TEXT, \"Timestamp(ns)\" INTEGER, \"Process Id\" INTEGER, \"Thread Id\" INTEGER, "
                 "\"Device Id\" TEXT, \"Ptr\" TEXT, \"Attr\" TEXT, \"Call Stack(Python)\" TEXT, \"Call Stack(C)\" TEXT)");
            exec("CREATE TABLE msms_blocks (allocation_id INTEGER, device TEXT, pool TEXT, ptr INTEGER, "
                 "size INTEGER, malloc_id INTEGER, malloc_ts INTEGER, free_id INTEGER, free_ts INTEGER, "
                 "thread_id INTEGER, owner TEXT, c_stack_id INTEGER, py_stack_id INTEGER)");
            ins_dump_ = Stmt(db_, "INSERT OR REPLACE INTO memscope_dump VALUES (?,?,?,?,?,?,?,?,?,?,?,?)");
            ins_block_ = Stmt(db_, "INSERT INTO msms_blocks VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)");
            upd_attr_ = Stmt(db_, "UPDATE memscope_dump SET \"Attr\"=json_set(\"Attr\", ?, json(?)) WHERE \"ID\"=?");
        } else {
            // No NOT NULL (every row has its ctx anyway): a constraint that
            // can abort a multi-row INSERT makes SQLite copy each page the
            // statement touches into a statement journal first (~14% of the
            // inserts' instructions).
            exec("CREATE TABLE msms_dump_rows (id INTEGER PRIMARY KEY, ctx INTEGER, ts INTEGER, ptr INTEGER, "
                 "link INTEGER, size INTEGER, mid INTEGER, fmt INTEGER, a1, a2, a3, a4, a5, a6, attr TEXT, "
                 "py INTEGER, c INTEGER)");
            exec("CREATE TABLE msms_dump_ctx (id INTEGER PRIMARY KEY, \"Event\" TEXT, \"Event Type\" TEXT, "
                 "\"Name\" TEXT, \"Process Id\" INTEGER, \"Thread Id\" INTEGER, \"Device Id\" TEXT)");
            exec("CREATE TABLE msms_attr_formats (id INTEGER PRIMARY KEY, expr TEXT)");
            exec("CREATE TABLE msms_live_blocks (malloc_id INTEGER PRIMARY KEY)");
            const std::string one = "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)";
            ins_row_ = Stmt(db_, "INSERT OR REPLACE INTO msms_dump_rows VALUES " + one);
            std::string many = "INSERT OR REPLACE INTO msms_dump_rows VALUES " + one;
            for (size_t i = 1; i < kBatchRows; ++i) many += "," + one;
            ins_rows_ = Stmt(db_, many);
            pend_.vals.resize(kGroupRows * kCols);
            ins_ctx_ = Stmt(db_, "INSERT INTO msms_dump_ctx VALUES (?,?,?,?,?,?,?)");
            ins_fmt_ = Stmt(db_, "INSERT INTO msms_attr_formats VALUES (?,?)");
            ins_live_ = Stmt(db_, "INSERT OR IGNORE INTO msms_live_blocks VALUES (?)");
            make_views();
            upd_attr_ = Stmt(db_, "UPDATE msms_dump_rows SET attr=json_set((SELECT \"Attr\" FROM memscope_dump "
                                  "WHERE \"ID\"=?3), ?1, json(?2)) WHERE id=?3");
        }
        ins_stack_ = Stmt(db_, "INSERT OR IGNORE INTO msms_stacks VALUES (?,?,?)");
        page_count_ = Stmt(db_, "PRAGMA page_count");
        ins_finding_ = Stmt(db_, "INSERT INTO msms_findings VALUES (?,?,?)");
        ins_meta_ = Stmt(db_, "INSERT OR REPLACE INTO msms_meta VALUES (?,?)");
        meta("schema_version", std::to_string(version));
        meta("layout", table_ ? "table" : "view");
        meta("tool", "msmemscope");
        meta("pid", std::to_string(run.pid));
        meta("timestamp", run.timestamp);
        meta("device", device);
        meta("command_line", run.command_line);
        meta("config", run.config_json);
        meta("complete", "false");
        exec("BEGIN");
    }
    ~Database() {
        if (db_) {
            try {
                flush_rows();  // rows of a run that ended early
                drain();
            } catch (...) {
            }
            writer_.stop();
            sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr);
            for (Stmt* s : {&ins_dump_, &ins_block_, &ins_row_, &ins_rows_, &ins_ctx_, &ins_fmt_, &ins_live_, &ins_stack_,
                            &upd_attr_, &ins_finding_, &ins_meta_})
                *s = Stmt();
            for (auto& [k, s] : ins_py_) s = Stmt();
            batch_stmts_.clear();
            sqlite3_close(db_);
        }
    }

    void row(const msms_event& ev) {
        std::string_view dev = dev_;  // a row without a device: this file's
        if (ev.device_kind != MSMS_DEV_NA && !own_device(ev)) {
            other_dev_ = device_label(ev);
            dev = other_dev_;
        }
        if (table_) table_row(ev, dev);
        else view_row(ev, dev);
        ++rows_;
        tick();
    }

    void python_trace(const msms_event& ev, uint32_t pid) {
        auto it = ins_py_.find(pid);
        if (it == ins_py_.end()) {
            std::string table = "python_trace_" + std::to_string(pid);
            exec("CREATE TABLE IF NOT EXISTS " + table +
                 " (\"FuncInfo\" TEXT, \"StartTime(ns)\" TEXT, \"EndTime(ns)\" TEXT, \"Thread Id\" INTEGER, "
                 "\"Process Id\" INTEGER)");
            it = ins_py_.emplace(pid, Stmt(db_, "INSERT INTO " + table + " VALUES (?,?,?,?,?)")).first;
        }
        drain();
        // Start/end times as TEXT, N/A when unknown (upstream's table).
        std::string start = ev.aux0 ? std::to_string(ev.aux0) : "N/A";
        std::string end = ev.timestamp_ns ? std::to_string(ev.timestamp_ns) : "N/A";
        it->second.text(1, view(ev.name))
            .text(2, start)
            .text(3, end)
            .i64(4, ev.tid)
            .i64(5, ev.pid)
            .run(db_);
        tick();
    }

    void annotate(uint64_t id, std::string_view key, std::string_view value) {
        flush_rows();
        drain();  // the row it changes is in; the connection is this thread's
        std::string path = "$.";
        msms::json_quote(path, key);  // $."key" handles any characters
        std::string v;
        msms::json_quote(v, value);  // a string, as every Attr value
        upd_attr_.text(1, path).text(2, v).i64(3, static_cast<int64_t>(id)).run(db_);
        if (table_ && key == "owner")
            for (auto& [aid, b] : live_)
                if (b.malloc_id == id) b.owner = std::string(value);
        tick();
    }

    void finding(std::string_view table, const msms_kv* cols, uint32_t n) {
        std::string j = "{";
        for (uint32_t i = 0; i < n; ++i) {
            if (i) j += ',';
            msms::json_quote(j, view(cols[i].key));
            j += ':';
            msms::json_attr_value(j, view(cols[i].value));
        }
        j += '}';
        drain();
        ins_finding_.text(1, table).i64(2, static_cast<int64_t>(++findings_)).text(3, j).run(db_);
        tick();
    }

    void finish() {
        flush_rows();
        drain();
        // Blocks never freed: free_id and free_ts stay NULL.
        for (auto& [id, b] : live_) {
            if (table_) block(id, b, -1, -1);
            else ins_live_.i64(1, static_cast<int64_t>(b.malloc_id)).run(db_);
        }
        live_.clear();
        meta("rows", std::to_string(rows_));
        meta("complete", "true");
        exec("COMMIT");
        if (table_) {
            exec("CREATE INDEX IF NOT EXISTS memscope_dump_time ON memscope_dump (\"Timestamp(ns)\")");
            exec("CREATE INDEX IF NOT EXISTS msms_blocks_time ON msms_blocks (device, malloc_ts)");
            exec("CREATE INDEX IF NOT EXISTS msms_blocks_malloc ON msms_blocks (malloc_id)");
            exec("CREATE INDEX IF NOT EXISTS msms_blocks_id ON msms_blocks (allocation_id)");
        }
        exec("CREATE INDEX IF NOT EXISTS msms_findings_table ON msms_findings (\"table\", seq)");
        exec("CREATE VIEW IF NOT EXISTS msms_leaks AS SELECT seq, cols FROM msms_findings WHERE \"table\"='leaks'");
        exec("PRAGMA journal_mode=DELETE");
        exec("BEGIN");  // the destructor commits this empty one
    }

    uint64_t rows() const { return rows_; }
    const std::string& path() const { return path_; }
    // The database's size as SQLite sees it now (pages, written or still
    // cached in the open transaction): what the status line shows.
    // In layout "view" as the row writer last counted them (after each
    // group of rows): asking the connection would wait for the writer, and
    // the status line asks every kProgressRows rows.
    uint64_t size_bytes() {
        if (!table_) return pages_.load(std::memory_order_relaxed) * kPageSize;
        return static_cast<uint64_t>(page_count_.value(db_)) * kPageSize;
    }

private:
    void exec(const std::string& sql) {
        drain();
        exec_here(sql.c_str());
    }
    // On the thread that holds the connection now (the row writer's jobs
    // included), without waiting for the writer.
    void exec_here(const char* sql) {
        char* msg = nullptr;
        if (sqlite3_exec(db_, sql, nullptr, nullptr, &msg) != SQLITE_OK) {
            std::string why = msg ? msg : "unknown error";
            sqlite3_free(msg);
            throw std::runtime_error(path_ + ": SQLite: " + why + " (in: " + sql + ")");
        }
    }
    void meta(const std::string& k, const std::string& v) {
        drain();
        ins_meta_.text(1, k).text(2, v).run(db_);
    }
    struct Live {
        uint64_t malloc_id, ts, ptr, size, c_stack, py_stack;
        uint32_t tid;
        uint16_t type;
        std::string owner, device;
    };
    // Whether the row is of this file's device (the common case, cached).
    bool own_device(const msms_event& ev) {
        if (ev.device_kind == own_kind_ && ev.device_id == own_id_) return true;
        if (device_label(ev) != dev_) return false;
        own_kind_ = ev.device_kind;
        own_id_ = ev.device_id;
        return true;
    }

    static const char* kind_text(const msms_event& ev) {
        const char* k = msms_event_kind_name(ev.kind);
        return k ? k : "N/A";
    }
    static const char* type_text(uint16_t type) {
        const char* t = msms_event_type_name(type);
        return t ? t : "N/A";
    }
    static std::string_view name_text(const msms_event& ev) {
        if (const char* oom = msms::oom_row_name(ev)) return oom;
        return ev.name.size ? view(ev.name) : std::string_view("N/A");
    }
    static bool has_ptr(const msms_event& ev) {
        return ev.kind == MSMS_EV_MALLOC || ev.kind == MSMS_EV_FREE || ev.kind == MSMS_EV_ACCESS;
    }

    // ---- layout "table": every row's text in full (schema version 1)
    void table_row(const msms_event& ev, std::string_view dev) {
        attr_.clear();
        attr_json(attr_, ev);
        char ptr[24];
        if (has_ptr(ev)) {
            static const char hex[] = "0123456789abcdef";
            ptr[0] = '0';
            ptr[1] = 'x';
            for (int i = 0; i < 16; ++i) ptr[2 + i] = hex[(ev.ptr >> (60 - 4 * i)) & 0xf];
            ptr[18] = 0;
        } else {
            std::memcpy(ptr, "N/A", 4);
        }
        ins_dump_.i64(1, static_cast<int64_t>(ev.id))
            .text(2, kind_text(ev))
            .text(3, type_text(ev.type))
            .text(4, name_text(ev))
            .i64(5, static_cast<int64_t>(ev.timestamp_ns))
            .i64(6, ev.pid)
            .i64(7, ev.tid)
            .text(8, dev)
            .text(9, ptr)
            .text(10, attr_)
            .text(11, view(ev.py_stack))
            .text(12, view(ev.c_stack))
            .run(db_);
        if (ev.kind == MSMS_EV_MALLOC && ev.allocation_id) {
            stack_id("c", ev.c_stack_id, ev.c_stack);
            stack_id("python", ev.py_stack_id, ev.py_stack);
            Live& b = live_[ev.allocation_id];
            b.malloc_id = ev.id;
            b.ts = ev.timestamp_ns;
            b.ptr = ev.ptr;
            b.size = ev.size;
            b.tid = ev.tid;
            b.type = ev.type;
            b.c_stack = ev.c_stack_id;
            b.py_stack = ev.py_stack_id;
            b.owner = std::string(msmemscope::attr(ev, "owner"));
            b.device = std::string(dev);
        } else if (ev.kind == MSMS_EV_FREE && ev.allocation_id) {
            auto it = live_.find(ev.allocation_id);
            if (it != live_.end()) {
                block(ev.allocation_id, it->second, static_cast<int64_t>(ev.id), static_cast<int64_t>(ev.timestamp_ns));
                live_.erase(it);
            }
        }
    }
    void block(uint64_t id, const Live& b, int64_t free_id, int64_t free_ts) {
        ins_block_.i64(1, static_cast<int64_t>(id))
            .text(2, b.device)
            .text(3, type_text(b.type))
            .i64(4, static_cast<int64_t>(b.ptr))
            .i64(5, static_cast<int64_t>(b.size))
            .i64(6, static_cast<int64_t>(b.malloc_id))
            .i64(7, static_cast<int64_t>(b.ts));
        if (free_id >= 0) ins_block_.i64(8, free_id).i64(9, free_ts);
        else ins_block_.null(8).null(9);
        ins_block_.i64(10, b.tid);
        if (b.owner.empty()) ins_block_.null(11);
        else ins_block_.text(11, b.owner);
        if (b.c_stack) ins_block_.i64(12, static_cast<int64_t>(b.c_stack));
        else ins_block_.null(12);
        if (b.py_stack) ins_block_.i64(13, static_cast<int64_t>(b.py_stack));
        else ins_block_.null(13);
        ins_block_.run(db_);
        tick();
    }

    // ---- layout "view": stacks, contexts and Attr layouts stored once

    // The stack's id in msms_stacks: the capture's interned id; a stack
    // given as text only (no id: replayed dump files, tests) gets a negative
    // id of its own, one per distinct text. 0 = no stack.
    int64_t stack_id(const char* kind, uint64_t id, msms_str text) {
        if (!text.size) return 0;
        bool c = kind[0] == 'c';
        if (id && id <= static_cast<uint64_t>(INT64_MAX)) {
            auto& seen = c ? c_seen_ : py_seen_;
            if (seen.insert(id).second) {
                drain();
                ins_stack_.text(1, kind).i64(2, static_cast<int64_t>(id)).text(3, view(text)).run(db_);
            }
            return static_cast<int64_t>(id);
        }
        auto& by_text = c ? c_text_ : py_text_;
        auto found = by_text.find(std::string(view(text)));
        if (found != by_text.end()) return found->second;
        auto it = by_text.emplace(std::string(view(text)), -static_cast<int64_t>(by_text.size() + 1)).first;
        {
            drain();
            ins_stack_.text(1, kind).i64(2, it->second).text(3, view(text)).run(db_);
        }
        return it->second;
    }

    int64_t context(const msms_event& ev, std::string_view dev) {
        std::string_view name = name_text(ev);
        // The last few contexts first (a heap-heavy run alternates between
        // two: MALLOC and FREE of one thread), without building the key.
        for (const RecentCtx& c : recent_ctx_)
            if (c.id && c.kind == ev.kind && c.type == ev.type && c.pid == ev.pid && c.tid == ev.tid && c.dev == dev &&
                c.name == name)
                return c.id;
        int64_t id = context_id(ev, dev, name);
        RecentCtx& c = recent_ctx_[next_recent_ctx_++ % kRecentCtx];
        c.kind = ev.kind;
        c.type = ev.type;
        c.pid = ev.pid;
        c.tid = ev.tid;
        c.dev.assign(dev);
        c.name.assign(name);
        c.id = id;
        return id;
    }
    int64_t context_id(const msms_event& ev, std::string_view dev, std::string_view name) {
        key_.clear();
        char head[16];
        std::memcpy(head, &ev.kind, 2);
        std::memcpy(head + 2, &ev.type, 2);
        std::memcpy(head + 4, &ev.pid, 4);
        std::memcpy(head + 8, &ev.tid, 4);
        uint32_t dn = static_cast<uint32_t>(dev.size());
        std::memcpy(head + 12, &dn, 4);
        key_.append(head, sizeof(head));
        key_ += dev;
        key_ += name;
        auto found = ctx_.find(key_);
        if (found != ctx_.end()) return found->second;
        auto it = ctx_.emplace(key_, static_cast<int64_t>(ctx_.size() + 1)).first;
        {
            drain();
            ins_ctx_.i64(1, it->second)
                .text(2, kind_text(ev))
                .text(3, type_text(ev.type))
                .text(4, name)
                .i64(5, ev.pid)
                .i64(6, ev.tid)
                .text(7, dev)
                .run(db_);
        }
        return it->second;
    }

    struct RecentCtx {
        uint16_t kind = 0, type = 0;
        uint32_t pid = 0, tid = 0;
        std::string dev, name;
        int64_t id = 0;  // 0: empty
    };
    static constexpr size_t kRecentCtx = 4;
    RecentCtx recent_ctx_[kRecentCtx];
    size_t next_recent_ctx_ = 0;

    struct Slot {
        bool is_int;
        int64_t n;
        std::string text;
    };

    // The row's Attr as a layout id and slot values; false when it has to
    // keep its text (more distinct values than slots, too many layouts).
    bool encode_attr(const msms_event& ev, bool ptr_col, bool link_col, bool size_col, int64_t& fmt) {
        nslots_ = 0;
        fkey_.clear();
        const msms_kv* kv = ev.attrs;
        uint32_t n = ev.attr_count;
        if (n > 64) return false;
        // the order attr_json writes (upstream's for memory rows): the same
        // keys as the row before (nearly always) give the same order
        uint32_t* order = order_;
        uint32_t m = 0;
        constexpr uint32_t kSynthAddr = UINT32_MAX;
        bool same_keys = same_keys_as_before(ev);
        int64_t before = same_keys ? fmt_before_ : 0;
        fmt_before_ = 0;  // set again below when this row gets a layout
        if (same_keys) {
            m = order_len_;
        } else {
            for (uint32_t i = 0; i < n; ++i) order[m++] = i;
        }
        if (!same_keys && msms::is_memory_row(ev.kind)) {
            bool has_addr = false;
            for (uint32_t i = 0; i < n; ++i) has_addr |= view(kv[i].key) == "addr";
            // stable insertion sort by rank (a handful of keys; no allocation)
            int rank[65];
            for (uint32_t i = 0; i < m; ++i) {
                int r = msms::memory_attr_rank(view(kv[i].key));
                uint32_t j = i;
                while (j > 0 && rank[j - 1] > r) {
                    order[j] = order[j - 1];
                    rank[j] = rank[j - 1];
                    --j;
                }
                order[j] = i;
                rank[j] = r;
            }
            if (ev.kind == MSMS_EV_ACCESS && !has_addr) {
                uint32_t at = 0;
                while (at < m && msms::memory_attr_rank(view(kv[order[at]].key)) <= 1) ++at;
                for (uint32_t j = m; j > at; --j) order[j] = order[j - 1];
                order[at] = kSynthAddr;
                ++m;
            }
        }
        if (!same_keys) remember_keys(ev, m);
        // Each value's source and slot; the layout is the row before's when
        // those are too (then no key is built and no layout looked up).
        bool same_layout = before > 0;
        for (uint32_t j = 0; j < m; ++j) {
            Src src;
            int slot = 0;
            if (order[j] == kSynthAddr) {
                src = Src::Ptr;
            } else {
                std::string_view v = view(kv[order[j]].value);
                int64_t dec;
                uint64_t hex;
                if (hex16(v, hex)) {
                    if (ptr_col && hex == ev.ptr) src = Src::Ptr;
                    else {
                        src = Src::Hex;
                        if (!(slot = int_slot(static_cast<int64_t>(hex)))) return false;
                    }
                } else if (canonical_decimal(v, dec)) {
                    if (link_col && dec == static_cast<int64_t>(ev.allocation_id)) src = Src::Link;
                    else if (size_col && dec == static_cast<int64_t>(ev.size)) src = Src::Size;
                    else {
                        src = Src::Dec;
                        if (!(slot = int_slot(dec))) return false;
                    }
                } else {
                    src = Src::Text;
                    escaped_.clear();
                    msms::json_quote(escaped_, v);
                    if (!(slot = text_slot(std::string_view(escaped_).substr(1, escaped_.size() - 2)))) return false;
                }
            }
            char code[2] = {static_cast<char>(src), static_cast<char>('0' + slot)};
            same_layout = same_layout && codes_[2 * j] == code[0] && codes_[2 * j + 1] == code[1];
            codes_[2 * j] = code[0];
            codes_[2 * j + 1] = code[1];
        }
        if (same_layout) {
            fmt = fmt_before_ = before;
            return true;
        }
        for (uint32_t j = 0; j < m; ++j) {
            std::string_view key = order[j] == kSynthAddr ? std::string_view("addr") : view(kv[order[j]].key);
            uint32_t kn = static_cast<uint32_t>(key.size());
            fkey_.append(reinterpret_cast<const char*>(&kn), 4);
            fkey_ += key;
            fkey_.append(codes_ + 2 * j, 2);
        }
        auto it = formats_.find(fkey_);
        if (it != formats_.end()) {
            fmt = fmt_before_ = it->second;
            return true;
        }
        if (formats_.size() >= kMaxFormats) return false;
        fmt = static_cast<int64_t>(formats_.size() + 1);
        formats_.emplace(fkey_, fmt);
        std::string expr = format_expr(fkey_);
        drain();
        ins_fmt_.i64(1, fmt).text(2, expr).run(db_);
        format_exprs_.emplace_back(fmt, std::move(expr));
        make_views();  // the view renders the new layout from now on
        fmt_before_ = fmt;
        return true;
    }
    // The keys of the row before encode_attr's, in their order, and their
    // order for the Attr text: rows of one kind and pool share them.
    bool same_keys_as_before(const msms_event& ev) const {
        if (ev.attr_count != key_lens_.size() || msms::is_memory_row(ev.kind) != keys_memory_ ||
            (ev.kind == MSMS_EV_ACCESS) != keys_access_)
            return false;
        size_t at = 0;
        for (uint32_t i = 0; i < ev.attr_count; ++i) {
            std::string_view k = view(ev.attrs[i].key);
            if (k.size() != key_lens_[i] || std::memcmp(k.data(), keys_.data() + at, k.size()) != 0) return false;
            at += k.size();
        }
        return true;
    }
    void remember_keys(const msms_event& ev, uint32_t m) {
        keys_.clear();
        key_lens_.clear();
        for (uint32_t i = 0; i < ev.attr_count; ++i) {
            std::string_view k = view(ev.attrs[i].key);
            keys_ += k;
            key_lens_.push_back(static_cast<uint32_t>(k.size()));
        }
        keys_memory_ = msms::is_memory_row(ev.kind);
        keys_access_ = ev.kind == MSMS_EV_ACCESS;
        order_len_ = m;
    }
    int int_slot(int64_t n) {
        for (int i = 0; i < nslots_; ++i)
            if (slots_[i].is_int && slots_[i].n == n) return i + 1;
        if (nslots_ == kSlots) return 0;
        slots_[nslots_].is_int = true;
        slots_[nslots_].n = n;
        return ++nslots_;
    }
    int text_slot(std::string_view t) {
        for (int i = 0; i < nslots_; ++i)
            if (!slots_[i].is_int && slots_[i].text == t) return i + 1;
        if (nslots_ == kSlots) return 0;
        slots_[nslots_].is_int = false;
        slots_[nslots_].text.assign(t);
        return ++nslots_;
    }
    // The SQL expression (over msms_dump_rows d) that renders a layout.
    static std::string format_expr(const std::string& fkey) {
        std::string expr, lit = "{";
        size_t p = 0;
        bool first = true;
        while (p < fkey.size()) {
            uint32_t kn;
            std::memcpy(&kn, fkey.data() + p, 4);
            std::string_view key(fkey.data() + p + 4, kn);
            Src src = static_cast<Src>(fkey[p + 4 + kn]);
            int slot = fkey[p + 5 + kn] - '0';
            p += 6 + kn;
            if (!first) lit += ',';
            first = false;
            msms::json_quote(lit, key);
            lit += ":\"";
            sql_literal(expr, lit);
            lit.clear();
            expr += "||";
            std::string a = "d.a" + std::to_string(slot);
            switch (src) {
            case Src::Ptr: expr += "printf('0x%016x',d.ptr)"; break;
            case Src::Link: expr += "d.link"; break;
            case Src::Size: expr += "d.size"; break;
            case Src::Dec: expr += a; break;
            case Src::Hex: expr += "printf('0x%016x'," + a + ")"; break;
            case Src::Text: expr += a; break;
            }
            expr += "||";
            lit += '"';
        }
        lit += '}';
        sql_literal(expr, lit);
        return expr;
    }

    void view_row(const msms_event& ev, std::string_view dev) {
        bool ptr_col = has_ptr(ev);
        bool link_col = ev.allocation_id && ev.allocation_id <= static_cast<uint64_t>(INT64_MAX);
        bool size_col = ev.size && ev.size <= static_cast<uint64_t>(INT64_MAX);
        int64_t fmt = 0;
        bool coded = encode_attr(ev, ptr_col, link_col, size_col, fmt);
        int64_t c = stack_id("c", ev.c_stack_id, ev.c_stack);
        int64_t py = stack_id("python", ev.py_stack_id, ev.py_stack);
        Val* v = &pend_.vals[npend_ * kCols];
        v[0].set(static_cast<int64_t>(ev.id));
        v[1].set(context(ev, dev));
        v[2].set(static_cast<int64_t>(ev.timestamp_ns));
        v[3].set_if(ptr_col, static_cast<int64_t>(ev.ptr));
        v[4].set_if(link_col, static_cast<int64_t>(ev.allocation_id));
        v[5].set_if(size_col, static_cast<int64_t>(ev.size));
        int64_t mid = -1;
        if (ev.kind == MSMS_EV_MALLOC && ev.allocation_id) {
            live_[ev.allocation_id].malloc_id = ev.id;
        } else if (ev.kind == MSMS_EV_FREE && ev.allocation_id) {
            auto it = live_.find(ev.allocation_id);
            if (it != live_.end()) {
                mid = static_cast<int64_t>(it->second.malloc_id);
                live_.erase(it);
            }
        }
        v[6].set_if(mid >= 0, mid);
        if (coded) {
            v[7].set(fmt);
            for (int i = 0; i < kSlots; ++i) {
                if (i >= nslots_) v[8 + i].kind = 0;
                else if (slots_[i].is_int) v[8 + i].set(slots_[i].n);
                else v[8 + i].set_text(pend_.text, slots_[i].text);
            }
            v[14].kind = 0;
        } else {
            v[7].kind = 0;
            for (int i = 0; i < kSlots; ++i) v[8 + i].kind = 0;
            size_t at = pend_.text.size();
            attr_json(pend_.text, ev);
            v[14].kind = 2;
            v[14].n = static_cast<int64_t>(at);
            v[14].len = static_cast<uint32_t>(pend_.text.size() - at);
        }
        v[15].set_if(py != 0, py);  // no stack: NULL (the view renders '' either way)
        v[16].set_if(c != 0, c);
        if (++npend_ == kGroupRows) flush_rows();
    }

    // A value of a row: 16 bytes (a million rows' values are written by
    // the sink's thread and read by the writer's); text lives in its
    // group's Rows::text.
    struct Val {
        int64_t n = 0;     // the integer, or the text's offset
        uint32_t kind = 0;  // 0 NULL, 1 integer, 2 text
        uint32_t len = 0;   // the text's length
        void set(int64_t v) {
            kind = 1;
            n = v;
        }
        void set_if(bool has, int64_t v) {
            kind = has ? 1 : 0;
            n = v;
        }
        void set_text(std::string& texts, const std::string& v) {
            kind = 2;
            n = static_cast<int64_t>(texts.size());
            len = static_cast<uint32_t>(v.size());
            texts += v;
        }
        void bind(Stmt& s, int col, const std::string& texts) const {
            if (kind == 1) s.i64(col, n);
            else if (kind == 2) s.text(col, std::string_view(texts).substr(static_cast<size_t>(n), len));
            else s.null(col);
        }
    };
    struct Rows {
        std::vector<Val> vals;  // kGroupRows rows of kCols values
        std::string text;       // their text values
    };
    static constexpr int kCols = 17;
    // Rows go to SQLite kBatchRows at a time, in one multi-row INSERT: the
    // statement's own cost (step, reset, the statement transaction) once
    // per batch instead of once per row.
    static constexpr size_t kBatchRows = 32;
    // Rows are handed to the row writer thread kGroupRows at a time (view
    // layout): SQLite's work for the rows (a third of the host's CPU on a
    // stack-heavy run) runs beside the decoding and the row building
    // instead of after them. The connection is used by one thread at a
    // time (SQLITE_OPEN_NOMUTEX): every other use of it drains the writer
    // first (drain()), which is rare on the rows' path (a new stack,
    // context or Attr layout); the commit every kBatch rows is the
    // writer's own job.
    static constexpr size_t kGroupRows = 64 * kBatchRows;
    // `commit`: the writer commits the transaction after the rows and
    // begins the next (view layout): the commit's page writes run beside
    // the next rows' building instead of on the sink's thread.
    void flush_rows(bool commit = false) {
        if (!npend_ && !(commit && !table_)) return;
        if (!table_) {
            writer_.wait();  // the group before is in; its error is thrown here
            std::swap(work_, pend_);
            nwork_ = npend_;
            npend_ = 0;
            writer_.submit([this, commit] {
                insert_rows(work_, nwork_);
                if (commit) commit_and_begin();
                pages_.store(static_cast<uint64_t>(page_count_.value(db_)), std::memory_order_relaxed);
            });
            if (pend_.vals.size() != kGroupRows * kCols) pend_.vals.resize(kGroupRows * kCols);
            pend_.text.clear();
            return;
        }
        insert_rows(pend_, npend_);
        npend_ = 0;
        pend_.text.clear();
    }
    // n rows of `rows`: kBatchRows per INSERT, the rest one by one. A batch
    // names only the columns that one of its rows has (a heap row has ~10
    // of the 17; the others default to NULL): a fifth fewer instructions
    // per row than binding all 17 (callgrind, 100k heap rows).
    void insert_rows(const Rows& rows, size_t n) {
        const std::string& texts = rows.text;
        size_t r = 0;
        for (; r + kBatchRows <= n; r += kBatchRows) {
            const Val* b = &rows.vals[r * kCols];
            uint32_t mask = 0;
            for (size_t i = 0; i < kBatchRows * kCols; ++i)
                if (b[i].kind) mask |= 1u << (i % kCols);
            mask |= 3u;  // id and ctx: always there
            Stmt* st = batch_stmt(mask);
            if (!st) {
                for (size_t i = 0; i < kBatchRows * kCols; ++i) b[i].bind(ins_rows_, static_cast<int>(i + 1), texts);
                ins_rows_.run(db_);
                continue;
            }
            int col = 1;
            for (size_t k = 0; k < kBatchRows; ++k)
                for (int i = 0; i < kCols; ++i)
                    if (mask >> i & 1u) b[k * kCols + i].bind(*st, col++, texts);
            st->run(db_);
        }
        for (; r < n; ++r) {
            for (int i = 0; i < kCols; ++i) rows.vals[r * kCols + i].bind(ins_row_, i + 1, texts);
            ins_row_.run(db_);
        }
    }
    // The multi-row INSERT naming the columns of `mask`, prepared once;
    // nullptr (the statement of all columns) past kMaxBatchStmts shapes.
    static constexpr size_t kMaxBatchStmts = 64;
    Stmt* batch_stmt(uint32_t mask) {
        static const char* const kNames[kCols] = {"id", "ctx", "ts", "ptr", "link", "size", "mid", "fmt", "a1",
                                                  "a2", "a3", "a4", "a5", "a6", "attr", "py", "c"};
        if (mask == (1u << kCols) - 1) return nullptr;
        auto it = batch_stmts_.find(mask);
        if (it != batch_stmts_.end()) return &it->second;
        if (batch_stmts_.size() >= kMaxBatchStmts) return nullptr;
        std::string cols, one;
        for (int i = 0; i < kCols; ++i) {
            if (!(mask >> i & 1u)) continue;
            cols += cols.empty() ? "" : ",";
            cols += kNames[i];
            one += one.empty() ? "(?" : ",?";
        }
        one += ')';
        std::string sql = "INSERT OR REPLACE INTO msms_dump_rows (" + cols + ") VALUES " + one;
        for (size_t i = 1; i < kBatchRows; ++i) sql += "," + one;
        return &batch_stmts_.emplace(mask, Stmt(db_, sql)).first->second;
    }
    // Waits until the writer holds no rows (the connection is then this
    // thread's); the writer's error, if any, is thrown here.
    void drain() { writer_.wait(); }

    // memscope_dump (and msms_blocks) as views over the rows; made again
    // whenever a new Attr layout appears (inside the open transaction, so
    // every commit holds views that render every row).
    void make_views() {
        std::string attr = "CASE WHEN d.attr IS NOT NULL THEN d.attr";
        for (auto& [id, expr] : format_exprs_) attr += " WHEN d.fmt=" + std::to_string(id) + " THEN " + expr;
        attr += " ELSE '{}' END";
        exec("DROP VIEW IF EXISTS msms_blocks");
        exec("DROP VIEW IF EXISTS memscope_dump");
        exec("CREATE VIEW memscope_dump AS SELECT d.id AS \"ID\", x.\"Event\" AS \"Event\", "
             "x.\"Event Type\" AS \"Event Type\", x.\"Name\" AS \"Name\", d.ts AS \"Timestamp(ns)\", "
             "x.\"Process Id\" AS \"Process Id\", x.\"Thread Id\" AS \"Thread Id\", x.\"Device Id\" AS \"Device Id\", "
             "CASE WHEN d.ptr IS NULL THEN 'N/A' ELSE printf('0x%016x',d.ptr) END AS \"Ptr\", " +
             attr + " AS \"Attr\", COALESCE(ps.text,'') AS \"Call Stack(Python)\", "
             "COALESCE(cs.text,'') AS \"Call Stack(C)\" FROM msms_dump_rows d JOIN msms_dump_ctx x ON x.id=d.ctx "
             "LEFT JOIN msms_stacks ps ON ps.kind='python' AND ps.id=d.py "
             "LEFT JOIN msms_stacks cs ON cs.kind='c' AND cs.id=d.c");
        // Only Attr can change (upstream's inefficient write-back does that).
        exec("CREATE TRIGGER memscope_dump_update INSTEAD OF UPDATE ON memscope_dump BEGIN "
             "SELECT RAISE(ABORT, 'memscope_dump: only the Attr column can be changed') WHERE "
             "NEW.\"ID\" IS NOT OLD.\"ID\" OR NEW.\"Event\" IS NOT OLD.\"Event\" OR "
             "NEW.\"Event Type\" IS NOT OLD.\"Event Type\" OR NEW.\"Name\" IS NOT OLD.\"Name\" OR "
             "NEW.\"Timestamp(ns)\" IS NOT OLD.\"Timestamp(ns)\" OR NEW.\"Process Id\" IS NOT OLD.\"Process Id\" OR "
             "NEW.\"Thread Id\" IS NOT OLD.\"Thread Id\" OR NEW.\"Device Id\" IS NOT OLD.\"Device Id\" OR "
             "NEW.\"Ptr\" IS NOT OLD.\"Ptr\" OR NEW.\"Call Stack(Python)\" IS NOT OLD.\"Call Stack(Python)\" OR "
             "NEW.\"Call Stack(C)\" IS NOT OLD.\"Call Stack(C)\"; "
             "UPDATE msms_dump_rows SET attr=NEW.\"Attr\" WHERE id=OLD.\"ID\"; END");
        const char* block_cols =
            "m.link AS allocation_id, x.\"Device Id\" AS device, x.\"Event Type\" AS pool, m.ptr AS ptr, "
            "m.size AS size, m.id AS malloc_id, m.ts AS malloc_ts, %s AS free_id, %s AS free_ts, "
            "x.\"Thread Id\" AS thread_id, json_extract(v.\"Attr\", '$.owner') AS owner, "
            "CASE WHEN m.c>0 THEN m.c END AS c_stack_id, CASE WHEN m.py>0 THEN m.py END AS py_stack_id";
        char freed[1024], live[1024];
        std::snprintf(freed, sizeof(freed), block_cols, "f.id", "f.ts");
        std::snprintf(live, sizeof(live), block_cols, "NULL", "NULL");
        exec(std::string("CREATE VIEW msms_blocks AS SELECT ") + freed +
             " FROM msms_dump_rows f JOIN msms_dump_rows m ON m.id=f.mid JOIN msms_dump_ctx x ON x.id=m.ctx "
             "JOIN memscope_dump v ON v.\"ID\"=m.id WHERE f.mid IS NOT NULL UNION ALL SELECT " +
             live +
             " FROM msms_live_blocks l JOIN msms_dump_rows m ON m.id=l.malloc_id JOIN msms_dump_ctx x ON x.id=m.ctx "
             "JOIN memscope_dump v ON v.\"ID\"=m.id");
    }

    // Commit every kBatch changes: the file on disk is always a consistent
    // database holding everything up to the last commit.
    void tick() {
        if (++since_commit_ < kBatch) return;
        since_commit_ = 0;
        if (!table_) return flush_rows(true);
        flush_rows();
        commit_and_begin();  // table layout: no row writer, the connection is this thread's
    }
    // On whichever thread holds the connection (the row writer's job).
    void commit_and_begin() {
        exec_here("COMMIT");
        exec_here("BEGIN");
    }

    std::string path_;
    msmemscope::files::Fd dir_;  // the file's folder (SQLite reaches it through /proc/self/fd)
    sqlite3* db_ = nullptr;
    Stmt ins_dump_, ins_block_, ins_row_, ins_rows_, ins_ctx_, ins_fmt_, ins_live_, ins_stack_, upd_attr_, ins_finding_, ins_meta_;
    Stmt page_count_;
    std::atomic<uint64_t> pages_{0};  // the row writer's last page count (size_bytes)
    std::string dev_, other_dev_;
    bool table_;
    int32_t own_kind_ = -1, own_id_ = -1;
    std::unordered_map<uint64_t, Live> live_;
    std::map<uint32_t, Stmt> ins_py_;
    std::unordered_set<uint64_t> c_seen_, py_seen_;
    std::unordered_map<std::string, int64_t> c_text_, py_text_, ctx_, formats_;
    std::vector<std::pair<int64_t, std::string>> format_exprs_;
    Slot slots_[kSlots];
    int nslots_ = 0;
    // encode_attr's memory of the row before (same_keys_as_before)
    std::string keys_;
    std::vector<uint32_t> key_lens_;
    bool keys_memory_ = false, keys_access_ = false;
    uint32_t order_[65];
    uint32_t order_len_ = 0;
    char codes_[130];
    int64_t fmt_before_ = 0;  // the layout of the row before; 0: none
    std::string attr_, key_, fkey_, escaped_;
    Rows pend_;
    size_t npend_ = 0;
    // The row writer (flush_rows): the rows it writes, untouched here
    // between submit() and the next wait().
    Rows work_;
    size_t nwork_ = 0;
    std::unordered_map<uint32_t, Stmt> batch_stmts_;  // the writer's (insert_rows)
    msms::JobThread writer_;
    uint64_t rows_ = 0, since_commit_ = 0, findings_ = 0;
};

class DbSink : public msmemscope::ISink {
public:
    static constexpr const char* kTypeName = "db";
    static constexpr const char* kVersion = "1.0.0";
    static constexpr const char* kDescription =
        "memscope_dump_{ts}.db per device (SQLite, msMemScope-compatible memscope_dump and python_trace tables, "
        "plus indexed blocks, stacks and findings)";

    DbSink(msmemscope::Host host, const msmemscope::Options& opts)
        : host_(host),
          written_(msms::WrittenEvents::from_option(opts.get("write_events", "all"))),
          table_layout_(opts.get("layout", "view") == "table") {}

    static const msms_option_spec* options(uint32_t& count) {
        static const msms_option_spec specs[] = {
            msms::WrittenEvents::kOptionSpec,
            {"layout", MSMS_OPT_ENUM, "view", "view|table", 0, 0,
             "view: each call stack stored once, memscope_dump a view (small files); table: memscope_dump a "
             "table with every row's text in full, for readers that require a table (upstream's python analyzer)"}};
        count = 2;
        return specs;
    }

    void begin(const msmemscope::RunInfo& run) override { run_ = run; }

    void on_event(const msms_event& ev) override {
        if (!written_.wants(ev)) return;  // --events is what is written (frees still reach the analyzers)
        if (ev.kind == MSMS_EV_PY_TRACE) {
            Database& d = first_device_.empty() ? open("cpu") : *dbs_.at(first_device_);
            d.python_trace(ev, run_.pid ? run_.pid : ev.pid);
            return;
        }
        if (ev.device_kind == MSMS_DEV_NA) {
            // A row without a device (steps, marks...) goes into every
            // device's file with that file's Device Id (as the csv sink);
            // files of devices seen later get the earlier ones first.
            for (auto& [dev, d] : dbs_) d->row(ev);
            tick_progress();
            if (pending_.size() < kMaxPending) {
                pending_.emplace_back(ev);
            } else if (!pending_full_) {
                pending_full_ = true;
                host_.warn("db: more than " + std::to_string(kMaxPending) +
                           " rows without a device; the files of devices first seen from now on miss the earlier ones");
            }
            if (dbs_.empty() && pending_.size() >= kMaxPending) open("cpu");
            return;
        }
        open(device_label(ev)).row(ev);
        tick_progress();
    }

    void on_annotation(uint64_t id, std::string_view key, std::string_view value) override {
        for (auto& [dev, d] : dbs_) d->annotate(id, key, value);
    }

    void on_finding(std::string_view table, const msms_kv* cols, uint32_t n) override {
        if (dbs_.empty()) open("cpu");
        for (auto& [dev, d] : dbs_) d->finding(table, cols, n);
    }

    void finish() override {
        if (dbs_.empty()) open("cpu");  // an empty run still leaves a valid file
        report_size();
        std::vector<std::string> paths;
        for (auto& [dev, d] : dbs_) {
            d->finish();
            paths.push_back(d->path());
        }
        dbs_.clear();  // closed: the files are complete
        uint64_t total = 0;
        std::error_code ec;
        for (auto& p : paths) {
            auto n = fs::file_size(p, ec);
            if (!ec) total += n;
        }
        host_.progress(total, total);  // the end: the files' size
    }

private:
    void tick_progress() {
        if (++since_progress_ < kProgressRows) return;
        since_progress_ = 0;
        report_size();
    }
    void report_size() {
        uint64_t bytes = 0;
        for (auto& [dev, d] : dbs_) bytes += d->size_bytes();
        host_.progress(bytes);
    }

    Database& open(const std::string& dev) {
        auto it = dbs_.find(dev);
        if (it != dbs_.end()) return *it->second;
        if (!run_fd_) {
            std::string why;
            run_fd_.reset(run_.open_output_dir(why));
            if (!run_fd_) throw std::runtime_error("cannot open the run folder " + why);
        }
        std::string rel_dir = "device_" + dev + "/dump", name = "memscope_dump_" + run_.timestamp + ".db";
        auto d = std::make_unique<Database>(run_fd_.get(), rel_dir, name, run_.output_dir + "/" + rel_dir + "/" + name, run_,
                                            dev, table_layout_);
        Database& db = *dbs_.emplace(dev, std::move(d)).first->second;
        if (first_device_.empty()) first_device_ = dev;
        for (auto& p : pending_) db.row(p.get());
        return db;
    }

    // An event kept until the first device file exists.
    struct Pending {
        msms_event ev;
        std::string name, py, c;
        std::vector<std::pair<std::string, std::string>> attrs;
        std::vector<msms_kv> kv;
        explicit Pending(const msms_event& e) : ev(e), name(view(e.name)), py(view(e.py_stack)), c(view(e.c_stack)) {
            for (uint32_t i = 0; i < e.attr_count; ++i)
                attrs.emplace_back(std::string(view(e.attrs[i].key)), std::string(view(e.attrs[i].value)));
        }
        const msms_event& get() {
            kv.clear();
            for (auto& a : attrs) kv.push_back({msmemscope::str(a.first), msmemscope::str(a.second)});
            ev.attrs = kv.data();
            ev.attr_count = static_cast<uint32_t>(kv.size());
            ev.name = msmemscope::str(name);
            ev.py_stack = msmemscope::str(py);
            ev.c_stack = msmemscope::str(c);
            return ev;
        }
    };
    static constexpr size_t kMaxPending = 100000;

    msmemscope::Host host_;
    msms::WrittenEvents written_;
    bool table_layout_;
    msmemscope::RunInfo run_;
    msmemscope::files::Fd run_fd_;  // the run folder (RunInfo::open_output_dir), opened at the first file
    std::vector<Pending> pending_;  // rows without a device so far
    bool pending_full_ = false;
    std::string first_device_;
    std::map<std::string, std::unique_ptr<Database>> dbs_;
    uint64_t since_progress_ = 0;
};

}  // namespace

MSMEMSCOPE_PLUGIN(DbSink)
