// Reads a memscope_dump table (COMPAT §4) — ours or upstream's, CSV or the
// SQLite `memscope_dump` table — back into Records for the offline modes
// (--analyze, --compare). Upstream writes rows out of time order: callers
// sort (sort_by_time). Errors name the file and the line.
#pragma once

#include <sqlite3.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "record.h"
#include "util/csv.h"

namespace msms {

struct DumpRow {
    Record rec;
    uint64_t file_id = 0;  // the row's own ID column
    size_t line = 0;       // CSV line (or DB row number) the row starts on
    std::string device;    // the Device Id column as written
    // Attr `size` as written, signed (upstream's 2025 builds write a PTA
    // FREE's size negative, -512); rec.ev.size holds its magnitude. 0 when
    // the row has none.
    int64_t attr_size = 0;
};

// One file's rows in file order, one at a time (nothing else is kept).
class RowScanner {
public:
    enum { kAuto, kCsv, kDb };
    RowScanner() = default;
    RowScanner(const RowScanner&) = delete;
    RowScanner& operator=(const RowScanner&) = delete;
    ~RowScanner();
    // kAuto: a .db file is SQLite, anything else CSV. False with `error`.
    bool open(const std::string& path, std::string& error, int format = kAuto);
    // 1: `row` is the next row; 0: the end; -1: `error` (with file and line).
    int next(DumpRow& row, std::string& error);
    // The 12 fields of the last row, as make_row read them.
    const std::vector<std::string>& fields() const { return fields_; }
    void close();

private:
    bool open_db(std::string& error);
    std::string path_;
    std::FILE* f_ = nullptr;
    std::unique_ptr<CsvReader> reader_;
    sqlite3* db_ = nullptr;
    sqlite3_stmt* st_ = nullptr;
    size_t n_ = 0;
    std::vector<std::string> fields_;
};

// The rows of one or more dump files (read in the order given, as if one
// file) in time order: stable by (timestamp, ID), as sort_by_time, without
// holding the rows. open() reads every file once, checking each row (so a
// bad row is reported before anything is delivered) and whether the rows
// are already in time order (then next() simply reads them again); when
// they are not, they are sorted in runs of at most `sort_memory` bytes
// spilled to an unlinked temporary file and merged. Memory: one run while
// sorting, then a buffer per run.
class DumpStream {
public:
    DumpStream(std::vector<std::string> files, size_t sort_memory);
    ~DumpStream();
    DumpStream(const DumpStream&) = delete;
    DumpStream& operator=(const DumpStream&) = delete;
    bool open(std::string& error);
    // 1: the next row; 0: the end; -1: `error`.
    int next(DumpRow& row, std::string& error);
    size_t rows() const { return rows_; }
    // The file (index into the list given) of the row last returned.
    size_t file_index() const { return file_; }
    bool sorted() const { return sorted_; }
    size_t runs() const { return runs_.size(); }

private:
    struct Run;
    bool build_runs(std::string& error);
    std::vector<std::string> files_;
    size_t sort_memory_;
    size_t rows_ = 0, delivered_ = 0, file_ = 0;
    bool sorted_ = true, merging_ = false;
    // sorted input: the file being read again
    RowScanner scan_;
    size_t scan_file_ = 0;
    bool scan_open_ = false;
    // unsorted input: one chunk kept in memory, or runs in the spill file
    std::vector<std::string> mem_;  // the single run, sorted
    size_t mem_pos_ = 0;
    int spill_fd_ = -1;
    uint64_t spill_size_ = 0;
    std::vector<std::unique_ptr<Run>> runs_;
    std::vector<size_t> heap_;
};

// Reads a .csv or .db file. False with `error` = "<file>:<line>: <what>".
bool read_dump(const std::string& path, std::vector<DumpRow>& rows, std::string& error);
bool read_dump_csv(const std::string& path, std::vector<DumpRow>& rows, std::string& error);
bool read_dump_db(const std::string& path, std::vector<DumpRow>& rows, std::string& error);
// Stable sort by (timestamp, ID).
void sort_by_time(std::vector<DumpRow>& rows);
// The memscope_dump files under a folder (recursive), sorted; a file is itself.
std::vector<std::string> dump_files(const std::string& path, std::string& error);

// Sets Attr entries of rows (by ID and Process Id) in a dump file, in place.
// patches: (ID, pid) -> [(key, value)]. False with `error` on failure.
struct AttrPatch {
    uint64_t id = 0;
    uint32_t pid = 0;
    std::string key, value;
};
bool patch_dump(const std::string& path, const std::vector<AttrPatch>& patches, std::string& error);

}  // namespace msms
