// --call-stack=python from the interpreter's own frame chain (CPython
// 3.11: tstate->cframe->current_frame, each _PyInterpreterFrame's code and
// last instruction), as memray and py-spy read it: no profile function, so
// the interpreter keeps its specialised instructions and makes no call per
// Python call. See py_frames.cpp for how it stays exact.
#pragma once

#include <Python.h>

#include <stdint.h>

namespace msms_py {

// Whether this build can read frames (CPython 3.11's frame layout).
bool frames_reader_available();

// Turns the reader's registrations on or off (the GIL held): a frame whose
// code has no info yet is read the slow way and asks the main thread to
// make the infos of every thread's frames (Py_AddPendingCall).
void frames_reader_enable(bool on);

// Whether `ts` (the calling thread's own state) has Python frames.
bool frames_present(PyThreadState* ts);

// Interned frames ("file(line): func"), innermost first, of `ts`, which
// must be the calling thread's own state, stopped in C code (an operator,
// the allocator): its frames do not move while they are read, GIL or not.
// Nothing here allocates or needs the GIL. Frames of skipped files are left
// out. Returns how many were written to out (at most max).
uint32_t frames_read(PyThreadState* ts, uint64_t* out, uint32_t max);

}  // namespace msms_py
