// Our stack texts as the {filename, line, name} frames of PyTorch's memory
// snapshots. One frame per line, innermost first, in either form:
//   Python  "path/to/file.py(42): function"
//   C       "symbol+0x1a at /src/file.c:12 in /lib/libfoo.so"
//           "symbol+0x1a in /lib/libfoo.so"   (no line table)
//           "0x1234 in /lib/libfoo.so"         (no symbol)
//           anything else: the whole line as the name
// C frames keep the symbol without its offset; when there is no source
// line, the file is the module and the line is 0.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace msms_viz {

struct Frame {
    std::string filename, name;
    int64_t line = 0;
    bool operator==(const Frame& o) const { return line == o.line && filename == o.filename && name == o.name; }
};

Frame python_frame(std::string_view line);
Frame c_frame(std::string_view line);

// A whole event's frames: the C stack (innermost, below the interpreter)
// first, then the Python stack, as PyTorch lists C++ and Python frames.
std::vector<Frame> frames_of(std::string_view c_stack, std::string_view py_stack);

}  // namespace msms_viz
