#include "run_index.h"

#include "process_summary_json.h"

#include "util/output_dir.h"
#include "util/text.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <sstream>

namespace fs = std::filesystem;

namespace msms {
namespace {


std::string html_escape(const std::string& s) {
    std::string o;
    for (char c : s) {
        switch (c) {
        case '&': o += "&amp;"; break;
        case '<': o += "&lt;"; break;
        case '>': o += "&gt;"; break;
        case '"': o += "&quot;"; break;
        case '\'': o += "&#39;"; break;
        default: o += c;
        }
    }
    return o;
}

// Each path segment percent-encoded where needed (a relative link).
std::string url_path(const std::string& rel) {
    std::string o;
    for (unsigned char c : rel) {
        if (isalnum(c) || c == '/' || c == '.' || c == '_' || c == '-' || c == '~') o += static_cast<char>(c);
        else {
            char buf[4];
            snprintf(buf, sizeof buf, "%%%02X", c);
            o += buf;
        }
    }
    return o;
}

std::string peaks(const ProcessSummary& s) {
    std::string o;
    for (auto& [pool, t] : s.totals) o += (o.empty() ? "" : "; ") + pool + " " + human_bytes(t.peak);
    return o.empty() ? "-" : o;
}

// How it ended: the words of the process's summary line (Session::how_ended),
// without the explanations in parentheses that line adds.
std::string end_of(const ProcessSummary& s) {
    if (s.interrupted) return "not finished (msmemscope was interrupted)";
    if (!s.error.empty()) return "not read";
    std::string how = s.ended;
    if (how.empty()) {  // not set by a session (a caller of its own)
        if (s.replaced_by_exec) how = "replaced by exec";
        else if (s.end_kind == 1 || s.end_kind == 2) how = "exited with code " + std::to_string(s.end_code);
        else if (s.end_kind == 3) how = "killed by signal " + std::to_string(s.end_code);
        else if (s.end_kind == 4) how = kEndStatusUnknown;
        else how = "ended without an end record";
    }
    for (const char* why : {" (continued in ", " (killed by SIGKILL or the OOM killer)",
                            " (the new program's environment does not preload it",
                            " (its environment preloads the agent, but", " (the new image runs on unrecorded)",
                            " (msmemscope's Python API ends the recording"}) {
        size_t at = how.find(why);
        if (at == std::string::npos) continue;
        size_t close = how.find(')', at);  // what follows it stays ("; then exited with code 0")
        how.erase(at, close == std::string::npos ? std::string::npos : close + 1 - at);
    }
    return how;
}

const char kRunBegin[] = "<!-- msmemscope-run ";
const char kRunEnd[] = "<!-- /msmemscope-run -->";

// The sections other runs wrote into <root>/index.html (a regular file, not a
// link), each with its number of processes: those whose process folders are
// all still there (a run whose folders were removed leaves the index).
std::vector<std::pair<std::string, size_t>> other_runs(const fs::path& root, const std::string& index) {
    std::vector<std::pair<std::string, size_t>> out;
    int fd = open(index.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return out;
    struct stat st{};
    std::string text;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size < (64 << 20)) {
        text.resize(static_cast<size_t>(st.st_size));
        ssize_t n = read(fd, text.data(), text.size());
        text.resize(n > 0 ? static_cast<size_t>(n) : 0);
    }
    close(fd);
    for (size_t at = text.find(kRunBegin); at != std::string::npos; at = text.find(kRunBegin, at + 1)) {
        size_t end = text.find(kRunEnd, at);
        size_t line = text.find('\n', at);
        if (end == std::string::npos || line == std::string::npos || line > end) break;
        std::istringstream head(text.substr(at + strlen(kRunBegin), line - at - strlen(kRunBegin)));
        std::string id, dir;
        head >> id;
        bool there = true;
        size_t dirs = 0;
        while (head >> dir && dir != "-->") {
            ++dirs;
            std::string plain;  // url_path's encoding undone
            for (size_t i = 0; i < dir.size(); ++i) {
                if (dir[i] == '%' && i + 2 < dir.size()) {
                    plain += static_cast<char>(strtol(dir.substr(i + 1, 2).c_str(), nullptr, 16));
                    i += 2;
                } else plain += dir[i];
            }
            std::error_code ec;
            there = there && plain.find("..") == std::string::npos && fs::is_directory(root / plain, ec);
        }
        if (!there || dirs == 0) continue;
        size_t rows = 0;
        for (size_t r = text.find("<tr><td", at); r != std::string::npos && r < end; r = text.find("<tr><td", r + 1))
            ++rows;
        out.emplace_back(text.substr(at, end + strlen(kRunEnd) - at) + "\n", rows);
    }
    return out;
}

// Its memory went with its exec: nothing leaked. (A child forked without
// exec that ended with _exit() left its memory too, but its step leaks
// stand: "(steps)" after them.)
bool no_leaks(const ProcessSummary& s) { return replaced_by_exec(s); }

// The leak analysis found a shell's own heap live at exit ("Host memory of
// the shell still allocated at exit ...", plugins/analyzers/leaks): in no
// leak total, and the row says why its figure leaves it out.
bool shell_heap_left_out(const ProcessSummary& s) {
    for (auto& line : s.report)
        if (line.find("Host memory of the shell still allocated ") != std::string::npos) return true;
    return false;
}

}  // namespace

long double leaked_bytes(const ProcessSummary& s, uint64_t& allocations) {
    // As summary.json says it (process_summary_json.h report_leaks): the
    // leak analysis's report, in exact bytes where its lines give them, not
    // upstream's "X Mb(s)" rounded to six decimals (96000 bytes read back as
    // 95999.6, "93.7 KiB" here beside the summary's 96000).
    uint64_t bytes = 0;
    allocations = 0;
    if (!report_leaks(s.report, bytes, allocations)) return -1;
    return static_cast<long double>(bytes);
}

std::string rank_of(const ProcessSummary& s) {
    if (!s.rank.empty()) return s.rank;  // the environment's or torch.distributed's (process_rank.h)
    // A summary the worker did not hand back (it crashed, or was stopped):
    // the folder's name still says the environment's rank.
    std::string name = fs::path(s.output_dir).filename().string();
    size_t at = name.rfind("_rank");
    if (at == std::string::npos) return "";
    std::string r = name.substr(at + 5);
    size_t us = r.find('_');  // ..._rank3_2 (a second folder of that name)
    if (us != std::string::npos) r = r.substr(0, us);
    for (char c : r)
        if (!isdigit(static_cast<unsigned char>(c))) return "";
    return r;
}

std::string write_run_index(const std::vector<ProcessSummary>& runs, const std::string& output_root,
                            const std::string& timestamp, std::ostream& out) {
    // The console table.
    // pid, the parent it was started by, rank, how it ended (the words of
    // its summary line), leaked, peak, and its own command line (a child
    // forked without exec runs its parent's command: the parent pid says
    // which process it came from).
    out << "msmemscope: " << runs.size() << " processes\n";
    // The columns of variable width fit their longest text, so that the
    // command column starts at one place (a Python process's two pools,
    // "cpu/HOST 64.8 MiB; cpu/PTA 14.4 MiB", are wider than one pool's).
    size_t ended_w = 6, peak_w = 34;
    for (auto& s : runs) {
        ended_w = std::max(ended_w, end_of(s).size() + 2);
        peak_w = std::max(peak_w, peaks(s).size() + 2);
    }
    out << "  " << std::left << std::setw(8) << "pid" << std::setw(8) << "ppid" << std::setw(6) << "rank"
        << std::setw(static_cast<int>(ended_w)) << "ended" << std::setw(18) << "leaked"
        << std::setw(static_cast<int>(peak_w)) << "peak" << "command\n";
    for (auto& s : runs) {
        uint64_t n = 0;
        long double leaked = no_leaks(s) ? 0 : leaked_bytes(s, n);
        if (leaked < 0 && s.leaks_ran) leaked = 0;  // judged, none found
        std::string leak_text = no_leaks(s) || leaked < 0 ? "-" : human_bytes(leaked);
        if (leak_text != "-" && s.exit_after_fork) leak_text += " (steps)";
        if (leak_text != "-" && shell_heap_left_out(s)) leak_text += " (shell)";
        std::string rank = rank_of(s);
        const std::string& cmd = s.command;  // the last column: never cut
        std::string pk = peaks(s);
        out << "  " << std::left << std::setw(8) << s.pid << std::setw(8)
            << (s.ppid ? std::to_string(s.ppid) : std::string("-")) << std::setw(6) << (rank.empty() ? "-" : rank)
            << std::setw(static_cast<int>(ended_w)) << end_of(s) << std::setw(18) << leak_text
            << std::setw(static_cast<int>(peak_w)) << pk << cmd << "\n";
    }

    // index.html: this run's section, next to the sections of the other runs
    // of this --output whose folders are still there (runs at the same time
    // included: rebuilt under an flock on the output folder), in a new file
    // renamed into place (never written through a link).
    std::ostringstream h;
    fs::path root = fs::absolute(output_root).lexically_normal();
    std::string dirs_attr;  // the run's process folders, for a later run to see whether it is still there
    for (auto& s : runs) {
        std::error_code ec;
        fs::path dir = fs::absolute(s.output_dir, ec).lexically_normal();
        if (s.output_dir.empty()) continue;
        dirs_attr += (dirs_attr.empty() ? "" : " ") + url_path(dir.lexically_relative(root).string());
    }
    h << kRunBegin << html_escape(timestamp) << "-" << getpid() << " " << dirs_attr << " -->\n<h2>run "
      << html_escape(timestamp) << ": " << runs.size() << " processes</h2>\n<table>\n<tr><th>pid</th><th>ppid</th><th>rank</th><th>command</th><th>ended</th>"
         "<th>peak</th><th>leaked</th><th>report</th></tr>\n";
    for (auto& s : runs) {
        uint64_t n = 0;
        long double leaked = no_leaks(s) ? 0 : leaked_bytes(s, n);
        if (leaked < 0 && s.leaks_ran) leaked = 0;
        std::string rank = rank_of(s);
        std::string link;
        std::error_code ec;
        fs::path dir = fs::absolute(s.output_dir, ec).lexically_normal();
        std::string rel_dir = dir.lexically_relative(root).string();
        std::string report;
        for (auto& e : fs::directory_iterator(dir, ec)) {
            std::string f = e.path().filename().string();
            if (f.rfind("report_", 0) == 0 && f.size() > 5 && f.compare(f.size() - 5, 5, ".html") == 0) report = f;
        }
        if (!report.empty())
            link = "<a href=\"" + html_escape(url_path(rel_dir + "/" + report)) + "\">" + html_escape(report) + "</a>";
        else if (!s.output_dir.empty())
            link = "<a href=\"" + html_escape(url_path(rel_dir)) + "/\">" + html_escape(rel_dir) + "/</a>";
        h << "<tr><td class=\"n\">" << s.pid << "</td><td class=\"n\">"
          << (s.ppid ? std::to_string(s.ppid) : std::string("-")) << "</td><td>"
          << html_escape(rank.empty() ? "-" : rank) << "</td><td>"
          << html_escape(s.command) << "</td><td>" << html_escape(end_of(s)) << "</td><td>" << html_escape(peaks(s))
          << "</td><td class=\"n\">"
          << (no_leaks(s) || leaked < 0 ? std::string("-")
                                        : html_escape(human_bytes(leaked)) + " in " + std::to_string(n) + " allocation(s)" +
                                              (s.exit_after_fork ? " (step leaks: what it held at its _exit went with it)"
                                                                 : "") +
                                              (shell_heap_left_out(s) ? " (a shell: its own heap at exit is not counted)"
                                                                      : ""))
          << "</td><td>" << link << "</td></tr>\n";
    }
    h << "</table>\n" << kRunEnd << "\n";
    std::string final_path = (root / "index.html").string();
    // One writer at a time: a run reads the sections the others wrote.
    // The output folder through an openat chain (#29 item 4): index.html and
    // its temporary file are created and renamed relative to it.
    std::string open_why;
    int dfd = open_output_root(root.string(), open_why).release();
    if (dfd < 0) return "cannot open " + open_why;
    while (flock(dfd, LOCK_EX) != 0 && errno == EINTR) {}
    struct Unlock {
        int fd;
        ~Unlock() { close(fd); }
    } unlock{dfd};
    std::vector<std::string> sections;
    size_t processes = runs.size();
    for (auto& sec : other_runs(root, final_path)) {
        sections.push_back(sec.first);
        processes += sec.second;
    }
    sections.push_back(h.str());
    std::ostringstream page;
    page << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>msmemscope run " << html_escape(timestamp)
         << "</title>\n<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}th{background:#eee}"
            "td.n{text-align:right}</style></head><body>\n<h1>msmemscope: "
         << processes << " processes</h1>\n";
    if (sections.size() > 1) page << "<p>" << sections.size() << " runs wrote into this folder:</p>\n";
    for (auto& sec : sections) page << sec;
    page << "<p>A process that exec'ed continues in the next row of the same pid; its pre-exec image "
            "holds no leaks. Nor does a child forked without exec that ended with _exit(): its memory went with "
            "it. A shell's heap at exit is its own (a shell does not free it before it exits): its report lists "
            "it, its leaked figure leaves it out.</p>\n</body></html>\n";
    std::string text = page.str();
    std::string tmp_name = ".index.html." + std::to_string(getpid());
    std::string tmp = (root / tmp_name).string(), why;
    if (!files::write_new(dfd, tmp_name, text, why, 0644)) {
        unlinkat(dfd, tmp_name.c_str(), 0);
        return "cannot create " + tmp + ": " + why;
    }
    if (renameat(dfd, tmp_name.c_str(), dfd, "index.html") != 0) {
        why = strerror(errno);
        unlinkat(dfd, tmp_name.c_str(), 0);
        return "cannot write " + final_path + ": " + why;
    }
    out << "  index: " << final_path << "\n";
    return "";
}

}  // namespace msms
