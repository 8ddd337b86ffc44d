// Leak suppressions (issue #19 item 7), in heaptrack's format (LeakSanitizer's
// suppression files): one pattern per line, optionally prefixed "leak:";
// blank lines and lines starting with '#' are ignored. A pattern is a
// substring of a frame: a function, source file or library name; '*' matches
// any text, a leading '^' anchors at the frame's start (the function), a
// trailing '$' at its end (the library). A leak is suppressed when a frame of
// its allocation stack (C or Python) matches a pattern.
//
// The built-in list covers the CPython interpreter's own one-time allocations
// (its arenas, interned strings and types, the import system, the loader's
// and libc's tables set up at start), and torch's (cpuinfo's tables, libgomp's
// thread state, c10's hooks registries): memory every such run holds until
// exit by design. Built-in rules match the allocation site only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace msms_leaks {

// The origin of the built-in list of one-time set-up's rules (add_builtin).
constexpr const char* kBuiltinOrigin = "built-in (CPython)";
// The origin of the rules for msmemscope's own memory (add_builtin:
// util/own_memory.h, every frame of the stack for its modules, the
// allocation site for its interpreter-start hook).
constexpr const char* kOwnOrigin = "built-in (msmemscope)";

// The origin of the rules for torch's own one-time set-up (add_builtin:
// matched against the allocation site only, a C site, or with Python stacks
// alone the allocator's caller, msms_event.alloc_caller).
constexpr const char* kTorchOrigin = "built-in (torch)";

// '*', '^...', '...$' matching of one pattern against one frame.
bool pattern_matches(std::string_view pattern, std::string_view frame);

// A C frame in the interpreter's own code (the built-in list's first two
// patterns): a Python object's block has such a site whatever Python code
// made it.
bool interpreter_frame(std::string_view frame);

class Suppressions {
public:
    struct Rule {
        std::string pattern;
        std::string origin;  // "file:line" or "built-in (CPython)"
        uint64_t sites = 0;  // sites it suppressed
        bool site_only = false;  // built-in: matched against the allocation site only
    };
    // Reads one file; false (and why) when it cannot be read.
    bool load_file(const std::string& path, std::string& error);
    // Adds text in the file format (origin: where it came from).
    void load_text(std::string_view text, const std::string& origin);
    void add_builtin();
    // The rule that suppresses a stack ('\n'-separated frames) whose
    // allocation site (first frame past the allocator) is `site`, or nullptr.
    Rule* match(std::string_view stack, std::string_view site);
    // The built-in rule that suppresses a block by its native site alone
    // (the allocator's caller of a block with a Python stack only), or nullptr.
    Rule* match_builtin_site(std::string_view site);
    bool empty() const { return rules_.empty(); }
    const std::vector<Rule>& rules() const { return rules_; }

private:
    std::vector<Rule> rules_;
};

}  // namespace msms_leaks
