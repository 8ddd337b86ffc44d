// The db sink through its C descriptor: exact schema, Attr JSON round trip,
// annotations, findings, python trace table, empty run.
#include <doctest/doctest.h>
#include <msmemscope/testing.hpp>
#include <sqlite3.h>

#include <filesystem>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using namespace msmemscope::testing;

namespace {

const msms_plugin_descriptor* plugin() { return require_descriptor(MSMS_DB_PLUGIN); }

std::string fresh_dir(const std::string& name) {
    std::string dir = std::string(MSMS_TEST_OUT) + "/" + name;
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir;
}

struct Db {
    sqlite3* db = nullptr;
    explicit Db(const std::string& path) {
        REQUIRE(fs::exists(path));
        REQUIRE(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
    }
    ~Db() { sqlite3_close(db); }
    // All rows of a query, columns as text ("NULL" for null).
    std::vector<std::vector<std::string>> q(const std::string& sql) {
        sqlite3_stmt* s = nullptr;
        REQUIRE_MESSAGE(sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr) == SQLITE_OK, sqlite3_errmsg(db));
        std::vector<std::vector<std::string>> rows;
        while (sqlite3_step(s) == SQLITE_ROW) {
            std::vector<std::string> r;
            for (int i = 0; i < sqlite3_column_count(s); ++i) {
                const unsigned char* t = sqlite3_column_text(s, i);
                r.push_back(t ? reinterpret_cast<const char*>(t) : "NULL");
            }
            rows.push_back(r);
        }
        sqlite3_finalize(s);
        return rows;
    }
    std::string one(const std::string& sql) {
        auto r = q(sql);
        REQUIRE(r.size() == 1);
        return r[0][0];
    }
};

// The harness has no findings entry: this drives the descriptor as the host
// does, with a host API that ignores every call.
struct RawSink {
    const msms_plugin_descriptor* d;
    void* obj = nullptr;
    msms_host_api api{};
    uint64_t next = 0;
    explicit RawSink(const msms_plugin_descriptor* desc) : d(desc) {
        api.struct_size = sizeof(api);
        msms_error err{};
        REQUIRE(d->create(&api, nullptr, 0, &obj, &err) == MSMS_OK);
    }
    ~RawSink() { d->destroy(obj); }
    void begin(const std::string& dir) {
        msms_run_info r{};
        r.struct_size = sizeof(r);
        r.pid = 1;
        r.output_dir = msmemscope::str(dir);
        r.timestamp = msmemscope::str("20260101000000");
        r.output_dir_fd = -1;  // ABI 1.3: none (the sink opens output_dir itself)
        msms_error err{};
        REQUIRE(d->begin(obj, &r, &err) == MSMS_OK);
    }
    void feed(OwnedEvent e) {
        if (!e.ev.id) e.ev.id = ++next;
        REQUIRE(d->on_event(obj, &e.view()) == MSMS_OK);
    }
    void finding(const char* table, const msms_kv* cols, uint32_t n) {
        REQUIRE(d->on_finding(obj, msmemscope::str(table), cols, n) == MSMS_OK);
    }
    int finish() {
        msms_error err{};
        return d->finish(obj, &err);
    }
};

}  // namespace

TEST_CASE("db: memscope_dump has exactly the 12 columns of COMPAT §5 (layout table: with their types)") {
    std::string dir = fresh_dir("schema_table");
    PluginHarness h(plugin());
    REQUIRE(h.create({{"layout", "table"}}) == MSMS_OK);
    REQUIRE(h.begin(dir, "20260101000000") == MSMS_OK);
    h.feed(EventBuilder::malloc(0x1000, 64).allocation_id(1).attr("allocation_id", "1").attr("size", "64"));
    REQUIRE(h.finish() == MSMS_OK);
    Db db(dir + "/device_cpu/dump/memscope_dump_20260101000000.db");
    auto cols = db.q("SELECT name, type FROM pragma_table_info('memscope_dump') ORDER BY cid");
    std::vector<std::vector<std::string>> want = {
        {"ID", "INTEGER"},          {"Event", "TEXT"},       {"Event Type", "TEXT"},
        {"Name", "TEXT"},           {"Timestamp(ns)", "INTEGER"}, {"Process Id", "INTEGER"},
        {"Thread Id", "INTEGER"},   {"Device Id", "TEXT"},   {"Ptr", "TEXT"},
        {"Attr", "TEXT"},           {"Call Stack(Python)", "TEXT"}, {"Call Stack(C)", "TEXT"}};
    CHECK(cols == want);
    CHECK(db.one("PRAGMA user_version") == "1");
    CHECK(db.one("PRAGMA journal_mode") == "delete");
    CHECK(db.one("SELECT value FROM msms_meta WHERE key='complete'") == "true");
    CHECK(db.one("SELECT value FROM msms_meta WHERE key='schema_version'") == "1");
    CHECK(db.one("SELECT value FROM msms_meta WHERE key='layout'") == "table");
    auto tables = db.q("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name");
    std::vector<std::vector<std::string>> want_tables = {
        {"memscope_dump"}, {"msms_blocks"}, {"msms_findings"}, {"msms_meta"}, {"msms_stacks"}};
    CHECK(tables == want_tables);
    CHECK(db.one("SELECT count(*) FROM sqlite_master WHERE type='index' AND name='memscope_dump_time'") == "1");
}

