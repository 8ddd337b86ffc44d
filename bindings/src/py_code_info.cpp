// Code object infos: see py_code_info.h.
#include "py_code_info.h"

#include <string.h>

#include "agent_api.h"

namespace msms_py {
namespace {

Py_ssize_t g_code_extra = -1;
std::vector<std::string> g_skip_prefixes;
std::atomic<uint64_t> g_deaths{0};

// Code object -> CodeInfo without a call: a 4-way set-associative table in
// front of the code's co_extra slot (4 slots a cache line: two hot code
// objects whose addresses hash alike do not push each other out; the frame
// reader reads a code the slow way while it is not in the table). Written
// with the GIL held only (an info made, or its code freed: free_code_info
// clears its slot, so an address reused by a new code object never finds
// the old entry); read by any thread. A writer clears `code` before it
// changes `info` and sets `code` last; a reader that finds its code reads
// `info`, then `code` again: the same code both times means the info is
// that code's (the code is alive, so its entry cannot be cleared meanwhile;
// a slot taken over by another code shows another code the second time).
struct CodeSlot {
    std::atomic<PyCodeObject*> code{nullptr};
    std::atomic<CodeInfo*> info{nullptr};
};
constexpr int kWays = 4;
struct alignas(64) CodeSet {
    CodeSlot way[kWays];
    uint32_t next = 0;  // the way the next new code takes when none is free (GIL)
};
constexpr size_t kCodeSets = 2048;
CodeSet g_code_sets[kCodeSets];

inline CodeSet& code_set(PyCodeObject* code) {
    return g_code_sets[(reinterpret_cast<uintptr_t>(code) * 0x9E3779B97F4A7C15ull) >> (64 - 11)];
}
static_assert(kCodeSets == (size_t{1} << 11), "code_set's shift");

void set_slot(CodeSlot& s, PyCodeObject* code, CodeInfo* ci) {
    s.code.store(nullptr, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    s.info.store(ci, std::memory_order_relaxed);
    s.code.store(code, std::memory_order_release);
}

// The GIL held: the slot of `code` in its set, or nullptr.
inline CodeSlot* slot_of(CodeSet& set, PyCodeObject* code) {
    for (CodeSlot& s : set.way)
        if (s.code.load(std::memory_order_relaxed) == code) return &s;
    return nullptr;
}

// The GIL held: `code` joins its set in a free slot, else in the one
// whose turn it is.
void put_slot(PyCodeObject* code, CodeInfo* ci) {
    CodeSet& set = code_set(code);
    if (slot_of(set, code)) return;
    CodeSlot* free = slot_of(set, nullptr);
    if (!free) free = &set.way[set.next++ % kWays];
    set_slot(*free, code, ci);
}

void free_code_info(void* p) {
    auto* ci = static_cast<CodeInfo*>(p);
    if (ci->code)
        if (CodeSlot* s = slot_of(code_set(ci->code), ci->code)) set_slot(*s, nullptr, nullptr);
    g_deaths.fetch_add(1, std::memory_order_release);
    const bool hooks_off = ci->unrecorded && g_agent_loaded && g_agent.enter();
    delete ci;
    if (hooks_off) g_agent.leave();
}

__attribute__((noinline)) CodeInfo* code_info_slow(PyCodeObject* code, bool unrecorded) {
    void* extra = nullptr;
    if (_PyCode_GetExtra(reinterpret_cast<PyObject*>(code), g_code_extra, &extra) == 0 && extra)
        return static_cast<CodeInfo*>(extra);
    auto* ci = new CodeInfo{};
    ci->code = code;
    ci->file = PyUnicode_AsUTF8(code->co_filename);
    ci->func = PyUnicode_AsUTF8(code->co_name);
    if (!ci->file) ci->file = "?";
    if (!ci->func) ci->func = "?";
    PyErr_Clear();
    ci->first_line = code->co_firstlineno;
    ci->label = std::string(ci->file) + "(" + std::to_string(ci->first_line) + "): " + ci->func;
    ci->skip = skipped_file(ci->file);
    ci->unrecorded = unrecorded;
    if (_PyCode_SetExtra(reinterpret_cast<PyObject*>(code), g_code_extra, ci) != 0) {
        // Never expected; keep the program going and the info alive.
        PyErr_Clear();
        ci->code = nullptr;
    }
    return ci;
}

}  // namespace

void code_info_init(const std::vector<std::string>& skip_prefixes) {
    if (g_code_extra < 0) g_code_extra = _PyEval_RequestCodeExtraIndex(free_code_info);
    if (g_skip_prefixes.empty()) g_skip_prefixes = skip_prefixes;
}

bool code_info_ready() { return g_code_extra >= 0; }

CodeInfo* code_info(PyCodeObject* code, bool unrecorded) {
    if (CodeSlot* s = slot_of(code_set(code), code)) return s->info.load(std::memory_order_relaxed);
    CodeInfo* ci = code_info_slow(code, unrecorded);
    if (ci->code == code) put_slot(code, ci);  // in the table only while the code owns it
    return ci;
}

CodeInfo* code_info_lookup(PyCodeObject* code) {
    for (CodeSlot& s : code_set(code).way) {
        if (s.code.load(std::memory_order_acquire) != code) continue;
        CodeInfo* ci = s.info.load(std::memory_order_relaxed);
        std::atomic_thread_fence(std::memory_order_acquire);
        if (s.code.load(std::memory_order_relaxed) != code) return nullptr;
        return ci;
    }
    return nullptr;
}

uint64_t code_info_deaths() { return g_deaths.load(std::memory_order_acquire); }

bool skipped_file(const char* file) {
    for (auto& p : g_skip_prefixes)
        if (strncmp(file, p.c_str(), p.size()) == 0) return true;
    return false;
}

void put_utf8(PyObject* s, char* out, size_t cap) {
    if (cap == 0) return;
    size_t n = 0;
    bool ok = s && PyUnicode_Check(s) && PyUnicode_IS_READY(s);
    if (ok) {
        const int kind = PyUnicode_KIND(s);
        const void* data = PyUnicode_DATA(s);
        const Py_ssize_t len = PyUnicode_GET_LENGTH(s);
        for (Py_ssize_t i = 0; i < len && ok; ++i) {
            const Py_UCS4 c = PyUnicode_READ(kind, data, i);
            char b[4];
            size_t k = 1;
            if (c < 0x80) {
                b[0] = static_cast<char>(c);
            } else if (c < 0x800) {
                b[0] = static_cast<char>(0xC0 | (c >> 6));
                b[1] = static_cast<char>(0x80 | (c & 0x3F));
                k = 2;
            } else if (c >= 0xD800 && c <= 0xDFFF) {
                ok = false;  // a lone surrogate: not UTF-8
                break;
            } else if (c < 0x10000) {
                b[0] = static_cast<char>(0xE0 | (c >> 12));
                b[1] = static_cast<char>(0x80 | ((c >> 6) & 0x3F));
                b[2] = static_cast<char>(0x80 | (c & 0x3F));
                k = 3;
            } else {
                b[0] = static_cast<char>(0xF0 | (c >> 18));
                b[1] = static_cast<char>(0x80 | ((c >> 12) & 0x3F));
                b[2] = static_cast<char>(0x80 | ((c >> 6) & 0x3F));
                b[3] = static_cast<char>(0x80 | (c & 0x3F));
                k = 4;
            }
            if (n + k >= cap) break;
            memcpy(out + n, b, k);
            n += k;
        }
    }
    if (!ok) {
        n = 0;
        if (cap > 1) out[n++] = '?';
    }
    out[n] = '\0';
}

void format_frame(char* out, size_t cap, const char* file, int line, const char* func) {
    if (cap == 0) return;
    char num[16];
    size_t k = 0;
    unsigned v = line < 0 ? 0u - static_cast<unsigned>(line) : static_cast<unsigned>(line);
    do {
        num[k++] = static_cast<char>('0' + v % 10);
        v /= 10;
    } while (v);
    if (line < 0) num[k++] = '-';
    size_t n = 0;
    auto put = [&](const char* s, size_t len) {
        if (n + len >= cap) len = cap - 1 - n;
        memcpy(out + n, s, len);
        n += len;
    };
    put(file, strlen(file));
    put("(", 1);
    char digits[16];
    for (size_t i = 0; i < k; ++i) digits[i] = num[k - 1 - i];
    put(digits, k);
    put("): ", 3);
    put(func, strlen(func));
    out[n] = '\0';
}

uint64_t id_generation() { return g_agent.stream_generation ? (g_agent.stream_generation() & 0xff) : 0; }

}  // namespace msms_py
