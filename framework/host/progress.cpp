#include "progress.h"

#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <msmemscope/abi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <vector>

namespace fs = std::filesystem;

namespace msms {
namespace progress {
namespace {

constexpr size_t kSlots = 256;
Slot* g_slots = nullptr;
bool g_sync = false;  // MSMEMSCOPE_PROGRESS_SYNC (progress.h)

std::string human(double v, const char* const* units, int n, double step) {
    int u = 0;
    while (v >= step && u < n - 1) {
        v /= step;
        ++u;
    }
    char buf[32];
    if (u == 0) snprintf(buf, sizeof buf, "%.0f%s", v, units[0]);
    else snprintf(buf, sizeof buf, "%.1f%s", v, units[u]);
    return buf;
}

std::string count(double v) {
    static const char* const u[] = {"", "k", "M", "G"};
    return human(v, u, 4, 1000);
}

std::string bytes(double v) {
    static const char* const u[] = {" B", " KiB", " MiB", " GiB", " TiB"};
    return human(v, u, 5, 1024);
}

size_t terminal_width() {
    struct winsize ws{};
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20) return ws.ws_col;
    return 80;
}

uint64_t folder_bytes(const std::string& dir) {
    uint64_t total = 0;
    std::error_code ec;
    for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        std::error_code ec2;
        if (it->is_regular_file(ec2)) total += it->file_size(ec2);
    }
    return total;
}


void copy_text(char* dst, size_t n, const std::string& src) { snprintf(dst, n, "%s", src.c_str()); }

std::string text_of(const char* p, size_t n) { return std::string(p, strnlen(p, n)); }

// Writers bracket their changes with seq (odd while writing).
// One writer at a time in this process: the pipeline's thread and the
// sinks' threads (sink_lanes.h) report into the same slot.
std::mutex g_write_mu;
struct WriteScope {
    explicit WriteScope(Slot* s) : lk_(g_write_mu), s_(s) { s_->seq.fetch_add(1, std::memory_order_acq_rel); }
    ~WriteScope() { s_->seq.fetch_add(1, std::memory_order_acq_rel); }
    std::lock_guard<std::mutex> lk_;
    Slot* s_;
};

// Sync mode: waits until the printer has drawn what was just reported.
void settle(Slot* s) {
    if (!g_sync) return;
    uint64_t want = s->posted.fetch_add(1, std::memory_order_acq_rel) + 1;
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (s->drawn.load(std::memory_order_acquire) < want && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::microseconds(200));
}

// One consistent copy of a slot (false: it kept changing).
bool read_slot(Slot& s, View& v) {
    for (int attempt = 0; attempt < 5; ++attempt) {
        uint32_t before = s.seq.load(std::memory_order_acquire);
        if (before & 1) {
            std::this_thread::yield();
            continue;
        }
        View out;
        out.phase = static_cast<Phase>(s.phase.load(std::memory_order_acquire));
        out.state.phase = out.phase;
        out.state.events = s.events;
        out.state.stacks = s.stacks;
        out.state.stacks_total = s.stacks_total;
        out.state.chunks_read = s.chunks_read;
        out.state.chunks_total = s.chunks_total;
        for (auto& p : s.pools)
            if (p.label[0]) out.state.used[text_of(p.label, sizeof p.label)] = p.used;
        for (auto& t : s.tasks) {
            if (!t.plugin[0]) continue;
            TaskReport r;
            r.plugin = text_of(t.plugin, sizeof t.plugin);
            r.what = text_of(t.what, sizeof t.what);
            r.done = t.done;
            r.total = t.total;
            r.unit = t.unit;
            r.estimate = t.estimate != 0;
            out.tasks.push_back(std::move(r));
        }
        out.output_dir = text_of(s.output_dir, sizeof s.output_dir);
        if (s.seq.load(std::memory_order_acquire) != before) continue;
        v = std::move(out);
        return true;
    }
    return false;
}

}  // namespace