TEST_CASE("db: layout view (the default): memscope_dump is a view with the 12 columns, values of their types") {
    std::string dir = fresh_dir("schema");
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin(dir, "20260101000000") == MSMS_OK);
    h.feed(EventBuilder::malloc(0x1000, 64).allocation_id(1).attr("allocation_id", "1").attr("size", "64"));
    h.feed(EventBuilder::step(1).at(5));
    REQUIRE(h.finish() == MSMS_OK);
    Db db(dir + "/device_cpu/dump/memscope_dump_20260101000000.db");
    auto cols = db.q("SELECT name FROM pragma_table_info('memscope_dump') ORDER BY cid");
    std::vector<std::vector<std::string>> want = {{"ID"},  {"Event"}, {"Event Type"}, {"Name"},
                                                  {"Timestamp(ns)"}, {"Process Id"}, {"Thread Id"},
                                                  {"Device Id"}, {"Ptr"}, {"Attr"}, {"Call Stack(Python)"},
                                                  {"Call Stack(C)"}};
    CHECK(cols == want);
    // every value of the type the table layout stores (SQLite gives a view's
    // computed columns no declared type; the values keep theirs)
    auto types = db.q("SELECT DISTINCT typeof(\"ID\"), typeof(\"Event\"), typeof(\"Event Type\"), typeof(\"Name\"), "
                      "typeof(\"Timestamp(ns)\"), typeof(\"Process Id\"), typeof(\"Thread Id\"), typeof(\"Device Id\"), "
                      "typeof(\"Ptr\"), typeof(\"Attr\"), typeof(\"Call Stack(Python)\"), typeof(\"Call Stack(C)\") "
                      "FROM memscope_dump");
    std::vector<std::vector<std::string>> want_types = {
        {"integer", "text", "text", "text", "integer", "integer", "integer", "text", "text", "text", "text", "text"}};
    CHECK(types == want_types);
    CHECK(db.one("PRAGMA user_version") == "2");
    CHECK(db.one("PRAGMA journal_mode") == "delete");
    CHECK(db.one("PRAGMA integrity_check") == "ok");
    CHECK(db.one("SELECT value FROM msms_meta WHERE key='complete'") == "true");
    CHECK(db.one("SELECT value FROM msms_meta WHERE key='schema_version'") == "2");
    CHECK(db.one("SELECT value FROM msms_meta WHERE key='layout'") == "view");
    auto objects = db.q("SELECT type, name FROM sqlite_master WHERE type IN ('table', 'view') ORDER BY type, name");
    std::vector<std::vector<std::string>> want_objects = {
        {"table", "msms_attr_formats"}, {"table", "msms_dump_ctx"}, {"table", "msms_dump_rows"},
        {"table", "msms_findings"},     {"table", "msms_live_blocks"}, {"table", "msms_meta"},
        {"table", "msms_stacks"},       {"view", "memscope_dump"},  {"view", "msms_blocks"},
        {"view", "msms_leaks"}};
    CHECK(objects == want_objects);
}

