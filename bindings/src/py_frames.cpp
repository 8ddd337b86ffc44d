// The interpreter-frame reader: see py_frames.h.
//
// Exact, and cheap for the many allocations a training step makes from the
// same few places:
// * a frame's text is cached per code object and instruction in the code's
//   info (py_code_info.h), which lives in the code's co_extra slot and dies
//   with it: a code object freed and another made at its address (file name
//   and line table objects too, as tests/python/test_python_stack_frames.py
//   makes them) finds no info and is read afresh;
// * infos are made with the GIL held only. A frame whose code has none yet
//   (the reader may run without the GIL: an operator releases it before it
//   allocates) is formatted from the code's own str and line table, and the
//   main thread is asked (Py_AddPendingCall) to make the infos of every
//   thread's frames at its next check;
// * each thread remembers its last walk (frame, code, instruction, id): the
//   outer frames both walks share keep their ids, as long as no code object
//   with an info was freed since (the same address is then the same code).
// * while an operator runs (the C++ operator observer's calls, frames_op_enter),
//   the Python frame that called it cannot move: it waits in its call until
//   the operator returns, and so does every frame below it. Whatever the
//   operator allocates while that frame is still the innermost has the stack
//   read at the operator's first allocation: one frame compared, not the chain;
// * answers are named (msms_stack_provider_named): an answer the agent
//   already holds is not copied out, nor compared again there.
#include "py_frames.h"

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#define Py_BUILD_CORE 1
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE
#define MSMS_READ_FRAMES 1
#endif

#include <stdio.h>
#include <string.h>

#include <atomic>

#include "agent_api.h"
#include "py_code_info.h"

