// msmemscope --compare --input=<base>,<compare> [--level=op|kernel] [--output=DIR]
// (COMPAT §5, §6): per device, the sequences of op ends (ATEN_END/ATB_END,
// op level) or kernel launches (kernel level) of both runs are aligned with a
// Myers diff on their names. Output: <output>/compare/memory_compare_{ts}.csv
// with upstream's two header lines; a side without the op is N/A. An
// operator is aligned by its name and the name of the operator it ran in,
// so that the inner ops of an op that only one run has stay with it.
//
// The memory of an entry (the rule, docs: README "Compare"):
//  - an operator: the bytes of the framework-pool allocations (PTA,
//    PTA_WORKSPACE, ATB, MINDSPORE; on a device whose rows have no
//    framework pool at all, the host pools HOST/HOST_PINNED, so that CPU
//    runs compare too) made on its thread between its start and its end,
//    nested operators' included: what running it cost;
//  - a kernel launch (instantaneous): the size of the first such allocation
//    after it, as upstream;
//  - --level given explicitly (--level=op as a migrating user types it):
//    upstream's rule for operators too (the Attr size of the first row,
//    MALLOC or FREE, of the framework pool after the op's end, as written:
//    negative for a FREE in upstream's 2025 files; csrc/analysis/
//    memory_compare.cpp GetMemoryUsage).
// A device whose runs have no operator or kernel rows is left out when
// another device has some (upstream compares device numbers only; its host
// rows, Device Id host or cpu, never). When no device has any (a C program),
// the runs are compared by allocation site instead: per site (the first frame of the C
// stack outside the allocator, else of the Python stack, else the pool), the
// bytes allocated there, one row per site (Event MALLOC, Name the site); the
// console says so. Each byte once: a framework block carved at the address
// of a live host heap block (a PyTorch CPU tensor's storage is a malloc and
// a PTA block) counts under the framework block's site only, as decompose
// and the html count it; and msmemscope's own memory in the process (its
// extension modules, its interpreter-start hook: util/own_memory.h, as the
// leak report's "msmemscope's own modules") is not the program's, so no
// site of it is listed.
#include "compare.h"

#include "util/output_dir.h"
#include "util/own_memory.h"
#include "util/text.h"

#include <errno.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <set>
#include <unordered_map>

#include "offline/dump_reader.h"
#include "offline/memory_budget.h"
#include "process_run.h"
#include "util/csv.h"
#include "warning_out.h"

namespace fs = std::filesystem;