namespace {

// One stream with every kind of Attr value the encoding treats apart, fed to
// a sink of the given layout; returns the file.
std::string write_variety(const std::string& name, const char* layout) {
    std::string dir = fresh_dir(name);
    PluginHarness h(plugin());
    REQUIRE(h.create({{"layout", layout}}) == MSMS_OK);
    REQUIRE(h.begin(dir, "20260101000000") == MSMS_OK);
    h.feed(EventBuilder::step(1).at(100));
    h.feed(EventBuilder::mark("start").at(101).attr("message", "it's 100% \"done\"\n\ttab\x01").attr("tid", "7"));
    for (int i = 0; i < 3; ++i) {
        std::string id = std::to_string(10 + i);
        uint64_t ptr = 0x7f0000001000ull + 0x40 * i;
        char addr[32];
        std::snprintf(addr, sizeof(addr), "0x%016llx", static_cast<unsigned long long>(ptr));
        h.feed(EventBuilder::malloc(ptr, 64 + i)
                   .allocation_id(10 + i)
                   .at(200 + i)
                   .thread(42 + i)
                   .c_stack(i == 2 ? "other\nstack" : "f1\nf2")
                   .py_stack(i ? "a.py(3): main" : "")
                   .attr("allocation_id", id)
                   .attr("addr", addr)
                   .attr("size", std::to_string(64 + i))
                   .attr("used", "1000")
                   .attr("process_used", "1000")
                   .attr("device_used", i == 1 ? "1001" : "1000"));
    }
    h.feed(EventBuilder::free(0x7f0000001000ull).allocation_id(10).at(300).attr("allocation_id", "10")
               .attr("addr", "0x00007f0000001000").attr("size", "64").attr("used", "936"));
    // values that look like numbers but must stay text; numbers out of range
    h.feed(EventBuilder::malloc(0x2000, 8).allocation_id(20).at(400)
               .attr("allocation_id", "021").attr("addr", "0x0000000000002001").attr("size", "-0")
               .attr("a%d'b", "0X00000000000000FF").attr("big", "99999999999999999999")
               .attr("neg", "-12").attr("max", "9223372036854775807").attr("hexbig", "0xffffffffffffffff"));
    // more distinct values than slots: the row keeps its text
    h.feed(EventBuilder::malloc(0x3000, 9).allocation_id(21).at(401)
               .attr("k1", "1").attr("k2", "2").attr("k3", "3").attr("k4", "4").attr("k5", "5").attr("k6", "6")
               .attr("k7", "7").attr("k8", "x"));
    // ACCESS without addr (Ptr added by the sink) and with one
    h.feed(EventBuilder::access(0x2000).at(500).attr("type", "PTA").attr("size", "8"));
    h.feed(EventBuilder::access(0x2008).at(501).attr("addr", "0x0000000000002008").attr("type", "PTA"));
    // another device's row, an operator, a kernel with a quoted name
    h.feed(EventBuilder::malloc(0x4000, 16, MSMS_T_PTA).device(MSMS_DEV_NPU, 1).allocation_id(30).at(600)
               .attr("allocation_id", "30").attr("owner", "PTA@weight"));
    h.feed(EventBuilder::op("aten::add", true).at(700).name("aten::add"));
    h.feed(EventBuilder::kernel("k\"1,2").at(701));
    h.feed(EventBuilder::mark("empty").at(702));
    REQUIRE(h.annotate(3, "inefficient_type", "early_allocation") == MSMS_OK);
    REQUIRE(h.annotate(4, "owner", "PTA@activation") == MSMS_OK);
    REQUIRE(h.finish() == MSMS_OK);
    return dir + "/device_cpu/dump/memscope_dump_20260101000000.db";
}

// A stream long enough for the view layout's row writer thread to take
// several groups of rows (2048 each) while the sink keeps adding what it
// writes itself in between: a new call stack every 97 rows, a new thread
// (row context) every 500, a new Attr layout every 3000, an annotation of
// an earlier row every 1000, a commit every 200000 (not reached: the last
// group is written at finish).
std::string write_long(const std::string& name, const char* layout) {
    std::string dir = fresh_dir(name);
    PluginHarness h(plugin());
    REQUIRE(h.create({{"layout", layout}}) == MSMS_OK);
    REQUIRE(h.begin(dir, "20260101000000") == MSMS_OK);
    for (int i = 1; i <= 9000; ++i) {
        auto m = EventBuilder::malloc(0x100000 + 64 * i, 64 + i % 7)
                     .allocation_id(i)
                     .at(1000 + i)
                     .thread(100 + i / 500)
                     .c_stack("f" + std::to_string(i / 97) + "\nmain")
                     .attr("allocation_id", std::to_string(i))
                     .attr("size", std::to_string(64 + i % 7));
        if (i % 3000 == 0) m.attr("layout" + std::to_string(i / 3000), "x");
        h.feed(m);
        if (i % 1000 == 0) REQUIRE(h.annotate(static_cast<uint64_t>(i - 10), "owner", "PTA@" + std::to_string(i)) == MSMS_OK);
    }
    REQUIRE(h.finish() == MSMS_OK);
    return dir + "/device_cpu/dump/memscope_dump_20260101000000.db";
}

}  // namespace

