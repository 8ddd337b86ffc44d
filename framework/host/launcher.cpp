#include "launcher.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "util/file_trust.h"
#include "util/host_process.h"
#include "util/output_dir.h"
#include "warning_out.h"

namespace msms {

std::string resolve_program(const std::string& name, std::string& error) {
    auto check = [&](const std::string& path) -> int {
        struct stat st;
        if (stat(path.c_str(), &st) != 0) return ENOENT;
        if (S_ISDIR(st.st_mode)) return EISDIR;
        if (access(path.c_str(), X_OK) != 0) return EACCES;
        return 0;
    };
    if (name.find('/') != std::string::npos) {
        int rc = check(name);
        if (rc == ENOENT) error = "program '" + name + "' not found";
        else if (rc == EISDIR) error = "program '" + name + "' is a directory";
        else if (rc == EACCES) error = "program '" + name + "' is not executable";
        return rc ? "" : name;
    }
    const char* path = std::getenv("PATH");
    std::string p = path ? path : "/usr/local/bin:/usr/bin:/bin";
    bool saw_not_exec = false;
    size_t start = 0;
    while (start <= p.size()) {
        size_t colon = p.find(':', start);
        if (colon == std::string::npos) colon = p.size();
        std::string dir = p.substr(start, colon - start);
        if (dir.empty()) dir = ".";
        std::string cand = dir + "/" + name;
        int rc = check(cand);
        if (rc == 0) return cand;
        if (rc == EACCES) saw_not_exec = true;
        start = colon + 1;
    }
    error = saw_not_exec ? "program '" + name + "' is not executable" : "program '" + name + "' not found in PATH";
    return "";
}

namespace {
// The first file of the package folder (and its sub-folders) that root may
// not run: "" when all pass, or when not root.
std::string untrusted_package_file(const std::string& dir) {
    if (geteuid() != 0) return "";
    std::error_code ec;
    for (std::filesystem::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        std::error_code ec2;
        if (it->is_symlink(ec2) || it->is_regular_file(ec2) || it->is_directory(ec2)) {
            if (std::string why = untrusted_reason(it->path().string()); !why.empty()) return why;
        }
    }
    return untrusted_reason(dir);
}
}  // namespace

std::string python_boot_path(const std::string& home, const std::string& session_dir, std::string& error) {
    // The package next to the prefix: <prefix>/python (build tree, cmake
    // install), or the folder holding the package whose msmemscope/_prefix
    // this is (a pip install: site-packages/msmemscope/_prefix).
    std::string pkg_parent = home + "/python";
    struct stat st;
    if (stat((pkg_parent + "/msmemscope/_boot.py").c_str(), &st) != 0) {
        pkg_parent = home + "/../..";
        if (stat((pkg_parent + "/msmemscope/_boot.py").c_str(), &st) != 0) return "";
        char* real = realpath(pkg_parent.c_str(), nullptr);
        if (real) pkg_parent = real;
        free(real);
    }
    // As root, the package runs in every Python process of the run: each of
    // its files passes the check plugins pass (util/file_trust.h).
    if (std::string why = untrusted_package_file(pkg_parent + "/msmemscope"); !why.empty()) {
        warning_out() << "msmemscope: warning: the msmemscope Python package is refused: " << why
                      << "; Python processes run without the Python-side collectors\n";
        return "";
    }
    std::string dir = session_dir + "/python";
    // The session folder, then python/ in it, through descriptors; the file
    // is a new one renamed into place (#29 item 4: never written through a link).
    std::string why;
    Fd session = open_output_root(session_dir, why);
    if (session && mkdirat(session.get(), "python", 0700) != 0 && errno != EEXIST) why = dir + ": " + strerror(errno);
    Fd py(session && why.empty() ? files::open_dir(session.get(), "python", false, why) : -1);
    if (!py) {
        // The program still runs (e.g. ulimit -n leaves the tool no
        // descriptor for it): only its Python side goes without collectors.
        warning_out() << "msmemscope: warning: cannot create '" << dir << "': " << why
                      << "; Python processes run without the Python-side collectors\n";
        return "";
    }
    // The hook itself lives in the package (msmemscope/_boot.py); this file
    // only hands over, and never fails the program's start.
    std::ostringstream f;
    f << R"PY(# Written by msmemscope: starts its collectors in this Python process, then runs
# the sitecustomize that was next on the path (if any), as the program's own code:
# _msmemscope_chain, outside the boot, whose frames name msmemscope's own memory
# (plugins/analyzers/leaks/suppressions.cpp).
def _msmemscope_boot():
    import os, sys

    def restore_environment():
        # The agent put this folder first on PYTHONPATH (framework/agent/python_boot.h):
        # the program and its children see the PYTHONPATH they were given.
        was = os.environ.pop('MSMEMSCOPE_PYTHONPATH_WAS', None)
        if was == '-':
            os.environ.pop('PYTHONPATH', None)
        elif was is not None and was.startswith('='):
            os.environ['PYTHONPATH'] = was[1:]
    try:
        from msmemscope import _boot
    except Exception as e:  # the package cannot load: run the program untouched
        try:
            # Through the agent itself (sdk/include/msmemscope/agent.h): the
            # strings libc's setenv keeps are the profiler's, not the
            # program's leak, and the interpreter's start-up ends here
            # all the same (framework/agent/agent.cpp).
            import ctypes
            agent = ctypes.CDLL(None)
            agent.msms_agent_hooks_off()
            try:
                restore_environment()
            finally:
                agent.msms_agent_leave()
            agent.msms_agent_python_started()
        except Exception:
            restore_environment()
        sys.stderr.write('msmemscope: warning: cannot load the msmemscope package (%s); '
                         'this Python process is profiled without its Python-side collectors\n' % e)
        return
    _boot.run(restore_environment)


def _msmemscope_chain():
    import os, sys, importlib.machinery, importlib.util
    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or '.') != here]
    spec = importlib.machinery.PathFinder.find_spec('sitecustomize', path)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules['sitecustomize'] = module
        boot = sys.modules.get('msmemscope._boot')
        if boot is not None:
            boot.program_code(True)
        try:
            spec.loader.exec_module(module)  # its errors reach site.py, as without msmemscope
        finally:
            if boot is not None:
                boot.program_code(False)


