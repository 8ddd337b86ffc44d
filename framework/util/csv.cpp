#include "csv.h"

#include <array>

namespace msms {

void csv_field(std::string& out, std::string_view v, bool force_quote) {
    // One table load per byte instead of four compares (every name of
    // every row passes here).
    static const auto special = [] {
        std::array<bool, 256> t{};
        t[static_cast<unsigned char>(',')] = t[static_cast<unsigned char>('"')] = true;
        t[static_cast<unsigned char>('\n')] = t[static_cast<unsigned char>('\r')] = true;
        return t;
    }();
    bool quote = force_quote;
    if (!quote)
        for (char c : v)
            if (special[static_cast<unsigned char>(c)]) {
                quote = true;
                break;
            }
    if (!quote) {
        out.append(v.data(), v.size());
        return;
    }
    out += '"';
    for (char c : v) {
        if (c == '"') out += '"';
        out += c;
    }
    out += '"';
}

bool CsvReader::next(std::vector<std::string>& fields) {
    fields.clear();
    raw_.clear();
    malformed_ = false;
    line_ = next_line_;
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