TEST_CASE("db: layout view written by its row writer thread gives back the table layout's rows, in a long stream") {
    std::string table = write_long("long_table", "table");
    std::string viewed = write_long("long_view", "view");
    Db t(table), v(viewed);
    auto rows = v.q("SELECT * FROM memscope_dump ORDER BY \"ID\"");
    REQUIRE(rows.size() == 9000);
    CHECK(rows == t.q("SELECT * FROM memscope_dump ORDER BY \"ID\""));
    // the annotated rows carry their owner
    CHECK(v.one("SELECT count(*) FROM memscope_dump WHERE json_extract(\"Attr\", '$.owner') LIKE 'PTA@%'") == "9");
    CHECK(v.one("SELECT count(*) FROM msms_stacks WHERE kind='c'") == std::to_string(9000 / 97 + 1));
    CHECK(v.one("SELECT value FROM msms_meta WHERE key='complete'") == "true");
}

TEST_CASE("db: layout view gives back exactly the rows and blocks of layout table") {
    std::string table = write_variety("variety_table", "table");
    std::string viewed = write_variety("variety_view", "view");
    Db t(table), v(viewed);
    auto rows = v.q("SELECT * FROM memscope_dump ORDER BY \"ID\"");
    REQUIRE(rows.size() == 13);
    CHECK(rows == t.q("SELECT * FROM memscope_dump ORDER BY \"ID\""));
    // each value of the same SQLite type as in the table
    const char* typed = "SELECT typeof(\"ID\")||typeof(\"Timestamp(ns)\")||typeof(\"Process Id\")||typeof(\"Thread Id\")"
                        "||typeof(\"Attr\")||typeof(\"Call Stack(C)\") FROM memscope_dump ORDER BY \"ID\"";
    CHECK(v.q(typed) == t.q(typed));
    const char* blocks = "SELECT allocation_id, device, pool, ptr, size, malloc_id, malloc_ts, free_id, free_ts, thread_id, "
                         "owner, c_stack_id, py_stack_id FROM msms_blocks ORDER BY allocation_id";
    CHECK(v.q(blocks) == t.q(blocks));
    CHECK(v.q(blocks).size() == 5);
    // the two rows with more distinct values than slots (ID 7 and 8) keep
    // their text; every other row is encoded
    CHECK(v.q("SELECT id FROM msms_dump_rows WHERE fmt IS NULL ORDER BY id") ==
          std::vector<std::vector<std::string>>{{"7"}, {"8"}});
    CHECK(v.one("SELECT count(*) FROM msms_dump_rows WHERE attr IS NOT NULL AND fmt IS NULL") == "2");
}

