// msmemscope's own memory in a profiled process: what its Python extension
// modules keep and what its interpreter-start hook allocates is the
// profiler's memory, not the program's. The leak analysis suppresses it
// ("by msmemscope's own modules", plugins/analyzers/leaks/suppressions.cpp)
// and --compare leaves it out of its allocation sites (host/compare.cpp),
// both by these patterns. Header-only.
#pragma once

#include <string_view>

namespace msms {

// One pattern in the leak suppressions' syntax (heaptrack's, LSan's) against
// one frame: a substring; '*' matches any text, a leading '^' anchors at the
// frame's start, a trailing '$' at its end.
inline bool frame_pattern_matches(std::string_view pattern, std::string_view frame) {
    bool anchor_start = !pattern.empty() && pattern.front() == '^';
    if (anchor_start) pattern.remove_prefix(1);
    bool anchor_end = !pattern.empty() && pattern.back() == '$';
    if (anchor_end) pattern.remove_suffix(1);
    // The pieces between '*' must appear in order (no allocation: the leak
    // report and --compare match every frame of many stacks).
    size_t pieces = 1;
    for (char c : pattern) pieces += c == '*';
    size_t pos = 0, start = 0;
    for (size_t i = 0; i < pieces; ++i) {
        size_t star = pattern.find('*', start);
        std::string_view piece =
            pattern.substr(start, star == std::string_view::npos ? std::string_view::npos : star - start);
        start = star + 1;
        bool last = i + 1 == pieces;
        if (i == 0 && anchor_start) {
            if (frame.substr(0, piece.size()) != piece) return false;
            pos = piece.size();
            if (last && anchor_end) return pieces == 1 ? frame.size() == piece.size() : true;
            continue;
        }
        if (last && anchor_end) {
            if (frame.size() < pos + piece.size()) return false;
            return frame.substr(frame.size() - piece.size()) == piece;
        }
        if (piece.empty()) continue;
        size_t at = frame.find(piece, pos);
        if (at == std::string_view::npos) return false;
        pos = at + piece.size();
    }
    return true;
}

// Patterns, one per line, matched against every frame of an allocation's
// stacks (C and Python): msmemscope's own extension modules (their
// std::string and container allocations name a libstdc++ frame as the
// site) and the boot in the interpreter-start hook the CLI writes into its
// session folder (<out>/.msmemscope_session_XXXX/python/sitecustomize.py,
// a temporary path gone when the run ends).
inline constexpr const char* kOwnFrames =
    "/msmemscope/_msmemscope.\n"
    "/msmemscope/_msmemscope_config.\n"
    "/msmemscope/_torch_observer.\n"
    "/.msmemscope_session_*/python/sitecustomize.py(*): _msmemscope_boot\n";
// Patterns matched against an allocation's site only (its first frame past
// the allocator; a Python line where the C site is the interpreter's): any
// line of that hook. Not every frame: the hook's _msmemscope_chain runs the
// program's own sitecustomize, whose allocations have the program's frames
// first.
inline constexpr const char* kOwnSites = "/.msmemscope_session_*/python/sitecustomize.py(\n";

// Whether one of the patterns (one per line) matches the frame.
inline bool any_pattern_matches(std::string_view patterns, std::string_view frame) {
    size_t start = 0;
    while (start < patterns.size()) {
        size_t nl = patterns.find('\n', start);
        std::string_view p = patterns.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
        if (!p.empty() && frame_pattern_matches(p, frame)) return true;
        if (nl == std::string_view::npos) break;
        start = nl + 1;
    }
    return false;
}

// Every pattern above names msmemscope: a stack without the word has none
// of its frames (a cheap test before matching frame by frame).
inline bool may_be_own(std::string_view stack) { return stack.find("msmemscope") != std::string_view::npos; }

// A frame matched by kOwnFrames.
inline bool own_frame(std::string_view frame) { return any_pattern_matches(kOwnFrames, frame); }
// A site matched by kOwnSites.
inline bool own_site(std::string_view site) { return any_pattern_matches(kOwnSites, site); }

}  // namespace msms
