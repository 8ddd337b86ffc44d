// Python trace: a C-level profile function (PyEval_SetProfile) keeps a
// shadow stack per thread (frame, code info, start time) and writes one
// record per returning call through the agent (msms_agent_py_call). The
// shadow stack also answers --call-stack=python for the agent.
//
// Every Python call passes here twice, so the hook avoids calls it can: the
// thread's shadow stack comes with the profile function's object (no TLS
// lookup in this dlopen'ed module), the code's info from a direct-mapped
// cache, and on CPython 3.11 the frame's code from the frame itself.
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

struct CodeInfo {
    PyCodeObject* code;  // whose co_extra this is (freed with it)
    const char* file;   // UTF-8, owned by the code object
    const char* func;
    int first_line;
    bool skip;
    std::string label;  // "file(line): func", formatted once
    uint64_t name_cache[2] = {0, 0};  // the label's id in this thread's stream (agent)
};

struct ShadowFrame {
    PyFrameObject* frame;
    CodeInfo* info;
    uint64_t start;
};

constexpr int kMaxShadow = 4096;
struct Shadow {
    ShadowFrame frames[kMaxShadow];
    int depth = 0;       // may exceed kMaxShadow (frames not kept)
};
thread_local Shadow* t_shadow = nullptr;

Py_ssize_t g_code_extra = -1;
std::atomic<bool> g_trace_emit{false};   // PY_TRACE events wanted (traceback or tracer)
std::atomic<bool> g_tracer_forced{false}; // tracer.start(): emit even when not collecting
std::vector<std::string> g_skip_prefixes;

// Code object -> CodeInfo without a call: a direct-mapped cache in front of
// the code's co_extra slot. A slot is cleared when its code object dies
// (free_code_info runs then, under the GIL), so an address reused by a new
// code object never finds the old entry.
struct CodeSlot {
    PyCodeObject* code;
    CodeInfo* info;
};
constexpr size_t kCodeSlots = 1024;
CodeSlot g_code_slots[kCodeSlots];

inline CodeSlot& code_slot(PyCodeObject* code) {
    return g_code_slots[(reinterpret_cast<uintptr_t>(code) >> 4) & (kCodeSlots - 1)];
}

void free_code_info(void* p) {
    auto* ci = static_cast<CodeInfo*>(p);
    CodeSlot& s = code_slot(ci->code);
    if (s.code == ci->code) s = CodeSlot{nullptr, nullptr};
    delete ci;
}

__attribute__((noinline)) CodeInfo* code_info_slow(PyCodeObject* code) {
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
    for (auto& p : g_skip_prefixes)
        if (strncmp(ci->file, p.c_str(), p.size()) == 0) ci->skip = true;
    if (_PyCode_SetExtra(reinterpret_cast<PyObject*>(code), g_code_extra, ci) != 0) {
        // Never expected; keep the program going and the info alive.
        PyErr_Clear();
        ci->code = nullptr;
    }
    return ci;
}

inline CodeInfo* code_info(PyCodeObject* code) {
    CodeSlot& s = code_slot(code);
    if (s.code == code) return s.info;
    CodeInfo* ci = code_info_slow(code);
    if (ci->code == code) s = CodeSlot{code, ci};  // cached only while the code owns it
    return ci;
}

// The capture's clock (the agent's msms_agent_now is CLOCK_MONOTONIC too),
// read here directly: one call fewer through a pointer on every Python call.
inline uint64_t trace_clock() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// The profile function's object: the installing thread's shadow stack, so
// that the hook finds it with one load instead of a TLS lookup (the module
// is dlopen'ed: its thread_locals go through __tls_get_addr).
struct ProfileState {
    PyObject_HEAD
    Shadow* shadow;
};

PyObject* new_profile_state(Shadow* shadow) {
    static PyObject* type = [] {
        static PyType_Slot slots[] = {{0, nullptr}};
        static PyType_Spec spec = {"msmemscope._ProfileState", sizeof(ProfileState), 0, Py_TPFLAGS_DEFAULT, slots};
        return PyType_FromSpec(&spec);
    }();
    if (!type) return nullptr;
    PyObject* o = PyType_GenericAlloc(reinterpret_cast<PyTypeObject*>(type), 0);
    if (o) reinterpret_cast<ProfileState*>(o)->shadow = shadow;
    return o;
}

