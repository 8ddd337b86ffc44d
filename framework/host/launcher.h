// Starts the profiled program with the agent and collector libraries
// preloaded and the session's environment.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <string>
#include <vector>

namespace msms {

struct LaunchSpec {
    std::vector<std::string> argv;
    std::vector<std::string> preload;  // absolute paths, agent first
    std::vector<std::pair<std::string, std::string>> env;
    // The signal mask the program starts with (the caller may block signals
    // around the launch); nullptr: the caller's mask.
    const sigset_t* child_mask = nullptr;
};

// Finds argv[0] like execvp would; "" + error when missing or not executable.
std::string resolve_program(const std::string& name, std::string& error);
// The import path that starts the package's collectors at interpreter start
// in every Python process of the run: a sitecustomize written into
// `session_dir`/python (it chains to the target's own sitecustomize), then
// the folder holding msmemscope's package. `home` is MSMEMSCOPE_HOME.
// The launcher hands it to the program as MSMEMSCOPE_PYTHON_PATH; the agent
// prepends it to PYTHONPATH in each process that is a CPython interpreter
// (framework/agent/python_boot.h). "" when the package is not found there.
std::string python_boot_path(const std::string& home, const std::string& session_dir, std::string& error);

// Forks and execs. Returns the child's pid, or -1 with the reason in error
// (the exec failure of the child is reported through a close-on-exec pipe).
pid_t launch(const LaunchSpec& spec, std::string& error);
// 128+N for a signal, else the exit code.
int exit_code_of(int wait_status);
std::string describe_status(int wait_status);
// "killed by signal 9 (SIGKILL)": how describe_status says a signal, and how
// a process's recorded end says one.
std::string killed_by_signal(int sig);

}  // namespace msms