namespace msms_py {

#ifdef MSMS_READ_FRAMES
namespace {

std::atomic<bool> g_enabled{false};
std::atomic<bool> g_register_pending{false};

// Pending call (main thread, GIL held): an info for the code of every
// frame of every thread. The threads' frames come from
// _PyThread_CurrentFrames (sys._current_frames(): it reads the list of
// thread states under the runtime's lock, as a thread state may be deleted
// without the GIL). The agent's hooks are off meanwhile: this is the
// profiler's memory, made on the program's time.
int register_frames(void*) {
    g_register_pending.store(false, std::memory_order_relaxed);
    if (!g_enabled.load(std::memory_order_relaxed)) return 0;
    const bool hooks_off = g_agent_loaded && g_agent.enter();
    if (PyObject* frames = _PyThread_CurrentFrames()) {
        PyObject *key, *value;
        Py_ssize_t pos = 0;
        while (PyDict_Next(frames, &pos, &key, &value)) {
            if (!PyFrame_Check(value)) continue;
            PyFrameObject* f = reinterpret_cast<PyFrameObject*>(value);
            Py_INCREF(f);
            while (f) {
                PyCodeObject* code = PyFrame_GetCode(f);  // new reference
                code_info(code, /*unrecorded=*/true);
                Py_DECREF(code);
                PyFrameObject* back = PyFrame_GetBack(f);  // new reference
                Py_DECREF(f);
                f = back;
            }
        }
        Py_DECREF(frames);
    }
    PyErr_Clear();
    if (hooks_off) g_agent.leave();
    return 0;
}

void request_registration() {
    if (!g_enabled.load(std::memory_order_relaxed) || g_register_pending.exchange(true, std::memory_order_relaxed))
        return;
    // Takes the interpreter's pending-calls lock only (no allocation, no
    // GIL); refused when its queue is full: asked again at the next miss.
    if (Py_AddPendingCall(register_frames, nullptr) != 0) g_register_pending.store(false, std::memory_order_relaxed);
}

// "file(line): func" of a frame at instruction `lasti` of `code`, interned.
uint64_t intern_text(PyCodeObject* code, int lasti, const char* file, const char* func) {
    char buf[1024];
    format_frame(buf, sizeof(buf), file, PyCode_Addr2Line(code, lasti * static_cast<int>(sizeof(_Py_CODEUNIT))), func);
    return g_agent.intern(buf);
}

// One frame's interned text (0: skipped or not interned); `reusable` when
// the answer holds for this code address and instruction as long as no
// code object with an info dies (its info was found) and ids stay valid.
uint64_t frame_id(PyCodeObject* code, int lasti, uint64_t gen, bool& reusable) {
    reusable = false;
    // A frame being popped drops its code last: if that was the code's last
    // reference, the code is being freed now (its strings may be gone).
    if (Py_REFCNT(code) <= 0) return 0;
    if (CodeInfo* ci = code_info_lookup(code)) {
        if (ci->skip) {
            reusable = true;
            return 0;
        }
        const bool cacheable = gen != 0 && lasti >= 0 && lasti < 0x10000;
        const uint64_t key = (gen << 56) | (static_cast<uint64_t>(lasti) << 40);
        if (cacheable)
            if (uint64_t id = cached_id(ci->instr_ids, key)) {
                reusable = true;
                return id;
            }
        uint64_t id = intern_text(code, lasti, ci->file, ci->func);
        if (id && cacheable && id < (uint64_t{1} << 40)) {
            remember_id(ci->instr_ids, static_cast<unsigned>(lasti), key, id);
            reusable = true;
        }
        return id;
    }
    request_registration();
    char file[768], func[192];
    put_utf8(code->co_filename, file, sizeof(file));
    if (skipped_file(file)) return 0;
    put_utf8(code->co_name, func, sizeof(func));
    return intern_text(code, lasti, file, func);
}

// One frame of a walk: what identifies its text (frame, code, instruction,
// owner: a frame at the same address running the same code at the same
// instruction reads the same) and that text's id (0: none, or left out).
struct WalkFrame {
    _PyInterpreterFrame* frame;
    PyCodeObject* code;
    _Py_CODEUNIT* instr;
    uint64_t id;
    int8_t owner;
    bool reusable;
};

constexpr uint32_t kMemoFrames = 128;

// The calling thread's last two walks, the newer at `last`: a walk is
// written over the older while the newer is compared with it (no copy).
// Zero-initialised: no constructor behind the thread_local's access.
struct ReadMemo {
    uint64_t gen;
    uint64_t deaths;
    uint32_t last;
    uint32_t n[2];
    // The newer walk's ids (in order, the left-out frames dropped), and
    // their name when every frame of the walk is reusable (0: not an
    // answer the memo may give again).
    uint32_t nids;
    uint64_t out_token;
    WalkFrame frames[2][kMemoFrames];
    uint64_t out[kMemoFrames];
    // The outermost operator in progress on this thread (frames_op_enter):
    // the frame that called it, as it was then (pin_frame nullptr: none),
    // and, once read (pin_gen: its generation, 0: not yet), its answer.
    PyThreadState* pin_ts;
    _PyInterpreterFrame* pin_frame;
    PyCodeObject* pin_code;
    _Py_CODEUNIT* pin_instr;
    uint64_t pin_gen;
    uint32_t pin_n;
    uint64_t pin_token;
    uint64_t pin_out[kMemoFrames];
    uint64_t next_token;  // this thread's next answer name (0: take a block)
};
thread_local ReadMemo t_memo;

// Answer names: blocks of 2^20 taken per thread from one counter, so that a
// name is never given twice in the process (a thread's writer in the agent
// may outlive the thread's memo).
std::atomic<uint64_t> g_token_blocks{0};
constexpr uint64_t kTokenBlock = uint64_t{1} << 20;

uint64_t new_token(ReadMemo* m) {
    if ((m->next_token & (kTokenBlock - 1)) == 0)
        m->next_token = (g_token_blocks.fetch_add(1, std::memory_order_relaxed) + 1) * kTokenBlock;
    return m->next_token++;
}

// The answer `ids[0..n)` named `name`, for a caller that holds `*token` and
// may take at most `max`.
inline uint32_t give(const uint64_t* ids, uint32_t n, uint64_t name, uint64_t* out, uint32_t max, uint64_t* token) {
    const uint64_t held = *token;
    *token = name;
    if (name != 0 && held == name) return MSMS_STACK_SAME;
    if (n > max) n = max;
    memcpy(out, ids, n * sizeof(uint64_t));
    return n;
}

// The memo's ids, named `name`, as the pinned frame's answer.
inline void pin_answer(ReadMemo* m, uint64_t name, uint64_t gen) {
    memcpy(m->pin_out, m->out, m->nids * sizeof(uint64_t));
    m->pin_n = m->nids;
    m->pin_token = name;
    m->pin_gen = gen;
}

inline int lasti_of(const WalkFrame& w) { return static_cast<int>(w.instr - _PyCode_CODE(w.code)); }

// A frame pushed whose first instruction has not run (its arguments are
// being bound): not on the stack yet, as in tracebacks.
inline bool incomplete(const WalkFrame& w) {
    return w.owner != FRAME_OWNED_BY_GENERATOR && w.instr < _PyCode_CODE(w.code) + w.code->_co_firsttraceable;
}

}  // namespace

bool frames_reader_available() { return true; }

void frames_reader_enable(bool on) { g_enabled.store(on, std::memory_order_relaxed); }

bool frames_present(PyThreadState* ts) { return ts && ts->cframe && ts->cframe->current_frame; }

// The memo's chain with another innermost frame (a new line of the same
// function, or another function called from the same place): only that
// frame is read; the memo's newer walk is changed in place.
uint32_t read_top(ReadMemo* m, _PyInterpreterFrame* top, uint64_t gen, bool pinned, uint64_t* out, uint32_t max,
                  uint64_t* token) {
    WalkFrame& b0 = m->frames[m->last][0];
    WalkFrame w{top, top->f_code, top->prev_instr, 0, top->owner, false};
    if (!incomplete(w)) w.id = frame_id(w.code, lasti_of(w), gen, w.reusable);
    // m->out: the walk's nonzero ids in order, the innermost one first
    if (b0.id && w.id) {
        m->out[0] = w.id;
    } else if (b0.id) {
        memmove(m->out, m->out + 1, (m->nids - 1) * sizeof(uint64_t));
        --m->nids;
    } else if (w.id) {
        memmove(m->out + 1, m->out, m->nids * sizeof(uint64_t));
        m->out[0] = w.id;
        ++m->nids;
    }
    b0 = w;
    const uint64_t name = new_token(m);
    // the levels below were reusable (checked), so the answer is if this one is
    m->out_token = w.reusable ? name : 0;
    if (pinned) pin_answer(m, name, gen);
    return give(m->out, m->nids, m->out_token, out, max, token);
}

void frames_op_enter() {
    if (!g_enabled.load(std::memory_order_relaxed)) return;
    ReadMemo* m = &t_memo;
    // This thread's own state only (not own_thread_state()'s fallback, the
    // GIL holder's): another thread's frames do not wait for our operator.
    PyThreadState* ts = PyGILState_GetThisThreadState();
    if (!ts || !ts->cframe || !ts->cframe->current_frame) return;
    _PyInterpreterFrame* f = ts->cframe->current_frame;
    m->pin_ts = ts;
    m->pin_code = f->f_code;
    m->pin_instr = f->prev_instr;
    m->pin_gen = 0;
    m->pin_frame = f;
}

void frames_op_exit() { t_memo.pin_frame = nullptr; }

uint32_t frames_read(PyThreadState* ts, uint64_t* out, uint32_t max, uint64_t* token) {
    if (!ts || !ts->cframe || max == 0) {
        *token = 0;
        return 0;
    }
    const uint64_t gen = id_generation();
    const uint64_t deaths = code_info_deaths();
    ReadMemo* m = &t_memo;
    asm("" : "+r"(m));  // one TLS lookup: the address is not recomputed after each call below
    _PyInterpreterFrame* const top = ts->cframe->current_frame;
    // Inside an operator, from the frame that called it: that frame and the
    // ones below it wait for the operator, as they were at its start.
    const bool pinned = m->pin_frame && top == m->pin_frame && ts == m->pin_ts && top->f_code == m->pin_code &&
                        top->prev_instr == m->pin_instr && gen != 0;
    if (pinned && m->pin_gen == gen) return give(m->pin_out, m->pin_n, m->pin_token, out, max, token);
    const WalkFrame* before = m->frames[m->last];
    const uint32_t nb = m->n[m->last];
    const bool memo_valid = gen != 0 && m->gen == gen && m->deaths == deaths;
    if (memo_valid && nb != 0 && top) {
        // Most allocations come from where the one before came from, or
        // from the same function a line or two on: the chain below the
        // innermost frame is the memo's (frame, code, instruction, owner at
        // every level). Each level's frame is read at the address the memo
        // has for it, once the level above has shown that it is still its
        // caller: the next address does not wait for this frame's load, so
        // the CPU reads the levels side by side instead of one pointer
        // after the other.
        bool below = top->previous == (nb > 1 ? before[1].frame : nullptr);
        for (uint32_t i = 1; below && i < nb; ++i) {
            const WalkFrame& b = before[i];
            const _PyInterpreterFrame* g = b.frame;  // live: checked as the caller of the level above
            const _PyInterpreterFrame* caller = i + 1 < nb ? before[i + 1].frame : nullptr;
            below = b.reusable && g->previous == caller && g->f_code == b.code && g->prev_instr == b.instr &&
                    g->owner == b.owner;
        }
        if (below) {
            const WalkFrame& b0 = before[0];
            if (m->out_token != 0 && top == b0.frame && top->f_code == b0.code && top->prev_instr == b0.instr &&
                top->owner == b0.owner) {
                if (pinned) pin_answer(m, m->out_token, gen);
                return give(m->out, m->nids, m->out_token, out, max, token);
            }
            return read_top(m, top, gen, pinned, out, max, token);
        }
    }
    *token = 0;
    WalkFrame* now = m->frames[m->last ^ 1];
    // The chain as it is, innermost first: no code object is touched yet.
    uint32_t c = 0;
    _PyInterpreterFrame* f = ts->cframe->current_frame;
    for (; f && c < kMemoFrames; f = f->previous)
        now[c++] = WalkFrame{f, f->f_code, f->prev_instr, 0, f->owner, false};
    const bool deep = f != nullptr;  // more frames than the memo holds: the rest read directly
    // The outer frames both walks share keep their ids.
    uint32_t shared = 0;
    if (!deep && memo_valid) {
        while (shared < c && shared < nb) {
            WalkFrame& a = now[c - 1 - shared];
            const WalkFrame& b = before[nb - 1 - shared];
            if (!b.reusable || a.frame != b.frame || a.code != b.code || a.instr != b.instr || a.owner != b.owner)
                break;
            a.id = b.id;
            a.reusable = true;
            ++shared;
        }
    }
    for (uint32_t i = 0; i < c - shared; ++i) {
        WalkFrame& w = now[i];
        if (!incomplete(w)) w.id = frame_id(w.code, lasti_of(w), gen, w.reusable);
    }
    uint32_t n = 0;
    for (uint32_t i = 0; i < c && n < max; ++i)
        if (now[i].id) out[n++] = now[i].id;
    for (; f && n < max; f = f->previous) {
        WalkFrame w{f, f->f_code, f->prev_instr, 0, f->owner, false};
        if (incomplete(w)) continue;
        if (uint64_t id = frame_id(w.code, lasti_of(w), gen, w.reusable)) out[n++] = id;
    }
    if (!deep) {
        m->gen = gen;
        m->deaths = deaths;
        m->last ^= 1;
        m->n[m->last] = c;
        uint32_t k = 0;
        bool all = true;
        for (uint32_t i = 0; i < c; ++i) {
            all = all && now[i].reusable;
            if (now[i].id) m->out[k++] = now[i].id;
        }
        m->nids = k;
        const uint64_t name = new_token(m);
        m->out_token = all ? name : 0;
        *token = m->out_token;
        // The operator's caller's answer holds for as long as it waits,
        // reusable or not (its code objects live while their frames do).
        if (pinned) pin_answer(m, name, gen);
    }
    return n;
}

#else  // not CPython 3.11: the profile function's shadow stacks answer

bool frames_reader_available() { return false; }
void frames_reader_enable(bool) {}
bool frames_present(PyThreadState*) { return false; }
void frames_op_enter() {}
void frames_op_exit() {}
uint32_t frames_read(PyThreadState*, uint64_t*, uint32_t, uint64_t* token) {
    *token = 0;
    return 0;
}

#endif

}  // namespace msms_py
