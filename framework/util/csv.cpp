#include "csv.h"

#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace msms {

namespace {
// Whether v holds a comma, quote, CR or LF. Every name of every row passes
// here: sixteen bytes per step with SSE2, the rest one byte at a time.
bool needs_quotes(std::string_view v) {
    size_t i = 0;
#if defined(__SSE2__)
    const __m128i comma = _mm_set1_epi8(','), quote = _mm_set1_epi8('"');
    const __m128i lf = _mm_set1_epi8('\n'), cr = _mm_set1_epi8('\r');
    for (; i + 16 <= v.size(); i += 16) {
        __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(v.data() + i));
        __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, comma), _mm_cmpeq_epi8(x, quote)),
                                   _mm_or_si128(_mm_cmpeq_epi8(x, lf), _mm_cmpeq_epi8(x, cr)));
        if (_mm_movemask_epi8(hit)) return true;
    }
#endif
    for (; i < v.size(); ++i) {
        char c = v[i];
        if (c == ',' || c == '"' || c == '\n' || c == '\r') return true;
    }
    return false;
}
}  // namespace

void csv_field(std::string& out, std::string_view v, bool force_quote) {
    bool quote = force_quote || needs_quotes(v);
    if (!quote) {
        out.append(v.data(), v.size());
        return;
    }
    // Quotes doubled, the text between them appended in one piece each (a
    // call stack of 2 KB has no quote: one append, not 2,000).
    out += '"';
    const char* p = v.data();
    const char* end = p + v.size();
    while (p < end) {
        const char* q = static_cast<const char*>(std::memchr(p, '"', static_cast<size_t>(end - p)));
        if (!q) {
            out.append(p, static_cast<size_t>(end - p));
            break;
        }
        out.append(p, static_cast<size_t>(q - p + 1));
        out += '"';
        p = q + 1;
    }
    out += '"';
}

bool CsvReader::next(std::vector<std::string>& fields) {
    fields.clear();
    raw_.clear();
    malformed_ = false;
    line_ = next_line_;
    if (too_long_) return false;
    int c = std::fgetc(f_);
    if (c == EOF) return false;
    std::string field;
    bool in_quotes = false, was_quoted = false;
    for (;;) {
        if (c == EOF) {
            if (in_quotes) malformed_ = true;
            fields.push_back(field);
            return true;
        }
        char ch = static_cast<char>(c);
        if (raw_.size() >= kMaxRecord) {
            too_long_ = malformed_ = true;
            fields.push_back(field);
            return true;
        }
        if (in_quotes) {
            if (ch == '"') {
                int n = std::fgetc(f_);
                if (n == '"') {
                    field += '"';
                    raw_ += "\"\"";
                } else {
                    in_quotes = false;
                    raw_ += '"';
                    c = n;
                    continue;
                }
            } else {
                if (ch == '\n') ++next_line_;
                field += ch;
                raw_ += ch;
            }
        } else if (ch == '"' && field.empty() && !was_quoted) {
            in_quotes = was_quoted = true;
            raw_ += ch;
        } else if (ch == ',') {
            fields.push_back(field);
            field.clear();
            was_quoted = false;
            raw_ += ch;
        } else if (ch == '\n') {
            ++next_line_;
            if (!raw_.empty() && raw_.back() == '\r') {
                raw_.pop_back();
                if (!field.empty() && field.back() == '\r') field.pop_back();
            }
            fields.push_back(field);
            return true;
        } else {
            field += ch;
            raw_ += ch;
        }
        c = std::fgetc(f_);
    }
}

}  // namespace msms
