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

// Text from outside (a program argument, a path, a plugin's error text) as
// it may be shown on a terminal: control characters (C0, DEL and the C1
// range U+0080..U+009F) are written escaped ("\n", "\t", "\x1b", "\u009b");
// bytes that are not UTF-8 are shown as "\xHH". Printable text is unchanged.
// `keep_tabs`: a tab stays a tab (an analyzer's report lines: upstream's
// Gap Analysis table is tab-separated); it cannot drive the terminal.
std::string escape_controls(std::string_view s, bool keep_tabs = false);
// `text` with each whole mention of the name `from` (not preceded nor
// followed by a letter, digit, '_' or '-': "out/NAME/x.csv", "NAME:", never
// inside NAME_2) replaced by `to`: the messages that named a process folder
// before it was renamed (ProcessRun, a rank learned late).
std::string rename_mentions(std::string_view text, std::string_view from, std::string_view to);
// Bytes for people: "512 B", "1.5 KiB", "3.2 MiB" ... (binary units, one decimal).
std::string human_bytes(int64_t bytes);

// What kind of file a st_mode names, for a message: "a FIFO", "a socket",
// "a character device", "a block device", "a folder", "a symbolic link",
// "not a regular file" for anything else; "" for a regular file.
std::string file_kind(unsigned mode);

// Opens an input file for reading without ever blocking on it: O_NONBLOCK
// (a FIFO opens at once; the flag is cleared again on a regular file), then
// fstat. A file that is not regular (FIFO, pipe, socket, device, folder) is
// closed again. Returns the descriptor, or -1 with `why` set to
// "'<path>' is not a regular file (a FIFO); give a file" or
// "'<path>': <strerror>" (the path escaped for the terminal).
int open_regular_file(const std::string& path, std::string& why);

// Reads fd to its end into out, at most `limit` bytes: the limit holds for
// the bytes actually read, whatever the file's size says. Returns 1 when the
// whole file was read, 0 when it has more than `limit` bytes, -1 on a read
// error (errno set).
int read_at_most(int fd, size_t limit, std::string& out);

}  // namespace msms