bool init(bool on) {
    if (!on || g_slots) return g_slots != nullptr;
    void* p = mmap(nullptr, kSlots * sizeof(Slot), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return false;
    g_slots = static_cast<Slot*>(p);  // zero-filled: every slot free
    const char* sync = getenv("MSMEMSCOPE_PROGRESS_SYNC");
    g_sync = sync && std::string(sync) == "1";
    return true;
}

bool enabled() { return g_slots != nullptr; }

Slot* acquire() {
    if (!g_slots) return nullptr;
    for (size_t i = 0; i < kSlots; ++i) {
        uint32_t free_slot = 0;
        if (g_slots[i].in_use.compare_exchange_strong(free_slot, 1)) {
            Slot* s = &g_slots[i];
            WriteScope w(s);
            s->phase.store(static_cast<uint32_t>(Phase::Idle));
            s->events = s->stacks = s->stacks_total = s->chunks_read = s->chunks_total = 0;
            memset(s->pools, 0, sizeof s->pools);
            memset(s->tasks, 0, sizeof s->tasks);
            s->output_dir[0] = '\0';
            return s;
        }
    }
    return nullptr;
}

void release(Slot* s) {
    if (s) s->in_use.store(0);
}

void start_run(Slot* s, const std::string& dir) {
    if (!s) return;
    WriteScope w(s);
    copy_text(s->output_dir, sizeof s->output_dir, dir);
    memset(s->tasks, 0, sizeof s->tasks);
}

void update(Slot* s, const State& st) {
    if (!s) return;
    {
        WriteScope w(s);
        s->events = st.events;
        s->stacks = st.stacks;
        s->stacks_total = st.stacks_total;
        s->chunks_read = st.chunks_read;
        s->chunks_total = st.chunks_total;
        int i = 0;
        for (auto& [label, v] : st.used) {
            if (i == Slot::kPools) break;
            copy_text(s->pools[i].label, sizeof s->pools[i].label, label);
            s->pools[i].used = v;
            ++i;
        }
        for (; i < Slot::kPools; ++i) s->pools[i].label[0] = '\0';
        s->phase.store(static_cast<uint32_t>(st.phase), std::memory_order_release);
    }
    settle(s);
}

void task(Slot* s, const TaskReport& t) {
    if (!s || t.plugin.empty()) return;
    {
        WriteScope w(s);
        Slot::Task* at = nullptr;
        for (auto& e : s->tasks)
            if (e.plugin[0] && text_of(e.plugin, sizeof e.plugin) == t.plugin) at = &e;
        for (auto& e : s->tasks)
            if (!at && !e.plugin[0]) at = &e;
        if (!at) return;  // more plugins report at once than the line has room for
        copy_text(at->plugin, sizeof at->plugin, t.plugin);
        copy_text(at->what, sizeof at->what, t.what);
        at->done = t.done;
        at->total = t.total;
        at->unit = t.unit;
        at->estimate = t.estimate ? 1 : 0;
    }
    settle(s);
}

void task_ended(Slot* s, const std::string& plugin) {
    if (!s) return;
    WriteScope w(s);
    for (auto& e : s->tasks)
        if (e.plugin[0] && text_of(e.plugin, sizeof e.plugin) == plugin) memset(&e, 0, sizeof e);
}

std::string Printer::line(const std::vector<View>& runs, double rate, uint64_t out_bytes, size_t width) {
    uint64_t events = 0, stacks = 0, stacks_total = 0, chunks_read = 0, chunks_total = 0;
    bool stacks_known = true;
    Phase phase = Phase::Idle;
    std::map<std::string, int64_t> used;
    // Plugins' work by what the line says, in order of first report.
    struct Shown {
        std::string text;
        uint32_t unit;
        uint64_t done = 0, total = 0;
        bool total_known = true, estimate = false;
    };
    std::vector<Shown> tasks;
    for (auto& v : runs) {
        const State& st = v.state;
        events += st.events;
        stacks += st.stacks;
        stacks_total += st.stacks_total;
        if (st.stacks && !st.stacks_total) stacks_known = false;
        chunks_read += st.chunks_read;
        chunks_total += st.chunks_total;
        phase = std::max(phase, v.phase);
        for (auto& [k, x] : st.used) used[k] += x;
        for (auto& t : v.tasks) {
            std::string text = t.what.empty() ? "writing " + t.plugin : t.what;
            uint64_t total = t.total;
            bool estimate = t.estimate;
            // A file written as the capture is read (csv, trace, db): once
            // the program has ended, its size grows with the part read.
            if (!total && t.unit == MSMS_PROGRESS_BYTES && v.phase == Phase::Draining && st.chunks_total &&
                st.chunks_read * 50 >= st.chunks_total && t.done) {
                total = static_cast<uint64_t>(static_cast<double>(t.done) * static_cast<double>(st.chunks_total) /
                                              static_cast<double>(st.chunks_read));
                estimate = true;
            }
            auto it = std::find_if(tasks.begin(), tasks.end(),
                                   [&](const Shown& x) { return x.text == text && x.unit == t.unit; });
            if (it == tasks.end()) {
                tasks.push_back(Shown{text, t.unit});
                it = tasks.end() - 1;
            }
            it->done += t.done;
            it->total += total;
            if (!total) it->total_known = false;
            it->estimate = it->estimate || estimate;
        }
    }
    std::string text = "msmemscope: " + count(static_cast<double>(events)) + " events (" + count(rate) + "/s)";
    for (auto& [label, v] : used) text += ", " + label + " " + bytes(static_cast<double>(v));
    std::vector<std::string> parts;
    switch (phase) {
    case Phase::Running: parts.push_back("program running"); break;
    case Phase::Draining: {
        std::string p = "program ended, reading its capture";
        if (chunks_total) p += " " + std::to_string(std::min<uint64_t>(100, chunks_read * 100 / chunks_total)) + "%";
        parts.push_back(p);
        break;
    }
    case Phase::Writing:
        parts.push_back(tasks.empty() && out_bytes ? "writing outputs " + bytes(static_cast<double>(out_bytes))
                                                   : "writing outputs");
        break;
    default: break;
    }
    if ((phase == Phase::Running || phase == Phase::Draining) && (stacks || stacks_total)) {
        if (stacks_known && stacks_total)
            parts.push_back("symbolizing " + count(static_cast<double>(stacks)) + " / " +
                            count(static_cast<double>(stacks_total)) + " stacks");
        else
            parts.push_back("symbolized " + count(static_cast<double>(stacks)) + " stacks");
    }
    std::string work;
    for (auto& t : tasks) {
        auto fmt = [&](uint64_t n) {
            return t.unit == MSMS_PROGRESS_ITEMS ? count(static_cast<double>(n)) : bytes(static_cast<double>(n));
        };
        if (!work.empty()) work += ", ";
        work += t.text + " " + fmt(t.done);
        if (t.total_known && t.total) work += " / " + std::string(t.estimate ? "~" : "") + fmt(t.total);
    }
    if (!work.empty()) parts.push_back(work);
    if (runs.size() > 1) parts.push_back(std::to_string(runs.size()) + " processes");
    for (auto& p : parts) text += " | " + p;
    if (text.size() >= width) text = text.substr(0, width - 1);
    return text;
}

void Printer::start() {
    if (!g_slots || thread_.joinable()) return;
    stop_ = false;
    thread_ = std::thread([this] {
        using clock = std::chrono::steady_clock;
        auto begin = clock::now();
        auto last = begin;
        uint64_t last_events = 0;
        double rate = 0;
        bool drawn = false;
        std::vector<uint64_t> posted(kSlots, 0);
        while (!stop_.load()) {
            std::this_thread::sleep_for(g_sync ? std::chrono::microseconds(500) : std::chrono::microseconds(250000));
            if (stop_.load()) break;
            auto now = clock::now();
            bool changed = false;
            for (size_t i = 0; i < kSlots; ++i) {
                posted[i] = g_slots[i].posted.load(std::memory_order_acquire);
                if (posted[i] != g_slots[i].drawn.load(std::memory_order_relaxed)) changed = true;
            }
            if (g_sync && !changed) continue;
            std::vector<View> runs;
            uint64_t out_bytes = 0;
            for (size_t i = 0; i < kSlots; ++i) {
                Slot& s = g_slots[i];
                if (!s.in_use.load()) continue;
                View v;
                if (!read_slot(s, v)) continue;
                if (v.phase == Phase::Writing && v.tasks.empty() && !v.output_dir.empty())
                    out_bytes += folder_bytes(v.output_dir);
                runs.push_back(std::move(v));
            }
            uint64_t events = 0;
            for (auto& v : runs) events += v.state.events;
            double dt = std::chrono::duration<double>(now - last).count();
            if (!g_sync || dt > 0.25) {
                if (dt > 0) rate = 0.5 * rate + 0.5 * (static_cast<double>(events - std::min(events, last_events)) / dt);
                last_events = events;
                last = now;
            }
            // Nothing for the first second: short runs stay quiet.
            bool show = !runs.empty() && (g_sync || now - begin >= std::chrono::seconds(1));
            if (show) {
                std::string text = "\r\x1b[K" + line(runs, rate, out_bytes, terminal_width());
                ssize_t n = write(STDERR_FILENO, text.data(), text.size());
                (void)n;
                drawn = true;
            }
            for (size_t i = 0; i < kSlots; ++i) g_slots[i].drawn.store(posted[i], std::memory_order_release);
        }
        if (drawn) {
            ssize_t n = write(STDERR_FILENO, "\r\x1b[K", 4);
            (void)n;
        }
    });
}

void Printer::stop() {
    if (!thread_.joinable()) return;
    stop_ = true;
    thread_.join();
}

}  // namespace progress
}  // namespace msms
