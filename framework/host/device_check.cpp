#include "device_check.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <set>

#include "util/text.h"

namespace msms {

std::string driver_library(const std::string& device_kind) {
    if (device_kind == "npu") return "libascend_hal.so";
    if (device_kind == "cuda") return "libcuda.so.1";
    return "";
}

bool driver_loadable(const std::string& library) {
    pid_t pid = fork();
    if (pid < 0) return true;  // cannot tell: say nothing
    if (pid == 0) {
        // Only the loader's search: no driver code is run in the host.
        void* h = dlopen(library.c_str(), RTLD_LAZY | RTLD_LOCAL);
        _exit(h ? 0 : 1);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    return !(WIFEXITED(st) && WEXITSTATUS(st) == 1);
}

namespace {

// The program's path as execvp would find it ("" when not found).
std::string resolve_program(const std::string& name) {
    if (name.empty()) return "";
    if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : "";
    const char* path = getenv("PATH");
    std::string dirs = path ? path : "/usr/bin:/bin";
    size_t at = 0;
    while (at <= dirs.size()) {
        size_t end = dirs.find(':', at);
        if (end == std::string::npos) end = dirs.size();
        std::string cand = (end > at ? dirs.substr(at, end - at) : ".") + "/" + name;
        if (access(cand.c_str(), X_OK) == 0) return cand;
        at = end + 1;
    }
    return "";
}

}  // namespace

bool program_links(const std::string& program, const std::string& library) {
    std::string exe = resolve_program(program);
    if (exe.empty()) return false;
    static const char* const loaders[] = {"/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"};
    const char* loader = nullptr;
    for (const char* l : loaders)
        if (access(l, X_OK) == 0) loader = l;
    if (!loader) return false;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return false;
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return false;
    }
    if (pid == 0) {
        // The loader lists the program's libraries as it would resolve them
        // (its RUNPATH included) without running any of its code.
        dup2(fds[1], 1);
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) dup2(null, 2);
        execl(loader, loader, "--list", exe.c_str(), static_cast<char*>(nullptr));
        _exit(127);
    }
    close(fds[1]);
    std::string out;
    char buf[4096];
    for (;;) {
        ssize_t n = read(fds[0], buf, sizeof(buf));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        out.append(buf, static_cast<size_t>(n));
    }
    close(fds[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (out.find("\t" + library + " => /") != std::string::npos) return true;
    // Or the driver sits beside a library the program loads from its own
    // RUNPATH (a program that loads the driver later, e.g. through NVTX).
    size_t at = 0;
    while ((at = out.find(" => /", at)) != std::string::npos) {
        size_t start = at + 4, end = out.find(" (", start);
        at = start;
        if (end == std::string::npos) break;
        std::string path = out.substr(start, end - start);
        size_t slash = path.rfind('/');
        if (slash == std::string::npos) continue;
        std::string dir = path.substr(0, slash);
        if (dir.rfind("/lib", 0) == 0 || dir.rfind("/usr/lib", 0) == 0) continue;  // the system's: dlopen saw it
        if (access((dir + "/" + library).c_str(), F_OK) == 0) return true;
    }
    return false;
}

namespace {

// The hint for one device kind whose driver is missing, in the words of the
// run's front end: the command line's options, or the Python API's config()
// (--serve-session: a plain `python3 script.py` with msmemscope.start()).
// `ahead`: said before anything was recorded (the API's start()).
std::string hint_line(const Config& cfg, const std::string& kind, const std::string& lib, bool ahead) {
    bool api = !cfg.serve_session.empty();
    std::vector<std::string> requested;
    for (auto& d : cfg.devices)
        if (d.rfind(kind, 0) == 0) requested.push_back(d);
    std::string name = kind == "npu" ? "Ascend NPU" : "NVIDIA CUDA";
    std::string who;
    if (!cfg.devices_given) who = "the default device is npu, but ";
    else if (api) who = "device=\"" + join(requested, ",") + "\": ";
    else who = "--device=" + join(requested, ",") + ": ";
    return who + "no " + name + " driver (" + lib + ") was found on this machine, so no " + kind + " memory " +
           (ahead ? "will be" : "was") + " recorded; to profile host memory, " +
           (api ? "call msmemscope.config(device=\"cpu\") before msmemscope.start()" : "run with --device=cpu");
}

std::set<std::string> requested_kinds(const Config& cfg) {
    std::set<std::string> kinds;
    for (auto& d : cfg.devices) kinds.insert(d.substr(0, d.find(':')));
    return kinds;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> drivers_missing_now(const Config& cfg) {
    std::vector<std::pair<std::string, std::string>> out;
    for (auto& kind : requested_kinds(cfg)) {
        std::string lib = driver_library(kind);
        if (lib.empty() || driver_loadable(lib)) continue;
        out.emplace_back(lib, hint_line(cfg, kind, lib, true));
    }
    return out;
}

std::vector<std::string> missing_driver_hints(const Config& cfg, const std::vector<ProcessSummary>& runs) {
    std::vector<std::string> hints;
    for (auto& kind : requested_kinds(cfg)) {
        std::string lib = driver_library(kind);
        if (lib.empty()) continue;
        // The console's labels name accelerators by id only ("0/HAL"): any
        // accelerator memory recorded means a driver was there.
        bool recorded = false;
        for (auto& s : runs)
            for (auto& [label, t] : s.totals)
                if (label.rfind("cpu", 0) != 0 && label.rfind("N/A", 0) != 0) recorded = true;
        if (recorded || driver_loadable(lib)) continue;
        // A program that links the driver from its own RUNPATH has it too.
        bool linked = !cfg.program.empty() && program_links(cfg.program[0], lib);
        for (auto& s : runs) linked = linked || program_links(s.command.substr(0, s.command.find(' ')), lib);
        if (linked) continue;
        hints.push_back(hint_line(cfg, kind, lib, false));
    }
    return hints;
}

}  // namespace msms
