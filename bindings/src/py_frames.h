// --call-stack=python from the interpreter's own frame chain (CPython
// 3.11: tstate->cframe->current_frame, each _PyInterpreterFrame's code and
// last instruction), as memray and py-spy read it: no profile function, so
// the interpreter keeps its specialised instructions and makes no call per
// Python call. See py_frames.cpp for how it stays exact.
#pragma once

#include <Python.h>
#include <msmemscope/agent.h>

#include <stdint.h>

namespace msms_py {

// The calling thread's own Python thread state, whether or not it holds
// the GIL: an operator releases the GIL before it allocates, and the
// GIL holder's state (_PyThreadState_UncheckedGet) is then another thread's
// or none. PyGILState_GetThisThreadState reads this thread's TLS slot only.
inline PyThreadState* own_thread_state() {
    PyThreadState* ts = PyGILState_GetThisThreadState();
    if (ts) return ts;
#if PY_VERSION_HEX >= 0x030D0000
    return PyThreadState_GetUnchecked();
#else
    return _PyThreadState_UncheckedGet();
#endif
}

// Whether this build can read frames (CPython 3.11's frame layout).
bool frames_reader_available();

// Turns the reader's registrations on or off (the GIL held): a frame whose
// code has no info yet is read the slow way and asks the main thread to
// make the infos of every thread's frames (Py_AddPendingCall).
void frames_reader_enable(bool on);

// Whether `ts` (the calling thread's own state) has Python frames.
bool frames_present(PyThreadState* ts);

// The outermost operator on the calling thread starts / ends (the C++
// operator observer's calls, through _msmemscope's operator depth). While
// it runs, the frame that called it waits in that call: its stack is read
// once.
void frames_op_enter();
void frames_op_exit();

// Interned frames ("file(line): func"), innermost first, of `ts`, which
// must be the calling thread's own state, stopped in C code (an operator,
// the allocator): its frames do not move while they are read, GIL or not.
// Nothing here allocates or needs the GIL. Frames of skipped files are left
// out. Returns how many were written to out (at most max). `token` names
// the answer as msms_stack_provider_named says: in, the one the caller
// holds (0: none); out, this one's (0: unnamed); MSMS_STACK_SAME when they are
// the same, and nothing is written.
uint32_t frames_read(PyThreadState* ts, uint64_t* out, uint32_t max, uint64_t* token);

}  // namespace msms_py
