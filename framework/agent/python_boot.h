// Python is recognised by the process, not by the command line (DESIGN §9).
//
// The launcher hands every process of a run MSMEMSCOPE_PYTHON_PATH (the
// session's sitecustomize folder, then the folder holding the msmemscope
// package). At load, the agent of a process that is a CPython interpreter
// puts that first on PYTHONPATH, before the interpreter reads its
// environment, so the package's collectors start at interpreter start
// however the interpreter was reached: a shell script, torchrun, `python -m`,
// `env`, `nohup`, `xargs`, a `#!` line or a symlink. Non-Python processes are
// left alone. The user's own PYTHONPATH is kept after ours and remembered in
// MSMEMSCOPE_PYTHONPATH_WAS ("=value", or "-" when it was unset), which
// msmemscope._boot restores in os.environ so the program and its children see
// their own environment.
//
// Interpreters started with -E or -I ignore PYTHONPATH, and -S imports no
// sitecustomize: the agent runs the sitecustomize itself from an audit hook
// at the first cpython.run_* event (python_boot.cpp); only where the
// interpreter will use its debug allocators do they run without the
// Python-side collectors (host memory is still recorded), and say so.
#pragma once

namespace msms::agent {

// True when the process is a CPython interpreter: its executable or a
// library it was linked with exports Py_BytesMain (CPython >= 3.8).
bool is_python_interpreter();

// The option of the interpreter's command line that turns off what runs the
// boot: 'I' or 'E' (PYTHONPATH ignored), 'S' (no site module, no
// sitecustomize); 0 when none does. Reads /proc/self/cmdline as CPython
// parses its options (up to -c, -m, the script or "--"), and notes -X dev
// on the way. python_boot_prepare then runs the boot from an audit hook; where
// it cannot, nothing ends the start-up window (framework/agent/agent.cpp)
// before the program's own code runs, and the Python-side collectors never
// start (python_boot_prepare says so on stderr).
char python_skips_boot();

// Called once from the agent's constructor, single-threaded, before the
// program's main: prepends MSMEMSCOPE_PYTHON_PATH to PYTHONPATH when the
// process is a CPython interpreter. Never fails the program.
// Returns whether the process is a CPython interpreter that will run the
// boot (the start-up window closes there, framework/agent/agent.cpp): its
// sitecustomize, or the agent's audit hook under -I, -E or -S.
bool python_boot_prepare();

}  // namespace msms::agent
