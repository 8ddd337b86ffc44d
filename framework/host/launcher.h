// Starts the profiled program with the agent and collector libraries
// preloaded and the session's environment.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace msms {

struct LaunchSpec {
    std::vector<std::string> argv;
    std::vector<std::string> preload;  // absolute paths, agent first
    std::vector<std::pair<std::string, std::string>> env;
};

// Finds argv[0] like execvp would; "" + error when missing or not executable.
std::string resolve_program(const std::string& name, std::string& error);
// True when the program is a Python interpreter (python, python3,
// python3.11 ...) or a script whose "#!" line names one.
bool is_python_program(const std::string& resolved_path);
// For a Python target: the environment that puts msmemscope's own package
// first on its import path and starts the package's collectors at
// interpreter start (a sitecustomize written into `session_dir`/python that
// chains to the target's own sitecustomize). `home` is MSMEMSCOPE_HOME.
// Returns the PYTHONPATH value ("" when the package is not found there).
std::string python_boot_path(const std::string& home, const std::string& session_dir, std::string& error);

// Forks and execs. Returns the child's pid, or -1 with the reason in error
// (the exec failure of the child is reported through a close-on-exec pipe).
pid_t launch(const LaunchSpec& spec, std::string& error);
// 128+N for a signal, else the exit code.
int exit_code_of(int wait_status);
std::string describe_status(int wait_status);

}  // namespace msms
