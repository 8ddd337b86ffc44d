#include "merge.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <vector>

#include "util/output_dir.h"
#include "compare_log.h"
#include "process_run.h"
#include "util/csv.h"
#include "util/sqlite_fd_path.h"
#include "util/text.h"
#include "warning_out.h"

namespace fs = std::filesystem;

namespace msms {
namespace {

constexpr size_t kMaxSummaryBytes = 1u << 20;  // a summary.json is a few KiB
constexpr size_t kMaxProcesses = 100000;

// ------------------------------------------------------------ a small JSON reader
// Enough for summary.json (our own format), bounded and strict.
struct JValue {
    enum Type { Null, Bool, Number, String, Array, Object } type = Null;
    bool b = false;
    double num = 0;
    bool is_int = false;
    int64_t i = 0;
    std::string s;
    std::vector<JValue> items;
    std::vector<std::pair<std::string, JValue>> members;
    const JValue* get(const std::string& key) const {
        if (type != Object) return nullptr;
        for (auto& [k, v] : members)
            if (k == key) return &v;
        return nullptr;
    }
};

class JParser {
public:
    explicit JParser(const std::string& text) : t_(text) {}
    bool parse(JValue& out, std::string& why) {
        ws();
        if (!value(out, 0)) {
            why = err_.empty() ? "not valid JSON" : err_;
            why += " (at byte " + std::to_string(p_) + ")";
            return false;
        }
        ws();
        if (p_ != t_.size()) {
            why = "text after the JSON value (at byte " + std::to_string(p_) + ")";
            return false;
        }
        return true;
    }

private:
    void ws() {
        while (p_ < t_.size() && (t_[p_] == ' ' || t_[p_] == '\n' || t_[p_] == '\r' || t_[p_] == '\t')) ++p_;
    }
    bool lit(const char* w) {
        size_t n = strlen(w);
        if (t_.compare(p_, n, w) != 0) return false;
        p_ += n;
        return true;
    }
    bool value(JValue& v, int depth) {
        if (depth > 32) {
            err_ = "nested too deeply";
            return false;
        }
        if (p_ >= t_.size()) return false;
        char c = t_[p_];
        if (c == '{') {
            v.type = JValue::Object;
            ++p_;
            ws();
            if (p_ < t_.size() && t_[p_] == '}') return ++p_, true;
            for (;;) {
                ws();
                std::string key;
                if (p_ >= t_.size() || t_[p_] != '"' || !str(key)) return false;
                ws();
                if (p_ >= t_.size() || t_[p_] != ':') return false;
                ++p_;
                ws();
                JValue m;
                if (!value(m, depth + 1)) return false;
                v.members.emplace_back(std::move(key), std::move(m));
                ws();
                if (p_ < t_.size() && t_[p_] == ',') {
                    ++p_;
                    continue;
                }
                if (p_ < t_.size() && t_[p_] == '}') return ++p_, true;
                return false;
            }
        }
        if (c == '[') {
            v.type = JValue::Array;
            ++p_;
            ws();
            if (p_ < t_.size() && t_[p_] == ']') return ++p_, true;
            for (;;) {
                ws();
                JValue m;
                if (!value(m, depth + 1)) return false;
                v.items.push_back(std::move(m));
                ws();
                if (p_ < t_.size() && t_[p_] == ',') {
                    ++p_;
                    continue;
                }
                if (p_ < t_.size() && t_[p_] == ']') return ++p_, true;
                return false;
            }
        }
        if (c == '"') {
            v.type = JValue::String;
            return str(v.s);
        }
        if (lit("null")) return v.type = JValue::Null, true;
        if (lit("true")) return v.type = JValue::Bool, v.b = true, true;
        if (lit("false")) return v.type = JValue::Bool, v.b = false, true;
        if (c == '-' || (c >= '0' && c <= '9')) {
            size_t start = p_;
            if (t_[p_] == '-') ++p_;
            bool frac = false;
            while (p_ < t_.size() && (isdigit(static_cast<unsigned char>(t_[p_])) || t_[p_] == '.' || t_[p_] == 'e' ||
                                      t_[p_] == 'E' || t_[p_] == '+' || t_[p_] == '-')) {
                frac = frac || !isdigit(static_cast<unsigned char>(t_[p_]));
                ++p_;
            }
            std::string n = t_.substr(start, p_ - start);
            char* end = nullptr;
            v.type = JValue::Number;
            v.num = strtod(n.c_str(), &end);
            if (end != n.c_str() + n.size()) return false;
            if (!frac) {
                errno = 0;
                long long i = strtoll(n.c_str(), &end, 10);
                v.is_int = errno == 0;
                v.i = i;
            }
            return true;
        }
        return false;
    }
    static void utf8(std::string& o, uint32_t cp) {
        if (cp < 0x80) o += static_cast<char>(cp);
        else if (cp < 0x800) {
            o += static_cast<char>(0xC0 | (cp >> 6));
            o += static_cast<char>(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            o += static_cast<char>(0xE0 | (cp >> 12));
            o += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            o += static_cast<char>(0x80 | (cp & 0x3F));
        } else {
            o += static_cast<char>(0xF0 | (cp >> 18));
            o += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
            o += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            o += static_cast<char>(0x80 | (cp & 0x3F));
        }
    }
    bool hex4(uint32_t& cp) {
        if (p_ + 4 > t_.size()) return false;
        cp = 0;
        for (int k = 0; k < 4; ++k) {
            char h = t_[p_++];
            cp <<= 4;
            if (h >= '0' && h <= '9') cp |= h - '0';
            else if (h >= 'a' && h <= 'f') cp |= h - 'a' + 10;
            else if (h >= 'A' && h <= 'F') cp |= h - 'A' + 10;
            else return false;
        }
        return true;
    }
    bool str(std::string& o) {
        ++p_;  // '"'
        while (p_ < t_.size()) {
            char c = t_[p_++];
            if (c == '"') return true;
            if (static_cast<unsigned char>(c) < 0x20) return false;
            if (c != '\\') {
                o += c;
                continue;
            }
            if (p_ >= t_.size()) return false;
            char e = t_[p_++];
            switch (e) {
            case '"': o += '"'; break;
            case '\\': o += '\\'; break;
            case '/': o += '/'; break;
            case 'b': o += '\b'; break;
            case 'f': o += '\f'; break;
            case 'n': o += '\n'; break;
            case 'r': o += '\r'; break;
            case 't': o += '\t'; break;
            case 'u': {
                uint32_t cp;
                if (!hex4(cp)) return false;
                if (cp >= 0xD800 && cp < 0xDC00 && t_.compare(p_, 2, "\\u") == 0) {
                    p_ += 2;
                    uint32_t lo;
                    if (!hex4(lo) || lo < 0xDC00 || lo > 0xDFFF) return false;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                utf8(o, cp);
                break;
            }
            default: return false;
            }
        }
        return false;
    }

    const std::string& t_;
    size_t p_ = 0;
    std::string err_;
};

// ------------------------------------------------------------ one process
struct Site {
    std::string kind, device, where;
    int64_t blocks = 0, bytes = 0;
};

struct Row {
    std::string node;    // the folder given to --merge
    std::string folder;  // the process folder's name
    std::string path;    // node/folder
    std::string hostname;
    std::optional<int64_t> rank, ppid, code, leak_bytes, leak_allocations;
    int64_t pid = 0, events = 0, dropped = 0, steps = 0;
    std::string command, ended_how, ended_text;
    bool complete = true;
    std::map<std::string, std::pair<int64_t, int64_t>> pools;  // pool -> (peak, final)
    std::vector<Site> sites;
    std::string report;  // report_*.html in the folder, if any
    std::string who() const {
        return node + (rank ? " rank " + std::to_string(*rank) : " pid " + std::to_string(pid));
    }
};


std::optional<int64_t> int_of(const JValue* v) {
    if (!v || v->type != JValue::Number || !v->is_int) return std::nullopt;
    return v->i;
}
std::string str_of(const JValue* v) { return v && v->type == JValue::String ? v->s : std::string(); }

// Reads <dir>/summary.json: a regular file (never through a link), at most
// kMaxSummaryBytes. "" or why not.
std::string read_summary(const std::string& path, std::string& text) {
    int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return errno == ELOOP ? "is a symbolic link (refused)" : strerror(errno);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return "is " + file_kind(st.st_mode) + " (refused)";
    }
    int r = read_at_most(fd, kMaxSummaryBytes, text);
    int e = errno;
    close(fd);
    if (r < 0) return strerror(e);
    if (r == 0) return "larger than " + std::to_string(kMaxSummaryBytes) + " bytes (refused)";
    return "";
}

std::string to_row(const JValue& j, Row& row) {
    if (j.type != JValue::Object) return "not a JSON object";
    if (str_of(j.get("format")) != "msmemscope-process-summary") return "not an msmemscope process summary";
    auto version = int_of(j.get("format_version"));
    if (!version || *version != 1)
        return "summary format version " + (version ? std::to_string(*version) : std::string("?")) +
               " is not one this msmemscope reads (1)";
    auto pid = int_of(j.get("pid"));
    if (!pid) return "no pid";
    row.pid = *pid;
    row.ppid = int_of(j.get("ppid"));
    row.rank = int_of(j.get("rank"));
    row.hostname = str_of(j.get("hostname"));
    row.command = str_of(j.get("command"));
    if (const JValue* e = j.get("ended")) {
        row.ended_how = str_of(e->get("how"));
        row.ended_text = str_of(e->get("text"));
        row.code = int_of(e->get("code"));
    }
    row.events = int_of(j.get("events")).value_or(0);
    row.dropped = int_of(j.get("dropped")).value_or(0);
    if (const JValue* c = j.get("complete"); c && c->type == JValue::Bool) row.complete = c->b;
    if (const JValue* p = j.get("pools"); p && p->type == JValue::Object)
        for (auto& [name, v] : p->members)
            row.pools[name] = {int_of(v.get("peak_bytes")).value_or(0), int_of(v.get("final_bytes")).value_or(0)};
    if (const JValue* l = j.get("leaks"); l && l->type == JValue::Object) {
        row.leak_bytes = int_of(l->get("bytes"));
        row.leak_allocations = int_of(l->get("allocations"));
    }
    row.steps = int_of(j.get("steps")).value_or(0);
    if (const JValue* t = j.get("top_sites"); t && t->type == JValue::Array)
        for (auto& s : t->items)
            row.sites.push_back(Site{str_of(s.get("kind")), str_of(s.get("device")), str_of(s.get("site")),
                                     int_of(s.get("blocks")).value_or(0), int_of(s.get("bytes")).value_or(0)});
    return "";
}

bool is_process_folder_name(const std::string& n) { return n.rfind("msmemscope_", 0) == 0 && n.size() > 11; }

// Reads one process folder (no link); false with a warning when it has no
// usable summary.json.
bool read_process(const std::string& node, const std::string& dir, Row& row, std::vector<std::string>& warnings) {
    std::string text;
    std::string path = dir + "/summary.json";
    if (std::string why = read_summary(path, text); !why.empty()) {
        warnings.push_back(escape_controls(path) + ": " + why +
                           (why == strerror(ENOENT) ? " (a run of an older msmemscope, or one that did not finish)"
                                                    : "") +
                           "; left out");
        return false;
    }
    JValue j;
    std::string why;
    JParser parser(text);
    if (!parser.parse(j, why) || !(why = to_row(j, row)).empty()) {
        warnings.push_back(escape_controls(path) + ": " + why + "; left out");
        return false;
    }
    row.node = node;
    row.folder = fs::path(dir).filename().string();
    row.path = dir;
    std::error_code ec;
    for (auto& e : fs::directory_iterator(dir, ec)) {
        std::string f = e.path().filename().string();
        std::error_code ec2;
        if (f.rfind("report_", 0) == 0 && f.size() > 5 && f.compare(f.size() - 5, 5, ".html") == 0 &&
            e.symlink_status(ec2).type() == fs::file_type::regular)
            row.report = f;
    }
    return true;
}

// ------------------------------------------------------------ imbalance
struct Imbalance {
    std::string metric, pool;  // metric "peak" (pool set) or "leaks"
    size_t ranks = 0;
    int64_t min = 0, max = 0;
    std::string min_at, max_at;
    std::optional<double> ratio;  // max/min; none when min is 0
};

std::vector<Imbalance> imbalances(const std::vector<Row>& rows) {
    std::vector<const Row*> ranked;
    for (auto& r : rows)
        if (r.rank) ranked.push_back(&r);
    std::vector<Imbalance> out;
    auto add = [&](const std::string& metric, const std::string& pool,
                   const std::function<std::optional<int64_t>(const Row&)>& value) {
        Imbalance im;
        im.metric = metric;
        im.pool = pool;
        for (const Row* r : ranked) {
            auto v = value(*r);
            if (!v) continue;
            if (im.ranks == 0 || *v < im.min) im.min = *v, im.min_at = r->who();
            if (im.ranks == 0 || *v > im.max) im.max = *v, im.max_at = r->who();
            ++im.ranks;
        }
        if (im.ranks < 2) return;
        if (im.min > 0) im.ratio = static_cast<double>(im.max) / static_cast<double>(im.min);
        out.push_back(im);
    };
    std::set<std::string> pools;
    for (const Row* r : ranked)
        for (auto& [p, _] : r->pools) pools.insert(p);
    // A rank without a row of that pool allocated nothing there: 0.
    for (auto& p : pools)
        add("peak", p, [&](const Row& r) -> std::optional<int64_t> {
            auto it = r.pools.find(p);
            return it == r.pools.end() ? 0 : it->second.first;
        });
    add("leaks", "", [](const Row& r) { return r.leak_bytes; });
    return out;
}

std::string ratio_text(const Imbalance& im) {
    if (!im.ratio) return "";
    char buf[32];
    snprintf(buf, sizeof buf, "%.6f", *im.ratio);
    return buf;
}

// ------------------------------------------------------------ writing
// A new temporary beside `path` (O_EXCL, never a link), renamed over it;
// both relative to the folder's descriptor, opened through an openat chain
// (#29 item 4).
std::string write_replacing(const std::string& path, const std::string& text) {
    std::string name = fs::path(path).filename().string();
    std::string tmp_name = "." + name + ".tmp." + std::to_string(getpid());
    std::string tmp = (fs::path(path).parent_path() / tmp_name).string(), why;
    Fd dir = open_output_root(fs::path(path).parent_path().string(), why);
    if (!dir) return "cannot create " + tmp + ": " + why;
    unlinkat(dir.get(), tmp_name.c_str(), 0);  // our own leftover of an earlier run of this pid
    if (!files::write_new(dir.get(), tmp_name, text, why)) return "cannot create " + tmp + ": " + why;
    if (renameat(dir.get(), tmp_name.c_str(), dir.get(), name.c_str()) != 0) {
        why = strerror(errno);
        unlinkat(dir.get(), tmp_name.c_str(), 0);
        return "cannot write " + path + ": " + why;
    }
    return "";
}

std::string opt(const std::optional<int64_t>& v) { return v ? std::to_string(*v) : std::string(); }

std::vector<std::string> all_pools(const std::vector<Row>& rows) {
    std::set<std::string> pools;
    for (auto& r : rows)
        for (auto& [p, _] : r.pools) pools.insert(p);
    return {pools.begin(), pools.end()};
}

const char* const kFixedColumns[] = {"node",  "hostname", "rank",         "pid",       "ppid",
                                     "ended", "exit_code", "steps",       "events",    "dropped",
                                     "complete", "leaked_bytes", "leaked_allocations", "command", "folder"};

std::vector<std::string> fixed_values(const Row& r) {
    return {r.node,
            r.hostname,
            opt(r.rank),
            std::to_string(r.pid),
            opt(r.ppid),
            r.ended_text,
            r.ended_how == "exit" ? opt(r.code) : std::string(),
            std::to_string(r.steps),
            std::to_string(r.events),
            std::to_string(r.dropped),
            r.complete ? "true" : "false",
            opt(r.leak_bytes),
            opt(r.leak_allocations),
            r.command,
            r.folder};
}

// A spreadsheet must not run a cell as a formula: text starting with
// = + - @ (and not a number) gets a leading quote.
std::string cell(const std::string& v) {
    if (!v.empty() && (v[0] == '=' || v[0] == '+' || v[0] == '@' || v[0] == '\t' || v[0] == '\r' ||
                       (v[0] == '-' && (v.size() == 1 || !isdigit(static_cast<unsigned char>(v[1]))))))
        return "'" + v;
    return v;
}

std::string csv_text(const std::vector<std::vector<std::string>>& records) {
    std::string out;
    for (auto& rec : records) {
        for (size_t i = 0; i < rec.size(); ++i) {
            if (i) out += ',';
            csv_field(out, cell(rec[i]));
        }
        out += '\n';
    }
    return out;
}

std::vector<std::string> imbalance_columns() {
    return {"metric", "pool", "ranks", "min_bytes", "min_at", "max_bytes", "max_at", "max_minus_min_bytes",
            "max_over_min"};
}
std::vector<std::string> imbalance_values(const Imbalance& im) {
    return {im.metric, im.pool, std::to_string(im.ranks), std::to_string(im.min), im.min_at,
            std::to_string(im.max), im.max_at, std::to_string(im.max - im.min), ratio_text(im)};
}

std::string quote_ident(const std::string& s) {
    std::string o = "\"";
    for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
    return o + "\"";
}

std::string write_db(const std::string& path, const std::vector<Row>& rows, const std::vector<std::string>& pools,
                     const std::vector<Imbalance>& imb) {
    std::string tmp_name = ".merge.db.tmp." + std::to_string(getpid());
    std::string tmp = (fs::path(path).parent_path() / tmp_name).string(), open_why;
    // The folder once, through an openat chain; the file created there first
    // (O_EXCL, never a link); SQLite then reaches it (and its journal) through
    // that descriptor, never by the folder's path (#29 item 4).
    Fd dir = open_output_root(fs::path(path).parent_path().string(), open_why);
    if (!dir) return "cannot create " + tmp + ": " + open_why;
    unlinkat(dir.get(), tmp_name.c_str(), 0);  // our own leftover of an earlier run of this pid
    if (!files::write_new(dir.get(), tmp_name, "", open_why)) return "cannot create " + tmp + ": " + open_why;
    sqlite3* db = nullptr;
    std::string error;
    auto fail = [&](const std::string& what) {
        if (error.empty()) error = what + ": " + (db ? sqlite3_errmsg(db) : "cannot open");
    };
    const char* vfs = sqlite_fd_path_vfs();
    if (!vfs) {
        error = "open: SQLite has no default VFS";
    } else if (sqlite3_open_v2(sqlite_fd_path(dir.get(), tmp_name).c_str(), &db,
                               SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW, vfs) != SQLITE_OK) {
        fail("open");
    }
    auto exec = [&](const std::string& sql) {
        if (error.empty() && sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) fail(sql.substr(0, 40));
    };
    // Each value: NULL when empty, an integer when the column is numeric.
    auto insert = [&](const std::string& table, const std::vector<std::string>& cols,
                      const std::vector<std::string>& types, const std::vector<std::vector<std::string>>& recs) {
        std::string sql = "CREATE TABLE " + table + " (";
        for (size_t i = 0; i < cols.size(); ++i) sql += (i ? ", " : "") + quote_ident(cols[i]) + " " + types[i];
        exec(sql + ")");
        if (!error.empty()) return;
        sql = "INSERT INTO " + table + " VALUES (";
        for (size_t i = 0; i < cols.size(); ++i) sql += i ? ",?" : "?";
        sqlite3_stmt* st = nullptr;
        if (sqlite3_prepare_v2(db, (sql + ")").c_str(), -1, &st, nullptr) != SQLITE_OK) return fail("insert");
        for (auto& rec : recs) {
            sqlite3_reset(st);
            for (size_t i = 0; i < rec.size(); ++i) {
                int k = static_cast<int>(i) + 1;
                if (rec[i].empty() && types[i] != "TEXT") sqlite3_bind_null(st, k);
                else if (types[i] == "INTEGER") sqlite3_bind_int64(st, k, strtoll(rec[i].c_str(), nullptr, 10));
                else if (types[i] == "REAL") sqlite3_bind_double(st, k, strtod(rec[i].c_str(), nullptr));
                else sqlite3_bind_text(st, k, rec[i].c_str(), static_cast<int>(rec[i].size()), SQLITE_TRANSIENT);
            }
            if (sqlite3_step(st) != SQLITE_DONE) {
                fail("insert into " + table);
                break;
            }
        }
        sqlite3_finalize(st);
    };
    exec("BEGIN");
    {
        std::vector<std::string> cols(std::begin(kFixedColumns), std::end(kFixedColumns));
        std::vector<std::string> types = {"TEXT", "TEXT", "INTEGER", "INTEGER", "INTEGER", "TEXT", "INTEGER", "INTEGER",
                                          "INTEGER", "INTEGER", "TEXT", "INTEGER", "INTEGER", "TEXT", "TEXT"};
        for (auto& p : pools) {
            cols.push_back(p + " peak_bytes");
            types.push_back("INTEGER");
            cols.push_back(p + " final_bytes");
            types.push_back("INTEGER");
        }
        std::vector<std::vector<std::string>> recs;
        for (auto& r : rows) {
            auto v = fixed_values(r);
            for (auto& p : pools) {
                auto it = r.pools.find(p);
                v.push_back(it == r.pools.end() ? "" : std::to_string(it->second.first));
                v.push_back(it == r.pools.end() ? "" : std::to_string(it->second.second));
            }
            recs.push_back(v);
        }
        insert("ranks", cols, types, recs);
    }
    {
        std::vector<std::vector<std::string>> recs;
        for (auto& r : rows)
            for (auto& [p, t] : r.pools)
                recs.push_back({r.node, opt(r.rank), std::to_string(r.pid), r.folder, p, std::to_string(t.first),
                                std::to_string(t.second)});
        insert("pools", {"node", "rank", "pid", "folder", "pool", "peak_bytes", "final_bytes"},
               {"TEXT", "INTEGER", "INTEGER", "TEXT", "TEXT", "INTEGER", "INTEGER"}, recs);
    }
    {
        std::vector<std::vector<std::string>> recs;
        for (auto& r : rows)
            for (auto& s : r.sites)
                recs.push_back({r.node, opt(r.rank), std::to_string(r.pid), r.folder, s.kind, s.device, s.where,
                                std::to_string(s.blocks), std::to_string(s.bytes)});
        insert("sites", {"node", "rank", "pid", "folder", "kind", "device", "site", "blocks", "bytes"},
               {"TEXT", "INTEGER", "INTEGER", "TEXT", "TEXT", "TEXT", "TEXT", "INTEGER", "INTEGER"}, recs);
    }
    {
        std::vector<std::vector<std::string>> recs;
        for (auto& im : imb) recs.push_back(imbalance_values(im));
        insert("imbalance", imbalance_columns(),
               {"TEXT", "TEXT", "INTEGER", "INTEGER", "TEXT", "INTEGER", "TEXT", "INTEGER", "REAL"}, recs);
    }
    exec("COMMIT");
    if (db && sqlite3_close(db) != SQLITE_OK && error.empty()) error = "close: " + std::string(sqlite3_errmsg(db));
    if (error.empty() &&
        renameat(dir.get(), tmp_name.c_str(), dir.get(), fs::path(path).filename().c_str()) != 0)  // #29 item 4
        error = "cannot write " + path + ": " + strerror(errno);
    if (!error.empty()) unlinkat(dir.get(), tmp_name.c_str(), 0);
    return error.empty() ? "" : path + ": " + error;
}

std::string html_escape(const std::string& s) {
    std::string o;
    for (char c : s) {
        switch (c) {
        case '&': o += "&amp;"; break;
        case '<': o += "&lt;"; break;
        case '>': o += "&gt;"; break;
        case '"': o += "&quot;"; break;
        case '\'': o += "&#39;"; break;
        default: o += c;
        }
    }
    return o;
}

std::string url_path(const std::string& rel) {
    std::string o;
    for (unsigned char c : rel) {
        if (isalnum(c) || c == '/' || c == '.' || c == '_' || c == '-' || c == '~') o += static_cast<char>(c);
        else {
            char buf[4];
            snprintf(buf, sizeof buf, "%%%02X", c);
            o += buf;
        }
    }
    return o;
}

std::string html_text(const std::vector<Row>& rows, const std::vector<std::string>& pools,
                      const std::vector<Imbalance>& imb, const std::string& out_dir, const std::string& ts) {
    std::set<std::string> nodes;
    for (auto& r : rows) nodes.insert(r.node);
    std::ostringstream b;
    b << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>msmemscope merge " << html_escape(ts)
      << "</title>\n<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:2em}"
         "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}th{background:#eee}"
         "td.n{text-align:right}</style></head><body>\n<h1>msmemscope: "
      << rows.size() << " processes from " << nodes.size()
      << " folder(s)</h1>\n<h2>Processes</h2>\n<table>\n<tr><th>node</th><th>host</th>"
      << "<th>rank</th><th>pid</th><th>ended</th><th>steps</th>";
    for (auto& p : pools) b << "<th>" << html_escape(p) << " peak</th>";
    b << "<th>leaked</th><th>largest site</th><th>command</th><th>folder</th></tr>\n";
    fs::path root = fs::absolute(out_dir).lexically_normal();
    for (auto& r : rows) {
        b << "<tr><td>" << html_escape(r.node) << "</td><td>" << html_escape(r.hostname) << "</td><td class=\"n\">"
          << (r.rank ? std::to_string(*r.rank) : "-") << "</td><td class=\"n\">" << r.pid << "</td><td>"
          << html_escape(r.ended_text) << (r.complete ? "" : " (output incomplete)") << "</td><td class=\"n\">"
          << r.steps << "</td>";
        for (auto& p : pools) {
            auto it = r.pools.find(p);
            if (it == r.pools.end()) b << "<td class=\"n\">-</td>";
            else
                b << "<td class=\"n\" title=\"" << it->second.first << " bytes\">" << html_escape(human_bytes(it->second.first))
                  << "</td>";
        }
        b << "<td class=\"n\">"
          << (r.leak_bytes ? html_escape(human_bytes(*r.leak_bytes)) + " in " + opt(r.leak_allocations) + " allocation(s)"
                           : std::string("-"))
          << "</td><td>"
          << (r.sites.empty() ? std::string("-")
                              : html_escape(r.sites[0].where) + " (" + html_escape(human_bytes(r.sites[0].bytes)) + ")")
          << "</td><td>" << html_escape(r.command) << "</td><td>";
        std::error_code ec;
        fs::path dir = fs::absolute(r.path, ec).lexically_normal();
        std::string rel = dir.lexically_relative(root).string();
        std::string target = rel + "/" + (r.report.empty() ? std::string() : r.report);
        b << "<a href=\"" << html_escape(url_path(target)) << "\">" << html_escape(r.node + "/" + r.folder) << "</a>";
        b << "</td></tr>\n";
    }
    b << "</table>\n<h2>Imbalance between ranks</h2>\n";
    if (imb.empty()) {
        b << "<p>Fewer than two ranked processes: no imbalance.</p>\n";
    } else {
        b << "<table>\n<tr><th>what</th><th>ranks</th><th>min</th><th>at</th><th>max</th><th>at</th>"
             "<th>max&minus;min</th><th>max/min</th></tr>\n";
        for (auto& im : imb)
            b << "<tr><td>" << html_escape(im.metric == "peak" ? im.pool + " peak" : "leaked") << "</td><td class=\"n\">"
              << im.ranks << "</td><td class=\"n\" title=\"" << im.min << " bytes\">" << html_escape(human_bytes(im.min))
              << "</td><td>" << html_escape(im.min_at) << "</td><td class=\"n\" title=\"" << im.max << " bytes\">"
              << html_escape(human_bytes(im.max)) << "</td><td>" << html_escape(im.max_at) << "</td><td class=\"n\" title=\""
              << (im.max - im.min) << " bytes\">" << html_escape(human_bytes(im.max - im.min)) << "</td><td class=\"n\">"
              << html_escape(im.ratio ? ratio_text(im) : "-") << "</td></tr>\n";
        b << "</table>\n";
    }
    b << "<p>merge.csv, merge_imbalance.csv and merge.db (SQLite: tables ranks, pools, sites, imbalance) hold the "
         "same values in bytes.</p>\n</body></html>\n";
    return b.str();
}

std::string now_timestamp() {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return timestamp_string(static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec));
}

// How a process ended, in the console table's few columns, from its
// summary.json: "exit 0", "_exit 0 after fork", "signal 15 (SIGTERM)".
std::string short_ended(const Row& r) {
    auto ends = [&](const char* tail) {
        size_t n = strlen(tail);
        return r.ended_text.size() >= n && r.ended_text.compare(r.ended_text.size() - n, n, tail) == 0;
    };
    if (r.ended_how == "exit" && r.code) {
        std::string code = std::to_string(*r.code);
        return ends(" (_exit after fork)") ? "_exit " + code + " after fork" : ends(" (_exit)") ? "_exit " + code
                                                                                                  : "exit " + code;
    }
    // (summary.json's code null: the process's status was not known, e.g.
    // a Python API run's, which ends its recording before the status is set)
    if (r.ended_how == "exit") return "exit, code unknown";
    const std::string kKilled = "killed by ";
    if (r.ended_how == "signal" && r.ended_text.rfind(kKilled, 0) == 0) return r.ended_text.substr(kKilled.size());
    return r.ended_how.empty() ? "-" : r.ended_how;
}

// What --merge tells the user, printed and kept for its log,
// <output>/msmemscope_logs/msmemscope_{ts}.log beside merge.csv, in
// msMemScope's format (as --compare keeps compare/msmemscope_logs): the
// merge's output folder is its record, read later or elsewhere than the
// console. Lines said before that folder is made (the folders read, their
// warnings) wait for it; a merge that stops before (nothing to merge, a
// folder that is not there) makes no folder just for its log: only the
// console says why.
class MergeLog {
public:
    MergeLog() = default;
    MergeLog(const MergeLog&) = delete;
    MergeLog& operator=(const MergeLog&) = delete;
    ~MergeLog() {
        if (fd_ >= 0) ::close(fd_);
    }
    void out(const std::string& line) {
        std::cout << line << "\n";
        keep("[INFO] ", line);
    }
    void warning(const std::string& text) {
        warning_out() << "msmemscope: warning: " << text << "\n";
        if (warnings_shown()) keep("[WARN] ", text);
    }
    void error(const std::string& text) {
        std::cerr << "msmemscope: error: " << text << "\n";
        keep("[ERROR]", text);
    }
    // The log is created in the output folder `out` (opened without following
    // links, the log O_EXCL|O_NOFOLLOW) and gets what was said so far (from
    // the configuration's warnings on: console_notes.h). One
    // that cannot be made leaves the console as the only record (the
    // merge's outputs say their own errors).
    void open(const std::string& out, const std::string& ts) {
        std::string why;
        Fd logs = open_output_subdir(out, "msmemscope_logs", why);
        if (logs) fd_ = files::create(logs.get(), "msmemscope_" + ts + ".log", why);
        for (auto& line : console_notes_log_lines()) write(line);
        for (auto& line : waiting_) write(line);
        waiting_.clear();
    }

private:
    void keep(const char* level, const std::string& text) {
        std::string line = upstream_log_line(level, text);  // with the time it was said
        if (fd_ >= 0) write(line);
        else waiting_.push_back(line);
    }
    void write(const std::string& line) {
        if (fd_ >= 0) files::write_all(fd_, line);
    }
    std::vector<std::string> waiting_;
    int fd_ = -1;
};

}  // namespace

int merge_main(const Config& cfg) {
    MergeLog log;
    std::vector<std::string> warnings;
    std::vector<Row> rows;
    std::map<std::string, std::string> seen;  // a process folder's real path -> as first named
    bool missing = false;
    for (auto& node : cfg.merge) {
        struct stat st;
        if (stat(node.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
            log.error("--merge: '" + escape_controls(node) + "' " +
                      (errno == ENOENT ? "does not exist" : "is not a folder"));
            missing = true;
            continue;
        }
        // A process folder given itself, or an output folder of a run.
        std::vector<std::string> dirs;
        std::string base = fs::path(node).lexically_normal().filename().string();
        if (base.empty()) base = fs::path(node).lexically_normal().parent_path().filename().string();
        if (is_process_folder_name(base) && access((node + "/summary.json").c_str(), F_OK) == 0) {
            dirs.push_back(node);
        } else {
            DIR* d = opendir(node.c_str());
            if (!d) {
                log.error("--merge: '" + escape_controls(node) + "': " + strerror(errno));
                missing = true;
                continue;
            }
            while (dirent* e = readdir(d)) {
                std::string name = e->d_name;
                if (!is_process_folder_name(name)) continue;
                std::string p = node + "/" + name;
                struct stat ps;
                // Process folders only (never through a link).
                if (lstat(p.c_str(), &ps) != 0 || !S_ISDIR(ps.st_mode)) continue;
                dirs.push_back(p);
                if (dirs.size() > kMaxProcesses) break;
            }
            closedir(d);
            std::sort(dirs.begin(), dirs.end());
        }
        size_t before = rows.size(), again = 0;
        for (auto& dir : dirs) {
            // The same process folder named twice (a folder and the run
            // folder above it, or one folder twice) is one process.
            char* real = realpath(dir.c_str(), nullptr);
            std::string key = real ? real : dir;
            free(real);
            if (auto [it, added] = seen.emplace(key, dir); !added) {
                warnings.push_back("--merge: '" + escape_controls(dir) + "' " +
                                   (dir == it->second ? std::string("is named more than once")
                                                      : "is '" + escape_controls(it->second) + "' again") +
                                   "; counted once");
                ++again;
                continue;
            }
            Row row;
            if (read_process(node, dir, row, warnings)) rows.push_back(std::move(row));
        }
        if (rows.size() == before && again == 0)
            warnings.push_back("--merge: '" + escape_controls(node) + "' has no process folder with a summary.json");
    }
    for (auto& w : warnings) log.warning(w);
    if (missing) return 2;
    if (rows.empty()) {
        log.error("--merge: nothing to merge (no msmemscope_*/summary.json found)");
        return 2;
    }
    // Ranked processes first, by rank then node; then the others (launchers,
    // shells) by node and pid.
    std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
        if (a.rank.has_value() != b.rank.has_value()) return a.rank.has_value();
        if (a.rank && *a.rank != *b.rank) return *a.rank < *b.rank;
        if (a.node != b.node) return a.node < b.node;
        return a.pid < b.pid;
    });

