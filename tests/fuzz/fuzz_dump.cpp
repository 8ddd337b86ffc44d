// The memscope_dump readers (--analyze, --compare) against damaged and
// hostile files (#16): never a crash, an escaped exception or unbounded
// memory; every refusal names the file.
#include <doctest/doctest.h>
#include <sqlite3.h>

#include <random>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "offline/dump_reader.h"
#include "util/csv.h"

using namespace msms;

namespace {

const char* kHeader = "ID,Event,Event Type,Name,Timestamp(ns),Process Id,Thread Id,Device Id,Ptr,Attr,"
                      "Call Stack(Python),Call Stack(C)\n";

std::string valid_csv() {
    std::string s = kHeader;
    for (int i = 0; i < 40; ++i) {
        std::string id = std::to_string(i);
        if (i % 2 == 0)
            s += id + ",MALLOC,HOST,N/A," + std::to_string(1000 + i) + ",7,7,cpu,0x" + std::to_string(1000 + i) +
                 ",\"{addr:1,size:" + std::to_string(64 + i) + ",allocation_id:" + id + "}\",\"a.py(1): f\",\"\"\n";
        else
            s += id + ",FREE,HOST,N/A," + std::to_string(1000 + i) + ",7,7,cpu,0x" + std::to_string(999 + i) +
                 ",\"{allocation_id:" + std::to_string(i - 1) + "}\",,\n";
    }
    return s;
}

}  // namespace

TEST_CASE("dump CSV reader: mutated files are read or refused with the file named (fixed seed)") {
    fuzz::TempDir dir;
    const std::string good = valid_csv();
    std::string path = dir.file("memscope_dump_1.csv");
    fuzz::write_file(path, good);
    std::vector<DumpRow> rows;
    std::string err;
    REQUIRE(read_dump_csv(path, rows, err));
    CHECK(rows.size() == 40);
    std::mt19937_64 rng(fuzz::kSeed + 2);
    fuzz::Budget budget(4.0);
    int cases = 0;
    for (; cases < 2000 && budget.left(); ++cases) {
        fuzz::write_file(path, fuzz::mutate(good, rng));
        rows.clear();
        err.clear();
        bool ok = read_dump_csv(path, rows, err);
        if (!ok) CHECK(err.rfind(path, 0) == 0);
    }
    CHECK(cases > 100);
}

TEST_CASE("dump CSV reader: a huge field is refused, not buffered") {
    fuzz::TempDir dir;
    std::string path = dir.file("memscope_dump_big.csv");
    std::string s = kHeader;
    s += "1,MALLOC,HOST,\"" + std::string(CsvReader::kMaxRecord + 10, 'x') + "\",1,1,1,cpu,0x1,{},,\n";
    fuzz::write_file(path, s);
    std::vector<DumpRow> rows;
    std::string err;
    CHECK_FALSE(read_dump_csv(path, rows, err));
    CHECK(err == path + ":2: a record longer than 16 MiB (not a memscope_dump file?)");
}

TEST_CASE("dump readers: a device or other non-regular input is refused") {
    std::string err;
    CHECK(dump_files("/dev/zero", err).empty());
    CHECK(err == "/dev/zero: not a regular file");
}

TEST_CASE("dump CSV reader: nonsense values are refused with the line") {
    fuzz::TempDir dir;
    std::string path = dir.file("memscope_dump_v.csv");
    std::vector<DumpRow> rows;
    std::string err;
    fuzz::write_file(path, std::string(kHeader) + "1,MALLOC,HOST,N/A,5,7,7,cpu,0xZZZ,{size:1},,\n");
    CHECK_FALSE(read_dump_csv(path, rows, err));
    CHECK(err == path + ":2: invalid Ptr '0xZZZ'");
    fuzz::write_file(path, std::string(kHeader) + "1,MALLOC,HOST,N/A,5,7,7,cpu,0x10,{size:5x},,\n");
    CHECK_FALSE(read_dump_csv(path, rows, err));
    CHECK(err == path + ":2: invalid size '5x' in Attr (expected a number of bytes)");
    fuzz::write_file(path, std::string(kHeader) + "1,MALLOC,HOST,N/A,5,7,7,cpu,0x10,{size:9223372036854775808},,\n");
    CHECK_FALSE(read_dump_csv(path, rows, err));
    CHECK(err == path + ":2: invalid size '9223372036854775808' in Attr (expected a number of bytes)");
}

