#include "oom_watch.h"

#include <fstream>
#include <sstream>

namespace msms {

namespace {

std::string under(const std::pair<std::string, std::string>& mount, const std::string& path) {
    std::string rel = path;
    if (mount.first != "/" && rel.compare(0, mount.first.size(), mount.first) == 0) rel = rel.substr(mount.first.size());
    if (rel == "/") rel.clear();
    return mount.second + rel;
}

// The "oom_kill N" line of memory.events (v2) or memory.oom_control (v1); -1 if none.
int64_t count(const std::string& file) {
    std::ifstream f(file);
    std::string key;
    int64_t v = 0;
    while (f >> key >> v)
        if (key == "oom_kill") return v;
    return -1;
}

}  // namespace

OomWatch::OomWatch(uint32_t pid, const std::string& mountinfo, const std::string& proc) : pid_(pid), proc_(proc) {
    std::ifstream mi(mountinfo);
    std::string line;
    while (std::getline(mi, line)) {
        // id parent major:minor root mountpoint options - fstype source superoptions
        std::istringstream in(line);
        std::string id, parent, dev, root, point, tok;
        in >> id >> parent >> dev >> root >> point;
        while (in >> tok && tok != "-") {}
        std::string fstype, source, super;
        in >> fstype >> source >> super;
        if (fstype == "cgroup2" && v2_.second.empty()) v2_ = {root, point};
        if (fstype == "cgroup" && ("," + super + ",").find(",memory,") != std::string::npos) v1_ = {root, point};
    }
}

void OomWatch::sample() {
    if (v1_.second.empty() && v2_.second.empty()) return;
    std::ifstream f(proc_ + "/" + std::to_string(pid_) + "/cgroup");
    std::string line;
    while (std::getline(f, line)) {
        // hierarchy-id:controllers:path ("0::path" is the v2 one)
        size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
        if (b == std::string::npos) continue;
        std::string ctrls = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
        std::string file;
        if (ctrls.empty() && !v2_.second.empty()) file = under(v2_, path) + "/memory.events";
        else if (("," + ctrls + ",").find(",memory,") != std::string::npos && !v1_.second.empty())
            file = under(v1_, path) + "/memory.oom_control";
        if (file.empty()) continue;
        bool known = false;
        for (auto& s : seen_) known = known || s.first == file;
        if (known) continue;
        int64_t n = count(file);
        if (n >= 0) seen_.emplace_back(file, n);
    }
}

bool OomWatch::increased() const {
    for (auto& s : seen_)
        if (count(s.first) > s.second) return true;
    return false;
}

std::vector<std::string> OomWatch::watched() const {
    std::vector<std::string> out;
    for (auto& s : seen_) out.push_back(s.first);
    return out;
}

}  // namespace msms
