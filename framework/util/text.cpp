#include "text.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace msms {

std::string trim(std::string_view s) {
    size_t b = 0, e = s.size();
    while (b < e && (s[b] == ' ' || s[b] == '\t' || s[b] == '\n' || s[b] == '\r')) ++b;
    while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\n' || s[e - 1] == '\r')) --e;
    return std::string(s.substr(b, e - b));
}

std::vector<std::string> split_list(std::string_view s, bool drop_empty) {
    static const std::string_view kFullWidthComma = "\xEF\xBC\x8C";  // U+FF0C
    std::vector<std::string> out;
    std::string cur;
    for (size_t i = 0; i < s.size();) {
        if (s[i] == ',') {
            out.push_back(trim(cur));
            cur.clear();
            ++i;
        } else if (s.substr(i, 3) == kFullWidthComma) {
            out.push_back(trim(cur));
            cur.clear();
            i += 3;
        } else {
            cur += s[i++];
        }
    }
    out.push_back(trim(cur));
    if (drop_empty) out.erase(std::remove(out.begin(), out.end(), std::string()), out.end());
    return out;
}

std::string join(const std::vector<std::string>& items, std::string_view sep) {
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += sep;
        out += items[i];
    }
    return out;
}

size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        cur[0] = i;
        for (size_t j = 1; j <= b.size(); ++j) {
            size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
            cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
        }
        std::swap(prev, cur);
    }
    return prev[b.size()];
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
    // A candidate that starts with the word ("idle" -> "idle_threshold") wins.
    if (word.size() >= 3)
        for (auto& c : candidates)
            if (c.size() > word.size() && c.compare(0, word.size(), word) == 0) return c;
    std::string best;
    size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
    for (auto& c : candidates) {
        size_t d = edit_distance(word, c);
        if (d < best_d) {
            best_d = d;
            best = c;
        }
    }
    return best;
}

std::vector<std::pair<std::string, std::string>> parse_attr_list(std::string_view s) {
    std::vector<std::pair<std::string, std::string>> out;
    if (!s.empty() && s.front() == '{' && s.back() == '}') s = s.substr(1, s.size() - 2);
    int depth = 0;
    size_t start = 0;
    auto flush = [&](size_t end) {
        std::string_view item = s.substr(start, end - start);
        if (item.empty()) return;
        size_t colon = item.find(':');
        if (colon == std::string_view::npos)
            out.emplace_back(trim(item), "");
        else
            out.emplace_back(trim(item.substr(0, colon)), std::string(item.substr(colon + 1)));
    };
    for (size_t i = 0; i < s.size(); ++i) {
        char c = s[i];
        if (c == '[' || c == '{' || c == '(') ++depth;
        else if ((c == ']' || c == '}' || c == ')') && depth > 0) --depth;
        else if (c == ',' && depth == 0) {
            flush(i);
            start = i + 1;
        }
    }
    flush(s.size());
    return out;
}

bool parse_uint(std::string_view s, unsigned long long& out) {
    if (s.empty() || s.size() > 19) return false;
    unsigned long long v = 0;
    for (char c : s) {
        if (c < '0' || c > '9') return false;
        v = v * 10 + static_cast<unsigned>(c - '0');
    }
    out = v;
    return true;
}

namespace {
// "00".."99": two digits per division (sinks print two 19-digit
// timestamps per row; one digit per division showed as a fifth of the
// host's time on the Python-trace benchmark).
constexpr char kDigitPairs[] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";
}  // namespace

namespace {
// Writes the digits of v < 10^8 ending at `end`, two per division in 32-bit
// arithmetic; returns where they start.
inline char* digits_below_1e8(char* end, uint32_t v) {
    while (v >= 100) {
        const char* d = kDigitPairs + (v % 100) * 2;
        v /= 100;
        end -= 2;
        end[0] = d[0];
        end[1] = d[1];
    }
    if (v >= 10) {
        const char* d = kDigitPairs + v * 2;
        end -= 2;
        end[0] = d[0];
        end[1] = d[1];
    } else {
        *--end = static_cast<char>('0' + v);
    }
    return end;
}

// Exactly 8 digits (zero-padded) ending at `end`.
inline void eight_digits(char* end, uint32_t v) {
    for (int i = 0; i < 4; ++i) {
        const char* d = kDigitPairs + (v % 100) * 2;
        v /= 100;
        end -= 2;
        end[0] = d[0];
        end[1] = d[1];
    }
}
}  // namespace

char* format_8_digits(char* dst, uint32_t v) {
    eight_digits(dst + 8, v);
    return dst + 8;
}

