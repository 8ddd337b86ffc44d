// The OOM killer's kills in the memory cgroups a process was seen in
// (issue 3 §4): the kill count of each cgroup when the process was first
// seen in it, compared with the count at the end. cgroup v1: the memory
// hierarchy's memory.oom_control; cgroup v2: memory.events (the "oom_kill N"
// line of either). Every failure (no /proc/<pid>, cgroups absent, unreadable
// or without the counter) only means "nothing seen".
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace msms {

class OomWatch {
public:
    // mountinfo / proc: where the mount table and /proc are (tests give
    // made-up ones).
    explicit OomWatch(uint32_t pid, const std::string& mountinfo = "/proc/self/mountinfo",
                      const std::string& proc = "/proc");

    // Notes the memory cgroups the process is in now.
    void sample();
    // Whether any of them counted an OOM kill since.
    bool increased() const;
    // The counter files being watched (tests).
    std::vector<std::string> watched() const;

private:
    uint32_t pid_;
    std::string proc_;
    std::pair<std::string, std::string> v1_, v2_;  // memory hierarchies: root, mount point
    std::vector<std::pair<std::string, int64_t>> seen_;
};

}  // namespace msms
