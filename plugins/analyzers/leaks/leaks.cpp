// Analyzer `leaks` (COMPAT §6).
//
// Online rule (upstream's step-inner analysis): a framework-pool block (PTA,
// PTA_WORKSPACE, ATB, MINDSPORE) allocated in step S > 1 and still live at
// the end of step S+1 is a suspected leak (steps 0 and 1 are warm-up).
// A batch a PyTorch DataLoader received from its worker processes is the
// DataLoader's until its iterator hands it to the program: while it waits
// (received out of order or ahead, Attr dataloader:held on an ACCESS
// UNKNOWN row from the Python collector) it is not judged, and its step is
// the one in which it is handed (dataloader:handed), so a batch received
// steps before it is used is no leak while one the program keeps still is.
// Driver (HAL, HOST_PINNED) and host heap (HOST) blocks still live at process
// exit are leaks too; host ones are reported grouped by allocation site.
// From step 2 on, the min/max ratio of a pool's usage within a step reaching
// a new extreme is warned about ("memory fluctuation").
//
// Offline mark rule (check_leaks): with option mstx_info set, marks A, B, C =
// the mstx marks named mstx_info number start_index, +1, +2 (per device); HAL
// blocks allocated between A and B and not freed by C are leaks.
//
// State is proportional to the live blocks (plus distinct stacks and the
// leaks found), never to the history.
#include <msmemscope/plugin.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "../common/analyzer_util.h"
#include "../common/block_table.h"
#include "suppressions.h"
#include "util/addr_map.h"
#include "util/stack_site.h"

