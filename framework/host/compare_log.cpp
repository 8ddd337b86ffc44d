#include "compare_log.h"

#include <time.h>

#include <cstdio>

#include "process_run.h"
#include "util/output_dir.h"

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
    line("[INFO] ", "Start to compare memory data.");
}

CompareLog::~CompareLog() {
    if (fd_ >= 0) ::close(fd_);
}

void CompareLog::line(const char* level, const std::string& text) {
    if (fd_ < 0) return;
    char when[32];
    time_t now = time(nullptr);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    files::write_all(fd_, std::string(when) + " " + level + " " + text + "\n");
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
