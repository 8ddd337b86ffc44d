#include "device_check.h"

#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

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

bool missing_driver_hint(const Config& cfg, const std::vector<ProcessSummary>& runs, std::ostream& err) {
    std::set<std::string> kinds;
    for (auto& d : cfg.devices) kinds.insert(d.substr(0, d.find(':')));
    bool said = false;
    for (auto& kind : kinds) {
        std::string lib = driver_library(kind);
        if (lib.empty()) continue;
        // The console's labels name accelerators by id only ("0/HAL"): any
        // accelerator memory recorded means a driver was there.
        bool recorded = false;
        for (auto& s : runs)
            for (auto& [label, t] : s.totals)
                if (label.rfind("cpu", 0) != 0 && label.rfind("N/A", 0) != 0) recorded = true;
        if (recorded || driver_loadable(lib)) continue;
        std::string name = kind == "npu" ? "Ascend NPU" : "NVIDIA CUDA";
        std::vector<std::string> requested;
        for (auto& d : cfg.devices)
            if (d.rfind(kind, 0) == 0) requested.push_back(d);
        err << "msmemscope: warning: " << (cfg.devices_given ? "--device=" + join(requested, ",")
                                                             : std::string("the default device is npu, but"))
            << (cfg.devices_given ? ": " : " ") << "no " << name << " driver (" << lib
            << ") was found on this machine, so no " << kind
            << " memory was recorded; to profile host memory, run with --device=cpu\n";
        said = true;
    }
    return said;
}

}  // namespace msms
