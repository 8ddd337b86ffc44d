// CSV reading and writing shared by the sinks and the offline readers
// (RFC 4180: fields with ',', '"' or newlines are quoted, quotes doubled).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace msms {

// Appends v as one CSV field (quoted only when needed, or when force_quote).
void csv_field(std::string& out, std::string_view v, bool force_quote = false);

// Reads records (a record may span lines inside quotes). Bounded: a record
// longer than kMaxRecord bytes (a field of a broken or hostile file, e.g.
// /dev/zero) stops the reader with too_long() set instead of filling memory.
class CsvReader {
public:
    static constexpr size_t kMaxRecord = 16u << 20;  // 16 MiB
    explicit CsvReader(std::FILE* f) : f_(f) {}
    // False at end of file. `line` is the line number the record starts on.
    bool next(std::vector<std::string>& fields);
    size_t line() const { return line_; }
    // The raw text of the last record (without the trailing newline).
    const std::string& raw() const { return raw_; }
    bool malformed() const { return malformed_; }
    bool too_long() const { return too_long_; }

private:
    std::FILE* f_;
    size_t line_ = 0, next_line_ = 1;
    std::string raw_;
    bool malformed_ = false;
    bool too_long_ = false;
};

}  // namespace msms
