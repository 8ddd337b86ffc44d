// Whether the drivers of the requested devices are on this machine, and the
// one hint a run gets when one is not (issue #19 item 6): the default device
// is npu, so a first run on a machine without Ascend software must say why
// nothing was recorded and how to profile host memory instead.
#pragma once

#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "config.h"
#include "process_run.h"

namespace msms {

// The driver library a device kind needs ("npu": libascend_hal.so, "cuda":
// libcuda.so.1), "" for cpu.
std::string driver_library(const std::string& device_kind);
// Whether the dynamic loader finds `library` with this process's environment
// (the profiled program's too): dlopen'ed in a short-lived child, so that no
// driver code runs inside the host.
bool driver_loadable(const std::string& library);
// Whether `program` (a path, or a name looked up in PATH) is linked against
// `library` and the dynamic loader resolves it (RUNPATH included): asked of
// the loader (`ld.so --list`) in a child, without running the program.
bool program_links(const std::string& program, const std::string& library);
// For each requested accelerator kind with no memory recorded by any process
// and no driver on the machine: one warning with the fix (in the Python
// API's words under --serve-session), without "msmemscope: warning: ".
std::vector<std::string> missing_driver_hints(const Config& cfg, const std::vector<ProcessSummary>& runs);
// Before anything is recorded (the Python API's start(), told on --ready-fd):
// each requested accelerator kind whose driver the dynamic loader does not
// find, as (driver library, the hint without "msmemscope: warning: ").
std::vector<std::pair<std::string, std::string>> drivers_missing_now(const Config& cfg);

}  // namespace msms