int profile_func(PyObject* state, PyFrameObject* frame, int what, PyObject*) {
    if (what != PyTrace_CALL && what != PyTrace_RETURN) return 0;
    Shadow* sh = reinterpret_cast<ProfileState*>(state)->shadow;
    if (what == PyTrace_CALL) {
        int d = sh->depth;
        if (d >= kMaxShadow) {
            ++sh->depth;
            return 0;
        }
        PyCodeObject* code = frame_code(frame);
        // code_info may allocate (recorded with a Python stack): the new
        // frame joins the shadow stack only once it is complete.
        CodeInfo* ci = code_info(code);
        sh->frames[d] = ShadowFrame{frame, ci, g_trace_emit.load(std::memory_order_relaxed) ? trace_clock() : 0};
        sh->depth = d + 1;
        return 0;
    }
    if (sh->depth == 0) return 0;  // a frame entered before tracing began
    int d = --sh->depth;
    if (d >= kMaxShadow) return 0;
    ShadowFrame& f = sh->frames[d];
    if (f.start && !f.info->skip && g_trace_emit.load(std::memory_order_relaxed) &&
        (agent_collecting() || g_tracer_forced.load(std::memory_order_relaxed))) {
        if (g_agent.py_call)
            g_agent.py_call(f.start, f.info->label.c_str(), f.info->name_cache);
        else
            g_agent.event(MSMS_EV_PY_TRACE, MSMS_T_PY_CALL, MSMS_DEV_NA, -1, 0, 0, f.start, 0,
                          f.info->label.c_str(), nullptr);
    }
    return 0;
}

// --call-stack=python: the calling thread's frames, innermost first, from
// the shadow stack (no Python API that allocates or needs the GIL).
uint32_t python_stack_provider(uint64_t* out, uint32_t max) {
    Shadow* sh = t_shadow;
    if (!sh) return 0;
    int d = sh->depth < kMaxShadow ? sh->depth : kMaxShadow;
    uint32_t n = 0;
    char buf[1024];
    for (int i = d - 1; i >= 0 && n < max; --i) {
        ShadowFrame& f = sh->frames[i];
        if (f.info->skip) continue;
        int line = PyFrame_GetLineNumber(f.frame);
        snprintf(buf, sizeof(buf), "%s(%d): %s", f.info->file, line, f.info->func);
        uint64_t id = g_agent.intern(buf);
        if (id) out[n++] = id;
    }
    return n;
}

bool g_profile_installed = false;

}  // namespace

void profile_install(bool emit, bool forced, const std::vector<std::string>& skip_prefixes) {
    need_agent();
    if (g_code_extra < 0) g_code_extra = _PyEval_RequestCodeExtraIndex(free_code_info);
    if (g_skip_prefixes.empty()) g_skip_prefixes = skip_prefixes;
    if (emit) g_trace_emit = true;
    if (forced) g_tracer_forced = true;
    if (!g_profile_installed) {
        if (!t_shadow) t_shadow = new Shadow();
        PyObject* state = new_profile_state(t_shadow);
        if (!state) throw pybind11::error_already_set();
        // Frames already running on this thread are not on the shadow stack.
        PyEval_SetProfile(profile_func, state);
        Py_DECREF(state);  // the thread state holds it
        g_profile_installed = true;
        g_agent.set_py_provider(python_stack_provider);
    }
}

void profile_stop_emit(bool forced_only) {
    if (forced_only) {
        g_tracer_forced = false;
    } else {
        g_trace_emit = false;
        g_tracer_forced = false;
    }
}

void profile_uninstall() {
    if (g_profile_installed) {
        PyEval_SetProfile(nullptr, nullptr);
        g_profile_installed = false;
        if (g_agent_loaded) g_agent.set_py_provider(nullptr);
        delete t_shadow;
        t_shadow = nullptr;
    }
    g_trace_emit = false;
    g_tracer_forced = false;
}

}  // namespace msms_py
