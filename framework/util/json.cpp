#include "json.h"

#include <cstdio>

namespace msms {

namespace {
// The length of the well-formed UTF-8 sequence at s[i] (2..4), or 0.
inline size_t utf8_sequence(std::string_view s, size_t i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return 0;
    for (size_t k = 1; k < n; ++k)
        if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
    unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
    if ((c == 0xE0 && c1 < 0xA0) || (c == 0xF0 && c1 < 0x90)) return 0;  // overlong
    if (c == 0xED && c1 >= 0xA0) return 0;                                // surrogates
    if (c == 0xF4 && c1 >= 0x90) return 0;                                // above U+10FFFF
    return n;
}
}  // namespace

void json_quote(std::string& out, std::string_view s) {
    out += '"';
    for (size_t i = 0; i < s.size();) {
        unsigned char c = static_cast<unsigned char>(s[i]);
        if (c >= 0x80) {
            // JSON text is UTF-8: a byte that is not part of a well-formed
            // sequence (a Latin-1 file name, a cut string) is written as the
            // character of the same number (\u00XX), so the file stays valid.
            size_t n = utf8_sequence(s, i);
            if (n) {
                out.append(s.data() + i, n);
                i += n;
            } else {
                char buf[8];
                std::snprintf(buf, sizeof(buf), "\\u%04x", c);
                out += buf;
                ++i;
            }
            continue;
        }
        ++i;
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
            if (c < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof(buf), "\\u%04x", c);
                out += buf;
            } else {
                out += static_cast<char>(c);
            }
        }
    }
    out += '"';
}

static bool is_number(std::string_view v) {
    if (v.empty() || v.size() > 20) return false;
    size_t i = v[0] == '-' ? 1 : 0;
    if (i == v.size()) return false;
    if (v[i] == '0' && v.size() > i + 1) return false;  // keep "0x..", "007" as text
    for (; i < v.size(); ++i)
        if (v[i] < '0' || v[i] > '9') return false;
    return true;
}

void json_attr_value(std::string& out, std::string_view v) {
    if (is_number(v)) {
        out += v;
        return;
    }
    if (v == "true" || v == "false") {
        out += v;
        return;
    }
    if (v.size() >= 2 && v.front() == '[' && v.back() == ']') {
        // [2, 3] -> array of numbers when every item is a number
        std::string_view body = v.substr(1, v.size() - 2);
        std::string arr = "[";
        bool ok = true;
        size_t start = 0;
        bool first = true;
        while (start <= body.size()) {
            size_t comma = body.find(',', start);
            if (comma == std::string_view::npos) comma = body.size();
            std::string_view item = body.substr(start, comma - start);
            while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
            while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
            if (!item.empty()) {
                if (!is_number(item)) {
                    ok = false;
                    break;
                }
                if (!first) arr += ',';
                arr += item;
                first = false;
            }
            start = comma + 1;
        }
        if (ok) {
            out += arr + "]";
            return;
        }
    }
    json_quote(out, v);
}

void Json::dump_to(std::string& out, int indent, int level) const {
    auto newline = [&](int lvl) {
        if (indent < 0) return;
        out += '\n';
        out.append(static_cast<size_t>(indent * lvl), ' ');
    };
    switch (type_) {
    case Type::Null: out += "null"; break;
    case Type::Bool: out += b_ ? "true" : "false"; break;
    case Type::Int: out += std::to_string(i_); break;
    case Type::Double: {
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%.17g", d_);
        out += buf;
        break;
    }
    case Type::String: json_quote(out, s_); break;
    case Type::Array:
    case Type::Object: {
        bool obj = type_ == Type::Object;
        out += obj ? '{' : '[';
        for (size_t i = 0; i < items_.size(); ++i) {
            if (i) out += ',';
            newline(level + 1);
            if (obj) {
                json_quote(out, items_[i].first);
                out += indent < 0 ? ":" : ": ";
            }
            items_[i].second.dump_to(out, indent, level + 1);
        }
        if (!items_.empty()) newline(level);
        out += obj ? '}' : ']';
        break;
    }
    }
}

std::string Json::dump(int indent) const {
    std::string out;
    dump_to(out, indent, 0);
    return out;
}

}  // namespace msms