// Rows that repeat the row before's Attr keys but not its sources, rows
// past the slots between them, contexts that come back after others, and
// batches whose rows have different columns: each row still reads back as
// layout table writes it (the sink remembers the row before's layout and a
// few contexts, and names only a batch's columns in its INSERT).
std::string write_repeats(const std::string& name, const char* layout) {
    std::string dir = fresh_dir(name);
    PluginHarness h(plugin());
    REQUIRE(h.create({{"layout", layout}}) == MSMS_OK);
    REQUIRE(h.begin(dir, "20260101000000") == MSMS_OK);
    for (int i = 1; i <= 300; ++i) {
        uint64_t ptr = 0x10000 + 0x100 * static_cast<uint64_t>(i);
        char addr[32];
        std::snprintf(addr, sizeof(addr), "0x%016llx", static_cast<unsigned long long>(ptr));
        std::string id = std::to_string(i), size = std::to_string(64 + i % 5);
        // used: the size (a column), another number (a slot), a pointer, text
        std::string used = i % 4 == 0 ? size : i % 4 == 1 ? std::to_string(1000 + i) : i % 4 == 2 ? addr : "n/a";
        auto m = EventBuilder::malloc(ptr, 64 + i % 5).allocation_id(i).at(1000 + 3 * i).thread(1 + i % 3)
                     .attr("allocation_id", id).attr("addr", addr).attr("size", size).attr("used", used);
        if (i % 7 == 0) m.c_stack("f" + std::to_string(i % 2));
        if (i % 11 == 0) m.py_stack("a.py(1): f");
        if (i % 13 == 0)  // the same keys as the row before would have, more values than slots
            m = EventBuilder::malloc(ptr, 1).allocation_id(i).at(1000 + 3 * i).attr("k1", "1001").attr("k2", "1002")
                    .attr("k3", "1003").attr("k4", "1004").attr("k5", "1005").attr("k6", "1006").attr("k7", "1007");
        h.feed(m);
        if (i % 2 == 0)
            h.feed(EventBuilder::free(ptr).allocation_id(i).at(1001 + 3 * i).thread(1 + i % 3)
                       .attr("allocation_id", id).attr("addr", addr).attr("size", size).attr("used", used));
        if (i % 50 == 0) h.feed(EventBuilder::mark("m" + std::to_string(i)).at(1002 + 3 * i));
    }
    REQUIRE(h.finish() == MSMS_OK);
    return dir + "/device_cpu/dump/memscope_dump_20260101000000.db";
}

TEST_CASE("db: layout view gives back table layout's rows when rows repeat keys with other sources, contexts and columns") {
    Db t(write_repeats("repeats_table", "table")), v(write_repeats("repeats_view", "view"));
    auto rows = v.q("SELECT * FROM memscope_dump ORDER BY \"ID\"");
    REQUIRE(rows.size() == 300 + 150 + 6);
    CHECK(rows == t.q("SELECT * FROM memscope_dump ORDER BY \"ID\""));
    // `used` from four sources: at least four layouts (none reused wrongly:
    // the rows above read back the same)
    CHECK(std::stoi(v.one("SELECT count(*) FROM msms_attr_formats")) >= 4);
    CHECK(v.one("SELECT count(*) FROM msms_dump_rows WHERE fmt IS NULL AND attr IS NOT NULL") == "23");
    // MALLOC and FREE on three threads, and the marks: each context once
    CHECK(v.one("SELECT count(*) FROM msms_dump_ctx") == t.one("SELECT count(DISTINCT \"Event\"||'/'||\"Event Type\"||'/'||\"Name\"||'/'||\"Thread Id\") FROM memscope_dump"));
}

TEST_CASE("db: layout view stores each call stack and each row context once") {
    std::string dir = fresh_dir("stacks_once");
    std::string big(2000, 'x');
    for (int i = 0; i < 2000; i += 50) big[i] = '\n';
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin(dir, "20260101000000") == MSMS_OK);
    for (int i = 1; i <= 2000; ++i) {
        auto m = EventBuilder::malloc(0x10000 + 64 * i, 64).allocation_id(i).at(1000 + 2 * i).c_stack(big + "m")
                     .attr("allocation_id", std::to_string(i)).attr("size", "64").build();
        m.ev.c_stack_id = 7;
        h.feed(m);
        auto f = EventBuilder::free(0x10000 + 64 * i).allocation_id(i).at(1001 + 2 * i).c_stack(big + "f")
                     .attr("allocation_id", std::to_string(i)).build();
        f.ev.c_stack_id = 8;
        h.feed(f);
    }
    REQUIRE(h.finish() == MSMS_OK);
    std::string path = dir + "/device_cpu/dump/memscope_dump_20260101000000.db";
    Db db(path);
    CHECK(db.one("SELECT count(*) FROM msms_stacks") == "2");
    CHECK(db.one("SELECT count(*) FROM msms_dump_ctx") == "2");
    CHECK(db.one("SELECT count(*) FROM memscope_dump WHERE \"Call Stack(C)\"='" + big + "m'") == "2000");
    CHECK(db.one("SELECT count(*) FROM memscope_dump WHERE \"Call Stack(C)\"='" + big + "f'") == "2000");
    CHECK(db.one("SELECT count(*) FROM msms_blocks WHERE free_id IS NOT NULL AND c_stack_id=7") == "2000");
    // 4000 rows of 2 KB stacks: 8 MB as text, well under 1 MB stored once
    CHECK(fs::file_size(path) < (1u << 20));
}

