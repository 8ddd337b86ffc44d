// The log of a --compare run, as msMemScope writes one: 
// <output>/compare/msmemscope_logs/msmemscope_{ts}.log with "Start to compare
// memory data." and "The memory comparison has been completed in a total time
// of X(s)" (or the failure), next to compare/memory_compare_{ts}.csv.
#pragma once

#include <chrono>
#include <string>

namespace msms {

class CompareLog {
public:
    explicit CompareLog(const std::string& output);
    ~CompareLog();
    CompareLog(const CompareLog&) = delete;
    CompareLog& operator=(const CompareLog&) = delete;
    // Writes the closing line: completed (status 0) or failed.
    void finish(int status);
    const std::string& path() const { return path_; }

private:
    void line(const char* level, const std::string& text);
    std::string path_;
    int fd_ = -1;  // the log, created O_EXCL|O_NOFOLLOW
    std::chrono::steady_clock::time_point start_;
};

}  // namespace msms