char* format_uint(char* dst, uint64_t v) {
    // Built backwards in 8-digit blocks (a 19-digit timestamp: two 64-bit
    // divisions, the rest in 32 bits), then moved to dst.
    char buf[24];
    char* end = buf + sizeof(buf);
    char* p = end;
    while (v >= 100000000ull) {
        eight_digits(p, static_cast<uint32_t>(v % 100000000ull));
        v /= 100000000ull;
        p -= 8;
    }
    p = digits_below_1e8(p, static_cast<uint32_t>(v));
    size_t n = static_cast<size_t>(end - p);  // 1..20
    // Two fixed-size copies that overlap, not a memcpy call of n bytes:
    // that call was ~8% of the host's time on a row-heavy run (a row has
    // half a dozen numbers).
    if (n >= 16) {
        std::memcpy(dst, p, 16);
        std::memcpy(dst + n - 16, p + n - 16, 16);
    } else if (n >= 8) {
        std::memcpy(dst, p, 8);
        std::memcpy(dst + n - 8, p + n - 8, 8);
    } else if (n >= 4) {
        std::memcpy(dst, p, 4);
        std::memcpy(dst + n - 4, p + n - 4, 4);
    } else {
        dst[0] = p[0];
        dst[n / 2] = p[n / 2];
        dst[n - 1] = p[n - 1];
    }
    return dst + n;
}

void append_uint(std::string& out, uint64_t v) {
    char buf[24];
    out.append(buf, static_cast<size_t>(format_uint(buf, v) - buf));
}

void append_int(std::string& out, int64_t v) {
    if (v < 0) {
        out += '-';
        append_uint(out, static_cast<uint64_t>(0) - static_cast<uint64_t>(v));
    } else {
        append_uint(out, static_cast<uint64_t>(v));
    }
}

char* format_hex_ptr(char* dst, uint64_t v) {
    static const char* digits = "0123456789abcdef";
    dst[0] = '0';
    dst[1] = 'x';
    for (int i = 17; i >= 2; --i) {
        dst[i] = digits[v & 15];
        v >>= 4;
    }
    return dst + 18;
}

void append_hex_ptr(std::string& out, uint64_t v) {
    char buf[18];
    out.append(buf, static_cast<size_t>(format_hex_ptr(buf, v) - buf));
}

namespace {
// The length of the well-formed UTF-8 sequence at s[i] (2..4), or 0.
size_t utf8_length(std::string_view s, size_t i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return 0;
    for (size_t k = 1; k < n; ++k)
        if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
    unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
    if (c == 0xE0 && c1 < 0xA0) return 0;   // overlong
    if (c == 0xED && c1 >= 0xA0) return 0;  // surrogates
    if (c == 0xF0 && c1 < 0x90) return 0;   // overlong
    if (c == 0xF4 && c1 >= 0x90) return 0;  // above U+10FFFF
    return n;
}
}  // namespace

std::string escape_controls(std::string_view s, bool keep_tabs) {
    std::string out;
    out.reserve(s.size());
    char buf[8];
    for (size_t i = 0; i < s.size();) {
        unsigned char c = static_cast<unsigned char>(s[i]);
        if (c < 0x80) {
            ++i;
            if (c == '\n') out += "\\n";
            else if (c == '\r') out += "\\r";
            else if (c == '\t') out += keep_tabs ? "\t" : "\\t";
            else if (c < 0x20 || c == 0x7F) {
                std::snprintf(buf, sizeof buf, "\\x%02x", c);
                out += buf;
            } else {
                out += static_cast<char>(c);
            }
            continue;
        }
        size_t n = utf8_length(s, i);
        if (n == 0) {
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
            ++i;
            continue;
        }
        if (n == 2 && c == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0) {  // C1 controls (CSI = U+009B)
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned char>(s[i + 1]));
            out += buf;
        } else {
            out.append(s.data() + i, n);
        }
        i += n;
    }
    return out;
}

std::string file_kind(unsigned mode) {
    if (S_ISREG(mode)) return "";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISDIR(mode)) return "a folder";
    if (S_ISLNK(mode)) return "a symbolic link";
    return "not a regular file";
}

int open_regular_file(const std::string& path, std::string& why) {
    int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        why = "'" + escape_controls(path) + "': " + std::strerror(errno);
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        why = "'" + escape_controls(path) + "': " + std::strerror(errno);
        ::close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        why = "'" + escape_controls(path) + "' is not a regular file (" + file_kind(st.st_mode) + "); give a file";
        ::close(fd);
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

int read_at_most(int fd, size_t limit, std::string& out) {
    out.clear();
    char buf[65536];
    for (;;) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (n == 0) return 1;
        if (out.size() + static_cast<size_t>(n) > limit) return 0;
        out.append(buf, static_cast<size_t>(n));
    }
}

std::string rename_mentions(std::string_view text, std::string_view from, std::string_view to) {
    auto name_char = [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    };
    std::string out;
    size_t pos = 0;
    while (!from.empty()) {
        size_t at = text.find(from, pos);
        if (at == std::string_view::npos) break;
        size_t end = at + from.size();
        bool whole = (at == 0 || !name_char(text[at - 1])) && (end == text.size() || !name_char(text[end]));
        out.append(text.substr(pos, at - pos));
        out.append(whole ? to : from);
        pos = end;
    }
    out.append(text.substr(pos));
    return out;
}

std::string human_bytes(int64_t bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = static_cast<double>(bytes);
    int u = 0;
    while (std::abs(v) >= 1024 && u < 4) {
        v /= 1024;
        ++u;
    }
    char buf[64];
    if (u == 0) std::snprintf(buf, sizeof(buf), "%lld B", static_cast<long long>(bytes));
    else std::snprintf(buf, sizeof(buf), "%.1f %s", v, units[u]);
    return buf;
}

}  // namespace msms
