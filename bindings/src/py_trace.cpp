// Python trace: a C-level profile function (PyEval_SetProfile) keeps a
// shadow stack per thread (frame, code info, start time) and writes one
// record per returning call through the agent (msms_agent_py_call). The
// shadow stack also answers --call-stack=python for the agent when the
// profile function is on anyway (trace records), on Pythons other than
// 3.11, or with MSMEMSCOPE_PY_STACKS=shadow; else the stacks are read from
// the interpreter's frames (py_frames.h) and no profile function is set.
// This file also holds the stack provider that picks between the two.
//
// Every Python call passes here twice, so the hook avoids calls it can: the
// thread's shadow stack comes with the profile function's object (no TLS
// lookup in this dlopen'ed module), the code's info from a small table
// (py_code_info.h), and on CPython 3.11 the frame's code from the frame
// itself.
#include "py_trace.h"

#include <Python.h>
#include <frameobject.h>
#include <pybind11/pybind11.h>

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
// The interpreter frame behind a frame object (as memray reads it on 3.11);
// PyFrame_GetCode is a call plus a reference taken and dropped.
#define Py_BUILD_CORE 1
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE
#define MSMS_FRAME_CODE_DIRECT 1
#endif

#include <stdio.h>
#include <string.h>
#include <time.h>

#include <atomic>
#include <string>
#include <vector>

#include <msmemscope/abi.h>

#include "agent_api.h"
#include "hooks_off.h"
#include "py_code_info.h"
#include "py_frames.h"

