#include "pickle_writer.h"

#include <stdexcept>

namespace msms_viz {

void PickleWriter::close(char op) {
    if (stack_.empty() || stack_.back().closer != op) throw std::logic_error("pickle writer: unbalanced container");
    buf_ += op;  // SETITEMS / APPENDS: the items since the MARK
    stack_.pop_back();
    value_written();
}

void PickleWriter::value_written() {
    if (!stack_.empty()) {
        Level& l = stack_.back();
        ++l.items;
        if (l.items >= 2000 || (l.closer == 'e' && l.items >= 1000)) {
            buf_ += l.closer;
            buf_ += '(';
            l.items = 0;
        }
    }
    flush_if_large();
}

void PickleWriter::finish() {
    if (!stack_.empty()) throw std::logic_error("pickle writer: a container is still open");
    buf_ += '.';  // STOP
    sink_(buf_.data(), buf_.size());
    written_ += buf_.size();
    buf_.clear();
}

std::string PickleWriter::valid_utf8(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    size_t i = 0;
    while (i < s.size()) {
        unsigned char c = static_cast<unsigned char>(s[i]);
        size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
        bool ok = n > 0 && i + n <= s.size();
        for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
        if (ok && n == 2) ok = c >= 0xc2;  // no overlong forms
        if (ok && n == 3) {
            unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
            ok = !(c == 0xe0 && c1 < 0xa0) && !(c == 0xed && c1 >= 0xa0);  // overlong, surrogates
        }
        if (ok && n == 4) {
            unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
            ok = !(c == 0xf0 && c1 < 0x90) && !(c == 0xf4 && c1 >= 0x90) && c <= 0xf4;
        }
        if (!ok) {
            out += '?';
            ++i;
            continue;
        }
        out.append(s.data() + i, n);
        i += n;
    }
    return out;
}

}  // namespace msms_viz
