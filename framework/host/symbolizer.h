// Turns interned stacks into text, one frame per line, cached per stack id.
// C frames are symbolized in the host from the kModule records the agent
// wrote (load bias and path of every ELF object) with elfutils (libdw): ELF
// symbol tables give the function, DWARF line tables (where present) the
// source line. A frame reads
//     function+0xOFF at /src/file.c:LINE in /path/module
// dropping what is unknown: "0xOFF in /path/module" (no symbol), "0xADDR"
// (no module). Python frames are already text ("file(line): func").
// A CPython process's start-up stacks that no one asked for (kStack kind 2,
// framework/agent/agent.cpp) get no source lines (the DWARF of libc6-dbg's
// compressed debug files took ~40 ms per process to inflate for them), and
// a last line that says what they are; so do the stacks of blocks the
// dynamic loader allocated (kind 3: a thread's TLS, dlopen's maps).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "capture_reader.h"

namespace msms {

class Symbolizer {
public:
    // api: a Python API session's run (api_words.h): the note on a stack
    // taken without C stacks asked for names config()'s call_stack="c".
    explicit Symbolizer(const CaptureReader& reader, bool api = false);
    virtual ~Symbolizer();
    Symbolizer(const Symbolizer&) = delete;
    Symbolizer& operator=(const Symbolizer&) = delete;
    // "" for id 0 or an unknown stack.
    const std::string& text(uint64_t stack_id);
    // Stacks symbolized so far (for the progress line).
    size_t stacks() const { return cache_.size(); }

protected:
    // One C frame: a return address (the call site is address - 1).
    virtual std::string c_frame(uint64_t address, bool source_line = true);

private:
    void sync_modules();
    const CaptureReader& reader_;
    std::string startup_note_, loader_note_;  // (kinds 2 and 3)
    std::unordered_map<uint64_t, std::string> cache_;
    // In front of cache_: the stacks of the rows just before (a row's
    // stack is nearly always one of them), by id, without hashing.
    static constexpr uint64_t kRecent = 256;
    struct Recent {
        uint64_t id = 0;
        const std::string* text = nullptr;
    };
    Recent recent_[kRecent];
    std::unordered_map<uint64_t, std::string> frame_cache_;
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// "_ZN3foo3barEv" -> "foo::bar()"; other names unchanged.
std::string demangle(const char* name);

}  // namespace msms
