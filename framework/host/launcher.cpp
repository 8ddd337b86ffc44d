#include "launcher.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "util/host_process.h"

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
    if (WIFSIGNALED(st)) {
        int sig = WTERMSIG(st);
        const char* name = sigabbrev_np(sig);
        return std::string("killed by signal ") + std::to_string(sig) + (name ? std::string(" (SIG") + name + ")" : "") +
               (WCOREDUMP(st) ? ", core dumped" : "");
    }
    return "ended";
}

}  // namespace msms
