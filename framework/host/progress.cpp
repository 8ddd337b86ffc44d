#include "progress.h"

#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

namespace fs = std::filesystem;

namespace msms {
namespace progress {
namespace {

constexpr size_t kSlots = 256;
Slot* g_slots = nullptr;

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

}  // namespace

bool init(bool on) {
    if (!on || g_slots) return g_slots != nullptr;
    void* p = mmap(nullptr, kSlots * sizeof(Slot), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return false;
    g_slots = static_cast<Slot*>(p);  // zero-filled: every slot free
    return true;
}

bool enabled() { return g_slots != nullptr; }

Slot* acquire() {
    if (!g_slots) return nullptr;
    for (size_t i = 0; i < kSlots; ++i) {
        uint32_t free_slot = 0;
        if (g_slots[i].in_use.compare_exchange_strong(free_slot, 1)) {
            Slot* s = &g_slots[i];
            s->phase.store(static_cast<uint32_t>(Phase::Idle));
            s->events.store(0);
            s->stacks.store(0);
            s->seq.fetch_add(1);
            memset(s->pools, 0, sizeof s->pools);
            s->output_dir[0] = '\0';
            s->seq.fetch_add(1);
            return s;
        }
    }
    return nullptr;
}

void release(Slot* s) {
    if (s) s->in_use.store(0);
}

void set_output_dir(Slot* s, const std::string& dir) {
    if (!s) return;
    s->seq.fetch_add(1, std::memory_order_acq_rel);
    snprintf(s->output_dir, sizeof s->output_dir, "%s", dir.c_str());
    s->seq.fetch_add(1, std::memory_order_acq_rel);
}

void update(Slot* s, Phase phase, uint64_t events, uint64_t stacks, const std::map<std::string, int64_t>& used) {
    if (!s) return;
    s->events.store(events, std::memory_order_relaxed);
    s->stacks.store(stacks, std::memory_order_relaxed);
    s->seq.fetch_add(1, std::memory_order_acq_rel);
    int i = 0;
    for (auto& [label, v] : used) {
        if (i == Slot::kPools) break;
        snprintf(s->pools[i].label, sizeof s->pools[i].label, "%s", label.c_str());
        s->pools[i].used = v;
        ++i;
    }
    for (; i < Slot::kPools; ++i) s->pools[i].label[0] = '\0';
    s->seq.fetch_add(1, std::memory_order_acq_rel);
    s->phase.store(static_cast<uint32_t>(phase), std::memory_order_release);
}

std::string Printer::line(uint64_t events, double rate, const std::map<std::string, int64_t>& used,
                          const std::string& phase, size_t width) {
    std::string text = "msmemscope: " + count(static_cast<double>(events)) + " events (" + count(rate) + "/s)";
    for (auto& [label, v] : used) text += ", " + label + " " + bytes(static_cast<double>(v));
    if (!phase.empty()) text += " | " + phase;
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
        while (!stop_.load()) {
            std::this_thread::sleep_for(std::chrono::milliseconds(250));
            if (stop_.load()) break;
            auto now = clock::now();
            uint64_t events = 0, stacks = 0, out_bytes = 0;
            uint32_t phase = 0;
            size_t runs = 0;
            std::map<std::string, int64_t> used;
            for (size_t i = 0; i < kSlots; ++i) {
                Slot& s = g_slots[i];
                if (!s.in_use.load()) continue;
                ++runs;
                uint32_t ph = s.phase.load(std::memory_order_acquire);
                events += s.events.load(std::memory_order_relaxed);
                stacks += s.stacks.load(std::memory_order_relaxed);
                phase = std::max(phase, ph);
                for (int attempt = 0; attempt < 3; ++attempt) {
                    uint32_t before = s.seq.load(std::memory_order_acquire);
                    if (before & 1) continue;
                    std::map<std::string, int64_t> mine;
                    for (auto& p : s.pools)
                        if (p.label[0]) mine[std::string(p.label, strnlen(p.label, sizeof p.label))] = p.used;
                    std::string dir(s.output_dir, strnlen(s.output_dir, sizeof s.output_dir));
                    if (s.seq.load(std::memory_order_acquire) != before) continue;
                    for (auto& [k, v] : mine) used[k] += v;
                    if (ph == static_cast<uint32_t>(Phase::Writing) && !dir.empty()) out_bytes += folder_bytes(dir);
                    break;
                }
            }
            double dt = std::chrono::duration<double>(now - last).count();
            if (dt > 0) rate = 0.5 * rate + 0.5 * (static_cast<double>(events - std::min(events, last_events)) / dt);
            last_events = events;
            last = now;
            // Nothing for the first second: short runs stay quiet.
            if (now - begin < std::chrono::seconds(1) || runs == 0) continue;
            std::string what;
            switch (static_cast<Phase>(phase)) {
            case Phase::Running: what = "program running"; break;
            case Phase::Draining: what = "program ended, reading its capture"; break;
            case Phase::Writing: what = "writing outputs " + bytes(static_cast<double>(out_bytes)); break;
            default: break;
            }
            if (stacks) what += std::string(what.empty() ? "" : ", ") + "symbolized " + count(static_cast<double>(stacks)) + " stacks";
            if (runs > 1) what += std::string(what.empty() ? "" : ", ") + std::to_string(runs) + " processes";
            std::string text = "\r\x1b[K" + line(events, rate, used, what, terminal_width());
            ssize_t n = write(STDERR_FILENO, text.data(), text.size());
            (void)n;
            drawn = true;
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
