// What the Python stacks know of a code object (file, function, whether its
// file is skipped, the ids of the frame texts already interned for it),
// made once per code object with the GIL held and kept in the code's
// co_extra slot, so that it is freed with the code object. A set-associative
// table in front of co_extra answers "which info belongs to this code" from
// any thread, GIL or not: the profile function's pushes (py_trace.cpp) and
// the interpreter-frame reader (py_frames.cpp) share it.
#pragma once

#include <Python.h>

#include <stdint.h>

#include <atomic>
#include <string>
#include <vector>

namespace msms_py {

struct CodeInfo {
    PyCodeObject* code;  // whose co_extra this is (freed with it)
    const char* file;    // UTF-8, owned by the code object ("?" when it has none)
    const char* func;
    int first_line;
    bool skip;           // a file under a skipped prefix (the package's own)
    bool unrecorded;     // made with the agent's hooks off (code_info's `unrecorded`): freed so too
    std::string label;   // "file(line): func", formatted once
    uint64_t name_cache[2] = {0, 0};  // the label's id in this thread's stream (agent)
    // Interned ids of "file(line): func", each packed as stream generation
    // (8 bits) | key (16) | id (40): by line (shadow stacks, whose frame
    // objects say their line) and by instruction (the frame reader, which
    // skips the line table's scan). Read and written by any thread, GIL or
    // not (one word each). 32 instructions: AdamW's step and a model's
    // forward allocate at more than 16 places each; with 16 (and a slot
    // chosen by instruction) a training loop formatted and interned ~300
    // frames a step again.
    static constexpr int kLineIds = 8;
    std::atomic<uint64_t> line_ids[kLineIds] = {};
    static constexpr int kInstrIds = 32;
    std::atomic<uint64_t> instr_ids[kInstrIds] = {};
};

// Once, the GIL held, before any other call here.
void code_info_init(const std::vector<std::string>& skip_prefixes);
bool code_info_ready();

// The info of `code`, made now if it has none. The GIL held (it may
// allocate). `unrecorded`: the caller has the agent's hooks off while an
// info is made (the profiler's memory, made on the program's time by a
// pending call: its rows would name the program's line then running), and
// the info is freed with them off too.
CodeInfo* code_info(PyCodeObject* code, bool unrecorded = false);

// The info of `code` if one was made and is in the table, else nullptr. Any
// thread, GIL or not, no allocation; `code` must be alive (a frame of the
// calling thread holds it): an info is only taken out of the table when its
// code object is freed.
CodeInfo* code_info_lookup(PyCodeObject* code);

// How many code objects that had an info were freed so far: while it stays
// the same, a code address seen with an info earlier is still that code.
uint64_t code_info_deaths();

// Whether a UTF-8 file name is under a skipped prefix.
bool skipped_file(const char* file);

// A str as UTF-8 into out (NUL-terminated, cut at a character's end when
// it does not fit), from its own characters: no allocation, no GIL (the str
// belongs to a code object a live frame of the calling thread holds). "?"
// where PyUnicode_AsUTF8 would fail (not a str, lone surrogates), as the
// info's text.
void put_utf8(PyObject* s, char* out, size_t cap);

// "file(line): func" into out (NUL-terminated, cut to fit), as snprintf
// would write it, without its format parsing (a frame's text is made for
// every new code and instruction a stack passes through).
void format_frame(char* out, size_t cap, const char* file, int line, const char* func);

// The stream generation the interned ids belong to (8 bits; 0: ids cannot
// be cached, an agent without generations).
uint64_t id_generation();

// Looks `key` (generation << 56 | k << 40) up in a cache of packed ids;
// 0 when absent.
template <int N>
inline uint64_t cached_id(const std::atomic<uint64_t> (&slots)[N], uint64_t key) {
    for (auto& slot : slots) {
        uint64_t v = slot.load(std::memory_order_relaxed);
        if ((v & ~((uint64_t{1} << 40) - 1)) == key) return v & ((uint64_t{1} << 40) - 1);
    }
    return 0;
}

// Remembers `id` under `key` in such a cache: in a slot that holds nothing
// of this generation (the one `hint` names first), else over the one `hint`
// names. A code with several hot instructions keeps them all while they fit
// (two instructions whose hints collide do not push each other out). Two
// threads storing at once may lose one entry: it is made again on its next miss.
template <int N>
inline void remember_id(std::atomic<uint64_t> (&slots)[N], unsigned hint, uint64_t key, uint64_t id) {
    const uint64_t gen_mask = uint64_t{0xFF} << 56;
    unsigned at = hint % N;
    for (unsigned k = 0; k < static_cast<unsigned>(N); ++k) {
        const unsigned i = (hint + k) % N;
        const uint64_t v = slots[i].load(std::memory_order_relaxed);
        if (v == 0 || (v & gen_mask) != (key & gen_mask)) {
            at = i;
            break;
        }
    }
    slots[at].store(key | id, std::memory_order_relaxed);
}

}  // namespace msms_py
