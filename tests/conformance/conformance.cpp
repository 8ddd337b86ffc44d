// msmemscope-conformance: the checks every msmemscope plugin must pass,
// built-in or third-party. Usage:
//
//     msmemscope-conformance [--pairs=N] [--rss-limit-mib=M] [--time-budget=S]
//                            [--output-limit-mib=M] [--output-per-call=B] [--keep] PLUGIN.so|FOLDER...
//
// A FOLDER stands for every libmsmemscope_plugin_*.so in it (globbed when
// the program runs). Each plugin is checked in a child process, so a plugin
// that crashes fails its own run and the others still get checked. The
// checks (sdk/README.md, "Conformance"):
//
//   load           the host's own loader accepts it (Registry::load, the
//                  same checks the host refuses a plugin on: ABI, entry
//                  symbol in either form, descriptor size, type name,
//                  version and description set, events and devices from the
//                  known lists, the option schema and its defaults)
//   metadata       a collector's agent library found
//   options        the defaults validate; an unknown option and a bad value
//                  for each typed option are refused by the host's
//                  validator with the option's name
//   create         create/destroy with the default options; two instances
//                  alive at once
//   lifecycle      begin, one event of every kind and type (plus edge cases:
//                  unknown kind, free of an unknown block, no attrs), sinks'
//                  annotations and findings, finish: every call MSMS_OK
//   finish twice   a second finish() returns MSMS_OK and does nothing: no
//                  host calls, no change to the files in the output folder
//   exceptions     no C++ exception leaves any call
//   bounded state  N malloc/free pairs (default 1,000,000) with steps: the
//                  resident set grows by at most M MiB (default 32) after a
//                  warm-up, i.e. the plugin keeps live state, not history
//
// Watched by the supervising process all along: a plugin callback that runs
// longer than S seconds (default 10) is stopped ("exceeded its time budget
// (10 s) in on_event"); a plugin whose output -- the files in its output
// folder plus what it prints on stdout/stderr, which go to a file of their own
// (plugin_output.log), never between these lines -- passes M MiB (default 64)
// plus B bytes (default 1024) per callback made so far is stopped too: a
// sink's files grow with the events, not without end. A callback's failing status is shown with the plugin's own
// error text (msms_error, or descriptor.last_error).
//
// Exit status: 0 when every plugin passed, 1 when one failed, 2 on bad usage.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <msmemscope/abi.h>

#include "config.h"
#include "registry.h"

namespace fs = std::filesystem;

namespace {

struct Settings {
    uint64_t pairs = 1000000;
    uint64_t rss_limit_mib = 32;
    uint64_t time_budget_s = 10;      // per plugin callback; 0: none
    uint64_t output_limit_mib = 64;   // output files + stdout/stderr; 0: none
    uint64_t output_per_call = 1024;  // bytes more allowed per plugin callback made (a sink writes per event)
    bool keep = false;
};

// The plugin callback in progress, for the watchdog.
enum Callback : uint32_t { CB_NONE, CB_CREATE, CB_BEGIN, CB_ON_EVENT, CB_ON_ANNOTATION, CB_ON_FINDING, CB_FINISH,
                           CB_DESTROY, CB_LAST_ERROR };
const char* callback_name(uint32_t c) {
    static const char* const names[] = {"no callback", "create", "begin", "on_event", "on_annotation",
                                        "on_finding", "finish", "destroy", "last_error"};
    return c <= CB_LAST_ERROR ? names[c] : "an unknown callback";
}

// Shared with the parent: the check in progress, so that a crash names it,
// and the callback in progress, which the parent's watchdog times.
struct Shared {
    char check[128];
    int completed;  // the checks ran to their end (not ended by the plugin)
    std::atomic<uint32_t> callback;
    std::atomic<uint64_t> calls;  // callbacks begun: a count standing still while `callback` is set = one call running
    char stopped[512];            // why the child stopped itself (its output check), empty if it did not
};
Shared* g_shared = nullptr;
FILE* g_report = stdout;  // the checker's lines (in a child: the tool's stdout, not the plugin's)

uint64_t tree_bytes(const std::string& dir);
// Bytes of output allowed after `calls` plugin callbacks (0: no limit).
uint64_t output_limit(const Settings& s, uint64_t calls) {
    return s.output_limit_mib ? s.output_limit_mib * 1048576 + s.output_per_call * calls : 0;
}
std::string output_stop_reason(const Settings& s, uint64_t bytes, uint64_t calls, uint32_t cb);

// The child's own output check, made between callbacks: whenever the kind
// of callback changes and at most every 2 ms within a run of one kind, so
// the bytes found past the limit were written by the kind of callback that
// ran since the last check (the parent's sampling alone may first look when
// the plugin has already moved on to another callback).
struct OutputCheck {
    const Settings* s = nullptr;
    std::string dir;
    uint32_t last = CB_NONE;  // kind of the last callback begun
    std::chrono::steady_clock::time_point checked{};

