// Reads a memscope_dump table (COMPAT §4) — ours or upstream's, CSV or the
// SQLite `memscope_dump` table — back into Records for the offline modes
// (--analyze, --compare). Upstream writes rows out of time order: callers
// sort (sort_by_time). Errors name the file and the line.
#pragma once

#include <string>
#include <vector>

#include "record.h"

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