TEST_CASE("dump CSV reader: a negative size is read as upstream reads it (int64)") {
    // upstream's 2025 builds write a PTA FREE's size as the negative change
    fuzz::TempDir dir;
    std::string path = dir.file("memscope_dump_n.csv");
    std::vector<DumpRow> rows;
    std::string err;
    fuzz::write_file(path, std::string(kHeader) +
                               "1,FREE,PTA,N/A,5,7,7,0,20616939174400,\"{addr:20616939174400,size:-512,owner:}\",,\n"
                               "2,SYSTEM,acl init,N/A,6,7,7,N/A,N/A,,,\n"
                               "3,SYSTEM,acl finalize,N/A,7,7,7,N/A,N/A,,\"NA\",\n");
    REQUIRE(read_dump_csv(path, rows, err));
    REQUIRE(rows.size() == 3);
    CHECK(rows[0].attr_size == -512);
    CHECK(rows[0].rec.ev.size == 512);
    CHECK(rows[0].rec.ev.ptr == 20616939174400ull);
    // its spellings before 2025-04-29, and its "no Python stack"
    CHECK(rows[1].rec.ev.type == MSMS_T_ACL_INIT);
    CHECK(rows[2].rec.ev.type == MSMS_T_ACL_FINI);
    CHECK(rows[2].rec.py_stack.empty());
}

TEST_CASE("dump DB reader: random values and damaged files (fixed seed)") {
    fuzz::TempDir dir;
    std::mt19937_64 rng(fuzz::kSeed + 3);
    std::string path = dir.file("memscope_dump_1.db");
    {
        sqlite3* db = nullptr;
        REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
        sqlite3_exec(db,
                     "CREATE TABLE memscope_dump(\"ID\",\"Event\",\"Event Type\",\"Name\",\"Timestamp(ns)\","
                     "\"Process Id\",\"Thread Id\",\"Device Id\",\"Ptr\",\"Attr\",\"Call Stack(Python)\","
                     "\"Call Stack(C)\")",
                     nullptr, nullptr, nullptr);
        sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr);
        sqlite3_stmt* st = nullptr;
        sqlite3_prepare_v2(db, "INSERT INTO memscope_dump VALUES(?,?,?,?,?,?,?,?,?,?,?,?)", -1, &st, nullptr);
        const char* pool[] = {"", "1", "-1", "MALLOC", "FREE", "HOST", "N/A", "cpu", "0x10", "{size:5}",
                              "{size:-1}", "18446744073709551616", "\xff\xfe", "{a:[1,{b:2}]}", "0xZZ", "3"};
        for (int r = 0; r < 300; ++r) {
            sqlite3_reset(st);
            for (int c = 1; c <= 12; ++c) sqlite3_bind_text(st, c, pool[rng() % 16], -1, SQLITE_STATIC);
            sqlite3_step(st);
        }
        sqlite3_finalize(st);
        sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
        sqlite3_close(db);
    }
    std::vector<DumpRow> rows;
    std::string err;
    bool ok = read_dump_db(path, rows, err);
    if (!ok) CHECK(err.rfind(path, 0) == 0);
    // The file itself damaged: SQLite reports it, we pass it on.
    std::string bytes;
    {
        FILE* f = fopen(path.c_str(), "rb");
        REQUIRE(f);
        char buf[65536];
        size_t n;
        while ((n = fread(buf, 1, sizeof(buf), f)) > 0) bytes.append(buf, n);
        fclose(f);
    }
    fuzz::Budget budget(3.0);
    for (int i = 0; i < 200 && budget.left(); ++i) {
        std::string bad = bytes;
        for (int k = 0; k < 4; ++k) bad[rng() % bad.size()] ^= static_cast<char>(1 + rng() % 255);
        fuzz::write_file(path, bad);
        rows.clear();
        err.clear();
        if (!read_dump_db(path, rows, err)) CHECK(err.rfind(path, 0) == 0);
    }
}