TEST_CASE("db: layout view takes upstream's Attr write-back through the view, nothing else") {
    std::string path = write_variety("writeback", "view");
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK);
    // as upstream's InefficientAnalyzer._write_back_db does it
    REQUIRE(sqlite3_exec(db, "PRAGMA journal_mode=WAL", nullptr, nullptr, nullptr) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db, "UPDATE memscope_dump SET Attr = '{\"x\":\"1\"}' WHERE ID = 4 AND `Process Id` = 1",
                         nullptr, nullptr, nullptr) == SQLITE_OK);
    char* msg = nullptr;
    CHECK(sqlite3_exec(db, "UPDATE memscope_dump SET \"Event\"='FREE' WHERE ID = 4", nullptr, nullptr, &msg) ==
          SQLITE_CONSTRAINT);
    CHECK(std::string(msg ? msg : "") == "memscope_dump: only the Attr column can be changed");
    sqlite3_free(msg);
    REQUIRE(sqlite3_exec(db, "PRAGMA journal_mode=DELETE", nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
    Db r(path);
    CHECK(r.one("SELECT \"Attr\" FROM memscope_dump WHERE \"ID\"=4") == "{\"x\":\"1\"}");
    CHECK(r.one("SELECT \"Event\" FROM memscope_dump WHERE \"ID\"=4") == "MALLOC");
    CHECK(r.one("SELECT \"Attr\" FROM memscope_dump WHERE \"ID\"=5") != "{\"x\":\"1\"}");
}

TEST_CASE("db: rows, Attr JSON round trip and annotations") {
    std::string dir = fresh_dir("rows");
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin(dir, "20260101000000") == MSMS_OK);
    h.feed(EventBuilder::step(1).at(100));  // no device, before any device row: kept for every device file
    h.feed(EventBuilder::malloc(0xabc0, 4096, MSMS_T_PTA)
               .device(MSMS_DEV_NPU, 3)
               .allocation_id(7)
               .at(200)
               .thread(42)
               .c_stack("f1\nf2")
               .py_stack("a.py(3): main")
               .attr("allocation_id", "7")
               .attr("addr", "0x000000000000abc0")
               .attr("size", "4096")
               .attr("owner", "PTA@weight")
               .attr("shape", "[2, 3]")
               .attr("dtype", "torch.float32")
               .attr("weird", "a\"b,c\\d"));
    h.feed(EventBuilder::free(0xabc0, MSMS_T_PTA).device(MSMS_DEV_NPU, 3).allocation_id(7).at(300).attr("allocation_id", "7"));
    h.feed(EventBuilder::op("aten::add", true).at(400).name("aten::add"));
    REQUIRE(h.annotate(2, "inefficient_type", "early_allocation") == MSMS_OK);
    REQUIRE(h.annotate(2, "size", "4097") == MSMS_OK);
    REQUIRE(h.finish() == MSMS_OK);

    Db db(dir + "/device_3/dump/memscope_dump_20260101000000.db");
    auto rows = db.q("SELECT * FROM memscope_dump ORDER BY \"ID\"");
    REQUIRE(rows.size() == 4);
    // written with the file's Device Id, as upstream writes the current device
    std::vector<std::string> step = {"1", "SYSTEM", "STEP", "1", "100", "1", "1", "3", "N/A", "{}", "", ""};
    CHECK(rows[0] == step);
    CHECK(rows[1][1] == "MALLOC");
    CHECK(rows[1][2] == "PTA");
    CHECK(rows[1][3] == "N/A");
    CHECK(rows[1][6] == "42");
    CHECK(rows[1][7] == "3");
    CHECK(rows[1][8] == "0x000000000000abc0");
    CHECK(rows[1][10] == "a.py(3): main");
    CHECK(rows[1][11] == "f1\nf2");
    // Attr is valid JSON with every value a string, as upstream's DB writer
    // (FixJson); annotations updated one key in place and appended the other.
    CHECK(db.one("SELECT json_valid(\"Attr\") FROM memscope_dump WHERE \"ID\"=2") == "1");
    CHECK(rows[1][9] ==
          "{\"allocation_id\":\"7\",\"addr\":\"0x000000000000abc0\",\"size\":\"4097\",\"owner\":\"PTA@weight\","
          "\"shape\":\"[2, 3]\",\"dtype\":\"torch.float32\",\"weird\":\"a\\\"b,c\\\\d\","
          "\"inefficient_type\":\"early_allocation\"}");
    CHECK(db.one("SELECT json_type(\"Attr\", '$.size') FROM memscope_dump WHERE \"ID\"=2") == "text");
    CHECK(db.one("SELECT json_extract(\"Attr\", '$.weird') FROM memscope_dump WHERE \"ID\"=2") == "a\"b,c\\d");
    CHECK(rows[3][1] == "OP_LAUNCH");
    CHECK(rows[3][3] == "aten::add");
    CHECK(rows[3][8] == "N/A");
    // our block table: one row per allocation, freed
    auto blocks = db.q("SELECT allocation_id, device, pool, size, malloc_id, malloc_ts, free_id, free_ts, thread_id, owner, "
                       "c_stack_id IS NULL FROM msms_blocks");
    std::vector<std::vector<std::string>> want = {{"7", "3", "PTA", "4096", "2", "200", "3", "300", "42", "PTA@weight", "1"}};
    CHECK(blocks == want);
}

