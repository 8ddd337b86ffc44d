#include "live/live_state.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include <msmemscope/plugin.hpp>

#include "plugin_failure_json.h"
#include "util/json.h"
#include "util/stack_site.h"
#include "util/text.h"

namespace msms {
namespace live {

namespace {
constexpr size_t kMaxFile = 16u << 20;
constexpr char kRunningMark[] = "  [running]";
constexpr char kInterruptedMark[] = "  [not finished: msmemscope was interrupted]";

using msmemscope::view;


std::string pool_label(const msms_event& ev) {
    const char* t = msms_event_type_name(ev.type);
    return msmemscope::device_label(ev) + "/" + (t ? t : "UNKNOWN");
}

bool is_true_attr(const msms_event& ev, std::string_view key) { return msmemscope::attr(ev, key) == "true"; }

uint64_t addr_key(const msms_event& ev) {
    return ev.ptr * 1000003u ^ (static_cast<uint64_t>(ev.device_kind) << 56) ^
           (static_cast<uint64_t>(static_cast<uint16_t>(ev.device_id)) << 40);
}

std::string signed_bytes(int64_t v) { return (v > 0 ? "+" : "") + std::to_string(v) + " B"; }

std::string cut(const std::string& s, size_t n) { return s.size() <= n ? s : s.substr(0, n - 3) + "..."; }

}  // namespace


LiveState::LiveState(std::string session, uint32_t pid, std::string command, std::function<Totals()> totals)
    : session_(std::move(session)), command_(std::move(command)), pid_(pid), totals_(std::move(totals)) {}

int64_t LiveState::all_live() const {
    int64_t sum = 0;
    if (!totals_) return 0;
    for (auto& [pool, f] : totals_())
        if (pool.find(" mapped") == std::string::npos) sum += f.used;
    return sum;
}

void LiveState::step_ended(uint64_t step) {
    int64_t now = all_live();
    StepEnd e;
    e.step = step;
    e.live = now;
    e.growth = have_prev_ ? now - prev_live_ : 0;
    have_prev_ = true;
    prev_live_ = now;
    steps_.push_back(e);
    while (steps_.size() > kSteps) steps_.pop_front();
}

uint32_t LiveState::site_of(const msms_event& ev) {
    const std::string* op_name = nullptr;
    auto oit = open_ops_.find((static_cast<uint64_t>(ev.pid) << 32) | ev.tid);
    if (oit != open_ops_.end() && !oit->second.empty()) op_name = &oit->second.front();
    uint64_t op_id = 0;
    if (op_name) {
        auto o = op_ids_.find(*op_name);
        if (o == op_ids_.end() && op_ids_.size() < 65000) o = op_ids_.emplace(*op_name, op_ids_.size() + 1).first;
        op_id = o == op_ids_.end() ? 0xffff : o->second;
    }
    bool cacheable = (ev.c_stack_id || !ev.c_stack.size) && (ev.py_stack_id || !ev.py_stack.size) &&
                     (ev.c_stack.size || ev.py_stack.size) && op_id != 0xffff;
    FastKey fk{ev.c_stack_id, ev.py_stack_id,
               static_cast<uint64_t>(ev.type) | static_cast<uint64_t>(ev.device_kind) << 16 |
                   static_cast<uint64_t>(static_cast<uint16_t>(ev.device_id)) << 32 | op_id << 48};
    if (cacheable) {
        auto f = fast_.find(fk);
        if (f != fast_.end()) return f->second;
    }
    uint32_t id = site_by_text(ev, op_name ? *op_name : std::string());
    if (cacheable) fast_.emplace(fk, id);
    return id;
}

uint32_t LiveState::site_by_text(const msms_event& ev, const std::string& op) {
    std::string pool = pool_label(ev);
    std::string py = stack_first_line(view(ev.py_stack));
    std::string site;
    if (ev.c_stack.size) site = msms::caller_site(view(ev.c_stack));  // the leak report's rule
    // A frame with no name ("0x1b1e2 in .../libc10.so.1.13": a stripped
    // library's own function, PyTorch's CPU allocator) says less than the
    // Python line that made the call, which the leak rows name too.
    if (site.empty() || (!py.empty() && site.rfind("0x", 0) == 0)) site = py;
    if (site.empty())
        site = !is_true_attr(ev, "shadow") ? "(no stack) " + pool
               : is_true_attr(ev, "import") ? "(no stack) while importing Python modules"
                                            : "(no stack) allocated before collection started";
    std::string key = pool + '\x1f' + site + '\x1f' + py + '\x1f' + op;
    auto s = site_index_.find(key);
    if (s != site_index_.end()) return s->second;
    Site n;
    n.site = escape_controls(site);
    n.python = escape_controls(py);
    n.op = escape_controls(op);
    n.device = pool;
    sites_.push_back(std::move(n));
    uint32_t id = static_cast<uint32_t>(sites_.size() - 1);
    site_index_.emplace(std::move(key), id);
    return id;
}

void LiveState::on_event(const msms_event& ev) {
    ++events_;
    switch (ev.kind) {
    case MSMS_EV_SYSTEM:
        if (ev.type == MSMS_T_STEP && step_source_ != StepSource::Mstx) {
            step_source_ = StepSource::Python;
            uint64_t n = ev.aux0;
            if (n == 0) n = std::strtoull(std::string(view(ev.name)).c_str(), nullptr, 10);
            if (n == 0) n = step_ + 1;
            step_ended(n);
            step_ = n + 1;
        }
        return;
    case MSMS_EV_MSTX: {
        std::string_view name = view(ev.name);
        bool step_name = name == "step start" || name == "\"step start\"";
        if (ev.type == MSMS_T_RANGE_START && step_name && step_source_ != StepSource::Python) {
            step_source_ = StepSource::Mstx;
            step_ = ++mstx_count_;
            range_id_ = ev.aux0;
            in_range_ = true;
        } else if (ev.type == MSMS_T_RANGE_END && step_source_ == StepSource::Mstx && in_range_ && ev.aux0 == range_id_) {
            in_range_ = false;
            step_ended(step_);
        }
        return;
    }
    case MSMS_EV_OP_LAUNCH: {
        auto& st = open_ops_[(static_cast<uint64_t>(ev.pid) << 32) | ev.tid];
        std::string name(view(ev.name));
        if (ev.type == MSMS_T_ATEN_START || ev.type == MSMS_T_ATB_START) {
            if (st.size() < 64) st.push_back(name);
        } else if (ev.type == MSMS_T_ATEN_END || ev.type == MSMS_T_ATB_END) {
            for (size_t i = st.size(); i-- > 0;)
                if (st[i] == name) {
                    st.resize(i);
                    break;
                }
        }
        return;
    }
    case MSMS_EV_MALLOC: {
        if (!ev.allocation_id) return;
        if (msmemscope::attr(ev, "virtual") == "true") return;  // memory another block accounts for
        auto old = blocks_.find(ev.allocation_id);
        if (old != blocks_.end()) return;
        uint64_t at = addr_key(ev);
        if (ev.type == MSMS_T_HOST) {
            host_at_[at] = ev.allocation_id;
        } else if (msms_is_framework_pool(ev.type)) {
            // Each byte once (DESIGN §8): a framework block at the address of
            // a live host block is that block's memory (CPU tensors); the
            // host block leaves the sites, as the pipeline's HOST totals.
            auto h = host_at_.find(at);
            if (h != host_at_.end()) {
                auto hb = blocks_.find(h->second);
                if (hb != blocks_.end() && !hb->second.taken) {
                    hb->second.taken = true;
                    Site& hs = sites_[hb->second.site];
                    hs.live_bytes -= static_cast<int64_t>(hb->second.size);
                    hs.live_blocks -= hb->second.blocks;
                }
            }
        }
        uint32_t s = site_of(ev);
        uint32_t n = ev.type == MSMS_T_HOST && is_true_attr(ev, "import") ? msmemscope::attr_blocks(ev) : 1u;
        blocks_.emplace(ev.allocation_id, Block{ev.size, s, false, n});
        sites_[s].live_bytes += static_cast<int64_t>(ev.size);
        sites_[s].live_blocks += n;
        return;
    }
    case MSMS_EV_FREE: {
        auto b = blocks_.find(ev.allocation_id);
        if (!ev.allocation_id || b == blocks_.end()) return;
        if (ev.type == MSMS_T_HOST) {
            auto h = host_at_.find(addr_key(ev));
            if (h != host_at_.end() && h->second == ev.allocation_id) host_at_.erase(h);
        }
        if (!b->second.taken) {
            Site& s = sites_[b->second.site];
            s.live_bytes -= static_cast<int64_t>(b->second.size);
            s.live_blocks -= b->second.blocks;
        }
        blocks_.erase(b);
        return;
    }
    default: return;
    }
}

void LiveState::on_finding(std::string_view table, const msms_kv* cols, uint32_t n) {
    if (table != "leaks") return;
    LeakRow r;
    std::string stack, python_site, site;
    uint64_t size = 0, count = 0;
    for (uint32_t i = 0; i < n; ++i) {
        std::string_view k = view(cols[i].key), v = view(cols[i].value);
        if (k == "kind") r.kind = v;
        else if (k == "device") r.device = v;
        else if (k == "pool") r.pool = v;
        else if (k == "site") site = v;
        else if (k == "operator") r.op = v;
        else if (k == "python_site") python_site = v;
        else if (k == "stack") stack = v;
        else if (k == "size") size = std::strtoull(std::string(v).c_str(), nullptr, 10);
        else if (k == "count") count = std::strtoull(std::string(v).c_str(), nullptr, 10);
    }
    // Where, as the leak report says it: a step leak's row names the operator
    // and the program's line that called it (its stack's first frame is the
    // framework's allocator, the same for every such leak); a row of blocks
    // grouped by site names that site.
    r.where = !python_site.empty() ? python_site : !site.empty() ? site : stack_first_line(stack);
    r.where = escape_controls(r.where);
    r.op = escape_controls(r.op);
    r.kind = escape_controls(r.kind);
    r.device = escape_controls(r.device);
    r.pool = escape_controls(r.pool);
    if (count == 0) count = 1;
    ++leak_findings_;
    leak_bytes_ += size;
    leak_blocks_ += count;
    leaks_done_ = true;
    std::string key = r.kind + '\x1f' + r.device + '\x1f' + r.pool + '\x1f' + r.where + '\x1f' + r.op;
    auto g = leak_row_index_.find(key);
    if (g == leak_row_index_.end()) {
        if (leak_rows_.size() >= kLeakGroups) {
            leak_unlisted_blocks_ += count;
            leak_unlisted_bytes_ += size;
            return;
        }
        g = leak_row_index_.emplace(std::move(key), leak_rows_.size()).first;
        leak_rows_.push_back(std::move(r));
    }
    LeakRow& row = leak_rows_[g->second];
    row.size += size;
    row.count += count;
}

std::vector<const LiveState::LeakRow*> LiveState::largest_leak_rows() const {
    std::vector<const LeakRow*> rows;
    for (auto& r : leak_rows_) rows.push_back(&r);
    std::stable_sort(rows.begin(), rows.end(), [](const LeakRow* a, const LeakRow* b) { return a->size > b->size; });
    if (rows.size() > kLeakRows) rows.resize(kLeakRows);
    return rows;
}

void LiveState::on_log(const std::string& plugin, int level, const std::string& msg) {
    // The step analysis says a block outlived its step as it finds it:
    // "leaks: [device D][step N]: ptr: ... has lasted for ... Please check if there is leaks in POOL."
    if (plugin != "leaks" || level != 1 || msg.rfind("leaks: [device ", 0) != 0) return;
    if (msg.find("Please check if there is leaks") == std::string::npos) return;
    ++warnings_total_;
    warnings_.push_back(escape_controls(msg));
    while (warnings_.size() > kWarnings) warnings_.pop_front();
}

void LiveState::on_plugin_failure(const std::string& plugin, const std::string& kind, const std::string& what) {
    // (bounded: one per plugin instance of the run)
    failures_.push_back({escape_controls(plugin), escape_controls(kind), escape_controls(what)});
}

std::string failure_banner(const std::string& plugin, const std::string& kind, const std::string& what) {
    return "Plugin '" + plugin + "' (" + kind + ") failed: " + what + ". This page is without what it would have added.";
}

std::vector<SiteRow> LiveState::top_sites(size_t n) const {
    std::vector<uint32_t> idx;
    for (uint32_t i = 0; i < sites_.size(); ++i)
        if (sites_[i].live_blocks) idx.push_back(i);
    auto by = [&](uint32_t a, uint32_t b) {
        if (sites_[a].live_bytes != sites_[b].live_bytes) return sites_[a].live_bytes > sites_[b].live_bytes;
        return a < b;
    };
    if (idx.size() > n) {
        std::partial_sort(idx.begin(), idx.begin() + static_cast<long>(n), idx.end(), by);
        idx.resize(n);
    } else {
        std::sort(idx.begin(), idx.end(), by);
    }
    std::vector<SiteRow> out;
    for (uint32_t i : idx) {
        const Site& s = sites_[i];
        out.push_back(SiteRow{s.site, s.python, s.op, s.device, s.live_bytes, s.live_blocks});
    }
    return out;
}

std::string LiveState::snapshot(uint64_t wall_ns, bool finished) const {
    Json j = Json::object();
    j.set("version", Json(1));
    j.set("session", Json(session_));
    j.set("pid", Json(static_cast<int64_t>(pid_)));
    j.set("command", Json(escape_controls(command_)));
    j.set("time_ns", Json(wall_ns));
    j.set("finished", Json(finished));
    j.set("events", Json(events_));
    j.set("step", Json(step_));
    // how the program ended (summary.json's "ended"."text"); null while it runs
    j.set("ended", finished && !ended_.empty() ? Json(ended_) : Json());
    Json failures = Json::array();
    for (auto& f : failures_) {
        Json e = plugin_failure_json(f.plugin, f.kind, f.what);
        // the HTML report's banner, word for word, for the page to show as is
        e.set("text", Json(failure_banner(f.plugin, f.kind, f.what)));
        failures.push(std::move(e));
    }
    j.set("plugin_failures", std::move(failures));
    Json pools = Json::array();
    Totals t = totals_ ? totals_() : Totals{};
    for (auto& [name, f] : t) {
        Json p = Json::object();
        p.set("pool", Json(name));
        p.set("live_bytes", Json(f.used));
        p.set("peak_bytes", Json(f.peak));
        pools.push(std::move(p));
    }
    j.set("pools", std::move(pools));
    Json steps = Json::array();
    for (auto& s : steps_) {
        Json e = Json::object();
        e.set("step", Json(s.step));
        e.set("live_bytes", Json(s.live));
        e.set("growth_bytes", Json(s.growth));
        steps.push(std::move(e));
    }
    j.set("steps", std::move(steps));
    Json sites = Json::array();
    for (auto& s : top_sites()) {
        Json e = Json::object();
        e.set("site", Json(s.site));
        e.set("operator", Json(s.op));
        e.set("python", Json(s.python));
        e.set("pool", Json(s.device));
        e.set("live_bytes", Json(s.live_bytes));
        e.set("live_blocks", Json(s.live_blocks));
        sites.push(std::move(e));
    }
    j.set("top_sites", std::move(sites));
    Json suspects = Json::object();
    Json lines = Json::array();
    for (auto& w : warnings_) lines.push(Json(w));
    suspects.set("step_warnings", std::move(lines));
    suspects.set("step_warnings_total", Json(warnings_total_));
    Json leaks = Json::object();
    leaks.set("runs", Json(leaks_off_.empty()));
    if (!leaks_off_.empty()) leaks.set("not_running", Json(leaks_off_));
    leaks.set("reported", Json(leaks_done_));
    leaks.set("findings", Json(leak_findings_));
    leaks.set("blocks", Json(leak_blocks_));
    leaks.set("bytes", Json(leak_bytes_));
    Json rows = Json::array();
    auto largest = largest_leak_rows();
    uint64_t shown_blocks = 0, shown_bytes = 0;
    for (const LeakRow* r : largest) {
        Json e = Json::object();
        e.set("kind", Json(r->kind));
        e.set("device", Json(r->device));
        e.set("pool", Json(r->pool));
        e.set("site", Json(r->where));
        e.set("operator", Json(r->op));
        e.set("bytes", Json(r->size));
        e.set("blocks", Json(r->count));
        rows.push(std::move(e));
        shown_blocks += r->count;
        shown_bytes += r->size;
    }
    leaks.set("rows", std::move(rows));
    // what the rows leave out (more sites than are shown)
    Json rest = Json::object();
    rest.set("blocks", Json(leak_blocks_ - shown_blocks));
    rest.set("bytes", Json(leak_bytes_ - shown_bytes));
    leaks.set("not_in_rows", std::move(rest));
    suspects.set("leak_analysis", std::move(leaks));
    j.set("leak_suspects", std::move(suspects));
    return j.dump(2) + "\n";
}

std::string LiveState::screen(uint64_t wall_ns, bool finished) const {
    std::string o;
    char buf[512];
    time_t secs = static_cast<time_t>(wall_ns / 1000000000ull);
    struct tm tmv;
    localtime_r(&secs, &tmv);
    char when[32];
    std::strftime(when, sizeof(when), "%H:%M:%S", &tmv);
    o += "msmemscope live: pid " + std::to_string(pid_) + " (" + cut(escape_controls(command_), 60) + ")  " + when +
         "  step " + std::to_string(step_) + "  events " + std::to_string(events_) +
         (!finished ? std::string(kRunningMark) : ended_.empty() ? "  [finished]" : "  [finished: " + ended_ + "]") +
         "\n\n";
    // Above the figures: they include what a failed plugin no longer adds.
    for (auto& f : failures_) o += failure_banner(f.plugin, f.kind, f.what) + "\n";
    if (!failures_.empty()) o += "\n";
    o += "MEMORY (pool: live, peak)\n";
    Totals t = totals_ ? totals_() : Totals{};
    if (t.empty()) o += "  (no memory recorded yet)\n";
    for (auto& [name, f] : t) {
        std::snprintf(buf, sizeof(buf), "  %-22s live %10s (%lld B)  peak %10s (%lld B)\n", name.c_str(),
                      human_bytes(f.used).c_str(), static_cast<long long>(f.used), human_bytes(f.peak).c_str(),
                      static_cast<long long>(f.peak));
        o += buf;
    }
    o += "\nGROWTH PER STEP (last " + std::to_string(kSteps) + " step ends: live bytes, change)\n";
    if (steps_.empty()) o += "  (no step has ended)\n";
    for (auto& s : steps_) {
        std::snprintf(buf, sizeof(buf), "  step %-6llu live %lld B  %s\n", static_cast<unsigned long long>(s.step),
                      static_cast<long long>(s.live), signed_bytes(s.growth).c_str());
        o += buf;
    }
    o += "\nTOP ALLOCATION SITES BY LIVE BYTES\n";
    auto top = top_sites();
    if (top.empty()) o += "  (no live block)\n";
    for (auto& s : top) {
        std::snprintf(buf, sizeof(buf), "  %12lld B %6llu blocks  %-12s %s", static_cast<long long>(s.live_bytes),
                      static_cast<unsigned long long>(s.live_blocks), s.device.c_str(), cut(s.site, 70).c_str());
        o += buf;
        if (!s.op.empty()) o += "  op " + cut(s.op, 40);
        if (!s.python.empty() && s.python != s.site) o += "  py " + cut(s.python, 60);
        o += "\n";
    }
    o += "\nLEAK SUSPECTS\n";
    if (!leaks_off_.empty())
        o += "  (the leak analysis does not run: " + leaks_off_ + "; nothing here is judged)\n";
    else if (warnings_.empty() && !leaks_done_)
        o += finished ? "  (none found by the step analysis)\n" : "  (none found by the step analysis so far)\n";
    for (auto& w : warnings_) o += "  " + cut(w, 200) + "\n";
    if (warnings_total_ > warnings_.size())
        o += "  ... " + std::to_string(warnings_total_ - warnings_.size()) + " earlier warning(s)\n";
    if (leaks_done_) {
        o += "  leak analysis at the end: " + std::to_string(leak_blocks_) + " block(s), " +
             std::to_string(leak_bytes_) + " B in " + std::to_string(leak_findings_) + " finding(s)\n";
        uint64_t shown_blocks = 0, shown_bytes = 0;
        for (const LeakRow* r : largest_leak_rows()) {
            std::string where = r->op.empty() ? r->where : r->op + ", called from " + r->where;
            std::snprintf(buf, sizeof(buf), "    %-6s %-4s %-10s %10llu B %6llu blocks  %s\n", r->device.c_str(),
                          r->pool.c_str(), r->kind.c_str(), static_cast<unsigned long long>(r->size),
                          static_cast<unsigned long long>(r->count), cut(where, 110).c_str());
            o += buf;
            shown_blocks += r->count;
            shown_bytes += r->size;
        }
        if (shown_blocks < leak_blocks_ || shown_bytes < leak_bytes_)
            o += "    ... and " + std::to_string(leak_blocks_ - shown_blocks) + " more block(s), " +
                 std::to_string(leak_bytes_ - shown_bytes) + " B, at further sites\n";
    }
    return o;
}

bool read_file_in(int dir_fd, const char* name, std::string& out) {
    int fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return false;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<size_t>(st.st_size) > kMaxFile) {
        close(fd);
        return false;
    }
    out.clear();
    char buf[65536];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n <= 0) break;
        out.append(buf, static_cast<size_t>(n));
        if (out.size() > kMaxFile) break;
    }
    close(fd);
    return true;
}

