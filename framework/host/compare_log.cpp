#include "compare_log.h"

#include <time.h>

#include <cstdio>
#include <iostream>

#include "console_notes.h"
#include "process_run.h"
#include "util/output_dir.h"
#include "warning_out.h"

namespace msms {

CompareLog::CompareLog(const std::string& output) : start_(std::chrono::steady_clock::now()) {
    // <output>/compare/msmemscope_logs through an openat chain, the log
    // created O_EXCL|O_NOFOLLOW (#29 item 4): a planted `compare` link is
    // never written through (compare reports the folder it cannot create).
    std::string why;
    Fd compare = open_output_subdir(output, "compare", why);
    if (!compare) return;
    Fd logs(files::open_dir(compare.get(), "msmemscope_logs", true, why));
    if (!logs) return;
    std::string name = "msmemscope_" + timestamp_string(static_cast<uint64_t>(time(nullptr)) * 1000000000ull) + ".log";
    fd_ = files::create(logs.get(), name, why);
    if (fd_ < 0) return;
    path_ = output + "/compare/msmemscope_logs/" + name;
    for (auto& said : console_notes_log_lines()) files::write_all(fd_, said);
    line("[INFO] ", "Start to compare memory data.");
}

CompareLog::~CompareLog() {
    if (fd_ >= 0) ::close(fd_);
}

std::string upstream_log_line(const char* level, const std::string& text,
                              std::chrono::system_clock::time_point when) {
    char shown[32];
    time_t secs = std::chrono::system_clock::to_time_t(when);
    struct tm tm;
    localtime_r(&secs, &tm);
    strftime(shown, sizeof shown, "%Y-%m-%d %H:%M:%S", &tm);
    return std::string(shown) + " " + level + " " + text + "\n";
}

std::vector<std::string> console_notes_log_lines() {
    std::vector<std::string> lines;
    for (auto& note : console_notes()) {
        if (note.kind == ConsoleNote::Warning && !warnings_shown()) continue;  // not shown with -q
        const char* level = note.kind == ConsoleNote::Out       ? "[INFO] "
                            : note.kind == ConsoleNote::Warning ? "[WARN] "
                                                                : "[ERROR]";
        lines.push_back(upstream_log_line(level, note.text, note.when));
    }
    return lines;
}

void CompareLog::line(const char* level, const std::string& text) {
    if (fd_ < 0) return;
    files::write_all(fd_, upstream_log_line(level, text));
}

void CompareLog::out(const std::string& text) {
    std::cout << text << "\n";
    line("[INFO] ", text);
}

void CompareLog::warning(const std::string& text) {
    warning_out() << "msmemscope: warning: " << text << "\n";
    if (warnings_shown()) line("[WARN] ", text);
}

void CompareLog::error(const std::string& text) {
    std::cerr << "msmemscope: error: " << text << "\n";
    line("[ERROR]", text);
}

void CompareLog::finish(int status) {
    if (status != 0) {
        line("[ERROR]", "Memory comparison failed!");
        return;
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    char buf[128];
    std::snprintf(buf, sizeof buf, "The memory comparison has been completed in a total time of %.6f(s)", s);
    line("[INFO] ", buf);
}

}  // namespace msms
