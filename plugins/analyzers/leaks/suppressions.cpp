#include "suppressions.h"

#include "util/own_memory.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

namespace msms_leaks {
namespace {

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
    return s;
}

// The interpreter's own one-time allocations, as the allocation sites of a
// Python run's at-exit host leaks name them. Built-in rules are matched
// against the allocation site only (the first frame past the allocator), since
// every frame below a Python program's allocations is the interpreter's.
// The interpreter itself (Debian: the python3.x binary; elsewhere
// libpython3.x.so): its arenas, interned strings, static types and module
// state, held until exit by design. (interpreter_frame: the same two.)
constexpr const char* kInterpreterBinary = "bin/python3";
constexpr const char* kInterpreterLibrary = "libpython3";

const char* const kCPython =
    "# Python frames of the import system\n"
    "<frozen importlib.\n"
    "# the dynamic loader's maps of the extension modules the interpreter loaded\n"
    "ld-linux\n"
    "# libc's locale, character-set and time-zone tables, set up once at interpreter start\n"
    "_nl_\n"
    "setlocale\n"
    "new_composite_name\n"
    "read_alias_file\n"
    "__gconv_\n"
    "__wcsmbs_load_conv\n"
    "tzset\n"
    "__tzfile_read\n"
    "__tzstring\n"
    "# libc's message-catalog domains (gettext's textdomain and bindtextdomain), named once at a\n"
    "# program's start, as every coreutils program does after setlocale: never freed\n"
    "textdomain\n"
    "set_binding_values\n";

// torch's own one-time set-up, kept until exit by design: the sites (a C
// frame, or with Python stacks alone the allocator's caller) of what every
// torch process holds, which with Python stacks alone read as leaks of the
// program's first operator, of autograd's backward() and of a thread's first
// parallel operator, ~0.9 KiB a run.
const char* const kTorch =
    "# cpuinfo's tables of the machine's processors and caches (cpuinfo_initialize, once)\n"
    "/libcpuinfo*.so\n"
    "^cpuinfo_\n"
    "# libgomp's state of a thread that ran a parallel region (kept for the thread's next one)\n"
    "/libgomp*.so\n"
    "^gomp_\n"
    "# c10's registries of device hooks (at::detail::getCUDAHooks, at the first backward())\n"
    "^at::*HooksRegistry\n"
    "^at::detail::get*Hooks(\n"
    "^c10::Registry<\n"
    "# the interpreter tag torch leaves when Python exits (PyInterpreter::disarm)\n"
    "^c10::impl::PyInterpreter::disarm\n";

}  // namespace

bool pattern_matches(std::string_view pattern, std::string_view frame) {
    return msms::frame_pattern_matches(pattern, frame);
}

void Suppressions::load_text(std::string_view text, const std::string& origin) {
    size_t line_no = 0, start = 0;
    while (start <= text.size()) {
        size_t nl = text.find('\n', start);
        std::string_view line = text.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
        ++line_no;
        line = trim(line);
        if (line.rfind("leak:", 0) == 0) line = trim(line.substr(5));
        if (!line.empty() && line.front() != '#')
            rules_.push_back(Rule{std::string(line), origin + ":" + std::to_string(line_no), 0});
        if (nl == std::string_view::npos) break;
        start = nl + 1;
    }
}

bool Suppressions::load_file(const std::string& path, std::string& error) {
    // Opened without blocking (a FIFO would wait for a writer) and read only
    // when it is a regular file, at most 16 MiB (bytes read, issue #29).
    constexpr size_t kMaxBytes = 16u << 20;
    int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    struct stat st;
    if (fd < 0) {
        error = "cannot read the suppression file '" + path + "'";
        return false;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        error = "the suppression file '" + path + "' is not a regular file";
        return false;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    std::string text;
    char buf[65536];
    for (;;) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            ::close(fd);
            if (n < 0) {
                error = "cannot read the suppression file '" + path + "'";
                return false;
            }
            break;
        }
        if (text.size() + static_cast<size_t>(n) > kMaxBytes) {
            ::close(fd);
            error = "the suppression file '" + path + "' is larger than 16 MiB";
            return false;
        }
        text.append(buf, static_cast<size_t>(n));
    }
    load_text(text, path);
    return true;
}

bool interpreter_frame(std::string_view frame) {
    return pattern_matches(kInterpreterBinary, frame) || pattern_matches(kInterpreterLibrary, frame);
}

void Suppressions::add_builtin() {
    size_t first = rules_.size();
    load_text(std::string(kInterpreterBinary) + "\n" + kInterpreterLibrary + "\n" + kCPython, kBuiltinOrigin);
    for (size_t i = first; i < rules_.size(); ++i) rules_[i].site_only = true;
    // msmemscope's own memory (its extension modules in any frame, its
    // interpreter-start hook's lines as the site): util/own_memory.h, the
    // patterns --compare uses too.
    load_text(msms::kOwnFrames, kOwnOrigin);
    first = rules_.size();
    load_text(msms::kOwnSites, kOwnOrigin);
    for (size_t i = first; i < rules_.size(); ++i) rules_[i].site_only = true;
    first = rules_.size();
    load_text(kTorch, kTorchOrigin);
    for (size_t i = first; i < rules_.size(); ++i) rules_[i].site_only = true;
}

Suppressions::Rule* Suppressions::match_builtin_site(std::string_view site) {
    site = trim(site);
    if (site.empty()) return nullptr;
    for (auto& r : rules_)
        if (r.site_only && pattern_matches(r.pattern, site)) return &r;
    return nullptr;
}

Suppressions::Rule* Suppressions::match(std::string_view stack, std::string_view site) {
    if (rules_.empty() || stack.empty()) return nullptr;
    // The user's rules first (any frame of the stack), then the built-in ones (the site).
    size_t start = 0;
    while (start < stack.size()) {
        size_t nl = stack.find('\n', start);
        std::string_view frame = trim(stack.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start));
        if (!frame.empty())
            for (auto& r : rules_)
                if (!r.site_only && pattern_matches(r.pattern, frame)) return &r;
        if (nl == std::string_view::npos) break;
        start = nl + 1;
    }
    site = trim(site);
    if (!site.empty())
        for (auto& r : rules_)
            if (r.site_only && pattern_matches(r.pattern, site)) return &r;
    return nullptr;
}

}  // namespace msms_leaks
