// Where in a stack text a block was allocated, as the user sees it: the
// first frame that is not the allocator (the profiler's hooks, libc's malloc
// family and its thin wrappers such as strdup and operator new). One rule for
// the leak report (plugins/analyzers/leaks) and the live view
// (framework/host/live), so that both name the same site. Header-only.
#pragma once

#include <string>
#include <string_view>

namespace msms {

// One line of a stack text, trimmed ("" when none).
inline std::string stack_first_line(std::string_view stack) {
    size_t nl = stack.find('\n');
    std::string_view f = nl == std::string_view::npos ? stack : stack.substr(0, nl);
    while (!f.empty() && (f.back() == '\r' || f.back() == ' ')) f.remove_suffix(1);
    while (!f.empty() && f.front() == ' ') f.remove_prefix(1);
    return std::string(f);
}

// A frame of the allocator, not of its caller. A frame reads "func (file:line)"
// or "func+0x12 (module)": the function name comes first.
inline bool allocator_frame(const std::string& line) {
    if (line.find("libmsms_") != std::string::npos || line.find("libmsmemscope_agent") != std::string::npos)
        return true;
    static const char* const kNames[] = {"malloc",  "calloc",        "realloc",   "reallocarray", "free",
                                         "posix_memalign", "aligned_alloc", "memalign", "valloc", "pvalloc",
                                         "strdup",  "strndup",       "__strdup",  "__strndup",    "operator new",
                                         "operator new[]", "_Znwm", "_Znam", "_ZnwmSt11align_val_t", "asprintf",
                                         "vasprintf", "__libc_malloc", "__libc_calloc", "__libc_realloc",
                                         "__libc_memalign", "__posix_memalign", "_int_malloc", "c10::alloc_cpu"};
    size_t end = line.find_first_of(" +(");
    std::string func = line.substr(0, end);
    if (func == "operator") func = line.substr(0, line.find('(', 0));
    while (!func.empty() && func.back() == ' ') func.pop_back();
    for (const char* n : kNames)
        if (func == n) return true;
    return line.find("libc.so") != std::string::npos && line.find("alloc") != std::string::npos;
}

// The first frame of a C stack outside the allocator (the caller that asked
// for the memory), else the innermost frame.
inline std::string caller_site(std::string_view stack) {
    size_t start = 0;
    while (start < stack.size()) {
        size_t nl = stack.find('\n', start);
        std::string line =
            stack_first_line(stack.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start));
        if (!line.empty() && !allocator_frame(line)) return line;
        if (nl == std::string_view::npos) break;
        start = nl + 1;
    }
    return stack_first_line(stack);
}

}  // namespace msms