namespace msms_py {
namespace {

// The frame's code object (borrowed: the frame keeps it alive).
inline PyCodeObject* frame_code(PyFrameObject* frame) {
#ifdef MSMS_FRAME_CODE_DIRECT
    return frame->f_frame->f_code;
#else
    PyCodeObject* code = PyFrame_GetCode(frame);
    Py_DECREF(code);
    return code;
#endif
}

struct ShadowFrame {
    PyFrameObject* frame;
    CodeInfo* info;
    uint64_t start;
};

constexpr int kMaxShadow = 4096;
constexpr uint32_t kMemoIds = 64;
struct Shadow {
    ShadowFrame frames[kMaxShadow];
    int depth = 0;       // may exceed kMaxShadow (frames not kept)
    int started = 0;     // frames kept whose call was recorded (start != 0)
    // Changed by every push and pop: while it stays the same, every frame
    // but the innermost is stopped at the call it made, on the same line.
    uint64_t version = 0;
    // frames_of's last ids of the frames under the innermost, for that
    // version, stream generation and room (its thread's only: no lock).
    uint64_t memo_version = ~uint64_t{0}, memo_gen = 0;
    uint32_t memo_room = 0, memo_n = 0;
    uint64_t memo_ids[kMemoIds];
};

std::atomic<bool> g_trace_emit{false};   // PY_TRACE events wanted (traceback or tracer)
std::atomic<bool> g_tracer_forced{false}; // tracer.start(): emit even when not collecting
// --call-stack=python read from the interpreter's frames (py_frames.h):
// no profile function is needed for stacks alone.
std::atomic<bool> g_reader_on{false};
// Between two ranges of a Python trace (profile_range_stop): the profile
// functions stay on the threads that run calls the range recorded, so that
// such a call, returning in a later range, has its row with its own start;
// each thread removes its function once none of them is left. Calls made
// meanwhile are not timed (no start: they began outside any range).
std::atomic<bool> g_draining{false};

// The capture's clock (the agent's msms_agent_now is CLOCK_MONOTONIC too),
// read here directly: one call fewer through a pointer on every Python call.
inline uint64_t trace_clock() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// The profile function's object, one per traced thread: that thread's
// shadow stack (so the hook finds it with one load instead of a TLS lookup:
// this module is dlopen'ed, its thread_locals go through __tls_get_addr),
// owned here and freed with the object. Only its own thread drops the
// object (removing its profile function or ending), so a thread reading
// its own shadow stack from the agent's stack provider never races a free.
struct ProfileState {
    PyObject_HEAD
    Shadow* shadow;
    uint32_t generation;  // the tracing period it was installed for
};

// Bumped at each install and uninstall: a thread whose state is older
// removes its profile function at its next event (on its own thread).
uint32_t g_generation = 0;  // changed with the GIL held

void profile_state_dealloc(PyObject* o) {
    delete reinterpret_cast<ProfileState*>(o)->shadow;
    PyTypeObject* type = Py_TYPE(o);
    type->tp_free(o);
    Py_DECREF(type);
}

PyTypeObject* profile_state_type() {
    static PyObject* type = [] {
        static PyType_Slot slots[] = {{Py_tp_dealloc, reinterpret_cast<void*>(&profile_state_dealloc)}, {0, nullptr}};
        static PyType_Spec spec = {"msmemscope._ProfileState", sizeof(ProfileState), 0, Py_TPFLAGS_DEFAULT, slots};
        return PyType_FromSpec(&spec);
    }();
    return reinterpret_cast<PyTypeObject*>(type);
}

// Removes the profile function of the calling thread (its state and shadow
// stack go with it). The caller must not touch the state afterwards.
void remove_own_profile() { _PyEval_SetProfile(PyThreadState_Get(), nullptr, nullptr); }

int profile_func(PyObject* state, PyFrameObject* frame, int what, PyObject*) {
    if (what != PyTrace_CALL && what != PyTrace_RETURN) return 0;
    auto* st = reinterpret_cast<ProfileState*>(state);
    if (__builtin_expect(st->generation != g_generation, 0)) {
        remove_own_profile();  // tracing stopped (or restarted) since this thread's install
        return 0;
    }
    Shadow* sh = st->shadow;
    if (what == PyTrace_CALL) {
        int d = sh->depth;
        if (d >= kMaxShadow) {
            ++sh->depth;
            ++sh->version;
            return 0;
        }
        PyCodeObject* code = frame_code(frame);
        // code_info may allocate (recorded with a Python stack): the new
        // frame joins the shadow stack only once it is complete.
        CodeInfo* ci = code_info(code);
        const bool timed = g_trace_emit.load(std::memory_order_relaxed) &&
                           (!g_draining.load(std::memory_order_relaxed) || agent_collecting() ||
                            g_tracer_forced.load(std::memory_order_relaxed));
        sh->frames[d] = ShadowFrame{frame, ci, timed ? trace_clock() : 0};
        if (timed) ++sh->started;
        sh->depth = d + 1;
        ++sh->version;  // after the push: a stack taken inside code_info was the one before
        return 0;
    }
    if (sh->depth == 0) return 0;  // a frame entered before tracing began
    int d = --sh->depth;
    ++sh->version;
    if (d >= kMaxShadow) return 0;
    ShadowFrame& f = sh->frames[d];
    if (f.start) --sh->started;
    const bool on = agent_collecting() || g_tracer_forced.load(std::memory_order_relaxed);
    if (f.start && !f.info->skip && g_trace_emit.load(std::memory_order_relaxed) && on) {
        if (g_agent.py_call)
            g_agent.py_call(f.start, f.info->label.c_str(), f.info->name_cache);
        else
            g_agent.event(MSMS_EV_PY_TRACE, MSMS_T_PY_CALL, MSMS_DEV_NA, -1, 0, 0, f.start, 0,
                          f.info->label.c_str(), nullptr);
    }
    // Between ranges, no recorded call left on this thread: its function goes.
    if (!on && sh->started <= 0 && g_draining.load(std::memory_order_relaxed)) remove_own_profile();
    return 0;
}

// The shadow stack of `ts` when this module traces it, else nullptr.
inline Shadow* shadow_of(PyThreadState* ts) {
    if (!ts || ts->c_profilefunc != &profile_func) return nullptr;
    auto* st = reinterpret_cast<ProfileState*>(ts->c_profileobj);
    if (!st || st->generation != g_generation) return nullptr;
    return st->shadow;
}

// Interned frames ("file(line): func"), innermost first, of a shadow stack.
// The stack's thread is the caller, stopped in C code (an operator, the
// allocator): its frames do not move while we read them, GIL or not.
// One shadow frame's interned "file(line): func" (0: not interned), the
// line read now (the frame may have moved since it was pushed).
uint64_t frame_id(ShadowFrame& f, uint64_t gen) {
    CodeInfo* ci = f.info;
    int line = PyFrame_GetLineNumber(f.frame);
    bool cacheable = gen != 0 && line >= 0 && line < 0x10000;
    uint64_t key = (gen << 56) | (static_cast<uint64_t>(line) << 40);
    if (cacheable)
        if (uint64_t id = cached_id(ci->line_ids, key)) return id;
    char buf[1024];
    format_frame(buf, sizeof(buf), ci->file, line, ci->func);
    uint64_t id = g_agent.intern(buf);
    if (id && cacheable && id < (1ull << 40))
        remember_id(ci->line_ids, static_cast<unsigned>(line), key, id);
    return id;
}

// Interned frames ("file(line): func"), innermost first, of a shadow stack.
// The stack's thread is the caller, stopped in C code (an operator, the
// allocator): its frames do not move while we read them, GIL or not. Only
// the innermost frame's line can have changed since the last call without
// a push or pop in between (the others wait on their calls): the ids under
// it come from the memo then (many allocations come from one operator).
uint32_t frames_of(Shadow* sh, uint64_t* out, uint32_t max) {
    int d = sh->depth < kMaxShadow ? sh->depth : kMaxShadow;
    if (d == 0 || max == 0) return 0;
    // Ids are valid within one stream: the cache is keyed by its generation.
    uint64_t gen = id_generation();
    uint32_t n = 0;
    ShadowFrame& top = sh->frames[d - 1];
    if (!top.info->skip)
        if (uint64_t id = frame_id(top, gen)) out[n++] = id;
    const uint32_t room = max - n;
    if (gen != 0 && sh->memo_version == sh->version && sh->memo_gen == gen && sh->memo_room == room) {
        memcpy(out + n, sh->memo_ids, sh->memo_n * sizeof(uint64_t));
        return n + sh->memo_n;
    }
    const uint32_t first = n;
    bool whole = true;  // every frame interned: the answer may be remembered
    for (int i = d - 2; i >= 0 && n < max; --i) {
        ShadowFrame& f = sh->frames[i];
        if (f.info->skip) continue;
        uint64_t id = frame_id(f, gen);
        if (id) out[n++] = id;
        else whole = false;
    }
    if (gen != 0 && whole && n - first <= kMemoIds) {
        sh->memo_version = sh->version;
        sh->memo_gen = gen;
        sh->memo_room = room;
        sh->memo_n = n - first;
        memcpy(sh->memo_ids, out + first, sh->memo_n * sizeof(uint64_t));
    }
    return n;
}

// The Python stack of the innermost backward()/autograd.grad() call in
// progress (autograd_enter): what an autograd engine thread, which has no
// Python frames of its own, allocates for. On CPU the engine runs on the
// calling thread, whose own frames answer first.
constexpr uint32_t kMaxAutograd = 256;
std::atomic_flag g_autograd_lock = ATOMIC_FLAG_INIT;
uint64_t g_autograd_frames[kMaxAutograd];
uint32_t g_autograd_n = 0;
int g_autograd_depth = 0;  // changed with the GIL held
std::atomic<bool> g_autograd_active{false};

// Import pauses (profile_pause): the profile state a thread set aside
// while it loads a module of the Python installation, and how many threads
// have one (the stack provider looks at its thread-local only then).
thread_local PyObject* t_paused = nullptr;
std::atomic<int> g_paused_threads{0};

// Whether the stacks of `ts` (the calling thread's) are read from the
// interpreter's frames: reader mode, or the thread's profile function set
// aside for an import; and it has frames.
inline bool reads_frames(PyThreadState* ts) {
    if (!frames_present(ts)) return false;
    return g_reader_on.load(std::memory_order_relaxed) ||
           (g_paused_threads.load(std::memory_order_relaxed) > 0 && t_paused);
}

// --call-stack=python: the calling thread's frames, innermost first, from
// its own shadow stack or the interpreter's frames (no Python API that
// allocates or needs the GIL); a thread without Python frames inside a
// backward() gets that call's stack.
uint32_t python_stack_provider(uint64_t* out, uint32_t max, uint64_t* token) {
    PyThreadState* ts = own_thread_state();
    Shadow* sh = shadow_of(ts);
    if (sh && sh->depth > 0) {
        *token = 0;  // only the frame reader names its answers
        return frames_of(sh, out, max);
    }
    if (reads_frames(ts)) return frames_read(ts, out, max, token);
    *token = 0;
    if (!g_autograd_active.load(std::memory_order_acquire)) return 0;
    while (g_autograd_lock.test_and_set(std::memory_order_acquire)) {
    }
    uint32_t n = g_autograd_n < max ? g_autograd_n : max;
    memcpy(out, g_autograd_frames, n * sizeof(uint64_t));
    g_autograd_lock.clear(std::memory_order_release);
    return n;
}

// For an agent without named providers.
uint32_t python_stack_provider_plain(uint64_t* out, uint32_t max) {
    uint64_t none = 0;  // holds no answer: never told "the same"
    return python_stack_provider(out, max, &none);
}

// An out-of-memory failure's Python stack (oom_stacks_install), with or
// without --call-stack=python: the ordinary provider's answer when Python
// stacks are read from the frames or inside a backward(); else the shadow
// stack of a thread with a profile function (Python stacks or the trace);
// else the failing thread's own frames, read from the interpreter's frame
// chain (py_frames.h, CPython 3.11: the reader needs no registration, a
// frame whose code has no info yet is read from the code's own strings).
// The thread's own state only (never the GIL holder's: a thread of a
// native library has no Python stack). On other Pythons without a profile
// function: none.
uint32_t python_oom_stack_provider(uint64_t* out, uint32_t max) {
    uint64_t unnamed = 0;  // holds no answer: never told "the same"
    if (g_reader_on.load(std::memory_order_relaxed) || g_autograd_active.load(std::memory_order_acquire))
        return python_stack_provider(out, max, &unnamed);
    PyThreadState* ts = PyGILState_GetThisThreadState();  // NULL after finalization, and on a non-Python thread
    if (!ts) return 0;
    Shadow* sh = shadow_of(ts);
    if (sh && sh->depth > 0) return frames_of(sh, out, max);
    if (!frames_present(ts)) return 0;
    return frames_read(ts, out, max, &unnamed);
}

void set_provider(bool on) {
    if (g_agent.set_py_provider_named) g_agent.set_py_provider_named(on ? python_stack_provider : nullptr);
    else g_agent.set_py_provider(on ? python_stack_provider_plain : nullptr);
}

bool g_profile_installed = false;

void seed_shadow(PyThreadState* ts, Shadow* sh) {
    PyFrameObject* chain[kMaxShadow];
    int n = 0;
    PyFrameObject* f = PyThreadState_GetFrame(ts);  // new reference
    while (f && n < kMaxShadow) {
        chain[n++] = f;
        f = PyFrame_GetBack(f);  // new reference
    }
    Py_XDECREF(f);
    for (int i = n - 1; i >= 0; --i) {
        CodeInfo* ci = code_info(frame_code(chain[i]));
        sh->frames[sh->depth++] = ShadowFrame{chain[i], ci, 0};
        ++sh->version;
    }
    // The frames stay alive while they run (their thread holds them);
    // the shadow stack, like for every frame, keeps no reference.
    for (int i = 0; i < n; ++i) Py_DECREF(chain[i]);
}

// Traces `ts` (any thread of this interpreter; the GIL held). A thread that
// has a state already keeps it (renewed): replacing it here would free a
// shadow stack its thread may be reading.
void install_on(PyThreadState* ts) {
    if (ts->c_profilefunc == &profile_func && ts->c_profileobj) {
        reinterpret_cast<ProfileState*>(ts->c_profileobj)->generation = g_generation;
        return;
    }
    PyTypeObject* type = profile_state_type();
    if (!type) throw pybind11::error_already_set();
    PyObject* o = PyType_GenericAlloc(type, 0);
    if (!o) throw pybind11::error_already_set();
    auto* st = reinterpret_cast<ProfileState*>(o);
    st->shadow = new Shadow();
    st->generation = g_generation;
    // Frames already running on that thread (the script's module code, the
    // function that called start()) go on its shadow stack first, outermost
    // at the bottom: allocations made from them get their stack too, and
    // their returns pop them. No trace record for them (start 0): their
    // calls were not seen.
    seed_shadow(ts, st->shadow);
    int rc = _PyEval_SetProfile(ts, profile_func, o);
    Py_DECREF(o);  // the thread state holds it
    if (rc < 0) throw pybind11::error_already_set();
}

}  // namespace

bool profile_function_needed(bool emit, bool forced) {
    if (emit || forced || !frames_reader_available()) return true;
    const char* mode = getenv("MSMEMSCOPE_PY_STACKS");
    return mode && strcmp(mode, "shadow") == 0;
}

void profile_install(bool emit, bool forced, const std::vector<std::string>& skip_prefixes) {
    need_agent();
    if (g_draining.exchange(false)) {
        // The functions left running since the last range (profile_range_stop)
        // are this range's when it needs them (their threads' shadow stacks,
        // with the recorded calls' starts, are kept: install_on renews them);
        // else they go at their threads' next event.
        g_trace_emit = emit;
        g_tracer_forced = forced;
        if (!profile_function_needed(emit, forced)) ++g_generation;
    }
    {
        HooksOff hooks_off;  // the skipped prefixes, kept for the run
        code_info_init(skip_prefixes);
    }
    if (emit) g_trace_emit = true;
    if (forced) g_tracer_forced = true;
    if (!profile_function_needed(emit, forced) && !g_profile_installed) {
        frames_reader_enable(true);
        g_reader_on = true;
        set_provider(true);
        return;
    }
    if (!g_profile_installed) {
        ++g_generation;
        // Every thread of the interpreter now; threads started later call
        // profile_install_thread() (the package sets threading.setprofile).
        PyThreadState* me = PyThreadState_Get();
        for (PyThreadState* ts = PyInterpreterState_ThreadHead(me->interp); ts; ts = PyThreadState_Next(ts))
            install_on(ts);
        g_profile_installed = true;
        set_provider(true);
    }
}

void oom_stacks_install(const std::vector<std::string>& skip_prefixes) {
    need_agent();
    if (!g_agent.set_py_oom_provider) return;  // an older agent: Python stacks at a failure as asked for
    {
        HooksOff hooks_off;  // the skipped prefixes, kept for the run
        code_info_init(skip_prefixes);
    }
    g_agent.set_py_oom_provider(python_oom_stack_provider);
}

bool profile_install_thread() {
    if (!g_profile_installed) return false;
    install_on(PyThreadState_Get());
    return true;
}

void profile_stop_emit(bool forced_only) {
    if (forced_only) {
        g_tracer_forced = false;
    } else {
        g_trace_emit = false;
        g_tracer_forced = false;
    }
}

bool profile_pause() {
#ifdef MSMS_FRAME_CODE_DIRECT
    PyThreadState* ts = PyThreadState_Get();
    if (t_paused || g_trace_emit.load(std::memory_order_relaxed) || ts->c_profilefunc != &profile_func ||
        !ts->c_profileobj)
        return false;
    auto* st = reinterpret_cast<ProfileState*>(ts->c_profileobj);
    if (st->generation != g_generation) return false;
    t_paused = ts->c_profileobj;
    Py_INCREF(t_paused);  // the shadow stack lives on while the function is off
    g_paused_threads.fetch_add(1, std::memory_order_relaxed);
    if (_PyEval_SetProfile(ts, nullptr, nullptr) < 0) PyErr_Clear();
    return true;
#else
    return false;
#endif
}

void profile_resume() {
    PyObject* o = t_paused;
    if (!o) return;
    t_paused = nullptr;
    g_paused_threads.fetch_sub(1, std::memory_order_relaxed);
    PyThreadState* ts = PyThreadState_Get();
    // Not over a profile function set meanwhile (ours, renewed by a
    // start(), or the program's own sys.setprofile).
    if (!ts->c_profilefunc && _PyEval_SetProfile(ts, profile_func, o) < 0) PyErr_Clear();
    Py_DECREF(o);
}

void profile_range_stop() {
    if (!g_profile_installed || !g_trace_emit.load() || g_tracer_forced.load()) return profile_uninstall();
    if (g_agent_loaded) set_provider(false);
    // Left on the threads (profile_func removes each once its recorded calls
    // have returned); the next install renews them.
    g_profile_installed = false;
    g_draining = true;
}

void profile_uninstall() {
    if (g_draining.exchange(false)) g_profile_installed = true;  // the functions left since the last range go too
    if ((g_reader_on || g_profile_installed) && g_agent_loaded) set_provider(false);
    if (g_reader_on) {
        g_reader_on = false;
        frames_reader_enable(false);
    }
    if (g_profile_installed) {
        // Other threads drop their (now stale) state at their next event.
        ++g_generation;
        g_profile_installed = false;
        PyThreadState* me = PyThreadState_Get();
        if (me->c_profilefunc == &profile_func) remove_own_profile();
    }
    g_trace_emit = false;
    g_tracer_forced = false;
}

void autograd_enter() {
    if (!(g_profile_installed || g_reader_on) || !g_agent_loaded) return;
    uint64_t frames[kMaxAutograd];
    PyThreadState* ts = own_thread_state();
    Shadow* sh = shadow_of(ts);
    uint32_t n = sh ? frames_of(sh, frames, kMaxAutograd) : 0;
    uint64_t unnamed = 0;  // a copy is kept: the answer's name is not needed
    if (!sh && reads_frames(ts)) n = frames_read(ts, frames, kMaxAutograd, &unnamed);
    while (g_autograd_lock.test_and_set(std::memory_order_acquire)) {
    }
    if (g_autograd_depth++ == 0 || n) {
        memcpy(g_autograd_frames, frames, n * sizeof(uint64_t));
        g_autograd_n = n;
    }
    g_autograd_lock.clear(std::memory_order_release);
    g_autograd_active.store(true, std::memory_order_release);
}

void autograd_exit() {
    while (g_autograd_lock.test_and_set(std::memory_order_acquire)) {
    }
    if (g_autograd_depth > 0 && --g_autograd_depth == 0) {
        g_autograd_n = 0;
        g_autograd_active.store(false, std::memory_order_release);
    }
    g_autograd_lock.clear(std::memory_order_release);
}

}  // namespace msms_py