_msmemscope_boot()
if not globals().get('_msmemscope_site_ran'):  # (the agent runs this file itself under -I, -E, -S)
    _msmemscope_chain()
del _msmemscope_boot, _msmemscope_chain
)PY";
    if (!files::replace(py.get(), "sitecustomize.py", f.str(), why, 0644)) {
        warning_out() << "msmemscope: warning: cannot write '" << dir << "/sitecustomize.py': " << why
                      << "; Python processes run without the Python-side collectors\n";
        return "";
    }
    return dir + ":" + pkg_parent;
}

pid_t launch(const LaunchSpec& spec, std::string& error) {
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) != 0) {
        error = std::string("pipe: ") + strerror(errno);
        return -1;
    }
    // Build everything before fork: the child only calls async-signal-safe
    // functions.
    std::vector<std::string> envs;
    std::string preload;
    for (auto& p : spec.preload) preload += (preload.empty() ? "" : ":") + p;
    const char* old = std::getenv("LD_PRELOAD");
    if (old && *old) preload += std::string(":") + old;
    for (char** e = environ; *e; ++e) {
        std::string s = *e;
        if (s.rfind("LD_PRELOAD=", 0) == 0) continue;
        bool overridden = false;
        for (auto& kv : spec.env)
            if (s.rfind(kv.first + "=", 0) == 0) overridden = true;
        if (!overridden) envs.push_back(s);
    }
    if (!preload.empty()) envs.push_back("LD_PRELOAD=" + preload);
    for (auto& kv : spec.env) envs.push_back(kv.first + "=" + kv.second);
    // Python is recognised by the process, not by the command line (DESIGN
    // §9): every process of the run gets the boot path, and the agent puts it
    // first on PYTHONPATH in a process that is a CPython interpreter, however
    // it was started (a shell script, torchrun, `python -m`, `#!`, env ...).
    std::string home, session;
    for (auto& kv : spec.env) {
        if (kv.first == "MSMEMSCOPE_HOME") home = kv.second;
        if (kv.first == "MSMEMSCOPE_SESSION") session = kv.second;
    }
    if (!home.empty() && !session.empty()) {
        std::string why;
        std::string path = python_boot_path(home, session, why);
        if (!why.empty()) {
            error = why;
            return -1;
        }
        for (auto it = envs.begin(); it != envs.end();)
            it = it->rfind("MSMEMSCOPE_PYTHON_PATH=", 0) == 0 ? envs.erase(it) : it + 1;
        if (!path.empty()) envs.push_back("MSMEMSCOPE_PYTHON_PATH=" + path);
    }
    std::vector<char*> envp, argv;
    for (auto& s : envs) envp.push_back(const_cast<char*>(s.c_str()));
    envp.push_back(nullptr);
    envp.reserve(envp.size() + 2);  // the child adds one entry without allocating
    for (auto& s : spec.argv) argv.push_back(const_cast<char*>(s.c_str()));
    argv.push_back(nullptr);

    pid_t pid = fork();
    if (pid < 0) {
        error = std::string("fork: ") + strerror(errno);
        close(pipefd[0]);
        close(pipefd[1]);
        return -1;
    }
    if (pid == 0) {
        close(pipefd[0]);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        if (spec.child_mask) sigprocmask(SIG_SETMASK, spec.child_mask, nullptr);
        host_process_restore_for_child();  // SIGXFSZ and the umask as the user had them
        // Tell the agent which process is the root (for --follow-fork=false).
        char root[64];
        int n = snprintf(root, sizeof(root), "MSMEMSCOPE_ROOT_PID=%d", static_cast<int>(getpid()));
        (void)n;
        envp.back() = root;
        envp.push_back(nullptr);
        execve(argv[0], argv.data(), envp.data());
        int e = errno;
        ssize_t w = write(pipefd[1], &e, sizeof(e));
        (void)w;
        _exit(127);
    }
    close(pipefd[1]);
    int child_errno = 0;
    ssize_t r;
    do {
        r = read(pipefd[0], &child_errno, sizeof(child_errno));
    } while (r < 0 && errno == EINTR);
    close(pipefd[0]);
    if (r == static_cast<ssize_t>(sizeof(child_errno))) {
        error = "cannot run '" + spec.argv[0] + "': " + strerror(child_errno);
        int st;
        waitpid(pid, &st, 0);
        return -1;
    }
    return pid;
}

int exit_code_of(int st) {
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return 1;
}

std::string describe_status(int st) {
    if (WIFEXITED(st)) return "exited with code " + std::to_string(WEXITSTATUS(st));
    if (WIFSIGNALED(st)) return killed_by_signal(WTERMSIG(st)) + (WCOREDUMP(st) ? ", core dumped" : "");
    return "ended";
}

std::string killed_by_signal(int sig) {
    const char* name = sigabbrev_np(sig);
    return "killed by signal " + std::to_string(sig) + (name ? std::string(" (SIG") + name + ")" : "");
}

}  // namespace msms
