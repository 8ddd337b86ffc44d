// The log of a --compare run, as msMemScope writes one: 
// <output>/compare/msmemscope_logs/msmemscope_{ts}.log with "Start to compare
// memory data." and "The memory comparison has been completed in a total time
// of X(s)" (or the failure), next to compare/memory_compare_{ts}.csv.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace msms {

// One line of such a log, as msMemScope writes them: "YYYY-mm-dd HH:MM:SS
// LEVEL text\n", LEVEL "[INFO] ", "[WARN] " or "[ERROR]" (--merge's log too),
// at the time `when`.
std::string upstream_log_line(const char* level, const std::string& text,
                              std::chrono::system_clock::time_point when = std::chrono::system_clock::now());
// What the console said before such a log was made (console_notes.h: the
// configuration's warnings, the run as root), as its first lines, at the
// times said; warnings only where the console showed them (not with -q).
std::vector<std::string> console_notes_log_lines();

class CompareLog {
public:
    explicit CompareLog(const std::string& output);
    ~CompareLog();
    CompareLog(const CompareLog&) = delete;
    CompareLog& operator=(const CompareLog&) = delete;
    // What the comparison tells the user, printed and kept in this log in
    // the same words, so that the log alone says what the console said
    // (which devices were left out or compared by site, the result's file,
    // why it failed): a line on stdout, printed as it is; a warning
    // ("msmemscope: warning: TEXT", kept when warning_out() shows it); an
    // error ("msmemscope: error: TEXT").
    void out(const std::string& line);
    void warning(const std::string& text);
    void error(const std::string& text);
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
