#include "frames.h"

#include <cctype>

namespace msms_viz {

namespace {

bool all_digits(std::string_view s) {
    if (s.empty() || s.size() > 15) return false;
    for (char c : s)
        if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    return true;
}

int64_t to_int(std::string_view s) {
    int64_t v = 0;
    for (char c : s) v = v * 10 + (c - '0');
    return v;
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.back() == '\r' || s.back() == ' ')) s.remove_suffix(1);
    while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    return s;
}

template <class F>
void each_line(std::string_view text, F&& f) {
    size_t start = 0;
    while (start < text.size()) {
        size_t nl = text.find('\n', start);
        if (nl == std::string_view::npos) nl = text.size();
        std::string_view line = trim(text.substr(start, nl - start));
        if (!line.empty()) f(line);
        start = nl + 1;
    }
}

}  // namespace

Frame python_frame(std::string_view line) {
    Frame f;
    // "file(42): func": the last "(digits): " wins (file names may hold parentheses)
    size_t close = line.rfind("): ");
    if (close != std::string_view::npos) {
        size_t open = line.rfind('(', close);
        if (open != std::string_view::npos && all_digits(line.substr(open + 1, close - open - 1))) {
            f.filename = std::string(line.substr(0, open));
            f.line = to_int(line.substr(open + 1, close - open - 1));
            f.name = std::string(line.substr(close + 3));
            return f;
        }
    }
    f.name = std::string(line);
    return f;
}

Frame c_frame(std::string_view line) {
    // A native stack may carry frames in the Python form (a collector that
    // merges interpreter frames): read them as such.
    if (line.find(" in ") == std::string_view::npos && line.find(" at ") == std::string_view::npos) {
        Frame py = python_frame(line);
        if (!py.filename.empty()) return py;
    }
    Frame f;
    std::string_view rest = line;
    size_t in = rest.rfind(" in ");
    if (in != std::string_view::npos) {
        f.filename = std::string(rest.substr(in + 4));
        rest = rest.substr(0, in);
    }
    size_t at = rest.rfind(" at ");
    if (at != std::string_view::npos) {
        std::string_view loc = rest.substr(at + 4);
        size_t colon = loc.rfind(':');
        if (colon != std::string_view::npos && all_digits(loc.substr(colon + 1))) {
            f.filename = std::string(loc.substr(0, colon));
            f.line = to_int(loc.substr(colon + 1));
            rest = rest.substr(0, at);
        }
    }
    // "symbol+0x1a" -> "symbol"; a bare "0x1234" stays the name
    size_t plus = rest.rfind("+0x");
    if (plus != std::string_view::npos && plus > 0) rest = rest.substr(0, plus);
    f.name = std::string(rest);
    return f;
}

std::vector<Frame> frames_of(std::string_view c_stack, std::string_view py_stack) {
    std::vector<Frame> out;
    each_line(c_stack, [&](std::string_view l) { out.push_back(c_frame(l)); });
    each_line(py_stack, [&](std::string_view l) { out.push_back(python_frame(l)); });
    return out;
}

}  // namespace msms_viz
