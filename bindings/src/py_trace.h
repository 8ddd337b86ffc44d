// Python trace (events "traceback", tracer.start()) and the
// --call-stack=python provider: see py_trace.cpp.
#pragma once

#include <string>
#include <vector>

namespace msms_py {

// Whether profile_install(emit, forced) sets the profile function: for
// trace records, and for stacks where they are not read from the
// interpreter's frames (py_frames.h: CPython 3.11, unless
// MSMEMSCOPE_PY_STACKS=shadow asks for the shadow stacks).
bool profile_function_needed(bool emit, bool forced);
// Turns on --call-stack=python and, when `emit`, PY_TRACE records; `forced`
// records even outside start/stop (tracer.start()). Records, or stacks
// where profile_function_needed() says so, install the profile function on
// every thread of the interpreter (once). Frames of files under
// `skip_prefixes` are not recorded.
void profile_install(bool emit, bool forced, const std::vector<std::string>& skip_prefixes);
// Traces the calling thread if tracing is installed (a thread started after
// profile_install: the package's threading.setprofile hook calls this);
// returns whether it did.
bool profile_install_thread();
// Stops the records (only the tracer's when `forced_only`); the hook stays
// for --call-stack=python.
void profile_stop_emit(bool forced_only);
// Removes the profile function and the stack provider.
void profile_uninstall();
// Registers with the agent the Python stack of an out-of-memory failure
// (msms_agent_set_python_oom_stack_provider), whatever --call-stack says:
// the failing thread's own frames, read only at the failure (nothing
// changes on any other path). Frames of files under `skip_prefixes` (the
// package's own) are left out. The GIL held; the agent loaded.
void oom_stacks_install(const std::vector<std::string>& skip_prefixes);
// A collection range with a Python trace stops: the profile functions stay
// on the threads that run calls the range recorded, until those return (a
// call returning in a later range gets its row, from its own start); the
// next profile_install takes them over, profile_uninstall removes them.
void profile_range_stop();
// The calling thread's profile function off (true) or not (false: no
// profile function of ours on it, trace records wanted, or not CPython
// 3.11) until profile_resume(): the boot's import scopes of the Python
// installation (bindings/msmemscope/_boot.py), where the interpreter would
// otherwise make a frame object for each call of the import machinery for
// a stack nothing asks for (their host blocks are folded). Its shadow stack
// is kept; a Python stack asked for meanwhile is read from the interpreter's
// own frames. The GIL held; one pause per thread at a time.
bool profile_pause();
void profile_resume();
// Around backward() / autograd.grad() (the GIL held): remembers the
// caller's Python stack for allocations on threads without Python frames
// (autograd engine threads of a device); nests.
void autograd_enter();
void autograd_exit();

}  // namespace msms_py