    void before(uint32_t next) {
        if (!s || !s->output_limit_mib || last == CB_NONE) return;
        auto now = std::chrono::steady_clock::now();
        if (next == last && now - checked < std::chrono::milliseconds(2)) return;
        checked = now;
        uint64_t calls = g_shared->calls.load(std::memory_order_relaxed);
        uint64_t bytes = tree_bytes(dir);
        if (bytes <= output_limit(*s, calls)) return;
        std::snprintf(g_shared->stopped, sizeof(g_shared->stopped), "%s",
                      output_stop_reason(*s, bytes, calls, last).c_str());
        std::fflush(g_report);
        raise(SIGKILL);
    }
};
OutputCheck g_output_check;  // set up in the child only

// Marks a plugin callback for as long as it lives.
struct InCall {
    explicit InCall(Callback c) {
        if (g_shared) {
            g_output_check.before(c);
            g_output_check.last = c;
            g_shared->calls.fetch_add(1, std::memory_order_relaxed);
            g_shared->callback.store(c, std::memory_order_relaxed);
        }
    }
    ~InCall() {
        if (g_shared) g_shared->callback.store(CB_NONE, std::memory_order_relaxed);
    }
};

void set_current(const std::string& check) {
    if (g_shared) std::snprintf(g_shared->check, sizeof(g_shared->check), "%s", check.c_str());
}

std::string to_s(msms_str s) { return std::string(s.data ? s.data : "", s.size); }
msms_str sv(const std::string& s) { return msms_str{s.data(), static_cast<uint32_t>(s.size())}; }

uint64_t rss_bytes() {
    std::ifstream f("/proc/self/statm");
    uint64_t size = 0, resident = 0;
    f >> size >> resident;
    return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

// "5 (MSMS_ERR_EXCEPTION: a C++ exception was caught at the boundary)"
std::string status(int rc) {
    const char* n = "unknown status";
    switch (rc) {
    case MSMS_OK: n = "MSMS_OK"; break;
    case MSMS_ERR_INVALID_ARGUMENT: n = "MSMS_ERR_INVALID_ARGUMENT"; break;
    case MSMS_ERR_IO: n = "MSMS_ERR_IO"; break;
    case MSMS_ERR_INTERNAL: n = "MSMS_ERR_INTERNAL"; break;
    case MSMS_ERR_UNSUPPORTED: n = "MSMS_ERR_UNSUPPORTED"; break;
    case MSMS_ERR_EXCEPTION: n = "MSMS_ERR_EXCEPTION: a C++ exception was caught at the boundary"; break;
    case MSMS_ERR_OUT_OF_MEMORY: n = "MSMS_ERR_OUT_OF_MEMORY: an allocation failed"; break;
    }
    return std::to_string(rc) + " (" + n + ")";
}


// ---------------------------------------------------------------- fake host
// Counts what the plugin asks of the host; keeps nothing that grows with the
// stream (so that the bounded-state check measures the plugin only).
struct FakeHost {
    msms_host_api api{};
    bool in_event = false;
    uint64_t logs = 0, errors_logged = 0, attrs = 0, annotations = 0, emits = 0, findings = 0, reports = 0;
    uint64_t bad_calls = 0;
    std::string first_bad;
    std::string last_error_log;

    FakeHost() {
        api.struct_size = sizeof(api);
        api.host = this;
        api.log = [](void* h, int level, msms_str m) {
            auto* s = self(h);
            ++s->logs;
            if (level >= 2) {
                ++s->errors_logged;
                s->last_error_log = to_s(m);
            }
            if (level < 0 || level > 2) s->bad("log() with level " + std::to_string(level));
        };
        api.add_attr = [](void* h, msms_str k, msms_str) -> int {
            auto* s = self(h);
            if (!s->in_event) return MSMS_ERR_INVALID_ARGUMENT;
            if (k.size == 0) s->bad("add_attr() with an empty key");
            ++s->attrs;
            return MSMS_OK;
        };
        api.annotate = [](void* h, uint64_t, msms_str k, msms_str) -> int {
            auto* s = self(h);
            if (k.size == 0) s->bad("annotate() with an empty key");
            ++s->annotations;
            return MSMS_OK;
        };
        api.emit = [](void* h, const msms_event* ev) -> int {
            auto* s = self(h);
            if (!ev) {
                s->bad("emit(NULL)");
                return MSMS_ERR_INVALID_ARGUMENT;
            }
            if (ev->struct_size < offsetof(msms_event, c_stack_id) + sizeof(uint64_t) && ev->struct_size != 0)
                s->bad("emit() of an event with struct_size " + std::to_string(ev->struct_size));
            if (!msms_event_kind_name(ev->kind)) s->bad("emit() of an event of unknown kind " + std::to_string(ev->kind));
            ++s->emits;
            return MSMS_OK;
        };
        api.add_finding = [](void* h, msms_str table, const msms_kv*, uint32_t) -> int {
            auto* s = self(h);
            if (table.size == 0) s->bad("add_finding() with an empty table name");
            ++s->findings;
            return MSMS_OK;
        };
        api.report = [](void* h, msms_str) { ++self(h)->reports; };
    }
    void bad(const std::string& what) {
        if (bad_calls++ == 0) first_bad = what;
    }
    uint64_t host_calls() const { return attrs + annotations + emits + findings + reports; }
    static FakeHost* self(void* h) { return static_cast<FakeHost*>(h); }
};

// ---------------------------------------------------------------- events
struct Ev {
    msms_event ev{};
    std::string name, py, c;
    std::vector<std::pair<std::string, std::string>> attrs;
    std::vector<msms_kv> kv;
    bool null_attrs = false;

    Ev(uint16_t kind, uint16_t type) {
        ev.struct_size = sizeof(msms_event);
        ev.kind = kind;
        ev.type = type;
        ev.pid = 4242;
        ev.tid = 4243;
        ev.device_kind = MSMS_DEV_CPU;
        ev.device_id = -1;
        ev.pool_used = ev.pool_total = ev.process_used = ev.device_used = -1;
    }
    Ev& dev(uint16_t k, int16_t id) {
        ev.device_kind = k;
        ev.device_id = id;
        return *this;
    }
    Ev& a(const std::string& k, const std::string& v) {
        attrs.emplace_back(k, v);
        return *this;
    }
    const msms_event& view() {
        kv.clear();
        for (auto& p : attrs) kv.push_back({sv(p.first), sv(p.second)});
        ev.attrs = null_attrs ? nullptr : kv.data();
        ev.attr_count = null_attrs ? 0 : static_cast<uint32_t>(kv.size());
        ev.name = sv(name);
        ev.py_stack = sv(py);
        ev.c_stack = sv(c);
        return ev;
    }
};

std::string hex(uint64_t v) {
    char b[24];
    std::snprintf(b, sizeof(b), "0x%016" PRIx64, v);
    return b;
}

// One event of every kind and type the ABI defines, in a plausible order,
// plus the edge cases a plugin must tolerate.
std::vector<Ev> every_event() {
    std::vector<Ev> out;
    auto add = [&](Ev e) -> Ev& {
        out.push_back(std::move(e));
        return out.back();
    };
    add(Ev(MSMS_EV_SYSTEM, MSMS_T_ACL_INIT)).dev(MSMS_DEV_NPU, 0);
    add(Ev(MSMS_EV_SYSTEM, MSMS_T_START_TRACE)).dev(MSMS_DEV_NA, -1);
    uint64_t alloc_id = 0;
    int64_t process_used = 0;
    struct Pool {
        uint16_t type, dev;
        int16_t id;
        bool pool;
    };
    const Pool pools[] = {{MSMS_T_HAL, MSMS_DEV_NPU, 0, false},          {MSMS_T_PTA, MSMS_DEV_NPU, 0, true},
                          {MSMS_T_PTA_WORKSPACE, MSMS_DEV_NPU, 0, true}, {MSMS_T_ATB, MSMS_DEV_NPU, 1, true},
                          {MSMS_T_MINDSPORE, MSMS_DEV_CUDA, 0, true},    {MSMS_T_HOST, MSMS_DEV_CPU, -1, false},
                          {MSMS_T_HOST_PINNED, MSMS_DEV_CPU, -1, false}};
    for (uint64_t step = 1; step <= 3; ++step) {
        Ev& st = add(Ev(MSMS_EV_SYSTEM, MSMS_T_STEP));
        st.dev(MSMS_DEV_NA, -1);
        st.name = std::to_string(step);
        st.ev.aux0 = step;
        Ev& rs = add(Ev(MSMS_EV_MSTX, MSMS_T_RANGE_START));
        rs.name = "step start";
        rs.ev.aux0 = step;
        Ev& op = add(Ev(MSMS_EV_OP_LAUNCH, MSMS_T_ATEN_START));
        op.dev(MSMS_DEV_NPU, 0);
        op.name = "aten::add";
        op.py = "train.py(12): step\nmodel.py(40): forward";
        op.c = "0x0000000000401000 main\n0x0000000000401100 run";
        // `op` is a reference into `out`: later adds may move it.
        const std::string op_c_stack = op.c;
        for (auto& p : pools) {
            uint64_t ptr = 0x10000000ull * (p.type + 1) + step * 0x1000;
            uint64_t size = 512 * step + p.type;
            process_used += static_cast<int64_t>(size);
            Ev& m = add(Ev(MSMS_EV_MALLOC, p.type));
            m.dev(p.dev, p.id);
            m.ev.ptr = ptr;
            m.ev.size = size;
            m.ev.allocation_id = ++alloc_id;
            m.ev.pool_used = static_cast<int64_t>(size);
            m.ev.pool_total = p.pool ? 1 << 20 : -1;
            m.ev.process_used = process_used;
            m.ev.aux0 = p.type == MSMS_T_HAL ? (1ull << 10) | (3ull << 56) : 0;
            m.a("allocation_id", std::to_string(alloc_id)).a("addr", hex(ptr)).a("size", std::to_string(size));
            m.a("owner", p.pool ? "PTA@model@weight" : "HOST").a("used", std::to_string(size));
            if (p.pool) m.a("total", std::to_string(1 << 20));
            m.a("process_used", std::to_string(process_used));
            m.c = op_c_stack;
            Ev& acc = add(Ev(MSMS_EV_ACCESS, step == 1 ? MSMS_T_READ : step == 2 ? MSMS_T_WRITE : MSMS_T_UNKNOWN));
            acc.dev(p.dev, p.id);
            acc.ev.ptr = ptr;
            acc.ev.size = size;
            acc.ev.allocation_id = alloc_id;
            acc.a("dtype", "torch.float32").a("shape", "[2, 4]").a("size", std::to_string(size));
            acc.a("allocation_id", std::to_string(alloc_id));
            acc.name = "aten::add";
            Ev& f = add(Ev(MSMS_EV_FREE, p.type));
            f.dev(p.dev, p.id);
            f.ev.ptr = ptr;
            f.ev.size = size;
            f.ev.allocation_id = alloc_id;
            process_used -= static_cast<int64_t>(size);
            f.ev.pool_used = 0;
            f.ev.pool_total = p.pool ? 1 << 20 : -1;
            f.ev.process_used = process_used;
            f.a("allocation_id", std::to_string(alloc_id)).a("addr", hex(ptr)).a("size", std::to_string(size));
        }
        Ev& k = add(Ev(MSMS_EV_KERNEL_LAUNCH, MSMS_T_KERNEL_LAUNCH));
        k.dev(MSMS_DEV_NPU, 0);
        k.name = "AddKernel";
        k.ev.aux0 = 3;
        k.ev.aux1 = 17;
        k.a("streamId", "3").a("taskId", "17");
        add(Ev(MSMS_EV_KERNEL_LAUNCH, MSMS_T_KERNEL_START)).dev(MSMS_DEV_NPU, 0).name = "AddKernel";
        add(Ev(MSMS_EV_KERNEL_LAUNCH, MSMS_T_KERNEL_END)).dev(MSMS_DEV_NPU, 0).name = "AddKernel";
        add(Ev(MSMS_EV_OP_LAUNCH, MSMS_T_ATEN_END)).dev(MSMS_DEV_NPU, 0).name = "aten::add";
        Ev& atb = add(Ev(MSMS_EV_OP_LAUNCH, MSMS_T_ATB_START));
        atb.dev(MSMS_DEV_NPU, 0);
        atb.name = "LinearOperation";
        atb.a("path", "0_1/LinearOperation").a("workspace_ptr", hex(0x5000)).a("workspace_size", "128");
        add(Ev(MSMS_EV_OP_LAUNCH, MSMS_T_ATB_END)).dev(MSMS_DEV_NPU, 0).name = "LinearOperation";
        add(Ev(MSMS_EV_MSTX, MSMS_T_MARK)).name = "checkpoint";
        Ev& re = add(Ev(MSMS_EV_MSTX, MSMS_T_RANGE_END));
        re.ev.aux0 = step;
        Ev& py = add(Ev(MSMS_EV_PY_TRACE, MSMS_T_PY_CALL));
        py.name = "model.py(40): forward";
        py.ev.aux0 = 1;
        Ev& rf = add(Ev(MSMS_EV_PY_TRACE, MSMS_T_PY_RECORD_FUNCTION));
        rf.name = "my_span";
        rf.ev.aux0 = 1;
    }
    Ev& snap = add(Ev(MSMS_EV_SNAPSHOT, MSMS_T_SNAPSHOT));
    snap.dev(MSMS_DEV_NPU, 0);
    snap.name = "Memory Snapshot";
    snap.a("reserved", "256").a("max_reserved", "256").a("allocated", "128").a("max_allocated", "128");
    snap.a("total", "1024").a("free", "512").a("device_rate", "50.000000").a("reserved_rate", "50.000000");
    Ev& oom = add(Ev(MSMS_EV_OOM_DETAIL, MSMS_T_OOM_TRIGGER));
    oom.dev(MSMS_DEV_NPU, 0);
    oom.a("func", "halMemAlloc").a("req_size", "1048576").a("flag", "0").a("ret", "6");
    for (uint16_t t : {MSMS_T_OOM_RECENT_ALLOC, MSMS_T_OOM_TOP_ALLOC}) {
        Ev& o = add(Ev(MSMS_EV_OOM_DETAIL, t));
        o.dev(MSMS_DEV_NPU, 0);
        o.a("pool", "PTA").a("ptr", hex(0x20001000)).a("size", "512");
    }
    // Edge cases: a free of a block never seen, the same address allocated
    // twice, a zero-sized block, an event without attrs, a huge block.
    Ev& f = add(Ev(MSMS_EV_FREE, MSMS_T_HOST));
    f.ev.ptr = 0xdead0000;
    Ev& m1 = add(Ev(MSMS_EV_MALLOC, MSMS_T_HOST));
    m1.ev.ptr = 0xbeef0000;
    m1.ev.size = 0;
    m1.ev.allocation_id = ++alloc_id;
    Ev& m2 = add(Ev(MSMS_EV_MALLOC, MSMS_T_HOST));
    m2.ev.ptr = 0xbeef0000;
    m2.ev.size = UINT64_MAX / 2;
    m2.ev.allocation_id = ++alloc_id;
    m2.null_attrs = true;
    add(Ev(MSMS_EV_SYSTEM, MSMS_T_STOP_TRACE)).dev(MSMS_DEV_NA, -1);
    add(Ev(MSMS_EV_SYSTEM, MSMS_T_ACL_FINI)).dev(MSMS_DEV_NPU, 0);
    uint64_t id = 0, ts = 1700000000000000000ull;
    for (auto& e : out) {
        e.ev.id = ++id;
        e.ev.timestamp_ns = (ts += 1000);
    }
    return out;
}

// A kind and type from a newer minor ABI: plugins must ignore what they do
// not know.
Ev future_event(uint64_t id, uint64_t ts) {
    Ev e(MSMS_EV_KIND_COUNT + 5, MSMS_T_TYPE_LIMIT - 1);
    e.ev.id = id;
    e.ev.timestamp_ns = ts;
    e.name = "future";
    e.a("future_key", "1");
    return e;
}

// ---------------------------------------------------------------- checks
class Checker {
public:
    // tmp: a private folder for the plugins' output, made and removed by the
    // supervising process so that a plugin crashing the check leaves nothing.
    Checker(const std::string& path, const Settings& s, const std::string& tmp) : path_(path), s_(s), tmp_(tmp) {}
    int run();

private:
    bool ok(const std::string& check, const std::string& detail = "") {
        std::fprintf(g_report, "  ok    %s%s%s\n", check.c_str(), detail.empty() ? "" : ": ", detail.c_str());
        std::fflush(g_report);
        ++passed_;
        return true;
    }
    bool fail(const std::string& check, const std::string& why) {
        std::fprintf(g_report, "  FAIL  %s: %s\n", check.c_str(), why.c_str());
        std::fflush(g_report);
        ++failed_;
        return false;
    }
    void note(const std::string& what) {
        std::fprintf(g_report, "  note  %s\n", what.c_str());
        std::fflush(g_report);
    }
    // The plugin's own words for its last failure: ": <text>", or "".
    std::string said(void* obj, const char* message = nullptr) {
        if (message && *message) return std::string(": ") + message;
        if (!obj) return "";
        std::string text;
        {
            InCall in(CB_LAST_ERROR);
            text = msms::plugin_last_error(d_, obj);
        }
        return text.empty() ? "" : ": " + text;
    }
    void destroy(void* obj) {
        InCall in(CB_DESTROY);
        d_->destroy(obj);
    }

    // Runs f, turning an escaping exception into a failure of `check`.
    bool guarded(const std::string& check, const std::string& call, const std::function<bool()>& f) {
        set_current(check + " (" + call + ")");
        try {
            return f();
        } catch (const std::exception& e) {
            exception_escaped_ = true;
            return fail(check, "a C++ exception escaped from " + call + ": " + e.what());
        } catch (...) {
            exception_escaped_ = true;
            return fail(check, "a C++ exception escaped from " + call);
        }
    }

    bool check_load();
    void check_metadata();
    void check_options();
    bool create(FakeHost& host, void** obj, std::string& why);
    void check_create();
    void check_lifecycle();
    void check_bounded();
    std::string run_info_dir(const std::string& what);
    // The run a check begins: the strings outlive the views in `info`.
    struct Run {
        std::string dir, timestamp, config_json, command_line;
        msms_run_info info{};
    };
    void make_run(Run& run, const std::string& what, std::string timestamp, std::string config_json,
                  std::string command_line);
    // Calls begin() (when the plugin has it); a failure is reported on `check`.
    bool begin(const std::string& check, void* obj, const Run& run);
    std::map<std::string, std::string> snapshot_dir(const std::string& dir);
    bool feeds_events() const { return d_->kind != MSMS_KIND_COLLECTOR && d_->on_event; }

    std::string path_;
    Settings s_;
    msms::Registry registry_;
    const msms::LoadedPlugin* plugin_ = nullptr;
    const msms_plugin_descriptor* d_ = nullptr;
    std::string name_;
    std::map<std::string, std::string> defaults_;
    std::string tmp_;
    int passed_ = 0, failed_ = 0;
    bool exception_escaped_ = false;
};

bool Checker::check_load() {
    set_current("load");
    if (!registry_.load(path_)) return fail("load", registry_.refused().back().reason);
    plugin_ = &registry_.plugins().back();
    d_ = plugin_->descriptor;
    name_ = d_->type_name;
    std::string file = fs::path(path_).filename().string();
    ok("load", plugin_->kind_name() + " '" + name_ + "' " + (d_->version ? d_->version : "") + ", ABI " +
                   std::to_string(d_->abi_major) + "." + std::to_string(d_->abi_minor));
    if (file != "libmsmemscope_plugin_" + name_ + ".so")
        note("file name " + file + " does not follow the rule libmsmemscope_plugin_<type name>.so (libmsmemscope_plugin_" +
             name_ + ".so)");
    return true;
}

// The descriptor's own rules (version, description, events, devices, the
// agent library's name, the option schema and its defaults) are the host's
// load checks (msms::check_descriptor): a plugin that breaks one failed
// "load" already. What is left needs the file's place on disk.
void Checker::check_metadata() {
    set_current("metadata");
    if (d_->kind == MSMS_KIND_COLLECTOR && d_->agent_library) {
        std::string lib = d_->agent_library;
        fs::path dir = fs::path(path_).parent_path();
        bool found = false;
        for (auto& c : {dir / lib, dir.parent_path() / "agent" / lib, dir / "agent" / lib})
            if (access(c.c_str(), R_OK) == 0) found = true;
        if (!found) {
            fail("metadata", "agent library " + lib + " not found next to the plugin (nor in ../agent or ./agent)");
            return;
        }
    }
    ok("metadata");
}

void Checker::check_options() {
    set_current("options");
    const msms::PluginInfo& info = plugin_->info;
    ok("options: schema", std::to_string(info.options.size()) + " option(s), checked at load");

    std::vector<std::string> errors;
    defaults_.clear();
    msms::validate_plugin_options(info, {}, "defaults", defaults_, errors);
    if (!errors.empty()) fail("options: defaults valid", errors.front());
    else ok("options: defaults valid");

    // Bad options must be refused, each error naming the option.
    std::vector<std::pair<std::string, std::string>> bad;  // option, value
    for (auto& o : info.options) {
        switch (o.type) {
        case MSMS_OPT_INT:
            bad.emplace_back(o.name, "not_a_number");
            if (o.max < INT64_MAX) bad.emplace_back(o.name, std::to_string(o.max + 1));
            if (o.min > INT64_MIN) bad.emplace_back(o.name, std::to_string(o.min - 1));
            break;
        case MSMS_OPT_BOOL: bad.emplace_back(o.name, "maybe"); break;
        case MSMS_OPT_ENUM: bad.emplace_back(o.name, "no_such_choice"); break;
        case MSMS_OPT_LIST:
            if (!o.allowed.empty()) bad.emplace_back(o.name, "no_such_item");
            break;
        default: break;
        }
    }
    std::string refused_all;
    bool all_refused = true;
    {
        std::vector<std::string> errs;
        std::map<std::string, std::string> out;
        msms::validate_plugin_options(info, {{"no_such_option", "1"}}, "--plugin-option", out, errs);
        std::string want = "plugin '" + name_ + "' has no option 'no_such_option'";
        if (errs.empty() || errs.front().find(want) == std::string::npos) {
            all_refused = false;
            fail("options: bad options refused", "an unknown option was not refused with \"" + want + "\"");
        }
    }
    for (auto& [opt, value] : bad) {
        std::vector<std::string> errs;
        std::map<std::string, std::string> out;
        msms::validate_plugin_options(info, {{opt, value}}, "--plugin-option", out, errs);
        std::string want = name_ + "." + opt;
        if (errs.empty()) {
            all_refused = false;
            fail("options: bad options refused", "value '" + value + "' of option '" + opt + "' was accepted");
        } else if (errs.front().find(want) == std::string::npos) {
            all_refused = false;
            fail("options: bad options refused", "the error for '" + value + "' does not name " + want + ": " + errs.front());
        }
    }
    if (all_refused) ok("options: bad options refused", std::to_string(bad.size() + 1) + " bad value(s)");
}

bool Checker::create(FakeHost& host, void** obj, std::string& why) {
    std::vector<msms_kv> kv;
    for (auto& [k, v] : defaults_) kv.push_back({sv(k), sv(v)});
    msms_error err{};
    *obj = nullptr;
    int rc;
    {
        InCall in(CB_CREATE);
        rc = d_->create(&host.api, kv.data(), static_cast<uint32_t>(kv.size()), obj, &err);
    }
    if (rc != MSMS_OK) {
        why = "create() returned status " + status(rc) + ": " + (err.message[0] ? err.message : "no message");
        *obj = nullptr;
        return false;
    }
    if (!*obj) {
        why = "create() returned MSMS_OK but no instance";
        return false;
    }
    return true;
}

void Checker::check_create() {
    const std::string check = "create/destroy";
    guarded(check, "create", [&] {
        FakeHost h1, h2;
        void *a = nullptr, *b = nullptr;
        std::string why;
        if (!create(h1, &a, why)) return fail(check, why);
        set_current(check + " (second instance)");
        if (!create(h2, &b, why)) {
            destroy(a);
            return fail(check, "a second instance while the first lives: " + why);
        }
        set_current(check + " (destroy)");
        destroy(a);
        destroy(b);
        return ok(check, "two instances at once");
    });
}

std::string Checker::run_info_dir(const std::string& what) {
    std::string dir = tmp_ + "/" + what;
    fs::create_directories(dir);
    return dir;
}

void Checker::make_run(Run& run, const std::string& what, std::string timestamp, std::string config_json,
                       std::string command_line) {
    run.dir = run_info_dir(what);
    run.timestamp = std::move(timestamp);
    run.config_json = std::move(config_json);
    run.command_line = std::move(command_line);
    run.info = msms_run_info{};
    run.info.struct_size = sizeof(run.info);
    run.info.pid = 4242;
    run.info.output_dir = sv(run.dir);
    run.info.timestamp = sv(run.timestamp);
    run.info.config_json = sv(run.config_json);
    run.info.command_line = sv(run.command_line);
    // ABI 1.3: the folder's descriptor, as the host gives it (kept open for
    // the checker's life: a few per plugin).
    run.info.output_dir_fd = ::open(run.dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

bool Checker::begin(const std::string& check, void* obj, const Run& run) {
    if (!d_->begin) return true;
    return guarded(check, "begin", [&] {
        msms_error err{};
        int rc;
        {
            InCall in(CB_BEGIN);
            rc = d_->begin(obj, &run.info, &err);
        }
        return rc == MSMS_OK || fail(check, "begin() returned status " + status(rc) + said(obj, err.message));
    });
}

std::map<std::string, std::string> Checker::snapshot_dir(const std::string& dir) {
    std::map<std::string, std::string> out;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (!it->is_regular_file()) continue;
        std::ifstream f(it->path(), std::ios::binary);
        std::string content((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        out[it->path().string()] = std::to_string(content.size()) + ":" + std::to_string(std::hash<std::string>()(content));
    }
    return out;
}

void Checker::check_lifecycle() {
    const std::string check = "lifecycle";
    FakeHost host;
    void* obj = nullptr;
    std::string why;
    bool created = guarded(check, "create", [&] { return create(host, &obj, why) || fail(check, why); });
    if (!created || !obj) return;

    msms::Config cfg;
    cfg.devices = {"cpu", "npu:0"};
    cfg.output = run_info_dir("lifecycle");
    Run run;
    make_run(run, "lifecycle", "20260101000000", cfg.to_json(), "python3 train.py");
    const std::string& dir = run.dir;
    bool good = begin(check, obj, run);
    size_t n_events = 0;
    if (good && feeds_events()) {
        auto events = every_event();
        events.push_back(future_event(events.size() + 1, events.back().ev.timestamp_ns + 1));
        n_events = events.size();
        for (auto& e : events) {
            const char* k = msms_event_kind_name(e.ev.kind);
            const char* t = msms_event_type_name(e.ev.type);
            std::string label = std::string(k ? k : "unknown kind") + "/" + (t ? t : "unknown type") + " (id " +
                                std::to_string(e.ev.id) + ")";
            good = guarded(check, "on_event " + label, [&] {
                host.in_event = true;
                int rc;
                {
                    InCall in(CB_ON_EVENT);
                    rc = d_->on_event(obj, &e.view());
                }
                host.in_event = false;
                if (rc != MSMS_OK)
                    return fail(check, "on_event() returned status " + status(rc) + " for " + label + said(obj) +
                                           " (the host would drop the plugin)");
                return true;
            });
            if (!good) break;
        }
    }
    if (good && d_->kind == MSMS_KIND_SINK && d_->on_annotation)
        good = guarded(check, "on_annotation", [&] {
            std::string k = "inefficient", v = "early_allocation";
            for (uint64_t id : {uint64_t(5), uint64_t(1), uint64_t(999999)}) {
                int rc;
                {
                    InCall in(CB_ON_ANNOTATION);
                    rc = d_->on_annotation(obj, id, sv(k), sv(v));
                }
                if (rc != MSMS_OK)
                    return fail(check, "on_annotation() returned status " + status(rc) + " for event " +
                                           std::to_string(id) + said(obj));
            }
            return true;
        });
    if (good && d_->kind == MSMS_KIND_SINK && d_->on_finding)
        good = guarded(check, "on_finding", [&] {
            std::string table = "leaks", k1 = "step", v1 = "2", k2 = "size", v2 = "512";
            msms_kv cols[2] = {{sv(k1), sv(v1)}, {sv(k2), sv(v2)}};
            int rc;
            {
                InCall in(CB_ON_FINDING);
                rc = d_->on_finding(obj, sv(table), cols, 2);
            }
            if (rc != MSMS_OK) return fail(check, "on_finding() returned status " + status(rc) + said(obj));
            return true;
        });
    if (good && d_->finish)
        good = guarded(check, "finish", [&] {
            msms_error err{};
            int rc;
            {
                InCall in(CB_FINISH);
                rc = d_->finish(obj, &err);
            }
            if (rc != MSMS_OK) return fail(check, "finish() returned status " + status(rc) + said(obj, err.message));
            return true;
        });
    if (good && host.bad_calls) good = fail(check, "bad host call: " + host.first_bad);
    if (good)
        ok(check, "begin, " + std::to_string(n_events) + " events, finish (" + std::to_string(host.host_calls()) +
                      " host calls)");

    // The rule: finish() may be called again; every call after the first
    // returns MSMS_OK and does nothing.
    const std::string check2 = "finish twice";
    if (good && d_->finish) {
        auto before = snapshot_dir(dir);
        uint64_t calls = host.host_calls(), errors = host.errors_logged;
        guarded(check2, "second finish", [&] {
            msms_error err{};
            int rc;
            {
                InCall in(CB_FINISH);
                rc = d_->finish(obj, &err);
            }
            if (rc != MSMS_OK)
                return fail(check2, "the second finish() returned status " + status(rc) + said(obj, err.message));
            if (host.host_calls() != calls)
                return fail(check2, "the second finish() called the host again (" +
                                        std::to_string(host.host_calls() - calls) + " emit/report/finding/annotate calls)");
            if (host.errors_logged != errors) return fail(check2, "the second finish() logged an error: " + host.last_error_log);
            if (snapshot_dir(dir) != before) return fail(check2, "the second finish() changed the files in the output folder");
            return ok(check2, "second call is a no-op");
        });
    } else if (!d_->finish) {
        ok(check2, "no finish function");
    }
    guarded(check, "destroy", [&] {
        destroy(obj);
        return true;
    });
}

void Checker::check_bounded() {
    const std::string check = "bounded state";
    if (!feeds_events()) return;
    FakeHost host;
    void* obj = nullptr;
    std::string why;
    if (!guarded(check, "create", [&] { return create(host, &obj, why) || fail(check, why); }) || !obj) return;
    Run run;
    make_run(run, "bounded", "20260101000001", "{}", "synthetic");
    bool good = begin(check, obj, run);

    // A window of live blocks slides over the stream: malloc p_i, free
    // p_{i-window}; a STEP every 20,000 events, an op around every 64 pairs.
    const uint64_t window = 1024, warmup = std::min<uint64_t>(s_.pairs / 10 + 1, 100000);
    uint64_t id = 0, ts_ns = 1700000000000000000ull, alloc_id = 0, step = 0;
    int64_t used = 0;
    std::string attr_id, attr_addr, attr_size, attr_used, step_name;
    const std::string k_id = "allocation_id", k_addr = "addr", k_size = "size", k_owner = "owner", k_used = "used",
                      owner = "HOST", op_name = "aten::mul";
    msms_kv kv[5];
    msms_event ev{};
    auto deliver = [&](msms_event& e) -> bool {
        e.id = ++id;
        e.timestamp_ns = (ts_ns += 100);
        host.in_event = true;
        int rc;
        {
            InCall in(CB_ON_EVENT);
            rc = d_->on_event(obj, &e);
        }
        host.in_event = false;
        if (rc != MSMS_OK)
            return fail(check, "on_event() returned status " + status(rc) + " for event " + std::to_string(e.id) +
                                   said(obj));
        return true;
    };
    auto base = [&](uint16_t kind, uint16_t type) {
        std::memset(&ev, 0, sizeof(ev));
        ev.struct_size = sizeof(ev);
        ev.kind = kind;
        ev.type = type;
        ev.pid = 4242;
        ev.tid = 4243;
        ev.device_kind = MSMS_DEV_CPU;
        ev.device_id = -1;
        ev.pool_used = ev.pool_total = ev.process_used = ev.device_used = -1;
    };
    auto alloc_event = [&](bool malloc, uint64_t i) -> bool {
        uint64_t ptr = 0x7f0000000000ull + (i % (window * 4)) * 256;
        uint64_t size = 64 + (i % 7) * 32;
        base(malloc ? MSMS_EV_MALLOC : MSMS_EV_FREE, MSMS_T_HOST);
        ev.ptr = ptr;
        ev.size = size;
        ev.allocation_id = i + 1;
        used += malloc ? static_cast<int64_t>(size) : -static_cast<int64_t>(size);
        ev.pool_used = ev.process_used = used;
        attr_id = std::to_string(i + 1);
        attr_addr = hex(ptr);
        attr_size = std::to_string(size);
        attr_used = std::to_string(used);
        kv[0] = {sv(k_id), sv(attr_id)};
        kv[1] = {sv(k_addr), sv(attr_addr)};
        kv[2] = {sv(k_size), sv(attr_size)};
        kv[3] = {sv(k_used), sv(attr_used)};
        kv[4] = {sv(k_owner), sv(owner)};
        ev.attrs = kv;
        ev.attr_count = malloc ? 5 : 3;
        return deliver(ev);
    };
    uint64_t rss_after_warmup = 0;
    std::string label = check + " (" + std::to_string(s_.pairs) + " malloc/free pairs)";
    if (good)
        good = guarded(check, "on_event", [&] {
            for (uint64_t i = 0; i < s_.pairs + window; ++i) {
                if (i == warmup) rss_after_warmup = rss_bytes();
                if (i < s_.pairs && !alloc_event(true, i)) return false;
                if (i >= window && !alloc_event(false, i - window)) return false;
                if (i % 64 == 0) {
                    base(MSMS_EV_OP_LAUNCH, (i / 64) % 2 ? MSMS_T_ATEN_END : MSMS_T_ATEN_START);
                    ev.name = sv(op_name);
                    if (!deliver(ev)) return false;
                }
                if (i % 10000 == 0) {
                    base(MSMS_EV_SYSTEM, MSMS_T_STEP);
                    ev.device_kind = MSMS_DEV_NA;
                    ev.aux0 = ++step;
                    step_name = std::to_string(step);
                    ev.name = sv(step_name);
                    if (!deliver(ev)) return false;
                }
            }
            return true;
        });
    (void)alloc_id;
    uint64_t rss_end = rss_bytes();
    if (good && d_->finish)
        good = guarded(check, "finish", [&] {
            msms_error err{};
            int rc;
            {
                InCall in(CB_FINISH);
                rc = d_->finish(obj, &err);
            }
            return rc == MSMS_OK || fail(check, "finish() returned status " + status(rc) + said(obj, err.message));
        });
    guarded(check, "destroy", [&] {
        destroy(obj);
        return true;
    });
    if (!good) return;
    int64_t growth = static_cast<int64_t>(rss_end) - static_cast<int64_t>(rss_after_warmup);
    double mib = growth / 1048576.0;
    char buf[160];
    std::snprintf(buf, sizeof(buf), "%" PRIu64 " pairs, resident set grew by %.1f MiB after warm-up (limit %" PRIu64 " MiB)",
                  s_.pairs, mib < 0 ? 0.0 : mib, s_.rss_limit_mib);
    if (growth > static_cast<int64_t>(s_.rss_limit_mib * 1048576)) fail(check, buf);
    else ok(check, buf);
}

int Checker::run() {
    if (check_load()) {
        check_metadata();
        check_options();
        check_create();
        check_lifecycle();
        check_bounded();
        if (!exception_escaped_) ok("exceptions", "none escaped");
        else fail("exceptions", "see above");
    }
    std::fflush(g_report);
    return failed_ ? 1 : 0;
}

// A new private folder under $TMPDIR (or /tmp); empty string and a FAIL line
// when it cannot be made.
std::string make_temp_folder() {
    const char* tmpdir = std::getenv("TMPDIR");
    std::string base = std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") + "/msmemscope-conformance-XXXXXX";
    std::vector<char> buf(base.begin(), base.end());
    buf.push_back('\0');
    if (!mkdtemp(buf.data())) {
        std::printf("  FAIL  setup: cannot create a temporary folder %s: %s\n", base.c_str(), std::strerror(errno));
        return {};
    }
    return buf.data();
}

// ---------------------------------------------------------------- watchdog
// Bytes in the regular files under dir (the plugin's output folders and its
// stdout/stderr file).
uint64_t tree_bytes(const std::string& dir) {
    uint64_t total = 0;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
        struct stat st{};
        if (lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) total += static_cast<uint64_t>(st.st_size);
    }
    return total;
}

// "unbounded output: ... in on_event; stopped" (cb: the callback that wrote
// past the limit, CB_NONE when none was running).
std::string output_stop_reason(const Settings& s, uint64_t bytes, uint64_t calls, uint32_t cb) {
    return "unbounded output: its files and stdout/stderr passed " + std::to_string(s.output_limit_mib) + " MiB + " +
           std::to_string(s.output_per_call) + " bytes per callback (--output-limit-mib, --output-per-call; " +
           std::to_string(bytes) + " bytes after " + std::to_string(calls) + " callbacks)" +
           (cb != CB_NONE ? std::string(" in ") + callback_name(cb) : std::string()) + "; stopped";
}

// Waits for the child checking one plugin; stops it (SIGKILL) when a plugin
// callback outlasts the time budget or its output passes the limit, and
// returns why in `stopped`.
int watch_child(pid_t pid, const Settings& s, const std::string& tmp, std::string& stopped) {
    using clock = std::chrono::steady_clock;
    int status = 0;
    uint64_t seen_calls = g_shared->calls.load(std::memory_order_relaxed);
    auto since = clock::now();
    bool over_idle = false;  // past the output limit with no callback running
    uint64_t over_calls = 0;
    auto over_since = since;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) {
            if (stopped.empty() && g_shared->stopped[0]) stopped = g_shared->stopped;  // the child's own check
            return status;
        }
        if (w < 0 && errno != EINTR) return status;
        if (stopped.empty()) {
            uint32_t cb = g_shared->callback.load(std::memory_order_relaxed);
            uint64_t calls = g_shared->calls.load(std::memory_order_relaxed);
            auto now = clock::now();
            if (cb == CB_NONE || calls != seen_calls) {
                seen_calls = calls;
                since = now;
            } else if (s.time_budget_s && now - since >= std::chrono::seconds(s.time_budget_s)) {
                stopped = std::string("exceeded its time budget in ") + callback_name(cb) + " (" +
                          std::to_string(s.time_budget_s) + " s, --time-budget); stopped";
            }
            // Output may grow with the events fed (a sink writes a row per
            // event), by at most output_per_call bytes per callback.
            uint64_t limit = output_limit(s, calls);
            // Past the limit while a callback runs: that callback (the child
            // checked at its start). Between callbacks the child's own check
            // at the next one names the writer; only output that keeps
            // growing past the limit for a second with no callback begun (a
            // plugin's own thread) is stopped here without a name.
            if (stopped.empty() && limit) {
                uint64_t bytes = tree_bytes(tmp);
                if (bytes <= limit || cb != CB_NONE) {
                    over_idle = false;
                    if (bytes > limit) stopped = output_stop_reason(s, bytes, calls, cb);
                } else if (!over_idle || calls != over_calls) {
                    over_idle = true;
                    over_calls = calls;
                    over_since = now;
                } else if (now - over_since >= std::chrono::seconds(1)) {
                    stopped = output_stop_reason(s, bytes, calls, CB_NONE);
                }
            }
            if (!stopped.empty()) kill(pid, SIGKILL);
        }
        usleep(20000);
    }
}

// ---------------------------------------------------------------- main
std::vector<std::string> expand(const std::string& arg) {
    std::error_code ec;
    if (!fs::is_directory(arg, ec)) return {arg};
    std::vector<std::string> out;
    for (auto& e : fs::directory_iterator(arg, ec)) {
        std::string n = e.path().filename().string();
        if (n.rfind("libmsmemscope_plugin_", 0) == 0 && n.size() > 3 && n.compare(n.size() - 3, 3, ".so") == 0)
            out.push_back(e.path().string());
    }
    std::sort(out.begin(), out.end());
    return out;
}

int usage(const char* why) {
    if (why) std::fprintf(stderr, "msmemscope-conformance: error: %s\n", why);
    std::fprintf(stderr,
                 "usage: msmemscope-conformance [--pairs=N] [--rss-limit-mib=M] [--time-budget=S]\n"
                 "                              [--output-limit-mib=M] [--output-per-call=B] [--keep] PLUGIN.so|FOLDER...\n"
                 "  checks each plugin (a FOLDER: every libmsmemscope_plugin_*.so in it) against the\n"
                 "  msmemscope plugin rules; exit status 0 when all pass, 1 when one fails\n"
                 "  --pairs=N           malloc/free pairs of the bounded-state check (default 1000000)\n"
                 "  --rss-limit-mib=M   allowed resident-set growth in that check (default 32)\n"
                 "  --time-budget=S     seconds one plugin callback may run before it is stopped (default 10; 0: none)\n"
                 "  --output-limit-mib=M  MiB a plugin may write, files and stdout/stderr together, before it is\n"
                 "                      stopped (default 64; 0: none), plus\n"
                 "  --output-per-call=B bytes more per plugin callback made so far (default 1024)\n"
                 "  --keep              keep the plugins' output folders\n");
    return 2;
}

bool parse_u64(const std::string& s, uint64_t& out) {
    if (s.empty() || s.size() > 18) return false;
    for (char c : s)
        if (c < '0' || c > '9') return false;
    out = std::strtoull(s.c_str(), nullptr, 10);
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    Settings s;
    std::vector<std::string> args;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "-h" || a == "--help") {
            usage(nullptr);
            return 0;
        } else if (a.rfind("--pairs=", 0) == 0) {
            if (!parse_u64(a.substr(8), s.pairs)) return usage("--pairs: expected a non-negative integer");
        } else if (a.rfind("--rss-limit-mib=", 0) == 0) {
            if (!parse_u64(a.substr(16), s.rss_limit_mib)) return usage("--rss-limit-mib: expected a non-negative integer");
        } else if (a.rfind("--time-budget=", 0) == 0) {
            if (!parse_u64(a.substr(14), s.time_budget_s)) return usage("--time-budget: expected a non-negative integer");
        } else if (a.rfind("--output-limit-mib=", 0) == 0) {
            if (!parse_u64(a.substr(19), s.output_limit_mib))
                return usage("--output-limit-mib: expected a non-negative integer");
        } else if (a.rfind("--output-per-call=", 0) == 0) {
            if (!parse_u64(a.substr(18), s.output_per_call))
                return usage("--output-per-call: expected a non-negative integer");
        } else if (a == "--keep") {
            s.keep = true;
        } else if (a.rfind("--", 0) == 0) {
            return usage(("unknown option " + a).c_str());
        } else {
            args.push_back(a);
        }
    }
    if (args.empty()) return usage("no plugin given");
    std::vector<std::string> plugins;
    for (auto& a : args) {
        auto e = expand(a);
        if (e.empty()) std::fprintf(stderr, "msmemscope-conformance: warning: no libmsmemscope_plugin_*.so in %s\n", a.c_str());
        plugins.insert(plugins.end(), e.begin(), e.end());
    }
    if (plugins.empty()) return usage("no plugin found");