    std::string ts = now_timestamp();
    std::string out = cfg.output.empty() ? "memscopeDumpResults/merge_" + ts : cfg.output;
    if (std::string why = make_dirs(out); !why.empty()) {
        log.error("--output: cannot create or write '" + escape_controls(out) + "': " + why);
        return 2;
    }
    log.open(out, ts);
    auto pools = all_pools(rows);
    auto imb = imbalances(rows);

    // The console table.
    std::ostringstream table;
    size_t ranked = 0;
    for (auto& r : rows) ranked += r.rank.has_value();
    std::set<std::string> nodes;
    for (auto& r : rows) nodes.insert(r.node);
    table << "msmemscope: merged " << rows.size() << " processes (" << ranked << " with a rank) from "
          << nodes.size() << " folder(s)\n";
    size_t node_w = 6;
    for (auto& n : nodes) node_w = std::max(node_w, n.size() + 2);
    table << "  " << std::left << std::setw(static_cast<int>(node_w)) << "node" << std::setw(6) << "rank"
          << std::setw(9) << "pid" << std::setw(22) << "ended" << std::setw(7) << "steps" << std::setw(14)
          << "leaked" << "peak\n";
    for (auto& r : rows) {
        std::string peaks;
        for (auto& [p, t] : r.pools) peaks += (peaks.empty() ? "" : "; ") + p + " " + human_bytes(t.first);
        std::string ended = short_ended(r);
        table << "  " << std::left << std::setw(static_cast<int>(node_w)) << escape_controls(r.node) << std::setw(6)
              << (r.rank ? std::to_string(*r.rank) : "-") << std::setw(9) << r.pid << std::setw(22) << ended
              << std::setw(7) << r.steps << std::setw(14) << (r.leak_bytes ? human_bytes(*r.leak_bytes) : "-")
              << (peaks.empty() ? "-" : peaks) << "\n";
    }
    if (imb.empty()) {
        table << "  imbalance: fewer than two processes with a rank\n";
    } else {
        table << "  imbalance across ranks:\n";
        for (auto& im : imb)
            table << "    " << (im.metric == "peak" ? im.pool + " peak" : std::string("leaked")) << ": min "
                  << human_bytes(im.min) << " (" << escape_controls(im.min_at) << "), max " << human_bytes(im.max) << " ("
                  << escape_controls(im.max_at) << "), max-min " << human_bytes(im.max - im.min) << " ("
                  << (im.max - im.min) << " bytes), max/min " << (im.ratio ? ratio_text(im) : "-") << "\n";
    }
    std::istringstream printed(table.str());
    for (std::string line; std::getline(printed, line);) log.out(line);

