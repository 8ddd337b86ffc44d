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
// console says so.
#include "compare.h"

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
#include "process_run.h"
#include "util/csv.h"

namespace fs = std::filesystem;

namespace msms {
namespace {

struct Entry {
    std::string name, event;
    int64_t bytes = 0;
    std::string key;  // what is aligned: the name and the operator it ran in
};

struct DeviceSeq {
    std::vector<DumpRow> rows;
    std::vector<Entry> entries;
};

bool load_side(const std::string& input, std::map<std::string, DeviceSeq>& out, std::string& err) {
    auto files = dump_files(input, err);
    if (files.empty()) return false;
    for (auto& f : files) {
        std::vector<DumpRow> rows;
        if (!read_dump(f, rows, err)) return false;
        for (auto& r : rows) {
            if (r.rec.ev.device_kind == MSMS_DEV_NA) continue;
            out[r.device == "host" ? std::string("cpu") : r.device].rows.push_back(std::move(r));
        }
    }
    for (auto& [dev, seq] : out) sort_by_time(seq.rows);
    return true;
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

// upstream: each operator is credited with the first allocation after its
// end (upstream's rule), else with what it allocated between start and end.
void build_entries(DeviceSeq& s, unsigned levels, bool upstream) {
    bool framework = false;
    for (auto& r : s.rows)
        if (r.rec.ev.kind == MSMS_EV_MALLOC && msms_is_framework_pool(r.rec.ev.type)) framework = true;
    // the size of the first counted allocation after each row, from the back
    std::vector<int64_t> next(s.rows.size() + 1, 0);
    if (upstream) {
        // upstream's GetMemoryUsage: the first row (MALLOC or FREE) of the
        // run's framework pool, PTA or MINDSPORE, whichever comes first;
        // a device without either (a CPU run) takes its host pools.
        uint16_t fw = 0;
        for (auto& r : s.rows)
            if ((r.rec.ev.kind == MSMS_EV_MALLOC || r.rec.ev.kind == MSMS_EV_FREE) &&
                (r.rec.ev.type == MSMS_T_PTA || r.rec.ev.type == MSMS_T_MINDSPORE)) {
                fw = r.rec.ev.type;
                break;
            }
        auto counts = [fw](const msms_event& ev) {
            if (ev.kind != MSMS_EV_MALLOC && ev.kind != MSMS_EV_FREE) return false;
            return fw ? ev.type == fw : (ev.type == MSMS_T_HOST || ev.type == MSMS_T_HOST_PINNED);
        };
        for (size_t i = s.rows.size(); i-- > 0;)
            next[i] = counts(s.rows[i].rec.ev) ? s.rows[i].attr_size : next[i + 1];
    } else {
        for (size_t i = s.rows.size(); i-- > 0;)
            next[i] = counted_pool(s.rows[i].rec.ev, framework) ? static_cast<int64_t>(s.rows[i].rec.ev.size)
                                                                : next[i + 1];
    }
    // per thread: the operators running and what they allocated so far
    struct Open {
        const std::string* name;
        int64_t bytes;
    };
    std::unordered_map<uint64_t, std::vector<Open>> open;
    for (size_t i = 0; i < s.rows.size(); ++i) {
        const Record& r = s.rows[i].rec;
        uint64_t thread = (static_cast<uint64_t>(r.ev.pid) << 32) | r.ev.tid;
        if (!upstream && is_op_start(r.ev)) {
            open[thread].push_back(Open{&r.name, 0});
            continue;
        }
        if (!upstream && counted_pool(r.ev, framework)) {
            auto it = open.find(thread);
            if (it != open.end())
                for (Open& o : it->second) o.bytes += static_cast<int64_t>(r.ev.size);
            continue;
        }
        if (!wanted(r.ev, levels)) continue;
        const char* kind = msms_event_kind_name(r.ev.kind);
        int64_t bytes = next[i + 1];
        std::string key = r.name;
        if (!upstream && r.ev.kind == MSMS_EV_OP_LAUNCH) {
            bytes = 0;
            auto it = open.find(thread);
            if (it != open.end()) {
                auto& st = it->second;
                for (size_t k = st.size(); k-- > 0;)
                    if (*st[k].name == r.name) {  // its start (an unmatched inner start is dropped with it)
                        bytes = st[k].bytes;
                        if (k > 0) key = *st[k - 1].name + " > " + r.name;
                        st.resize(k);
                        break;
                    }
            }
        }
        s.entries.push_back(Entry{r.name, kind ? kind : "N/A", bytes, std::move(key)});
    }
}

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

void build_sites(DeviceSeq& s, std::map<std::string, int64_t>& out) {
    for (auto& row : s.rows)
        if (row.rec.ev.kind == MSMS_EV_MALLOC) out[site_of(row.rec)] += static_cast<int64_t>(row.rec.ev.size);
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

int compare_main(const Config& cfg) {
    std::map<std::string, DeviceSeq> base, cmp;
    std::string err;
    if (!load_side(cfg.inputs[0], base, err) || !load_side(cfg.inputs[1], cmp, err)) {
        std::cerr << "msmemscope: error: --input: " << err << "\n";
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

    std::string out_dir = cfg.output + "/compare";
    if (std::string why = make_dirs(out_dir); !why.empty()) {
        std::cerr << "msmemscope: error: --output: cannot create or write '" << out_dir << "': " << why << "\n";
        return 2;
    }
    std::string path = out_dir + "/memory_compare_" +
                       timestamp_string(static_cast<uint64_t>(time(nullptr)) * 1000000000ull) + ".csv";
    std::string text = ",,,Base,Compare\nEvent,Name,Device Id,Allocated Memory(byte),Allocated Memory(byte),Diff Memory(byte)\n";
    size_t rows = 0;
    bool any_entries = false;
    for (auto& dev : devices) {
        build_entries(base[dev], cfg.levels, cfg.level_given);
        build_entries(cmp[dev], cfg.levels, cfg.level_given);
        if (!base[dev].entries.empty() || !cmp[dev].entries.empty()) any_entries = true;
    }
    for (auto& dev : devices) {
        DeviceSeq& a = base[dev];
        DeviceSeq& b = cmp[dev];
        if (a.entries.empty() && b.entries.empty() && any_entries) {
            // Other devices have operators or kernels: this one (the host
            // rows of an NPU run, Device Id host or cpu) is left out, as
            // upstream leaves out every row that is not a device number.
            if (!a.rows.empty() || !b.rows.empty())
                std::cout << "msmemscope: compare: device " << dev << " has no operator or kernel rows in either run; "
                          << "left out (the other devices' are compared)\n";
            continue;
        }
        if (a.entries.empty() && b.entries.empty()) {
            // No operator or kernel on this device (a C program): by allocation site.
            std::map<std::string, int64_t> sa, sb;
            build_sites(a, sa);
            build_sites(b, sb);
            std::set<std::string> sites;
            for (auto& [k, v] : sa) sites.insert(k);
            for (auto& [k, v] : sb) sites.insert(k);
            if (sites.empty()) continue;
            std::cout << "msmemscope: compare: device " << dev << " has no operator or kernel rows in either run; "
                      << "compared by allocation site (" << sites.size() << " site(s), Event MALLOC, Name = the site)\n";
            for (auto& site : sites) {
                auto x = sa.find(site), y = sb.find(site);
                csv_field(text, "MALLOC");
                text += ',';
                csv_field(text, site);
                text += ',';
                csv_field(text, dev);
                text += ',';
                text += x != sa.end() ? std::to_string(x->second) : "N/A";
                text += ',';
                text += y != sb.end() ? std::to_string(y->second) : "N/A";
                text += ',';
                text += std::to_string((y != sb.end() ? y->second : 0) - (x != sa.end() ? x->second : 0));
                text += '\n';
                ++rows;
            }
            continue;
        }
        bool exact = true;
        auto pairs = align(a.entries, b.entries, exact);
        if (!exact)
            std::cerr << "msmemscope: warning: device " << dev
                      << ": the two sequences differ too much for an exact alignment; unmatched ops are listed apart\n";
        for (auto& [i, j] : pairs) {
            const Entry* x = i >= 0 ? &a.entries[static_cast<size_t>(i)] : nullptr;
            const Entry* y = j >= 0 ? &b.entries[static_cast<size_t>(j)] : nullptr;
            const Entry* any = y ? y : x;
            csv_field(text, any->event);
            text += ',';
            csv_field(text, any->name.empty() ? std::string("N/A") : any->name);  // the Name column said N/A
            text += ',';
            csv_field(text, dev);
            text += ',';
            text += x ? std::to_string(x->bytes) : "N/A";
            text += ',';
            text += y ? std::to_string(y->bytes) : "N/A";
            text += ',';
            text += std::to_string((y ? y->bytes : 0) - (x ? x->bytes : 0));
            text += '\n';
            ++rows;
        }
    }
    // A new file beside the result, renamed over it: a link planted at the
    // result's name is replaced, never followed (issue #16 item 3).
    std::string tmp = path + ".XXXXXX";
    int fd = mkstemp(tmp.data());
    bool ok = fd >= 0 && fchmod(fd, 0644) == 0;
    for (size_t off = 0; ok && off < text.size();) {
        ssize_t n = write(fd, text.data() + off, text.size() - off);
        if (n < 0 && errno == EINTR) continue;
        ok = n > 0;
        if (ok) off += static_cast<size_t>(n);
    }
    if (fd >= 0 && close(fd) != 0) ok = false;
    if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
        std::cerr << "msmemscope: error: --output: cannot write " << path << ": " << std::strerror(errno) << "\n";
        if (fd >= 0) unlink(tmp.c_str());
        return 2;
    }
    std::cout << "msmemscope: compare: " << rows << " row(s) written to " << path << "\n";
    return 0;
}

}  // namespace msms