    void* mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
        std::perror("msmemscope-conformance: mmap");
        return 2;
    }
    g_shared = static_cast<Shared*>(mem);
    int passed = 0, failed = 0;
    std::vector<std::string> failures;
    for (auto& p : plugins) {
        std::printf("%s\n", p.c_str());
        std::fflush(stdout);
        std::memset(g_shared->check, 0, sizeof(g_shared->check));
        g_shared->completed = 0;
        g_shared->callback.store(CB_NONE);
        g_shared->calls.store(0);
        g_shared->stopped[0] = '\0';
        std::string tmp = make_temp_folder();
        if (tmp.empty()) return 2;
        pid_t pid = fork();
        if (pid < 0) {
            std::perror("msmemscope-conformance: fork");
            return 2;
        }
        if (pid == 0) {
            // The checker's lines go to the tool's stdout; the plugin's own
            // stdout and stderr to a file in its folder (watched for size).
            int report = dup(1);
            FILE* rf = report >= 0 ? fdopen(report, "w") : nullptr;
            int fd = open((tmp + "/plugin_output.log").c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
            if (rf && fd >= 0 && dup2(fd, 1) >= 0 && dup2(fd, 2) >= 0) g_report = rf;
            if (fd >= 0) close(fd);
            g_output_check.s = &s;
            g_output_check.dir = tmp;
            int rc = Checker(p, s, tmp).run();
            g_shared->completed = 1;
            std::fflush(g_report);
            std::fflush(stdout);
            _exit(rc);
        }
        std::string stopped;
        int status = watch_child(pid, s, tmp, stopped);
        bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 && g_shared->completed && stopped.empty();
        struct stat printed{};
        if (lstat((tmp + "/plugin_output.log").c_str(), &printed) == 0 && printed.st_size > 0)
            std::printf("  note  the plugin printed %lld bytes on stdout/stderr (the host puts them in the process "
                        "folder's msmemscope_plugins.log)\n",
                        static_cast<long long>(printed.st_size));
        if (!stopped.empty())
            std::printf("  FAIL  %s: %s\n", g_shared->check, stopped.c_str());
        else if (WIFSIGNALED(status))
            std::printf("  FAIL  %s: crashed with signal %d (%s)\n", g_shared->check, WTERMSIG(status),
                        strsignal(WTERMSIG(status)));
        else if (WIFEXITED(status) && !g_shared->completed)
            std::printf("  FAIL  %s: the plugin ended the process with exit status %d\n", g_shared->check,
                        WEXITSTATUS(status));
        if (!s.keep) {
            std::error_code ec;
            fs::remove_all(tmp, ec);
        } else {
            std::printf("  note  output kept in %s\n", tmp.c_str());
        }
        std::printf("%s %s\n", ok ? "PASS" : "FAIL", p.c_str());
        std::fflush(stdout);
        if (ok) ++passed;
        else {
            ++failed;
            failures.push_back(p);
        }
    }
    std::printf("%d plugin(s): %d passed, %d failed\n", passed + failed, passed, failed);
    for (auto& f : failures) std::printf("failed: %s\n", f.c_str());
    return failed ? 1 : 0;
}