    // The files.
    int status = 0;
    auto report = [&](const std::string& why) {
        if (why.empty()) return;
        log.error("--merge: " + why);
        status = 70;
    };
    {
        std::vector<std::vector<std::string>> recs;
        std::vector<std::string> header(std::begin(kFixedColumns), std::end(kFixedColumns));
        for (auto& p : pools) {
            header.push_back(p + " peak_bytes");
            header.push_back(p + " final_bytes");
        }
        recs.push_back(header);
        for (auto& r : rows) {
            auto v = fixed_values(r);
            for (auto& p : pools) {
                auto it = r.pools.find(p);
                v.push_back(it == r.pools.end() ? "" : std::to_string(it->second.first));
                v.push_back(it == r.pools.end() ? "" : std::to_string(it->second.second));
            }
            recs.push_back(v);
        }
        report(write_replacing(out + "/merge.csv", csv_text(recs)));
    }
    {
        std::vector<std::vector<std::string>> recs{imbalance_columns()};
        for (auto& im : imb) recs.push_back(imbalance_values(im));
        report(write_replacing(out + "/merge_imbalance.csv", csv_text(recs)));
    }
    report(write_db(out + "/merge.db", rows, pools, imb));
    report(write_replacing(out + "/index.html", html_text(rows, pools, imb, out, ts)));
    log.out("  files: " + out + "/merge.csv, " + out + "/merge_imbalance.csv, " + out + "/merge.db, " + out +
            "/index.html");
    return status;
}

}  // namespace msms
