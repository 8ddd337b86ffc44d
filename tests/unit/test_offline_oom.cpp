// The offline oom analysis of a live run's dump finds what the run found
// (`msmemscope --analyze=oom --input=<dump>`): the dump's rows, read back
// as framework/host/offline/offline.cpp reads them, given to the oom
// analyzer, make the live run's finding (table oom, which the run's db
// keeps in msms_findings), column for column: the failing call (the
// OOM_Trigger row's Attr func, not the row's Name), the size, the memory
// bound (from the OOM_Snapshot row), the bytes allocated, the stack.
// Fixture: tests/fixtures/offline_oom (a malloc failing under RLIMIT_AS).
#include <doctest/doctest.h>

#include <sqlite3.h>

#include <map>
#include <string>

#include <msmemscope/testing.hpp>

#include "offline/dump_reader.h"

using namespace msmemscope::testing;

namespace {
const std::string kFixture = std::string(MSMEMSCOPE_SOURCE_DIR) + "/tests/fixtures/offline_oom/memscope_dump_malloc_oom";

// The live run's oom finding as its db keeps it (JSON numbers and true as
// the analyzer gave them: text).
std::map<std::string, std::string> live_finding() {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open_v2((kFixture + ".db").c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    REQUIRE(sqlite3_prepare_v2(db,
                               "SELECT key, CASE type WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' "
                               "ELSE CAST(value AS TEXT) END FROM msms_findings, json_each(msms_findings.cols) "
                               "WHERE msms_findings.\"table\" = 'oom'",
                               -1, &st, nullptr) == SQLITE_OK);
    std::map<std::string, std::string> cols;
    while (sqlite3_step(st) == SQLITE_ROW)
        cols[reinterpret_cast<const char*>(sqlite3_column_text(st, 0))] =
            reinterpret_cast<const char*>(sqlite3_column_text(st, 1));
    sqlite3_finalize(st);
    sqlite3_close(db);
    return cols;
}

// The dump's rows in time order, with their own IDs, into the oom analyzer
// as `msmemscope --analyze` configures it (its options' defaults).
PluginHarness& analyse(PluginHarness& h, const std::string& path) {
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    msms::DumpStream stream({path}, 1u << 20);
    std::string err;
    REQUIRE_MESSAGE(stream.open(err), err);
    msms::DumpRow row;
    int more;
    while ((more = stream.next(row, err)) > 0) {
        OwnedEvent e;
        e.ev = row.rec.ev;
        e.ev.id = row.file_id;
        e.name = row.rec.name;
        e.attrs = row.rec.attrs;
        e.py_stack = row.rec.py_stack;
        e.c_stack = row.rec.c_stack;
        h.feed(e);
    }
    REQUIRE_MESSAGE(more == 0, err);
    REQUIRE(h.finish() == MSMS_OK);
    return h;
}
}  // namespace

TEST_CASE("--analyze=oom of a live run's dump, CSV or db, finds the failure the run found") {
    auto live = live_finding();
    REQUIRE(live.size() == 14);
    CHECK(live["func"] == "malloc");
    for (const char* ext : {".csv", ".db"}) {
        CAPTURE(ext);
        PluginHarness h(require_descriptor(OOM_PLUGIN_PATH));
        analyse(h, kFixture + ext);
        REQUIRE(h.findings["oom"].size() == 1);
        auto& offline = h.findings["oom"][0];
        CHECK(offline.size() == live.size());
        for (auto& [column, value] : live) {
            CAPTURE(column);
            CHECK(offline[column] == value);
        }
        // the warning names the failing call, as the run's did
        bool warned = false;
        for (auto& [level, line] : h.logs)
            warned = warned || line == "oom: malloc of 68719476736 bytes failed on device cpu with 37748736 bytes allocated";
        CHECK(warned);
    }
}