TEST_CASE("db: findings, stacks and python trace") {
    std::string dir = fresh_dir("findings");
    RawSink h(plugin());
    h.begin(dir);
    auto m = EventBuilder::malloc(0x10, 8).allocation_id(1).at(10).c_stack("main\nstart").build();
    m.ev.c_stack_id = 5;
    h.feed(m);
    auto m2 = EventBuilder::malloc(0x20, 8).allocation_id(2).at(20).c_stack("main\nstart").build();
    m2.ev.c_stack_id = 5;
    h.feed(m2);
    auto py = EventBuilder(MSMS_EV_PY_TRACE, MSMS_T_PY_CALL).name("a.py(1): f").aux(5).at(9).thread(3).build();
    h.feed(py);
    // a finding through the C entry, as the host delivers it
    msms_kv cols[] = {{msmemscope::str("allocation_id"), msmemscope::str("1")},
                      {msmemscope::str("size"), msmemscope::str("8")},
                      {msmemscope::str("kernel"), msmemscope::str("N/A")}};
    h.finding("leaks", cols, 3);
    h.finding("owners", cols, 1);
    REQUIRE(h.finish() == MSMS_OK);
    Db db(dir + "/device_cpu/dump/memscope_dump_20260101000000.db");
    CHECK(db.one("SELECT count(*) FROM msms_stacks") == "1");
    auto f = db.q("SELECT \"table\", seq, cols FROM msms_findings ORDER BY seq");
    std::vector<std::vector<std::string>> want_f = {
        {"leaks", "1", "{\"allocation_id\":1,\"size\":8,\"kernel\":\"N/A\"}"},
        {"owners", "2", "{\"allocation_id\":1}"}};
    CHECK(f == want_f);
    CHECK(db.one("SELECT json_extract(cols, '$.size') FROM msms_leaks") == "8");
    CHECK(db.one("SELECT text FROM msms_stacks WHERE kind='c' AND id=5") == "main\nstart");
    auto pt = db.q("SELECT * FROM python_trace_1");
    std::vector<std::vector<std::string>> want = {{"a.py(1): f", "5", "9", "3", "1"}};
    CHECK(pt == want);
    auto cols_pt = db.q("SELECT name FROM pragma_table_info('python_trace_1') ORDER BY cid");
    std::vector<std::vector<std::string>> want_cols = {{"FuncInfo"}, {"StartTime(ns)"}, {"EndTime(ns)"}, {"Thread Id"}, {"Process Id"}};
    CHECK(cols_pt == want_cols);
}

TEST_CASE("db: an empty run leaves a valid, empty database") {
    std::string dir = fresh_dir("empty");
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin(dir, "20260101000000") == MSMS_OK);
    REQUIRE(h.finish() == MSMS_OK);
    Db db(dir + "/device_cpu/dump/memscope_dump_20260101000000.db");
    CHECK(db.one("SELECT count(*) FROM memscope_dump") == "0");
    CHECK(db.one("PRAGMA integrity_check") == "ok");
}
