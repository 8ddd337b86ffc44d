#include "compare_log.h"

#include <time.h>

#include <cstdio>

#include "process_run.h"

namespace msms {

CompareLog::CompareLog(const std::string& output) : start_(std::chrono::steady_clock::now()) {
    std::string dir = output + "/compare/msmemscope_logs";
    if (!make_dirs(dir).empty()) return;  // compare reports the folder it cannot create
    path_ = dir + "/msmemscope_" + timestamp_string(static_cast<uint64_t>(time(nullptr)) * 1000000000ull) + ".log";
    line("[INFO] ", "Start to compare memory data.");
}

void CompareLog::line(const char* level, const std::string& text) {
    if (path_.empty()) return;
    std::FILE* f = std::fopen(path_.c_str(), "a");
    if (!f) return;
    char when[32];
    time_t now = time(nullptr);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    std::fprintf(f, "%s %s %s\n", when, level, text.c_str());
    std::fclose(f);
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