namespace {

using namespace msms_an;
using msmemscope::attr;

// Interned stack texts. A live run's events carry the capture's stack ids
// (equal ids, equal stacks): those are looked up first, so a stack's text
// is hashed once, not at every MALLOC (offline there are no ids).
class Stacks {
public:
    uint32_t intern(std::string_view text) {
        if (text.empty()) return 0;
        auto it = index_.find(text);
        if (it != index_.end()) return it->second;
        texts_.emplace_back(text);
        uint32_t id = static_cast<uint32_t>(texts_.size());
        index_.emplace(texts_.back(), id);
        return id;
    }
    // kind: 0 C stack, 1 Python stack (their ids are counted apart)
    uint32_t intern(uint64_t capture_id, unsigned kind, std::string_view text) {
        if (!capture_id || text.empty()) return intern(text);
        uint64_t key = capture_id * 2 + kind;
        auto it = by_id_.find(key);
        if (it != by_id_.end()) return it->second;
        uint32_t id = intern(text);
        by_id_.emplace(key, id);
        return id;
    }
    const std::string& text(uint32_t id) const {
        static const std::string empty;
        return id == 0 || id > texts_.size() ? empty : texts_[id - 1];
    }

private:
    std::deque<std::string> texts_;  // never moved: index_'s keys point into them
    std::unordered_map<std::string_view, uint32_t> index_;
    msms::AddrMap<uint32_t> by_id_;
};

// Where a block written as a shadow MALLOC (allocated while collection was
// off, reported when it started; no stack) comes from, in the report.
constexpr const char* kBeforeStart = "before collection started (no stack: allocated while collection was off)";
// Where such blocks still live at the end were made, in the report's line
// ("... bytes allocated before collection started were still allocated at
// stop()": framework/host/process_summary_json.cpp reads it) and in the
// leaks_not_judged finding's "why".
constexpr const char* kMadeBeforeStart = "allocated before collection started";
// The same when collection started more than once (start() after a stop()):
// such a block may have been made between two ranges, after the first start.
constexpr const char* kMadeWhileOff =
    "allocated before collection started or between a stop() and the next start()";
// A shadow MALLOC with Attr import:true: the imports' heap, the host blocks
// that Python imports made and that are still live, as one block (its Attr
// blocks says how many; framework/agent/import_fold.h).
constexpr const char* kImport =
    "while importing Python modules (no stack: host_heap.python_imports=fold; =record keeps the stacks)";

bool has_true(const msms_event& ev, const char* key) {
    size_t n = strlen(key);
    for (uint32_t i = 0; i < ev.attr_count; ++i) {
        const msms_kv& a = ev.attrs[i];
        if (a.key.size == n && memcmp(a.key.data, key, n) == 0)
            return a.value.size == 4 && memcmp(a.value.data, "true", 4) == 0;
    }
    return false;
}

bool is_shadow(const msms_event& ev) { return has_true(ev, "shadow"); }

// Where a shadow block came from (kBeforeStart or kImport); nullptr: not a shadow.
const char* shadow_origin(const msms_event& ev) {
    if (!is_shadow(ev)) return nullptr;
    return has_true(ev, "import") ? kImport : kBeforeStart;
}

// The shell a process is, by its command's first word ("bash", "/bin/sh",
// "-bash" for a login shell, "busybox sh"), else "". A shell frees none of
// its heap before it exits (bash, dash, zsh...): what it holds then is the
// shell's own, never a leak of the program it launched (`msmemscope bash
// user.sh`, a `#!/bin/sh` script, Python's subprocess with shell=True). By
// the command's words: the host hands plugins the command line, not the
// image's path; a #! script's first word is its interpreter's path.
std::string shell_of(const std::string& command_line) {
    std::istringstream words(command_line);
    std::string first, second;
    words >> first >> second;
    std::string name = first.substr(first.rfind('/') + 1);
    if (!name.empty() && name[0] == '-') name.erase(0, 1);
    if (name == "busybox" && (second == "sh" || second == "ash")) return "busybox " + second;
    for (const char* shell : {"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash"})
        if (name == shell) return name;
    return "";
}

// Whether the run's config.json asks for `kind` ("python", "c") stacks:
// its "call_stack" object names the kinds taken, with their depths.
bool stacks_asked(const std::string& config_json, const std::string& kind) {
    size_t key = config_json.find("\"call_stack\"");
    if (key == std::string::npos) return false;
    size_t open = config_json.find('{', key), close = config_json.find('}', key);
    if (open == std::string::npos || close == std::string::npos || close < open) return false;
    return config_json.substr(open, close - open).find("\"" + kind + "\"") != std::string::npos;
}

// The first frame of a C stack outside the allocator and libc's wrappers
// (the caller that asked for the memory); the inner ones stay in the stack.
// The live view names sites by the same rule (util/stack_site.h).
std::string site_of(const std::string& stack) { return msms::caller_site(stack); }

// A Python frame of the program, not of Python's or a package's own code.
// (msmemscope's own package never appears: its frames are left out where
// stacks are taken, by its exact folder. A folder named msmemscope in the
// program's path says nothing: a checkout of ours is one.)
bool user_py_frame(const std::string& line) {
    return !(line.rfind("<frozen ", 0) == 0 || line.find("/site-packages/") != std::string::npos ||
             line.find("/dist-packages/") != std::string::npos || line.find("/lib/python3") != std::string::npos);
}

// The first frame of the program's own code in a Python stack ("file(line):
// func"), else the innermost frame.
std::string user_frame(const std::string& stack) {
    size_t start = 0;
    while (start < stack.size()) {
        size_t nl = stack.find('\n', start);
        std::string line = first_frame(stack.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
        if (!line.empty() && user_py_frame(line)) return line;
        if (nl == std::string::npos) break;
        start = nl + 1;
    }
    return first_frame(stack);
}

// Shortest decimal that reads back as the same double (Python's repr).
std::string py_float(double v) {
    char buf[64];
    for (int p = 1; p <= 17; ++p) {
        std::snprintf(buf, sizeof(buf), "%.*g", p, v);
        if (std::strtod(buf, nullptr) == v) break;
    }
    std::string s = buf;
    if (s.find_first_of(".en") == std::string::npos) s += ".0";
    // Python writes 1e-06 as 1e-06 too; %g does the same.
    return s;
}

class LeaksAnalyzer : public msmemscope::IAnalyzer {
public:
    static constexpr const char* kTypeName = "leaks";
    static constexpr const char* kVersion = "1.0.0";
    static constexpr const char* kDescription =
        "memory leaks: framework-pool blocks that outlive a step, driver and host blocks live at exit; "
        "offline mark rule with mstx_info";
    static constexpr const char* kEvents = "alloc,free";

    static const msms_option_spec* options(uint32_t& count) {
        static const msms_option_spec specs[] = {
            {"mstx_info", MSMS_OPT_STRING, "", nullptr, 0, 0,
             "offline check_leaks: name of the mstx marks A, B, C (empty: the step rule)"},
            {"start_index", MSMS_OPT_INT, "0", nullptr, 0, 1000000000, "check_leaks: index of mark A"},
            {"max_lines", MSMS_OPT_INT, "20", nullptr, 1, 100000,
             "most console lines per device of each list: upstream's 'Direct ...' lines (then '... N more in "
             "FILE': every block in leaks_{timestamp}.txt in the run folder), our leak sites, driver blocks and "
             "host sites live at exit (the rest are summed up)"},
            {"suppress", MSMS_OPT_STRING, "", nullptr, 0, 0,
             "leak suppression files, comma-separated (heaptrack/LSan format: one 'leak:PATTERN' or PATTERN per "
             "line, '#' comments); CLI --suppress, YAML suppress"},
            {"default_suppressions", MSMS_OPT_BOOL, "true", nullptr, 0, 0,
             "suppress the interpreter's and torch's own one-time set-up allocations (CLI --default-suppressions)"},
        };
        count = sizeof(specs) / sizeof(specs[0]);
        return specs;
    }

    LeaksAnalyzer(msmemscope::Host host, const msmemscope::Options& opts) : host_(host) {
        mstx_info_ = opts.get("mstx_info");
        start_index_ = static_cast<uint64_t>(opts.get_int("start_index", 0));
        max_lines_ = static_cast<size_t>(opts.get_int("max_lines", 20));
        for (auto& file : split(opts.get("suppress"))) {
            std::string why;
            if (!suppressions_.load_file(file, why)) load_errors_.push_back(why);
        }
        builtin_ = opts.get_bool("default_suppressions", true);
        if (builtin_) suppressions_.add_builtin();
    }

    ~LeaksAnalyzer() override {
        if (dir_fd_ >= 0) ::close(dir_fd_);
    }

    void begin(const msmemscope::RunInfo& run) override {
        // The run folder, held from now on: the full leak list is written
        // under this descriptor (only if the console list is cut).
        out_dir_ = run.output_dir.empty() ? "." : run.output_dir;
        ts_ = run.timestamp;
        if (dir_fd_ < 0) {
            // The host's descriptor of the run folder (ABI 1.3, #29 item 4),
            // or the folder opened without following a link (older hosts).
            std::string why;
            dir_fd_ = run.open_output_dir(why);
            if (dir_fd_ < 0) dir_error_ = errno ? std::strerror(errno) : why;
        }
        for (auto& e : load_errors_) host_.error("leaks: " + e);
        shell_ = shell_of(run.command_line);
        took_python_ = stacks_asked(run.config_json, "python");
        // --attach: the range ends when msmemscope detaches, not at a stop()
        attached_ = run.config_json.find("\"attach\":") != std::string::npos;
        if (steps_selected(run.config_json)) {
            disabled_ = true;
            host_.warn("leaks: the leak analysis is off when --steps selects steps (only some events are collected)");
        }
    }

    void on_event(const msms_event& ev) override {
        if (disabled_) return;
        if (!mstx_info_.empty()) return marks_event(ev);
        uint64_t ended = 0;
        if (steps_.conflicting(ev)) {
            if (!warned_sources_) {
                host_.error("leaks: 'mstx' step ranges and 'msmemscope.step()' cannot be used simultaneously to "
                            "update the step; the later source is ignored");
                warned_sources_ = true;
            }
        }
        switch (steps_.feed(ev, ended)) {
        case StepTracker::Boundary::End: step_end(ended); break;
        case StepTracker::Boundary::Start: step_start(); break;
        case StepTracker::Boundary::EndAndStart:
            step_end(ended);
            step_start();
            break;
        default: break;
        }
        track_op(ev);
        if (ev.py_stack.size) python_ = took_python_ = true;
        if (ev.kind == MSMS_EV_PY_TRACE) python_ = true;
        // Collection ended at stop() (the Python API, or start()/stop() under
        // the CLI): what is live then is live "at stop()", not at exit. The
        // Python API's session ends with a STOP_TRACE at the interpreter's
        // exit too (Attr at_exit:true, no stop() called): live at exit.
        if (ev.kind == MSMS_EV_SYSTEM && (ev.type == MSMS_T_START_TRACE || ev.type == MSMS_T_STOP_TRACE))
            at_stop_ = ev.type == MSMS_T_STOP_TRACE && !has_true(ev, "at_exit");
        if (ev.kind == MSMS_EV_SYSTEM && ev.type == MSMS_T_START_TRACE) ++starts_;
        if (ev.kind == MSMS_EV_KERNEL_LAUNCH || (ev.kind == MSMS_EV_OP_LAUNCH &&
                                                 (ev.type == MSMS_T_ATEN_START || ev.type == MSMS_T_ATB_START))) {
            ++launches_[dev_key(ev)];
            return;
        }
        if (ev.kind == MSMS_EV_MALLOC) on_malloc(ev);
        else if (ev.kind == MSMS_EV_FREE) on_free(ev);
        else if (ev.kind == MSMS_EV_ACCESS && ev.type == MSMS_T_UNKNOWN) on_dataloader(ev);
    }

    void finish() override {
        if (disabled_) return;
        if (!mstx_info_.empty()) return marks_finish();
        report_online();
    }

private:
    // ------------------------------------------------------------ step rule
    struct PoolBlock {
        uint64_t size, step, kernel, duration, malloc_id;
        uint32_t stack, py_stack, op;  // op: interned operator name (0: none)
        bool held = false;  // a DataLoader batch not yet handed to the program: not judged
        // DDP's gradient buckets, which its Reducer rebuilds once in the
        // forward after the first backward (owner PTA@ddp_buckets, the
        // Python collector's label): torch's set-up, not judged, like the
        // warm-up's blocks; else every DDP run would name its forward line
        // as leaking the model's size in step 2.
        bool setup = false;
        // A shadow MALLOC (shadow:true): a block that existed when collection
        // started (made before start(), or between a stop() and the next
        // start()). Kept for the pool's figures and its FREE, never judged
        // (upstream's analyses leave shadow events alone): its step would be
        // the step current at the start, not the one that made it.
        bool shadow = false;
    };
    struct LeakKey {
        uint64_t ptr;
        uint16_t type;
        uint64_t step;
        bool operator<(const LeakKey& o) const {
            return std::tie(step, ptr, type) < std::tie(o.step, o.ptr, o.type);
        }
    };
    struct LeakInfo {
        uint64_t size, kernel, duration, malloc_id;
        uint32_t stack, py_stack, op;
    };
    struct Gap {
        double ratio = 0;
        uint64_t step = 0;
        int64_t min_alloc = 0;
    };
    struct PoolStatus {
        int64_t step_max = 0, step_min = 0, allocated = 0;
        Gap max_gap, min_gap;
    };
    struct ExitBlock {
        uint64_t size, step, kernel, malloc_id, ts;
        uint32_t stack;      // the C stack, else the Python one
        uint32_t py_stack;   // the Python stack beside a C one, else 0
        uint32_t blocks;     // the blocks it stands for (the imports' heap: its Attr blocks), else 1
        const char* shadow;  // a shadow MALLOC (no stack): kBeforeStart or kImport; else nullptr
        uint32_t caller = 0;  // the allocator's caller (msms_event.alloc_caller: Python stacks only), else 0
    };
    struct Device {
        std::unordered_map<BlockKey, PoolBlock, BlockKeyHash> pool;
        std::map<LeakKey, LeakInfo> leaks;
        std::map<uint16_t, PoolStatus> status;
        BlockTable<ExitBlock> exit;  // driver and host blocks live now
        // The warm-up's blocks still live when the last step ended (the
        // note's figures: at exit a Python program's teardown has freed them).
        uint64_t warm_live = 0, warm_bytes = 0, warm_step = 0;
        uint64_t setup_live = 0, setup_bytes = 0;  // the same for DDP's rebuilt buckets
        // The last step's own blocks still live when it ended: judged only
        // when the step after theirs ends, which never came (the note's figures).
        uint64_t last_live = 0, last_bytes = 0;
    };

    // The Python stack of an event that also has a C one (stack_of took the C one).
    uint32_t py_beside_c(const msms_event& ev) {
        return ev.c_stack.size && ev.py_stack.size ? stacks_.intern(ev.py_stack_id, 1, view(ev.py_stack)) : 0;
    }

    // The allocator's caller of a host block with a Python stack only (ABI
    // 1.4, msms_event.alloc_caller), interned; 0 when none.
    uint32_t caller_of(const msms_event& ev) {
        if (ev.struct_size < offsetof(msms_event, alloc_caller_id) + sizeof(ev.alloc_caller_id) ||
            !ev.alloc_caller.size || ev.c_stack.size)
            return 0;
        return stacks_.intern(ev.alloc_caller_id, 0, view(ev.alloc_caller));
    }

    uint32_t stack_of(const msms_event& ev) {
        if (ev.c_stack.size) return stacks_.intern(ev.c_stack_id, 0, view(ev.c_stack));
        if (ev.py_stack.size) return stacks_.intern(ev.py_stack_id, 1, view(ev.py_stack));
        return 0;
    }
    // The operator running on the event's thread (outermost: the one the
    // program called), interned; 0 outside operators.
    uint32_t op_of(const msms_event& ev) {
        auto it = open_ops_.find(thread_key(ev));
        if (it == open_ops_.end() || it->second.empty()) return 0;
        return it->second.front();
    }
    static uint64_t thread_key(const msms_event& ev) { return (static_cast<uint64_t>(ev.pid) << 32) | ev.tid; }
    void track_op(const msms_event& ev) {
        if (ev.kind != MSMS_EV_OP_LAUNCH) return;
        auto& st = open_ops_[thread_key(ev)];
        if (ev.type == MSMS_T_ATEN_START || ev.type == MSMS_T_ATB_START) {
            st.push_back(stacks_.intern(view(ev.name)));
        } else if ((ev.type == MSMS_T_ATEN_END || ev.type == MSMS_T_ATB_END) && !st.empty()) {
            uint32_t name = stacks_.intern(view(ev.name));
            // Pop to the matching start (an unmatched end pops nothing).
            for (size_t i = st.size(); i-- > 0;)
                if (st[i] == name) {
                    st.resize(i);
                    break;
                }
        }
    }
    // The C allocation site of a block's stack (its C stack, not the Python
    // one, which is named by "allocated by").
    std::string ev_c_site(const std::string& stack, const std::string& py) const {
        if (stack.empty() || stack == py) return "";
        return site_of(stack);
    }
    uint64_t kernel_of(const msms_event& ev) {
        auto it = launches_.find(dev_key(ev));
        return it == launches_.end() ? 0 : it->second;
    }

    void on_malloc(const msms_event& ev) {
        Device& d = devices_[dev_key(ev)];
        if (msms_is_framework_pool(ev.type)) {
            BlockKey k = block_key(ev);
            if (d.pool.count(k))
                host_.warn("leaks: [device " + device_label(ev) + "] double malloc in " + pool_name(ev.type) +
                           ", ptr: " + hex(ev.ptr));
            const bool shadow = is_shadow(ev);
            PoolBlock b{ev.size, steps_.current(), shadow ? 0 : kernel_of(ev), 0, ev.id, stack_of(ev),
                        ev.py_stack.size ? stacks_.intern(ev.py_stack_id, 1, view(ev.py_stack)) : 0u, op_of(ev)};
            b.shadow = shadow;
            b.setup = attr(ev, "owner") == kDdpBuckets;
            d.pool[k] = b;
            update_allocated(d, ev);
            // Each byte once: a framework block at the address of a live host
            // heap block is that block's memory (a CPU framework allocating
            // with malloc); it is the framework's, never also a host leak.
            d.exit.erase(BlockKey{ev.device_kind, ev.device_id, MSMS_T_HOST, ev.ptr});
        } else if (ev.type == MSMS_T_HAL || ev.type == MSMS_T_HOST || ev.type == MSMS_T_HOST_PINNED) {
            // A mapping (Attr virtual:true: cuMemMap of a cuMemCreate handle)
            // is memory its handle's block holds: that block is the leak.
            if (attr(ev, "virtual") == "true") return;
            const char* shadow = shadow_origin(ev);
            if (shadow == kImport) python_ = true;  // the package's boot marks a CPython's imports
            d.exit.put(block_key(ev), ExitBlock{ev.size, steps_.current(), kernel_of(ev), ev.id, ev.timestamp_ns,
                                                  stack_of(ev), py_beside_c(ev),
                                                  shadow == kImport ? msmemscope::attr_blocks(ev) : 1u, shadow,
                                                  caller_of(ev)});
        }
    }

    void on_free(const msms_event& ev) {
        auto dit = devices_.find(dev_key(ev));
        if (msms_is_framework_pool(ev.type)) {
            if (dit == devices_.end()) dit = devices_.emplace(dev_key(ev), Device{}).first;
            dit->second.pool.erase(block_key(ev));
            update_allocated(dit->second, ev);
        } else if (dit != devices_.end()) {
            dit->second.exit.erase(block_key(ev));
        }
    }

    // A DataLoader batch's block (the Python collector's ACCESS UNKNOWN row,
    // Attr dataloader, Ptr the storage's data): "held": received and kept by
    // the DataLoader for a later turn, not judged; "handed": given to the
    // program now, its step starts over at the current one (it must be gone
    // by the end of the next).
    void on_dataloader(const msms_event& ev) {
        std::string_view what = attr(ev, "dataloader");
        if (what.empty() || ev.ptr == 0) return;
        auto dit = devices_.find(dev_key(ev));
        if (dit == devices_.end()) return;
        PoolBlock* b = batch_block(dit->second, ev);
        if (!b) return;
        if (what == "held") {
            b->held = true;
        } else if (what == "handed") {
            b->held = false;
            b->step = steps_.current();
            b->duration = 0;
        }
    }

    // The framework block that holds a storage whose data starts at ev.ptr:
    // the block at that address, else the one it lies in (torch's
    // file_system sharing strategy maps a storage with a 64-byte header in
    // front of its data: the block is the mapping).
    PoolBlock* batch_block(Device& d, const msms_event& ev) {
        for (uint16_t type : {MSMS_T_PTA, MSMS_T_PTA_WORKSPACE, MSMS_T_ATB, MSMS_T_MINDSPORE}) {
            auto it = d.pool.find(BlockKey{ev.device_kind, ev.device_id, type, ev.ptr});
            if (it != d.pool.end()) return &it->second;
        }
        // (a few notes a step; the pool holds the framework pools' live blocks)
        for (auto& [k, b] : d.pool)
            if (k.dev_kind == ev.device_kind && k.dev_id == ev.device_id && k.ptr < ev.ptr && ev.ptr - k.ptr < b.size)
                return &b;
        return nullptr;
    }

    void update_allocated(Device& d, const msms_event& ev) {
        if (ev.pool_used < 0) return;
        PoolStatus& s = d.status[ev.type];
        s.allocated = ev.pool_used;
        if (steps_.current() <= kSkipSteps) return;  // not stable yet
        if (s.step_max == 0) {
            s.step_max = s.step_min = ev.pool_used;
            return;
        }
        s.step_max = std::max(s.step_max, ev.pool_used);
        s.step_min = std::min(s.step_min, ev.pool_used);
    }

    void step_start() {
        for (auto& [dk, d] : devices_)
            for (auto& [k, b] : d.pool) ++b.duration;
    }

    // One warning line per device and step (issue #27): upstream's line when
    // one block newly outlived its step ("ptr: P has lasted for N steps ..."),
    // else the count, the first few addresses and the bytes of all of them;
    // a memory fluctuation found at the same step end is said on that line.
    void step_end(uint64_t step) {
        for (auto& [dk, d] : devices_) {
            struct Fresh {
                uint64_t n = 0, bytes = 0, min_dur = UINT64_MAX, max_dur = 0;
                std::vector<uint64_t> ptrs;  // the first few, in address order
            };
            std::map<uint16_t, Fresh> fresh;  // by pool
            std::vector<std::pair<uint64_t, const PoolBlock*>> found;
            d.warm_live = d.warm_bytes = d.setup_live = d.setup_bytes = d.last_live = d.last_bytes = 0;
            d.warm_step = step;
            for (auto& [k, b] : d.pool) {
                if (b.shadow) continue;  // there when collection started: not judged
                if (b.setup) {
                    ++d.setup_live;
                    d.setup_bytes += b.size;
                    continue;
                }
                if (b.step <= kSkipSteps) {
                    ++d.warm_live;
                    d.warm_bytes += b.size;
                    continue;
                }
                if (b.duration < kDurationThreshold && !b.held) {
                    ++d.last_live;
                    d.last_bytes += b.size;
                }
                if (b.duration < kDurationThreshold || b.held) continue;
                LeakKey lk{k.ptr, k.type, b.step};
                if (!d.leaks.count(lk)) {
                    Fresh& f = fresh[k.type];
                    ++f.n;
                    f.bytes += b.size;
                    f.min_dur = std::min(f.min_dur, b.duration);
                    f.max_dur = std::max(f.max_dur, b.duration);
                    f.ptrs.push_back(k.ptr);
                }
                d.leaks[lk] = LeakInfo{b.size, b.kernel, b.duration, b.malloc_id, b.stack, b.py_stack, b.op};
            }
            std::vector<std::string> parts;
            for (auto& [type, f] : fresh) {
                std::string steps = std::to_string(f.max_dur);
                if (f.min_dur != f.max_dur) steps = std::to_string(f.min_dur) + "-" + steps;
                if (f.n == 1) {
                    parts.push_back("ptr: " + hex(f.ptrs[0]) + " has lasted for " + steps +
                                    " steps. Please check if there is leaks in " + pool_name(type) + ".");
                    continue;
                }
                std::sort(f.ptrs.begin(), f.ptrs.end());
                std::string list;
                for (size_t i = 0; i < f.ptrs.size() && i < kWarnPtrs; ++i) list += (i ? ", " : "") + hex(f.ptrs[i]);
                if (f.n > kWarnPtrs) list += " and " + std::to_string(f.n - kWarnPtrs) + " more";
                parts.push_back(std::to_string(f.n) + " ptrs (" + list + "; " + std::to_string(f.bytes) +
                                " bytes) have lasted for " + steps + " steps. Please check if there is leaks in " +
                                pool_name(type) + ".");
            }
            std::vector<std::string> gaps = check_gap(d, step);
            if (parts.empty()) {
                for (auto& g : gaps) host_.warn("leaks: memory fluctuation: [device " + dev_name(dk) + "]: " + g);
                continue;
            }
            std::string line = "leaks: [device " + dev_name(dk) + "][step " + std::to_string(step) + "]: ";
            for (size_t i = 0; i < parts.size(); ++i) line += (i ? " " : "") + parts[i];
            for (auto& g : gaps) line += " Memory fluctuation: " + g;
            host_.warn(line);
        }
    }

    // Upstream's memory fluctuation check; returns what to warn about
    // ("PTA Min/Max Allocated memory largest gap increases to X, last is Y").
    std::vector<std::string> check_gap(Device& d, uint64_t step) {
        std::vector<std::string> out;
        if (step <= kSkipSteps) return out;
        for (auto& [type, s] : d.status) {
            if (s.step_max == 0) continue;
            double gap = static_cast<double>(s.step_min) / static_cast<double>(s.step_max);
            if (s.max_gap.ratio == 0) {
                s.max_gap = s.min_gap = Gap{gap, step, s.step_min};
            } else {
                char buf[256];
                if (gap > s.max_gap.ratio) {
                    std::snprintf(buf, sizeof(buf), "%s Min/Max Allocated memory largest gap increases to %f, last is %f",
                                  pool_name(type).c_str(), gap, s.max_gap.ratio);
                    out.push_back(buf);
                    s.max_gap = Gap{gap, step, s.step_min};
                }
                if (gap < s.min_gap.ratio) {
                    std::snprintf(buf, sizeof(buf),
                                  "%s Min/Max Allocated memory smallest gap decreases to %f, last is %f",
                                  pool_name(type).c_str(), gap, s.min_gap.ratio);
                    out.push_back(buf);
                    s.min_gap = Gap{gap, step, s.step_min};
                }
            }
            s.step_max = s.step_min = 0;
        }
        return out;
    }

    void finding(const DevKey& dk, uint16_t type, const char* kind, const std::vector<std::pair<std::string, std::string>>& extra) {
        std::vector<std::pair<std::string, std::string>> cols{{"device", dev_name(dk)}, {"pool", pool_name(type)},
                                                              {"kind", kind}};
        cols.insert(cols.end(), extra.begin(), extra.end());
        host_.add_finding("leaks", cols);
    }

    // Upstream's name of a framework pool in its console report
    // (csrc/analysis/stepinner_analyzer.h PoolTypeToString).
    static std::string console_pool(uint16_t type) {
        switch (type) {
        case MSMS_T_PTA: return "Pytorch Caching memory pool";
        case MSMS_T_PTA_WORKSPACE: return "Pytorch Workspace memory pool";
        case MSMS_T_ATB: return "ATB memory pool";
        case MSMS_T_MINDSPORE: return "Mindspore memory pool";
        default: return pool_name(type);
        }
    }

    // The console report. First upstream's, line for line and at column 0
    // (csrc/analysis/stepinner_analyzer.cpp ReportLeak then ReportGap): the
    // framework-pool blocks that outlived their step, per device, then the
    // gap analysis of every device. Then ours, after a header line of its
    // own, indented: where each leaked block was allocated, the warm-up
    // note, and the driver and host blocks still allocated at exit (which
    // upstream's report does not list).
    // What the suppressions took out of one device's report.
    struct Suppressed {
        uint64_t blocks = 0, bytes = 0;
        std::map<std::string, std::set<std::string>> sites;  // rule origin (file or built-in) -> sites
        std::set<std::string> counted;                       // every site in `sites`, once
        bool take(msms_leaks::Suppressions& s, const std::string& stack, const std::string& site, uint64_t size) {
            msms_leaks::Suppressions::Rule* r = s.match(stack, site);
            return r && took(*r, site, size);
        }
        // Counts a block rule `r` took out, by its site.
        bool took(const msms_leaks::Suppressions::Rule& r, const std::string& site, uint64_t size) {
            ++blocks;
            bytes += size;
            std::string origin = r.origin.substr(0, r.origin.rfind(':'));
            // each site under one list (the first that took a block of it):
            // the counts add up to the sites left out
            if (!counted.count(site)) {
                counted.insert(site);
                sites[origin].insert(site);
            }
            return true;
        }
        // The imports' heap (no stack to match): one-time set-up, as the
        // import system's frames are when its blocks are recorded one by one.
        void take_imports(uint64_t n, uint64_t size) {
            blocks += n;
            bytes += size;
            if (counted.insert(kImport).second) sites[msms_leaks::kBuiltinOrigin].insert(kImport);
        }
        // "N allocation site(s) suppressed on device D (B block(s), X bytes): K by the built-in list of one-time set-up (...), M by FILE"
        std::string line(const std::string& device) const {
            std::set<std::string> all;
            std::vector<std::string> parts;
            for (auto& [origin, ss] : sites) {
                all.insert(ss.begin(), ss.end());
                parts.push_back(std::to_string(ss.size()) + " by " +
                                (origin == msms_leaks::kBuiltinOrigin
                                     ? std::string("the built-in list of one-time set-up (the interpreter, the imports' heap, the loader, libc's locale tables; --default-suppressions=false shows them)")
                                 : origin == msms_leaks::kOwnOrigin
                                     ? std::string("msmemscope's own modules (the profiler's memory)")
                                 : origin == msms_leaks::kTorchOrigin
                                     ? std::string("the built-in list of torch's one-time set-up (cpuinfo's tables, libgomp's threads, c10's hooks registries; --default-suppressions=false shows them)")
                                     : origin));
            }
            std::string text = std::to_string(all.size()) + " allocation site(s) suppressed on device " + device + " (" +
                               std::to_string(blocks) + " block(s), " + std::to_string(bytes) + " bytes): ";
            for (size_t i = 0; i < parts.size(); ++i) text += (i ? ", " : "") + parts[i];
            return text;
        }
    };
    std::map<DevKey, Suppressed> suppressed_;

    bool suppressed(const DevKey& dk, uint32_t stack, uint32_t py_stack, uint64_t size, uint32_t caller = 0) {
        const std::string& st = stacks_.text(stack);
        const std::string& py = stacks_.text(py_stack);
        if (st.empty() && py.empty()) return caller && suppressed_by_caller(dk, caller, size);
        const std::string py_site = first_frame(py);
        std::string site = !st.empty() && st != py ? site_of(st) : py_site;
        // A Python object's block has the interpreter as its C site whatever
        // code made it: with a Python stack, the line that ran is the site
        // the built-in list judges (the import system's frames stay set-up).
        if (!py.empty() && site != py_site && msms_leaks::interpreter_frame(site)) site = py_site;
        std::string all = py.empty() || st == py ? st : st.empty() ? py : st + "\n" + py;
        if (suppressed_[dk].take(suppressions_, all, site, size)) return true;
        return caller && suppressed_by_caller(dk, caller, size);
    }

    // A host block with a Python stack only: its line is the program's, but
    // the native code that called the allocator may be a library's one-time
    // set-up (torch's cpuinfo tables, libgomp's thread state, c10's hooks
    // registries) that the built-in list knows by that site, as it would
    // with a C stack. The interpreter as the caller is no such site: a
    // Python object's block, whose line stays the site.
    bool suppressed_by_caller(const DevKey& dk, uint32_t caller, uint64_t size) {
        if (!builtin_) return false;
        std::string site = site_of(stacks_.text(caller));
        if (site.empty() || msms_leaks::interpreter_frame(site)) return false;
        msms_leaks::Suppressions::Rule* r = suppressions_.match_builtin_site(site);
        return r && suppressed_[dk].took(*r, site, size);
    }

    // One stack of a block that has both (innermost first): its C frames
    // above the interpreter (an extension, libffi, an allocator), then the
    // Python frames that ran them; the interpreter's own frames below, down
    // to _start, would read as called from the Python ones.
    static std::string merged_stack(const std::string& c, const std::string& py) {
        std::string out;
        size_t start = 0;
        while (start < c.size()) {
            size_t nl = c.find('\n', start);
            std::string_view frame(c.data() + start, (nl == std::string::npos ? c.size() : nl) - start);
            if (msms_leaks::interpreter_frame(frame)) break;
            out.append(frame).push_back('\n');
            if (nl == std::string::npos) break;
            start = nl + 1;
        }
        return out + py;
    }

    // Where a leaked block came from, in our words: "allocated by: operator
    // OP, called from FILE(LINE): FUNC" (the operator the program called and
    // its first own frame), "allocated at: C_SITE" (the first C frame outside
    // the allocator), either or both ("; " between), "" when nothing is known.
    // A site (site = true: the key the report groups by) is the operator and
    // the first user frame when the block has one; the C site only without.
    std::string where_from(const LeakInfo& l, std::string* py_site_out = nullptr, bool site = false) const {
        const std::string& st = stacks_.text(l.stack);
        const std::string& py = stacks_.text(l.py_stack);
        const std::string& op = stacks_.text(l.op);
        std::string py_site = py.empty() ? std::string() : user_frame(py);
        if (py_site_out) *py_site_out = py_site;
        std::string c_site = ev_c_site(st, py);
        std::string by;
        if (!op.empty()) by += "operator " + op;
        if (!py_site.empty()) by += (by.empty() ? "" : ", ") + std::string("called from ") + py_site;
        std::string text;
        if (!by.empty()) text = "allocated by: " + by;
        if (site && !py_site.empty()) return text;
        if (!c_site.empty()) text += (text.empty() ? "" : "; ") + std::string("allocated at: ") + c_site;
        return text;
    }

    // The console report of the step rule, per device: upstream's ERROR line,
    // its "Direct ..." line for the first max_lines blocks, then "... N
    // more in FILE" where FILE (leaks_{ts}.txt in the run folder) holds every
    // block's line with where it was allocated, and upstream's SUMMARY of all
    // of them; the gap analysis; then ours: the leaked blocks grouped by
    // site (operator and first user frame), largest first.
    void report_online() {
        std::vector<std::string> extra;
        bool cut = false;
        for (auto& [dk, d] : devices_) {
            // Suppressed leaks leave the report and the findings.
            for (auto it = d.leaks.begin(); it != d.leaks.end();)
                it = suppressed(dk, it->second.stack, it->second.py_stack, it->second.size) ? d.leaks.erase(it) : ++it;
            if (d.leaks.size() > max_lines_) cut = true;
        }
        // The full list first, so that the console can name it.
        std::string file, file_error;
        if (cut && !write_full_list(file, file_error))
            host_.error("leaks: the full list of leaked blocks was not written: " + file_error);
        for (auto& [dk, d] : devices_) {
            if (d.leaks.empty()) continue;
            host_.report("====== ERROR: Detected memory leaks on device " + dev_name(dk) + " ======");
            long double bytes = 0;
            uint64_t count = 0;
            struct Site {
                uint64_t n = 0, bytes = 0, first_step = UINT64_MAX, last_step = 0;
            };
            std::map<std::string, Site> sites;
            for (auto& [k, l] : d.leaks) {
                if (count < max_lines_) host_.report(direct_line(k, l));
                std::string py_site;
                Site& s = sites[where_from(l, &py_site, true)];
                ++s.n;
                s.bytes += l.size;
                s.first_step = std::min(s.first_step, k.step);
                s.last_step = std::max(s.last_step, k.step);
                bytes += l.size;
                ++count;
                finding(dk, k.type, "step",
                        {{"ptr", hex(k.ptr)}, {"size", std::to_string(l.size)}, {"step", std::to_string(k.step)},
                         {"kernel", std::to_string(l.kernel)}, {"lasted_steps", std::to_string(l.duration)},
                         {"event_id", std::to_string(l.malloc_id)}, {"operator", stacks_.text(l.op)},
                         {"python_site", py_site}, {"stack", stacks_.text(l.stack)}});
            }
            if (count > max_lines_)
                host_.report("... " + std::to_string(count - max_lines_) +
                             (file.empty() ? " more (the full list was not written: " + file_error + ")"
                                           : " more in " + file));
            std::ostringstream os;  // upstream streams the sum with the default precision (6 digits)
            os << "====== SUMMARY: " << bytes / (1024.0L * 1024.0L) << " Mb(s) leaked in " << count
               << " allocation(s) ======";
            host_.report(os.str());
            site_lines(dk, sites, count, static_cast<uint64_t>(bytes), extra);
        }
        for (auto& [dk, d] : devices_) report_gap(dk, d);
        for (auto& [dk, d] : devices_) exit_details(dk, d, extra);
        for (auto& [dk, sup] : suppressed_)
            if (sup.blocks) extra.push_back("  " + sup.line(dev_name(dk)));
        if (extra.empty()) return;
        host_.report("leaks: msmemscope's details (not in upstream's report):");
        for (auto& l : extra) host_.report(l);
    }

    template <class Site>
    static std::vector<std::pair<std::string, Site>> largest_first(const std::map<std::string, Site>& sites) {
        std::vector<std::pair<std::string, Site>> sorted(sites.begin(), sites.end());
        std::sort(sorted.begin(), sorted.end(), [](auto& a, auto& b) {
            if (a.second.bytes != b.second.bytes) return a.second.bytes > b.second.bytes;
            if (a.second.n != b.second.n) return a.second.n > b.second.n;
            return a.first < b.first;
        });
        return sorted;
    }

    template <class Site>
    static std::string site_line(const std::string& where, const Site& s) {
        std::string steps = s.first_step == s.last_step
                                ? "step " + std::to_string(s.first_step)
                                : "steps " + std::to_string(s.first_step) + "-" + std::to_string(s.last_step);
        return std::to_string(s.n) + " block(s), " + std::to_string(s.bytes) + " bytes (" + steps + "): " +
               (where.empty() ? std::string("allocated at: an unknown site (collect stacks with --call-stack=python or c)")
                              : where);
    }

    // Ours: one device's leaked blocks by site, largest first (max_lines
    // sites at most; the rest summed up).
    template <class Site>
    void site_lines(const DevKey& dk, const std::map<std::string, Site>& sites, uint64_t count, uint64_t bytes,
                    std::vector<std::string>& lines) const {
        auto sorted = largest_first(sites);
        lines.push_back("  Leaked blocks on device " + dev_name(dk) + " by site, largest first: " +
                        std::to_string(count) + " block(s), " + std::to_string(bytes) + " bytes, from " +
                        std::to_string(sorted.size()) + " site(s):");
        uint64_t more_sites = 0, more_n = 0, more_bytes = 0;
        for (size_t i = 0; i < sorted.size(); ++i) {
            if (i < max_lines_) {
                lines.push_back("    " + site_line(sorted[i].first, sorted[i].second));
            } else {
                ++more_sites;
                more_n += sorted[i].second.n;
                more_bytes += sorted[i].second.bytes;
            }
        }
        if (more_sites)
            lines.push_back("    ... and " + std::to_string(more_sites) + " more site(s): " + std::to_string(more_n) +
                            " block(s), " + std::to_string(more_bytes) + " bytes");
    }

    static std::string direct_line(const LeakKey& k, const LeakInfo& l) {
        // A collector's own pool (abi.h msms_is_custom_pool) is named by the
        // collector and has no kernels: "Direct MYPOOL leak of ... at step 3."
        if (msms_is_custom_pool(k.type))
            return "Direct " + console_pool(k.type) + " leak of " + mb(l.size) + " Mb(s) at " + hex(k.ptr) +
                   " at step " + std::to_string(k.step) + ".";
        return "Direct " + console_pool(k.type) + " leak of " + mb(l.size) + " Mb(s) at " + hex(k.ptr) + " in kernel_" +
               std::to_string(l.kernel) + " at step " + std::to_string(k.step) + ".";
    }

    // leaks_{ts}.txt in the run folder: per device, upstream's report of
    // every leaked block, each "Direct ..." line followed by where the block
    // was allocated, then every site. Written to a fresh temporary in the
    // folder (O_EXCL|O_NOFOLLOW, under the directory descriptor taken in
    // begin()) and linked to a free name, so nothing but our own file is
    // ever written. `path` receives the name to print.
    bool write_full_list(std::string& path, std::string& why) {
        if (dir_fd_ < 0) {
            why = "cannot open the run folder " + out_dir_ + ": " + dir_error_;
            return false;
        }
        std::string name = "leaks_" + ts_ + ".txt";
        std::string tmp = "." + name + ".tmp." + std::to_string(getpid());
        int fd = openat(dir_fd_, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0) {
            why = out_dir_ + "/" + tmp + ": " + std::strerror(errno);
            return false;
        }
        std::string text;
        auto flush = [&](bool force) {
            if (!force && text.size() < (1u << 16)) return true;
            size_t off = 0;
            while (off < text.size()) {
                ssize_t w = ::write(fd, text.data() + off, text.size() - off);
                if (w < 0 && errno == EINTR) continue;
                if (w <= 0) return false;
                off += static_cast<size_t>(w);
            }
            text.clear();
            return true;
        };
        bool ok = true;
        for (auto& [dk, d] : devices_) {
            if (d.leaks.empty()) continue;
            text += "====== ERROR: Detected memory leaks on device " + dev_name(dk) + " ======\n";
            long double bytes = 0;
            struct Site {
                uint64_t n = 0, bytes = 0, first_step = UINT64_MAX, last_step = 0;
            };
            std::map<std::string, Site> sites;
            for (auto& [k, l] : d.leaks) {
                std::string where = where_from(l);
                text += direct_line(k, l) + "\n";
                text += "  " + (where.empty() ? std::string("allocated at: an unknown site") : where) + "\n";
                Site& s = sites[where_from(l, nullptr, true)];
                ++s.n;
                s.bytes += l.size;
                s.first_step = std::min(s.first_step, k.step);
                s.last_step = std::max(s.last_step, k.step);
                bytes += l.size;
                ok = ok && flush(false);
            }
            std::ostringstream os;
            os << "====== SUMMARY: " << bytes / (1024.0L * 1024.0L) << " Mb(s) leaked in " << d.leaks.size()
               << " allocation(s) ======\n";
            text += os.str();
            auto sorted = largest_first(sites);
            text += "Leaked blocks on device " + dev_name(dk) + " by site, largest first (" +
                    std::to_string(sorted.size()) + " site(s)):\n";
            for (auto& [where, s] : sorted) text += "  " + site_line(where, s) + "\n";
            ok = ok && flush(false);
        }
        ok = ok && flush(true);
        int err = ok ? 0 : errno;
        if (::close(fd) != 0 && ok) {
            ok = false;
            err = errno;
        }
        // Published under a name nothing has yet (a hard link fails where
        // the name exists: no file is ever replaced, e.g. when --analyze
        // writes into a folder of the user's, or a re-run into the same one).
        for (int i = 1; ok; ++i) {
            if (i > 1) name = "leaks_" + ts_ + "_" + std::to_string(i) + ".txt";
            if (linkat(dir_fd_, tmp.c_str(), dir_fd_, name.c_str(), 0) == 0) break;
            if (errno != EEXIST || i >= 100) {
                ok = false;
                err = errno;
            }
        }
        unlinkat(dir_fd_, tmp.c_str(), 0);
        if (!ok) {
            why = out_dir_ + "/" + name + ": " + std::strerror(err ? err : EIO);
            return false;
        }
        path = out_dir_ + "/" + name;
        return true;
    }

    // Ours: the warm-up note and the blocks still allocated at exit of one device.
    void exit_details(const DevKey& dk, const Device& d, std::vector<std::string>& lines) {
        // Blocks of the warm-up steps are not judged (upstream's rule):
        // say so, with how many such blocks were still live when the last
        // step ended (at exit a Python program's teardown has freed them);
        // before any step ended, at the end.
        uint64_t hidden = d.warm_live, hidden_bytes = d.warm_bytes;
        uint64_t setup = d.setup_live, setup_bytes = d.setup_bytes;
        std::string when = "when step " + std::to_string(d.warm_step) + " (the last) ended";
        if (d.warm_step == 0) {
            hidden = hidden_bytes = setup = setup_bytes = 0;
            for (auto& [k, b] : d.pool)
                if (b.setup && !b.shadow) {
                    ++setup;
                    setup_bytes += b.size;
                } else if (b.step <= kSkipSteps && !b.shadow) {
                    ++hidden;
                    hidden_bytes += b.size;
                }
            when = "at the end";
        }
        if (steps_.current() > kSkipSteps && (hidden || !d.leaks.empty()))
            lines.push_back("  Note: steps 0 and 1 are warm-up and not checked for leaks; on device " + dev_name(dk) +
                            ", " + std::to_string(hidden) + " block(s) (" + std::to_string(hidden_bytes) +
                            " bytes) allocated then were still live " + when + " and were not judged.");
        // Nor are the last step's own blocks: one that a program keeps from
        // then on (the last of a leak repeated every step) is no leak of the
        // report's, and would be said nowhere.
        if (d.warm_step > kSkipSteps && d.last_live)
            lines.push_back("  Note: a block is judged once the step after its own has ended; on device " +
                            dev_name(dk) + ", " + std::to_string(d.last_live) + " block(s) (" +
                            std::to_string(d.last_bytes) + " bytes) allocated in step " + std::to_string(d.warm_step) +
                            " (the last) were still live when it ended and were not judged, nor was what was "
                            "allocated after it.");
        if (setup)
            lines.push_back("  Note: DDP's gradient buckets, rebuilt once after its first iteration (owner " +
                            std::string(kDdpBuckets) + "), are its set-up and not checked for leaks; on device " +
                            dev_name(dk) + ", " + std::to_string(setup) + " block(s) (" + std::to_string(setup_bytes) +
                            " bytes) were still live " + when + ".");
        // 1. driver blocks live at exit, one line each (up to max_lines)
        std::vector<std::pair<const BlockKey*, const ExitBlock*>> driver, host;
        // In allocation order (the table holds addresses per pool): a site
        // two lists could take (a block of it with msmemscope's frames,
        // another without) is counted under the one that took its first
        // block, the same in every run; and the driver lines come in time.
        std::vector<std::pair<BlockKey, const ExitBlock*>> live;
        live.reserve(d.exit.size());
        d.exit.for_each([&](const BlockKey& k, const ExitBlock& b) { live.emplace_back(k, &b); });
        std::sort(live.begin(), live.end(), [](auto& a, auto& b) { return a.second->malloc_id < b.second->malloc_id; });
        // Blocks that were there when collection started (shadow MALLOCs,
        // kBeforeStart): not judged (upstream's analyses leave shadow events
        // alone; whether the program still meant to free them is not known)
        // and in no leak total or count; said once, on a line of their own.
        uint64_t before_n = 0, before_bytes = 0;
        for (auto& [k, bp] : live) {
            const ExitBlock& b = *bp;
            if (b.shadow == kBeforeStart) {
                before_n += b.blocks;
                before_bytes += b.size;
                continue;
            }
            if (suppressed(dk, b.stack, b.py_stack, b.size, b.caller)) continue;
            if (b.shadow == kImport && builtin_) {
                suppressed_[dk].take_imports(b.blocks, b.size);
                continue;
            }
            (k.type == MSMS_T_HOST ? host : driver).emplace_back(&k, &b);
        }
        if (!driver.empty()) {
            uint64_t driver_bytes = 0;
            for (auto& [k, b] : driver) driver_bytes += b->size;
            lines.push_back("  Driver memory still allocated " + live_when() + " on device " + dev_name(dk) + ": " +
                            std::to_string(driver.size()) + " block(s), " + mb(driver_bytes) + " Mb(s):");
        }
        size_t shown = 0;
        uint64_t rest_n = 0, rest_bytes = 0;
        for (auto& [k, b] : driver) {
            const std::string& st = stacks_.text(b->stack);
            if (shown < max_lines_) {
                lines.push_back("    " + pool_name(k->type) + " block of " + mb(b->size) + " Mb(s) at " + hex(k->ptr) +
                                " in kernel_" + std::to_string(b->kernel) + " at step " + std::to_string(b->step) +
                                (b->shadow       ? ", allocated at: " + std::string(b->shadow)
                                 : st.empty()    ? std::string()
                                                 : ", allocated at: " + site_of(st)));
                ++shown;
            } else {
                ++rest_n;
                rest_bytes += b->size;
            }
            finding(dk, k->type, "exit",
                    {{"ptr", hex(k->ptr)}, {"size", std::to_string(b->size)}, {"step", std::to_string(b->step)},
                     {"kernel", std::to_string(b->kernel)}, {"event_id", std::to_string(b->malloc_id)},
                     {"stack", st}});
        }
        if (rest_n)
            lines.push_back("    ... and " + std::to_string(rest_n) + " more driver block(s), " +
                            std::to_string(rest_bytes) + " bytes");
        // 2. host heap blocks live at exit, grouped by allocation site (a
        // shell's: one line that says whose they are)
        if (shell_.empty()) host_details(dk, host, lines);
        else shell_heap(dk, host, lines);
        // 3. the blocks from before the start, not judged
        if (before_n) {
            const char* made = starts_ > 1 ? kMadeWhileOff : kMadeBeforeStart;
            lines.push_back("  Not judged on device " + dev_name(dk) + ": " + std::to_string(before_n) +
                            " block(s), " + std::to_string(before_bytes) + " bytes " +
                            made + " were still allocated " + live_when() +
                            " (no stack: allocated while collection was off)");
            host_.add_finding("leaks_not_judged", {{"device", dev_name(dk)},
                                                   {"blocks", std::to_string(before_n)},
                                                   {"bytes", std::to_string(before_bytes)},
                                                   {"why", std::string(made) + " (no stack), still allocated " +
                                                               live_when() + "; in no leak total"}});
        }
    }

    // A shell's heap blocks live at exit: its own (shell_of), said on one
    // line of their own that no leak total counts (its words differ from
    // "Host memory still allocated ...", which the host's index and
    // summary.json add up), and in the findings as not judged.
    void shell_heap(const DevKey& dk, const std::vector<std::pair<const BlockKey*, const ExitBlock*>>& host,
                    std::vector<std::string>& lines) {
        if (host.empty()) return;
        uint64_t blocks = 0, bytes = 0;
        for (auto& [k, b] : host) {
            blocks += b->blocks;
            bytes += b->size;
        }
        std::string why = shell_ + "'s own heap: a shell does not free it before it exits";
        lines.push_back("  Host memory of the shell still allocated " + live_when() + " on device " + dev_name(dk) +
                        ": " + std::to_string(blocks) + " block(s), " + std::to_string(bytes) + " bytes (" + why +
                        "; not counted as leaked)");
        host_.add_finding("leaks_not_judged", {{"device", dev_name(dk)},
                                               {"blocks", std::to_string(blocks)},
                                               {"bytes", std::to_string(bytes)},
                                               {"why", why + ", still allocated " + live_when() + "; in no leak total"}});
    }

    // The host heap blocks of one device live at exit, grouped by allocation site.
    void host_details(const DevKey& dk, const std::vector<std::pair<const BlockKey*, const ExitBlock*>>& host,
                      std::vector<std::string>& lines) {
        if (host.empty()) return;
        struct Group {
            uint64_t n = 0, bytes = 0, first_id = UINT64_MAX;
            uint32_t stack = 0, py_stack = 0;
        };
        std::map<std::string, Group> groups;
        uint64_t host_bytes = 0, host_blocks = 0;
        for (auto& [k, b] : host) {
            // With both stacks, the Python line that ran is the site (as with
            // Python stacks alone): a Python object's C site is the
            // interpreter, a ctypes call's libffi, whatever line made it.
            const std::string& st = stacks_.text(b->py_stack ? b->py_stack : b->stack);
            std::string site = b->shadow ? std::string(b->shadow)
                               : st.empty()       ? std::string()
                                                  : site_of(st);
            Group& g = groups[site];
            g.n += b->blocks;
            host_blocks += b->blocks;
            g.bytes += b->size;
            if (b->malloc_id < g.first_id) {
                g.first_id = b->malloc_id;
                g.stack = b->stack;
                g.py_stack = b->py_stack;
            }
            host_bytes += b->size;
        }
        std::vector<std::pair<std::string, Group>> sorted(groups.begin(), groups.end());
        std::sort(sorted.begin(), sorted.end(), [](auto& a, auto& b) {
            return a.second.bytes != b.second.bytes ? a.second.bytes > b.second.bytes : a.first < b.first;
        });
        lines.push_back("  Host memory still allocated " + live_when() + " on device " + dev_name(dk) + ": " +
                        std::to_string(host_blocks) + " block(s), " + std::to_string(host_bytes) + " bytes, from " +
                        std::to_string(sorted.size()) + " allocation site(s):");
        size_t g_shown = 0;
        uint64_t more_sites = 0, more_n = 0, more_bytes = 0;
        for (auto& [site, g] : sorted) {
            std::string where = site.empty() ? unknown_host_site() : site;
            if (g_shown < max_lines_) {
                lines.push_back("    " + std::to_string(g.n) + " block(s), " + std::to_string(g.bytes) +
                                " bytes, allocated at: " + where);
                ++g_shown;
            } else {
                ++more_sites;
                more_n += g.n;
                more_bytes += g.bytes;
            }
            finding(dk, MSMS_T_HOST, "exit",
                    {{"count", std::to_string(g.n)}, {"size", std::to_string(g.bytes)}, {"site", where},
                     {"stack", g.py_stack ? merged_stack(stacks_.text(g.stack), stacks_.text(g.py_stack))
                                          : stacks_.text(g.stack)}});
        }
        if (more_sites)
            lines.push_back("    ... and " + std::to_string(more_sites) + " more site(s): " + std::to_string(more_n) +
                            " block(s), " + std::to_string(more_bytes) + " bytes");
    }

    void report_gap(const DevKey& dk, const Device& d) {
        for (auto& [type, s] : d.status) {
            if (s.max_gap.ratio == 0 && s.min_gap.ratio == 0) continue;
            host_.report("======= " + console_pool(type) + " Gap Analysis of Device " + dev_name(dk) + " =======");
            char buf[256];
            std::snprintf(buf, sizeof(buf), "\t%-25s%-25s%-25s", "MinAlloc/MaxAlloc(%)", "MinAllocMem(MB)", "StepId");
            host_.report(buf);
            std::snprintf(buf, sizeof(buf), "MinGap\t%-25.4f%-25.4f%-25llu", s.min_gap.ratio * 100,
                          s.min_gap.min_alloc / (1024.0 * 1024.0), static_cast<unsigned long long>(s.min_gap.step));
            host_.report(buf);
            std::snprintf(buf, sizeof(buf), "MaxGap\t%-25.4f%-25.4f%-25llu", s.max_gap.ratio * 100,
                          s.max_gap.min_alloc / (1024.0 * 1024.0), static_cast<unsigned long long>(s.max_gap.step));
            host_.report(buf);
        }
    }

    // ------------------------------------------------------------ mark rule
    struct MarkAlloc {
        uint64_t id, size;
        std::string addr;
    };
    struct MarkDevice {
        uint64_t marks = 0;
        bool has_marks = false;
        std::map<uint64_t, MarkAlloc> allocs;  // by event id
        std::unordered_map<uint64_t, std::vector<uint64_t>> by_ptr;
    };

    static std::string addr_text(uint64_t ptr) {
        char buf[32];
        std::snprintf(buf, sizeof(buf), "0x%016llx", static_cast<unsigned long long>(ptr));
        return buf;
    }

    void marks_event(const msms_event& ev) {
        if (ev.kind == MSMS_EV_MSTX && ev.type == MSMS_T_MARK && view(ev.name) == mstx_info_) {
            if (ev.device_kind == MSMS_DEV_NA) {
                ++na_marks_;
            } else {
                MarkDevice& d = marks_[dev_key(ev)];
                ++d.marks;
                d.has_marks = true;
            }
            return;
        }
        if (ev.type != MSMS_T_HAL || ev.device_kind == MSMS_DEV_NA) return;
        if (ev.kind != MSMS_EV_MALLOC && ev.kind != MSMS_EV_FREE) return;
        MarkDevice& d = marks_[dev_key(ev)];
        uint64_t seen = d.marks + na_marks_;
        // seen == start_index+1: between A and B; +2: between B and C.
        if (seen < start_index_ + 1 || seen > start_index_ + 2) return;
        if (ev.kind == MSMS_EV_MALLOC) {
            if (seen == start_index_ + 1 && attr(ev, "virtual") != "true") {  // (a mapping: its handle's memory)
                d.allocs[ev.id] = MarkAlloc{ev.id, ev.size, addr_text(ev.ptr)};
                d.by_ptr[ev.ptr].push_back(ev.id);
            }
        } else {
            auto it = d.by_ptr.find(ev.ptr);
            if (it == d.by_ptr.end()) return;
            for (uint64_t id : it->second) d.allocs.erase(id);
            d.by_ptr.erase(it);
        }
    }

    // Upstream's offline check_leaks output, line for line (python/msmemscope/
    // analyzer/leaks.py): what it says per device while analysing, then the
    // results after an empty line.
    void marks_finish() {
        std::vector<std::string> results;
        for (auto& [dk, d] : marks_) {
            host_.report("INFO: Starting to analyze data for device " + dev_name(dk) + "...");
            uint64_t total = d.marks + na_marks_;
            if (total < 3) {
                host_.report("ERROR: Device " + dev_name(dk) +
                             " has fewer than 3 data points. Please re-collect the data points.");
                continue;
            }
            if (start_index_ + 2 >= total) {
                host_.report("INFO: Start index " + std::to_string(start_index_) +
                             " is out of bounds. Device " + dev_name(dk) + " has a total of " + std::to_string(total) +
                             " MSTX events.");
                continue;
            }
            if (d.allocs.empty()) {
                results.push_back("No hal memory leaks detected on device " + dev_name(dk) + ".");
                continue;
            }
            results.push_back("====== ERROR: Detected memory leaks on device " + dev_name(dk) + " ======");
            for (auto& [id, a] : d.allocs) {
                results.push_back("Direct Hal memory leak of " + py_float(a.size / (1024.0 * 1024.0)) + " Mb(s) at " +
                                  a.addr + " in Index " + std::to_string(id) + ".");
                host_.annotate(id, "leak", "hal");
                host_.add_finding("leaks", {{"device", dev_name(dk)}, {"pool", "HAL"}, {"kind", "mark"},
                                            {"ptr", a.addr}, {"size", std::to_string(a.size)},
                                            {"event_id", std::to_string(id)}});
            }
        }
        if (results.empty()) return;
        host_.report("");
        host_.report("Leak Analysis Results for the Custom Range:");
        for (auto& l : results) host_.report(l);
    }

    static constexpr uint64_t kSkipSteps = 1;          // steps 0 and 1 are warm-up
    static constexpr uint64_t kDurationThreshold = 1;  // whole steps lived
    static constexpr std::string_view kDdpBuckets = "PTA@ddp_buckets";  // bindings/msmemscope/_torch.py
    static constexpr size_t kWarnPtrs = 3;             // addresses named in a step's warning

    static std::vector<std::string> split(const std::string& list) {
        std::vector<std::string> out;
        size_t start = 0;
        while (start <= list.size()) {
            size_t comma = list.find(',', start);
            std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
            if (!item.empty()) out.push_back(item);
            if (comma == std::string::npos) break;
            start = comma + 1;
        }
        return out;
    }

    msmemscope::Host host_;
    msms_leaks::Suppressions suppressions_;
    bool builtin_ = false;  // the built-in lists are on (default_suppressions)
    std::vector<std::string> load_errors_;
    std::string mstx_info_;
    uint64_t start_index_ = 0;
    size_t max_lines_ = 20;
    std::string out_dir_ = ".", ts_, dir_error_;
    int dir_fd_ = -1;
    bool disabled_ = false, warned_sources_ = false;
    bool at_stop_ = false;  // the last trace control was STOP_TRACE
    uint64_t starts_ = 0;   // START_TRACEs seen: more than one, blocks made between ranges are shadows too
    bool attached_ = false;  // an --attach run (config.json "attach")
    std::string shell_;      // the process is this shell (shell_of): its heap at exit is its own
    // The run took Python stacks: config.json's "call_stack" asks for them,
    // or an event has one (--analyze of a dump: the run that recorded it did).
    bool took_python_ = false;
    // The process runs Python with msmemscope's package loaded: its imports'
    // heap was folded (the boot marks the imports), or an event has a Python
    // stack or is a Python call (the Python collector's). Where the package
    // could not load (another CPython version), Python stacks cannot be had.
    bool python_ = false;
    // A host block's site when it has no stack: what would have named it.
    // A Python process without Python stacks: the program's line
    // (--call-stack=python) or the C caller; otherwise the C caller (a
    // block no Python frame made: the interpreter's, a library's thread).
    std::string unknown_host_site() const {
        return python_ && !took_python_ ? "an unknown site (collect stacks with --call-stack=python or c)"
                                         : "an unknown site (collect stacks with --call-stack=c)";
    }
    std::string live_when() const {
        return !at_stop_ ? "at exit" : attached_ ? "when msmemscope detached" : "at stop()";
    }
    StepTracker steps_;
    Stacks stacks_;
    std::map<DevKey, uint64_t> launches_;
    std::unordered_map<uint64_t, std::vector<uint32_t>> open_ops_;  // per thread: the operators running
    std::map<DevKey, Device> devices_;
    std::map<DevKey, MarkDevice> marks_;
    uint64_t na_marks_ = 0;
};

}  // namespace

MSMEMSCOPE_PLUGIN(LeaksAnalyzer)
