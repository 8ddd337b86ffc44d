#include "process_summary_json.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <vector>

#include "common/capture_format.h"
#include "launcher.h"
#include "plugin_failure_json.h"
#include "util/json.h"
#include <msmemscope/output_files.hpp>

#ifndef MSMEMSCOPE_VERSION
#define MSMEMSCOPE_VERSION "0.0.0"
#endif

namespace msms {
namespace {

struct Site {
    std::string kind;    // "leak" (outlived its step) or "live_at_exit" (host heap)
    std::string device;
    std::string where;
    uint64_t blocks = 0, bytes = 0;
};

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

// "N block(s), B..." at p (the reports' counts): N and B, and where the text
// after B begins; nullptr when p does not start so.
const char* blocks_and_bytes(const char* p, uint64_t& n, uint64_t& bytes) {
    char* end = nullptr;
    n = strtoull(p, &end, 10);
    if (end == p || strncmp(end, " block(s), ", 11) != 0) return nullptr;
    const char* q = end + 11;
    bytes = strtoull(q, &end, 10);
    return end == q ? nullptr : end;
}

// The leak analysis's per-site lines (plugins/analyzers/leaks):
//   "  Leaked blocks on device D by site, largest first: ..." then
//   "    N block(s), B bytes (step S): WHERE"
//   "  Host memory still allocated at exit on device D: ..." then
//   "    N block(s), B bytes, allocated at: WHERE"
std::vector<Site> report_sites(const std::vector<std::string>& report) {
    std::vector<Site> sites;
    std::string kind, device;
    for (auto& raw : report) {
        size_t first = raw.find_first_not_of(' ');
        if (first == std::string::npos) continue;
        std::string line = raw.substr(first);
        auto header = [&](const char* prefix, const char* k, const char* end) {
            if (!starts_with(line, prefix)) return false;
            size_t at = strlen(prefix);
            size_t stop = line.find(end, at);
            kind = k;
            device = line.substr(at, stop == std::string::npos ? std::string::npos : stop - at);
            return true;
        };
        // ("at stop()" in a Python API run, "at exit" otherwise)
        if (header("Leaked blocks on device ", "leak", " by site") ||
            header("Host memory still allocated at exit on device ", "live_at_exit", ": ") ||
            header("Host memory still allocated at stop() on device ", "live_at_exit", ": "))
            continue;
        if (first < 4 || kind.empty()) {
            if (first < 4) kind.clear();
            continue;
        }
        uint64_t n = 0, bytes = 0;
        const char* end = blocks_and_bytes(line.c_str(), n, bytes);
        if (!end || strncmp(end, " bytes", 6) != 0) continue;
        std::string rest = end + 6;
        std::string where;
        if (starts_with(rest, ", allocated at: ")) where = rest.substr(16);
        else if (starts_with(rest, " (")) {
            size_t c = rest.find("): ");
            if (c == std::string::npos) continue;
            where = rest.substr(c + 3);
            if (starts_with(where, "allocated at: ")) where = where.substr(14);
        } else {
            continue;
        }
        sites.push_back(Site{kind, device, where, n, bytes});
    }
    std::stable_sort(sites.begin(), sites.end(), [](const Site& a, const Site& b) { return a.bytes > b.bytes; });
    if (sites.size() > 10) sites.resize(10);
    return sites;
}


// The blocks the leak analysis did not judge because they were there when
// collection started (plugins/analyzers/leaks), summed over the devices:
//   "  Not judged on device D: N block(s), B bytes allocated before
//    collection started were still allocated at stop() (...)"
void report_not_judged(const std::vector<std::string>& report, uint64_t& blocks, uint64_t& bytes) {
    blocks = bytes = 0;
    for (auto& raw : report) {
        size_t first = raw.find_first_not_of(' ');
        if (first == std::string::npos || raw.compare(first, 21, "Not judged on device ") != 0) continue;
        size_t colon = raw.find(": ", first + 21);
        if (colon == std::string::npos) continue;
        uint64_t n = 0, b = 0;
        const char* end = blocks_and_bytes(raw.c_str() + colon + 2, n, b);
        if (!end || strncmp(end, " bytes allocated before collection started ", 43) != 0) continue;
        blocks += n;
        bytes += b;
    }
}

// A shell's own heap still allocated at exit, which the leak analysis
// reports apart and counts in no leak total (plugins/analyzers/leaks):
//   "  Host memory of the shell still allocated at exit on device D: N
//    block(s), B bytes (bash's own heap: ...; not counted as leaked)"
// False when the report has no such line.
bool report_shell_heap(const std::vector<std::string>& report, uint64_t& blocks, uint64_t& bytes) {
    const char kLine[] = "Host memory of the shell still allocated ";
    bool any = false;
    blocks = bytes = 0;
    for (auto& raw : report) {
        size_t first = raw.find_first_not_of(' ');
        if (first == std::string::npos || raw.compare(first, strlen(kLine), kLine) != 0) continue;
        size_t colon = raw.find(": ", first);
        if (colon == std::string::npos) continue;
        uint64_t n = 0, b = 0;
        if (!blocks_and_bytes(raw.c_str() + colon + 2, n, b)) continue;
        blocks += n;
        bytes += b;
        any = true;
    }
    return any;
}

// What the inefficient analysis marked, from its report lines
// (plugins/analyzers/inefficient), summed over the devices:
//   "inefficient: N block(s), B bytes marked on device D, of J block(s)
//    judged: KIND n block(s), b bytes; KIND ..."
// (each block once in N and B, and once in each of its kinds).
Json report_inefficient(const std::vector<std::string>& report) {
    uint64_t blocks = 0, bytes = 0;
    std::map<std::string, std::pair<uint64_t, uint64_t>> kinds;
    for (auto& line : report) {
        if (!starts_with(line, "inefficient: ")) continue;
        uint64_t n = 0, b = 0;
        const char* end = blocks_and_bytes(line.c_str() + 13, n, b);
        if (!end || strncmp(end, " bytes marked on device ", 24) != 0) continue;
        blocks += n;
        bytes += b;
        size_t colon = line.find(" judged: ");
        if (colon == std::string::npos) continue;
        size_t at = colon + 9;
        while (at < line.size()) {
            size_t stop = line.find("; ", at);
            std::string part = line.substr(at, stop == std::string::npos ? std::string::npos : stop - at);
            at = stop == std::string::npos ? line.size() : stop + 2;
            size_t sp = part.find(' ');
            if (sp == std::string::npos) continue;
            uint64_t kn = 0, kb = 0;
            if (!blocks_and_bytes(part.c_str() + sp + 1, kn, kb)) continue;
            auto& k = kinds[part.substr(0, sp)];
            k.first += kn;
            k.second += kb;
        }
    }
    Json j = Json::object();
    j.set("blocks", Json(blocks));
    j.set("bytes", Json(bytes));
    Json k = Json::object();
    for (auto& [name, v] : kinds) {
        Json e = Json::object();
        e.set("blocks", Json(v.first));
        e.set("bytes", Json(v.second));
        k.set(name, std::move(e));
    }
    j.set("kinds", std::move(k));
    return j;
}

struct EndWords {
    std::string how, text;
    int code = 0;
    bool code_known = false;  // "code" is a number (how == "exit" with a known status)
};

EndWords end_words(const ProcessSummary& s, const SummaryFacts& f) {
    std::string how, text;
    auto kind = static_cast<capture::EndKind>(s.end_kind);
    int code = s.end_code;
    if (f.exec_replaced) {
        how = "exec";
        text = "replaced by exec (continued in the next capture of this pid)";
    } else if (std::string words = unrecorded_exec_words(s); !words.empty()) {
        how = "exec";
        text = words;
    } else if (s.end_corrupt) {
        how = "unknown";
        text = "end record corrupt (it fails its checksum: how the process ended is not known)";
    } else if (kind == capture::EndKind::Exit || kind == capture::EndKind::QuickExit) {
        how = "exit";
        text = "exited with code " + std::to_string(s.end_code) +
               (kind != capture::EndKind::QuickExit ? "" : s.exit_after_fork ? " (_exit after fork)" : " (_exit)");
    } else if (kind == capture::EndKind::Signal) {
        how = "signal";
        text = killed_by_signal(s.end_code);
    } else if (kind == capture::EndKind::Returned) {
        how = "exit";  // code null: not known (not invented)
        text = kEndStatusUnknown;
    } else if (s.ended_normally) {
        how = "detached";
        text = "detached";
    } else if (f.wait_status >= 0 && (WIFEXITED(f.wait_status) || WIFSIGNALED(f.wait_status)) &&
               !(s.oom_kill_seen && WIFSIGNALED(f.wait_status) && WTERMSIG(f.wait_status) == SIGKILL)) {
        // No end record (SIGKILL; or the agent turned off): the CLI's wait
        // status says it, in the console's words.
        how = WIFEXITED(f.wait_status) ? "exit" : "signal";
        code = WIFEXITED(f.wait_status) ? WEXITSTATUS(f.wait_status) : WTERMSIG(f.wait_status);
        text = describe_status(f.wait_status);
    } else if (s.oom_kill_seen) {
        how = "oom_kill";
        text = "killed by the OOM killer (SIGKILL)";
    } else {
        how = "unknown";
        text = "ended without an end record (killed by SIGKILL or the OOM killer)";
    }
    return EndWords{how, text, code, how == "exit" && kind != capture::EndKind::Returned};
}

Json ended(const ProcessSummary& s, const SummaryFacts& f) {
    EndWords w = end_words(s, f);
    Json e = Json::object();
    e.set("how", Json(w.how));
    if (w.code_known) e.set("code", Json(static_cast<int64_t>(w.code)));
    else e.set("code", Json());
    if (w.how == "signal") e.set("signal", Json(static_cast<int64_t>(w.code)));
    e.set("text", Json(w.text));
    return e;
}

}  // namespace

bool judged_at_exit(const std::vector<std::string>& report) {
    for (auto& raw : report) {
        size_t first = raw.find_first_not_of(' ');
        if (first == std::string::npos) continue;
        if (raw.compare(first, 38, "Host memory still allocated at exit on") == 0 ||
            raw.compare(first, 40, "Driver memory still allocated at exit on") == 0)
            return true;
    }
    return false;
}

// Leaked bytes and blocks as the leak analysis reported them: upstream's
// "====== SUMMARY: X Mb(s) leaked in N allocation(s) ======" per device (in
// bytes where its own line "Leaked blocks on device D by site, largest
// first: N block(s), B bytes" gives them exactly), the driver blocks ("...: N
// block(s), X Mb(s):") and the host blocks ("...: N block(s), B bytes, ...")
// still allocated at exit. False when the report has none of them.
bool report_leaks(const std::vector<std::string>& report, uint64_t& bytes, uint64_t& blocks) {
    std::vector<std::pair<long double, uint64_t>> upstream, exact;
    long double total = 0;
    uint64_t n_total = 0;
    bool any = false;
    for (auto& raw : report) {
        size_t first = raw.find_first_not_of(' ');
        if (first == std::string::npos) continue;
        std::string line = raw.substr(first);
        char* end = nullptr;
        if (starts_with(line, "====== SUMMARY: ")) {
            const char* p = line.c_str() + 16;
            long double mb = strtold(p, &end);
            if (end != p && strncmp(end, " Mb(s) leaked in ", 17) == 0)
                upstream.emplace_back(mb * 1024.0L * 1024.0L, strtoull(end + 17, nullptr, 10));
            continue;
        }
        if (starts_with(line, "Leaked blocks on device ")) {
            size_t at = line.find(" largest first: ");
            if (at == std::string::npos) continue;
            const char* p = line.c_str() + at + 16;
            uint64_t n = strtoull(p, &end, 10);
            if (strncmp(end, " block(s), ", 11) != 0) continue;
            exact.emplace_back(static_cast<long double>(strtoull(end + 11, nullptr, 10)), n);
            continue;
        }
        for (const char* kind : {"Driver memory still allocated at exit on device ",
                                 "Host memory still allocated at exit on device ",
                                 "Driver memory still allocated at stop() on device ",
                                 "Host memory still allocated at stop() on device "}) {
            if (!starts_with(line, kind)) continue;
            size_t colon = line.find(": ", strlen(kind));
            if (colon == std::string::npos) continue;
            const char* p = line.c_str() + colon + 2;
            uint64_t n = strtoull(p, &end, 10);
            if (strncmp(end, " block(s), ", 11) != 0) continue;
            const char* q = end + 11;
            long double v = strtold(q, &end);
            if (strncmp(end, " Mb(s)", 6) == 0) v *= 1024.0L * 1024.0L;
            total += v;
            n_total += n;
            any = true;
        }
    }
    // One "Leaked blocks" line per SUMMARY line, in the same device order.
    auto& step = exact.size() == upstream.size() ? exact : upstream;
    for (auto& [b, n] : step) {
        total += b;
        n_total += n;
        any = true;
    }
    bytes = static_cast<uint64_t>(std::llround(static_cast<double>(total)));
    blocks = n_total;
    return any;
}

std::string process_summary_json(const ProcessSummary& s, const SummaryFacts& f) {
    Json j = Json::object();
    j.set("format", Json("msmemscope-process-summary"));
    j.set("format_version", Json(1));
    j.set("msmemscope_version", Json(MSMEMSCOPE_VERSION));
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) != 0) host[0] = 0;
    j.set("hostname", Json(std::string(host)));
    j.set("pid", Json(static_cast<uint64_t>(s.pid)));
    j.set("ppid", f.ppid ? Json(static_cast<uint64_t>(f.ppid)) : Json());
    j.set("rank", f.rank.empty() ? Json() : Json(static_cast<int64_t>(std::strtoll(f.rank.c_str(), nullptr, 10))));
    j.set("command", Json(s.command));
    j.set("folder", Json(std::filesystem::path(s.output_dir).filename().string()));
    j.set("start_ns", Json(f.wall_start_ns));
    j.set("ended", ended(s, f));
    j.set("events", Json(s.events));
    // the host's rows under --steps, apart from the program's events (0 without)
    j.set("steps_shadow_rows", Json(s.steps_shadow_rows));
    j.set("dropped", Json(s.dropped));
    j.set("complete", Json(s.incomplete.empty()));
    j.set("incomplete", Json::from_list(s.incomplete));
    // The plugins that failed or were left out, as the HTML report's banner
    // and the db's plugin_failure rows name them: here also a sink that
    // failed in its own finish(), which no sink's file can say.
    Json failures = Json::array();
    for (auto& pf : f.plugin_failures) failures.push(plugin_failure_json(pf.plugin, pf.kind, pf.what));
    j.set("plugin_failures", std::move(failures));
    Json pools = Json::object();
    for (auto& [pool, t] : s.totals) {
        Json p = Json::object();
        p.set("peak_bytes", Json(static_cast<int64_t>(t.peak)));
        p.set("final_bytes", Json(static_cast<int64_t>(t.used)));
        pools.set(pool, std::move(p));
    }
    j.set("pools", std::move(pools));
    // As the leak analysis reported them: null when it did not run; a
    // process replaced by exec holds no leaks; a child forked without exec
    // that ended with _exit() has its step leaks only (exit_judged false:
    // what it held then went with it).
    // The blocks there when collection started (deferred mode) and still
    // allocated at the end are in neither: not judged, counted apart.
    if (f.leaks_ran) {
        uint64_t bytes = 0, n = 0, before_n = 0, before_bytes = 0;
        if (!f.exec_replaced && !replaced_by_exec(s)) {
            report_leaks(s.report, bytes, n);
            report_not_judged(s.report, before_n, before_bytes);
        }
        Json l = Json::object();
        l.set("bytes", Json(bytes));
        l.set("allocations", Json(n));
        l.set("exit_judged", Json(!s.exit_after_fork && !f.exec_replaced && !replaced_by_exec(s)));
        Json before = Json::object();
        before.set("blocks", Json(before_n));
        before.set("bytes", Json(before_bytes));
        l.set("not_judged_before_start", std::move(before));
        // (only for a shell: its heap at exit, said apart and not counted)
        if (uint64_t shell_n = 0, shell_bytes = 0; report_shell_heap(s.report, shell_n, shell_bytes)) {
            Json shell = Json::object();
            shell.set("blocks", Json(shell_n));
            shell.set("bytes", Json(shell_bytes));
            l.set("shell_heap_at_exit", std::move(shell));
        }
        j.set("leaks", std::move(l));
    } else {
        j.set("leaks", Json());
    }
    // As the inefficient analysis counted them: null when it did not run.
    j.set("inefficient", f.inefficient_ran ? report_inefficient(s.report) : Json());
    j.set("steps", Json(f.steps));
    Json top = Json::array();
    for (auto& site : report_sites(s.report)) {
        // (an exec the agent did not see, taken for an exit: end_unrecorded)
        if (site.kind == "live_at_exit" && (f.exec_replaced || replaced_by_exec(s))) continue;
        Json t = Json::object();
        t.set("kind", Json(site.kind));
        t.set("device", Json(site.device));
        t.set("site", Json(site.where));
        t.set("blocks", Json(site.blocks));
        t.set("bytes", Json(site.bytes));
        top.push(std::move(t));
    }
    j.set("top_sites", std::move(top));
    return j.dump(2) + "\n";
}

std::string write_process_summary_json_at(int dir_fd, const ProcessSummary& s, const SummaryFacts& f) {
    std::string why;
    if (!msmemscope::files::write_new(dir_fd, "summary.json", process_summary_json(s, f), why)) return why;
    return "";
}

std::string ended_text(const ProcessSummary& s, const SummaryFacts& f) {
    return end_words(s, f).text;
}

}  // namespace msms
