// Small text helpers shared by the host: lists with full-width commas,
// "did you mean", Attr parsing.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace msms {

// Splits on ',' and the full-width comma U+FF0C; trims spaces; drops empty
// items only when drop_empty.
std::vector<std::string> split_list(std::string_view s, bool drop_empty = true);
std::string join(const std::vector<std::string>& items, std::string_view sep);
std::string trim(std::string_view s);
size_t edit_distance(std::string_view a, std::string_view b);
// The closest candidate within a small distance, or "".
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);
// "k:v,k:[1, 2],k:v" -> pairs; commas inside brackets or braces stay in values.
std::vector<std::pair<std::string, std::string>> parse_attr_list(std::string_view s);
bool parse_uint(std::string_view s, unsigned long long& out);
// Fast number formatting for output rows (no locale, no allocation beyond
// the string's own growth).
void append_uint(std::string& out, uint64_t v);
// Writes v's decimal digits at dst (at most 20 bytes, no terminator) and
// returns the end: for rows assembled in a local buffer.
char* format_uint(char* dst, uint64_t v);
// Writes exactly 8 digits of v < 10^8 (zero-padded) at dst; returns dst + 8.
char* format_8_digits(char* dst, uint32_t v);
void append_int(std::string& out, int64_t v);
void append_hex_ptr(std::string& out, uint64_t v);  // 0x%016x
char* format_hex_ptr(char* dst, uint64_t v);        // 0x%016x at dst (18 chars); returns the end

}  // namespace msms