void mark_interrupted(int dir_fd) {
    // Written by snapshot(): "finished" is a member of the top object, on a
    // line of its own; screen(): the mark ends the first line.
    std::string json, text;
    const std::string running = "\n  \"finished\": false,\n";
    if (read_file_in(dir_fd, "live.json", json)) {
        size_t at = json.find(running);
        if (at != std::string::npos && json.find("\"interrupted\"") == std::string::npos) {
            json.insert(at + running.size(), "  \"interrupted\": true,\n");
            write_atomic(dir_fd, "live.json", json);
        }
    }
    if (read_file_in(dir_fd, "live.txt", text)) {
        size_t eol = text.find('\n');
        size_t mark = std::strlen(kRunningMark);
        if (eol != std::string::npos && eol >= mark && text.compare(eol - mark, mark, kRunningMark) == 0) {
            text.replace(eol - mark, mark, kInterruptedMark);
            write_atomic(dir_fd, "live.txt", text);
        }
    }
}

std::string write_atomic(int dir_fd, const char* name, const std::string& text) {
    std::string tmp = std::string(".") + name + ".tmp";
    unlinkat(dir_fd, tmp.c_str(), 0);  // a temporary left by a worker that died (ours: same folder)
    int fd = openat(dir_fd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return tmp + ": " + std::strerror(errno);
    size_t done = 0;
    while (done < text.size()) {
        ssize_t w = write(fd, text.data() + done, text.size() - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            std::string why = tmp + ": " + std::strerror(errno);
            close(fd);
            unlinkat(dir_fd, tmp.c_str(), 0);
            return why;
        }
        done += static_cast<size_t>(w);
    }
    if (close(fd) != 0) {
        std::string why = tmp + ": " + std::strerror(errno);
        unlinkat(dir_fd, tmp.c_str(), 0);
        return why;
    }
    if (renameat(dir_fd, tmp.c_str(), dir_fd, name) != 0) {
        std::string why = std::string(name) + ": " + std::strerror(errno);
        unlinkat(dir_fd, tmp.c_str(), 0);
        return why;
    }
    return "";
}

}  // namespace live
}  // namespace msms