namespace msms {
namespace {

// Names and alignment keys are interned (one copy each, shared by both
// runs), so that an entry costs a few bytes and keys compare as numbers.
class Names {
public:
    uint32_t id(const std::string& s) {
        auto [it, added] = ids_.emplace(s, static_cast<uint32_t>(text_.size()));
        if (added) text_.push_back(&it->first);
        return it->second;
    }
    const std::string& text(uint32_t id) const { return *text_[id]; }

private:
    std::unordered_map<std::string, uint32_t> ids_;
    std::vector<const std::string*> text_;
};

// An entry's bytes under each rule the run may turn out to need (which one
// is known only at the end of the device's rows): upstream's rule, by the
// framework pool met first (0 PTA, 1 MINDSPORE, 2 host pools); ours, by
// whether the device has framework-pool allocations (0 yes, 1 no).
struct Entry {
    uint32_t name = 0, key = 0;
    uint16_t kind = 0;
    int64_t bytes[3] = {0, 0, 0};
};

struct DeviceSeq {
    size_t rows = 0;
    std::vector<Entry> entries;
    // the rule in force (set at the end of the rows)
    bool framework = false;  // ours: some MALLOC of a framework pool
    uint16_t fw = 0;         // upstream: the framework pool met first
    int variant = 0;
    // entries still waiting for the first counted row after them, per rule
    std::vector<uint32_t> pending[3];
    // per thread: the operators running and what they allocated so far
    struct Open {
        uint32_t name;
        int64_t bytes[2];
    };
    std::unordered_map<uint64_t, std::vector<Open>> open;
    // bytes and blocks per allocation site (kept while no entry was found anywhere)
    struct SiteTotal {
        int64_t bytes = 0;
        int64_t blocks = 0;
    };
    std::map<std::string, SiteTotal> sites;
    // the live host heap blocks (process, address) and their site, until a
    // framework block carved at the address takes their bytes
    struct HostBlock {
        SiteTotal* site;
        int64_t size;
    };
    std::map<std::pair<uint32_t, uint64_t>, HostBlock> host_live;
    int64_t bytes(const Entry& e) const { return e.bytes[variant]; }
};

// C programs (no operator, no kernel): the bytes allocated per site.
std::string site_of(const Record& r) {
    auto first_outside = [](std::string_view stack, bool c) -> std::string {
        size_t start = 0;
        std::string first;
        while (start < stack.size()) {
            size_t nl = stack.find('\n', start);
            std::string line(stack.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
            while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.pop_back();
            size_t lead = line.find_first_not_of(' ');
            line = lead == std::string::npos ? "" : line.substr(lead);
            if (first.empty()) first = line;
            bool alloc = c && (line.find("libmsms_") != std::string::npos ||
                               line.find("libmsmemscope_agent") != std::string::npos ||
                               line.rfind("malloc", 0) == 0 || line.rfind("calloc", 0) == 0 ||
                               line.rfind("realloc", 0) == 0 || line.rfind("posix_memalign", 0) == 0 ||
                               line.rfind("aligned_alloc", 0) == 0 || line.rfind("memalign", 0) == 0 ||
                               line.rfind("__strdup", 0) == 0 || line.rfind("strdup", 0) == 0 ||
                               line.rfind("__strndup", 0) == 0 || line.rfind("operator new", 0) == 0 ||
                               line.rfind("_Znwm", 0) == 0 || line.rfind("_Znam", 0) == 0);
            if (!line.empty() && !alloc) return line;
            if (nl == std::string::npos) break;
            start = nl + 1;
        }
        return first;
    };
    if (!r.c_text().empty()) return first_outside(r.c_text(), true);
    if (!r.py_text().empty()) return first_outside(r.py_text(), false);
    const char* t = msms_event_type_name(r.ev.type);
    return std::string("(no stack) ") + (t ? t : "N/A");
}

// msmemscope's own memory (util/own_memory.h): a frame of its modules
// anywhere in the row's stacks, or its interpreter-start hook's line as the
// innermost Python frame.
bool own_memory(const Record& r) {
    if (!may_be_own(r.c_text()) && !may_be_own(r.py_text())) return false;
    for (std::string_view stack : {std::string_view(r.c_text()), std::string_view(r.py_text())}) {
        size_t start = 0;
        while (start < stack.size()) {
            size_t nl = stack.find('\n', start);
            std::string_view line = stack.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
            size_t lead = line.find_first_not_of(' ');
            if (lead != std::string_view::npos && own_frame(line.substr(lead))) return true;
            if (nl == std::string_view::npos) break;
            start = nl + 1;
        }
    }
    std::string_view py = r.py_text();
    size_t lead = py.find_first_not_of(' ');
    return lead != std::string_view::npos && own_site(py.substr(lead, py.find('\n', lead) - lead));
}

// levels: bit 0 op (ATEN_END/ATB_END), bit 1 kernel (KERNEL_LAUNCH); --level=op,kernel: both.
bool wanted(const msms_event& ev, unsigned levels) {
    if ((levels & 1u) && ev.kind == MSMS_EV_OP_LAUNCH && (ev.type == MSMS_T_ATEN_END || ev.type == MSMS_T_ATB_END))
        return true;
    return (levels & 2u) && ev.kind == MSMS_EV_KERNEL_LAUNCH && ev.type == MSMS_T_KERNEL_LAUNCH;
}

bool counted_pool(const msms_event& ev, bool framework) {
    if (ev.kind != MSMS_EV_MALLOC) return false;
    return framework ? msms_is_framework_pool(ev.type) != 0 : (ev.type == MSMS_T_HOST || ev.type == MSMS_T_HOST_PINNED);
}

bool is_op_start(const msms_event& ev) {
    return ev.kind == MSMS_EV_OP_LAUNCH && (ev.type == MSMS_T_ATEN_START || ev.type == MSMS_T_ATB_START);
}

// One side: its rows in time order, one at a time, each device's entries
// built as they come. upstream: each operator is credited with the first
// allocation after its end (upstream's rule), else with what it allocated
// between start and end.
class SideBuilder {
public:
    SideBuilder(std::map<std::string, DeviceSeq>& out, Names& names, unsigned levels, bool upstream, bool& any_entry)
        : out_(out), names_(names), levels_(levels), upstream_(upstream), any_entry_(any_entry) {}

    void add(const DumpRow& row) {
        const Record& r = row.rec;
        const msms_event& ev = r.ev;
        DeviceSeq& s = out_[row.device == "host" ? std::string("cpu") : row.device];
        ++s.rows;
        if (ev.kind == MSMS_EV_MALLOC && msms_is_framework_pool(ev.type)) s.framework = true;
        if (!s.fw && (ev.kind == MSMS_EV_MALLOC || ev.kind == MSMS_EV_FREE) &&
            (ev.type == MSMS_T_PTA || ev.type == MSMS_T_MINDSPORE))
            s.fw = ev.type;
        // the first counted row after the pending entries: theirs
        if (upstream_) {
            if (ev.kind == MSMS_EV_MALLOC || ev.kind == MSMS_EV_FREE) {
                int v = ev.type == MSMS_T_PTA                                        ? 0
                        : ev.type == MSMS_T_MINDSPORE                                ? 1
                        : (ev.type == MSMS_T_HOST || ev.type == MSMS_T_HOST_PINNED) ? 2
                                                                                     : -1;
                if (v >= 0) resolve(s, v, row.attr_size);
            }
        } else {
            if (counted_pool(ev, true)) resolve(s, 0, static_cast<int64_t>(ev.size));
            if (counted_pool(ev, false)) resolve(s, 1, static_cast<int64_t>(ev.size));
        }
        if (!any_entry_) add_site(s, r);
        uint64_t thread = (static_cast<uint64_t>(ev.pid) << 32) | ev.tid;
        if (!upstream_ && is_op_start(ev)) {
            s.open[thread].push_back(DeviceSeq::Open{names_.id(r.name), {0, 0}});
            return;
        }
        if (!upstream_ && (counted_pool(ev, true) || counted_pool(ev, false))) {
            auto it = s.open.find(thread);
            if (it != s.open.end())
                for (auto& o : it->second) {
                    if (counted_pool(ev, true)) o.bytes[0] += static_cast<int64_t>(ev.size);
                    if (counted_pool(ev, false)) o.bytes[1] += static_cast<int64_t>(ev.size);
                }
            return;
        }
        if (!wanted(ev, levels_)) return;
        Entry e;
        e.kind = ev.kind;
        e.name = names_.id(r.name);
        e.key = e.name;
        uint32_t index = static_cast<uint32_t>(s.entries.size());
        if (!upstream_ && ev.kind == MSMS_EV_OP_LAUNCH) {
            auto it = s.open.find(thread);
            if (it != s.open.end()) {
                auto& st = it->second;
                for (size_t k = st.size(); k-- > 0;)
                    if (st[k].name == e.name) {  // its start (an unmatched inner start is dropped with it)
                        e.bytes[0] = st[k].bytes[0];
                        e.bytes[1] = st[k].bytes[1];
                        if (k > 0) e.key = names_.id(names_.text(st[k - 1].name) + " > " + r.name);
                        st.resize(k);
                        break;
                    }
            }
        } else {
            for (int v = 0; v < (upstream_ ? 3 : 2); ++v) s.pending[v].push_back(index);
        }
        s.entries.push_back(e);
        if (!any_entry_) {
            any_entry_ = true;  // no site table is needed any more, anywhere
            for (auto& [dev, seq] : out_) {
                std::map<std::string, DeviceSeq::SiteTotal>().swap(seq.sites);
                decltype(seq.host_live)().swap(seq.host_live);
            }
        }
    }

    // The rule each device's rows call for, once they are all in.
    void finish() {
        for (auto& [dev, s] : out_) {
            s.variant = upstream_ ? (s.fw == MSMS_T_PTA ? 0 : s.fw == MSMS_T_MINDSPORE ? 1 : 2) : (s.framework ? 0 : 1);
            for (auto& p : s.pending) std::vector<uint32_t>().swap(p);
            s.open.clear();
            s.host_live.clear();
            // a site whose every block a framework block took is no site of its own
            for (auto it = s.sites.begin(); it != s.sites.end();)
                it = it->second.blocks > 0 ? std::next(it) : s.sites.erase(it);
        }
    }

private:
    // By allocation site: what a MALLOC row allocated, each byte once, the
    // profiler's own memory left out.
    static void add_site(DeviceSeq& s, const Record& r) {
        const msms_event& ev = r.ev;
        std::pair<uint32_t, uint64_t> at{ev.pid, ev.ptr};
        if (ev.kind == MSMS_EV_FREE) {
            if (ev.type == MSMS_T_HOST) s.host_live.erase(at);
            return;
        }
        if (ev.kind != MSMS_EV_MALLOC || own_memory(r)) return;
        if (msms_is_framework_pool(ev.type)) {
            auto h = s.host_live.find(at);
            if (h != s.host_live.end()) {  // the host block under it: its bytes are this block's
                h->second.site->bytes -= h->second.size;
                --h->second.site->blocks;
                s.host_live.erase(h);
            }
        }
        DeviceSeq::SiteTotal& t = s.sites[site_of(r)];
        t.bytes += static_cast<int64_t>(ev.size);
        ++t.blocks;
        if (ev.type == MSMS_T_HOST) s.host_live[at] = DeviceSeq::HostBlock{&t, static_cast<int64_t>(ev.size)};
    }

    static void resolve(DeviceSeq& s, int v, int64_t bytes) {
        for (uint32_t i : s.pending[v]) s.entries[i].bytes[v] = bytes;
        s.pending[v].clear();
    }
    std::map<std::string, DeviceSeq>& out_;
    Names& names_;
    unsigned levels_;
    bool upstream_;
    bool& any_entry_;
};

// One side's files, streamed in time order. oom: the memory budget was the cause.
// The process folders (msmemscope_<pid>_<time>_<device>[_execN]) that the
// dump files found under the folder `input` lie in, in order.
std::vector<std::string> process_folders(const std::string& input, const std::vector<std::string>& files) {
    std::vector<std::string> out;
    for (auto& f : files) {
        fs::path rel = fs::path(f).lexically_relative(input);
        std::string folder;
        for (auto& part : rel.parent_path())
            if (part.string().rfind("msmemscope_", 0) == 0) folder = part.string();  // the innermost
        if (!folder.empty() && std::find(out.begin(), out.end(), folder) == out.end()) out.push_back(folder);
    }
    return out;
}

bool load_side(const std::string& input, std::map<std::string, DeviceSeq>& out, Names& names, const Config& cfg,
               bool& any_entry, std::string& err, bool& oom) {
    auto files = dump_files(input, err);
    if (files.empty()) return false;
    // A run's folder holds a process folder per process (a launcher's
    // children, DataLoader workers, ranks): their operators, merged into one
    // sequence by time, would be compared as one program's.
    if (auto folders = process_folders(input, files); folders.size() > 1) {
        err = escape_controls(input) + ": holds the dumps of " + std::to_string(folders.size()) + " processes (" +
              escape_controls(folders[0]) + ", " + escape_controls(folders[1]) +
              (folders.size() > 2 ? ", ..." : "") +
              "): --compare compares one process with one; name one process folder (or dump file) on each side";
        return false;
    }
    size_t budget = offline_budget(cfg.offline_memory_mib);
    MemoryGuard guard(budget);
    DumpStream stream(files, sort_memory(budget));
    if (!stream.open(err)) return false;
    SideBuilder builder(out, names, cfg.levels, cfg.level_given, any_entry);
    DumpRow row;
    int rc;
    size_t n = 0;
    while ((rc = stream.next(row, err)) > 0) {
        if (row.rec.ev.device_kind != MSMS_DEV_NA) builder.add(row);
        if (!guard.check(++n, err)) {
            err = input + ": " + err;
            oom = true;
            return false;
        }
    }
    if (rc < 0) return false;
    builder.finish();
    return true;
}

// One aligned pair: indexes into base / compare, -1 for a missing side.
using Pair = std::pair<long, long>;

// Myers' O(ND) diff with its trace; gives up (returns false) beyond max_d edits.
bool myers(const std::vector<Entry>& a, const std::vector<Entry>& b, size_t a0, size_t a1, size_t b0, size_t b1,
           long max_d, std::vector<Pair>& out) {
    long n = static_cast<long>(a1 - a0), m = static_cast<long>(b1 - b0);
    long offset = max_d + 1;
    std::vector<long> v(2 * offset + 1, 0);
    std::vector<std::vector<long>> trace;
    long found = -1;
    for (long d = 0; d <= max_d && d <= n + m; ++d) {
        trace.push_back(v);
        for (long k = -d; k <= d; k += 2) {
            long x;
            if (k == -d || (k != d && v[offset + k - 1] < v[offset + k + 1])) x = v[offset + k + 1];
            else x = v[offset + k - 1] + 1;
            long y = x - k;
            while (x < n && y < m && a[a0 + x].key == b[b0 + y].key) ++x, ++y;
            v[offset + k] = x;
            if (x >= n && y >= m) {
                found = d;
                break;
            }
        }
        if (found >= 0) break;
    }
    if (found < 0) return false;
    std::vector<Pair> rev;
    long x = n, y = m;
    for (long d = found; d > 0; --d) {
        const std::vector<long>& pv = trace[d];
        long k = x - y;
        long pk = (k == -d || (k != d && pv[offset + k - 1] < pv[offset + k + 1])) ? k + 1 : k - 1;
        long px = pv[offset + pk], py = px - pk;
        while (x > px && y > py) rev.emplace_back(a0 + --x, b0 + --y);
        if (x == px) rev.emplace_back(-1, b0 + --y);  // inserted in compare
        else rev.emplace_back(a0 + --x, -1);          // only in base
    }
    while (x > 0 && y > 0) rev.emplace_back(a0 + --x, b0 + --y);
    out.insert(out.end(), rev.rbegin(), rev.rend());
    return true;
}

std::vector<Pair> align(const std::vector<Entry>& a, const std::vector<Entry>& b, bool& exact) {
    std::vector<Pair> out;
    size_t pre = 0;
    while (pre < a.size() && pre < b.size() && a[pre].key == b[pre].key) out.emplace_back(pre, pre), ++pre;
    size_t suf = 0;
    while (suf < a.size() - pre && suf < b.size() - pre && a[a.size() - 1 - suf].key == b[b.size() - 1 - suf].key)
        ++suf;
    size_t a1 = a.size() - suf, b1 = b.size() - suf;
    exact = true;
    // bounded: the trace holds O(D^2) numbers
    if (!myers(a, b, pre, a1, pre, b1, 1500, out)) {
        exact = false;
        for (size_t i = pre; i < a1; ++i) out.emplace_back(static_cast<long>(i), -1);
        for (size_t j = pre; j < b1; ++j) out.emplace_back(-1, static_cast<long>(j));
    }
    for (size_t s = suf; s > 0; --s) out.emplace_back(static_cast<long>(a.size() - s), static_cast<long>(b.size() - s));
    return out;
}

}  // namespace

static int compare_run(const Config& cfg, CompareLog& log) {
    std::map<std::string, DeviceSeq> base, cmp;
    Names names;
    bool any_entries = false, oom = false;
    std::string err;
    if (!load_side(cfg.inputs[0], base, names, cfg, any_entries, err, oom) ||
        !load_side(cfg.inputs[1], cmp, names, cfg, any_entries, err, oom)) {
        if (oom) {
            log.error("--compare: " + err);
            return 70;
        }
        log.error("--input: " + err);
        return 2;
    }
    std::vector<std::string> devices;
    for (auto* side : {&base, &cmp})
        for (auto& [dev, s] : *side)
            if (std::find(devices.begin(), devices.end(), dev) == devices.end()) devices.push_back(dev);
    std::sort(devices.begin(), devices.end(), [](const std::string& x, const std::string& y) {
        bool nx = !x.empty() && isdigit(static_cast<unsigned char>(x[0])), ny = !y.empty() && isdigit(static_cast<unsigned char>(y[0]));
        if (nx != ny) return nx;
        if (nx) return std::stoll(x) < std::stoll(y);
        return x < y;
    });

    // <output>/compare made or opened without following a link (#29 item 4):
    // a `compare` link planted there is refused, never written through.
    std::string out_dir = cfg.output + "/compare", why;
    Fd out_fd = open_output_subdir(cfg.output, "compare", why);
    if (!out_fd) {
        log.error("--output: cannot create or write '" + out_dir + "': " + why);
        return 2;
    }
    std::string name = "memory_compare_" + timestamp_string(static_cast<uint64_t>(time(nullptr)) * 1000000000ull) + ".csv";
    std::string path = out_dir + "/" + name;
    std::string text = ",,,Base,Compare\nEvent,Name,Device Id,Allocated Memory(byte),Allocated Memory(byte),Diff Memory(byte)\n";
    size_t rows = 0;
    for (auto& dev : devices) {
        DeviceSeq& a = base[dev];
        DeviceSeq& b = cmp[dev];
        if (a.entries.empty() && b.entries.empty() && any_entries) {
            // Other devices have operators or kernels: this one (the host
            // rows of an NPU run, Device Id host or cpu) is left out, as
            // upstream leaves out every row that is not a device number.
            if (a.rows || b.rows)
                log.out("msmemscope: compare: device " + dev + " has no operator or kernel rows in either run; "
                        "left out (the other devices' are compared)");
            continue;
        }
        if (a.entries.empty() && b.entries.empty()) {
            // No operator or kernel on this device (a C program): by allocation site.
            const auto& sa = a.sites;
            const auto& sb = b.sites;
            std::set<std::string> sites;
            for (auto& [k, v] : sa) sites.insert(k);
            for (auto& [k, v] : sb) sites.insert(k);
            if (sites.empty()) continue;
            log.out("msmemscope: compare: device " + dev + " has no operator or kernel rows in either run; " +
                    "compared by allocation site (" + std::to_string(sites.size()) +
                    " site(s), Event MALLOC, Name = the site)");
            for (auto& site : sites) {
                auto x = sa.find(site), y = sb.find(site);
                csv_field(text, "MALLOC");
                text += ',';
                csv_field(text, site);
                text += ',';
                csv_field(text, dev);
                text += ',';
                text += x != sa.end() ? std::to_string(x->second.bytes) : "N/A";
                text += ',';
                text += y != sb.end() ? std::to_string(y->second.bytes) : "N/A";
                text += ',';
                text += std::to_string((y != sb.end() ? y->second.bytes : 0) - (x != sa.end() ? x->second.bytes : 0));
                text += '\n';
                ++rows;
            }
            continue;
        }
        if (a.entries.empty() != b.entries.empty()) {
            // One run has operator (or kernel) rows here and the other none
            // (recorded without launch in --events, or another level): every
            // entry is one side's alone, which says nothing about memory.
            bool base_has = !a.entries.empty();
            size_t n = base_has ? a.entries.size() : b.entries.size();
            std::string only = base_has ? "base" : "compare", lacking = base_has ? "compare" : "base";
            log.warning("--compare: device " + dev + ": the " + lacking + " run (" +
                        escape_controls(cfg.inputs[base_has ? 1 : 0]) + ") has no operator or kernel rows, the " +
                        only + " run has " + std::to_string(n) + ": all " + std::to_string(n) +
                        " are listed as only in the " + only +
                        " run (record both runs with launch in --events to compare them operator by operator)");
        }
        bool exact = true;
        auto pairs = align(a.entries, b.entries, exact);
        if (!exact)
            log.warning("device " + dev +
                        ": the two sequences differ too much for an exact alignment; unmatched ops are listed apart");
        for (auto& [i, j] : pairs) {
            const Entry* x = i >= 0 ? &a.entries[static_cast<size_t>(i)] : nullptr;
            const Entry* y = j >= 0 ? &b.entries[static_cast<size_t>(j)] : nullptr;
            const Entry* any = y ? y : x;
            const char* event = msms_event_kind_name(any->kind);
            const std::string& name = names.text(any->name);
            csv_field(text, event ? event : "N/A");
            text += ',';
            csv_field(text, name.empty() ? std::string("N/A") : name);  // the Name column said N/A
            text += ',';
            csv_field(text, dev);
            text += ',';
            int64_t xb = x ? a.bytes(*x) : 0, yb = y ? b.bytes(*y) : 0;
            text += x ? std::to_string(xb) : "N/A";
            text += ',';
            text += y ? std::to_string(yb) : "N/A";
            text += ',';
            text += std::to_string(yb - xb);
            text += '\n';
            ++rows;
        }
    }
    // A new file beside the result (O_EXCL|O_NOFOLLOW in the folder's
    // descriptor), renamed over it: a link planted at the result's name is
    // replaced, never followed (issue #16 item 3, #29 item 4).
    if (!files::replace(out_fd.get(), name, text, why, 0644)) {
        log.error("--output: cannot write " + path + ": " + why);
        return 2;
    }
    log.out("msmemscope: compare: " + std::to_string(rows) + " row(s) written to " + path);
    return 0;
}

// An allocation that fails (a cgroup's or `ulimit -v`'s limit) is said in
// one line, not left to a kill without a word.
int compare_main(const Config& cfg, CompareLog& log) {
    try {
        return compare_run(cfg, log);
    } catch (const std::bad_alloc&) {
        // (what the comparison held was freed by the unwinding: the line can be built)
        log.error("--compare: out of memory (an allocation failed after " + mib_text(resident_bytes()) +
                  " in use; --offline-memory sets the budget)");
        return 70;
    }
}

}  // namespace msms
