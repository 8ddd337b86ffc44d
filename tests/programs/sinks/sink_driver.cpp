// sinks_driver <plugin.so> <output_dir> <scenario> [key=value option...]
//
// Runs one sink plugin as the host would (create, begin, events in time
// order, annotations, findings, finish) on a synthetic stream, so that the
// sink tests can check every event kind without a device:
//   rich     two devices (cpu HOST, npu:0 HAL + PTA with owners), nested
//            operators, kernels, mstx marks and ranges, steps, Python and
//            RecordFunction spans, stacks, findings (leaks, inefficient,
//            owners) and an annotation
//   empty    nothing between begin and finish
//   carve    npu:0 PTA blocks carved from HAL driver blocks (memory_viz)
//   train N  an import phase of N host malloc/free pairs, then 8 steps of
//            operators, Python calls and marks (trace downsampling)
//   big N    N malloc/free events on cpu (a window of live blocks, stacks
//            from 50 sites, owners from 5 categories) and 2 leak findings
// Prints "ok" or the failure and exits non-zero.
#include <msmemscope/testing.hpp>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

using msmemscope::str;
using msmemscope::testing::EventBuilder;
using msmemscope::testing::OwnedEvent;

namespace {

struct Driver {
    const msms_plugin_descriptor* d;
    void* obj = nullptr;
    msms_host_api api{};
    uint64_t next_id = 0, next_alloc = 0, ts = 1'700'000'000'000'000'000ull;
    std::map<std::pair<int, int>, int64_t> used;  // (device, pool) -> bytes
    std::map<uint64_t, std::pair<uint64_t, uint64_t>> live;  // ptr -> (alloc id, size)
    std::vector<std::string> logs, reports;

    explicit Driver(const msms_plugin_descriptor* desc) : d(desc) {
        api.struct_size = sizeof(api);
        api.host = this;
        api.log = [](void* h, int level, msms_str m) {
            static_cast<Driver*>(h)->logs.push_back(std::to_string(level) + " " + std::string(msmemscope::view(m)));
        };
        api.report = [](void* h, msms_str m) { static_cast<Driver*>(h)->reports.emplace_back(msmemscope::view(m)); };
    }
    void check(int rc, const char* what, const msms_error& err) {
        if (rc != MSMS_OK) {
            std::fprintf(stderr, "%s failed: %s\n", what, err.message);
            std::exit(1);
        }
    }
    void create(const std::vector<std::pair<std::string, std::string>>& opts) {
        // defaults first, as the host fills them in
        std::vector<std::pair<std::string, std::string>> all;
        for (uint32_t i = 0; i < d->option_count; ++i) {
            std::string name = d->options[i].name, value = d->options[i].default_value ? d->options[i].default_value : "";
            for (auto& o : opts)
                if (o.first == name) value = o.second;
            all.emplace_back(name, value);
        }
        std::vector<msms_kv> kv;
        for (auto& o : all) kv.push_back({str(o.first), str(o.second)});
        msms_error err{};
        check(d->create(&api, kv.data(), static_cast<uint32_t>(kv.size()), &obj, &err), "create", err);
    }
    void begin(const std::string& dir) {
        msms_run_info r{};
        r.struct_size = sizeof(r);
        r.pid = 4242;
        r.output_dir = str(dir);
        r.timestamp = str("20260101000000");
        r.command_line = str("python3 train.py --epochs 1");
        r.config_json = str("{}");
        r.output_dir_fd = -1;  // ABI 1.3: none (the sink opens output_dir itself)
        msms_error err{};
        check(d->begin(obj, &r, &err), "begin", err);
    }
    uint64_t feed(OwnedEvent e, uint64_t advance_ns = 1000) {
        e.ev.id = ++next_id;
        ts += advance_ns;
        if (!e.ev.timestamp_ns) e.ev.timestamp_ns = ts;
        e.ev.pid = 4242;
        if (d->on_event(obj, &e.view()) != MSMS_OK) {
            std::fprintf(stderr, "on_event failed at id %llu\n", static_cast<unsigned long long>(e.ev.id));
            std::exit(1);
        }
        return e.ev.id;
    }
    // A MALLOC with the pipeline's accounting and Attr entries.
    uint64_t malloc_(uint64_t ptr, uint64_t size, uint16_t pool, uint16_t dk, int16_t di, const std::string& owner,
                     const std::string& cstack, uint64_t cstack_id, uint32_t tid = 7) {
        uint64_t aid = ++next_alloc;
        live[ptr] = {aid, size};
        int64_t& u = used[{dk * 100 + di, pool}];
        u += static_cast<int64_t>(size);
        EventBuilder b = EventBuilder::malloc(ptr, size, pool).device(dk, di).allocation_id(aid).used(u).thread(tid);
        char addr[32];
        std::snprintf(addr, sizeof(addr), "0x%016llx", static_cast<unsigned long long>(ptr));
        b.attr("allocation_id", std::to_string(aid)).attr("addr", addr).attr("size", std::to_string(size)).attr("used", std::to_string(u));
        if (!owner.empty()) b.attr("owner", owner);
        b.c_stack(cstack);
        OwnedEvent e = b.build();
        e.ev.c_stack_id = cstack_id;
        e.ev.device_used = u;
        e.ev.process_used = u;
        return feed(e);
    }
    uint64_t free_(uint64_t ptr, uint16_t pool, uint16_t dk, int16_t di, uint32_t tid = 7) {
        auto it = live.find(ptr);
        uint64_t aid = it == live.end() ? 0 : it->second.first, size = it == live.end() ? 0 : it->second.second;
        if (it != live.end()) live.erase(it);
        int64_t& u = used[{dk * 100 + di, pool}];
        u -= static_cast<int64_t>(size);
        EventBuilder b = EventBuilder::free(ptr, pool).device(dk, di).allocation_id(aid).size(size).used(u).thread(tid);
        b.attr("allocation_id", std::to_string(aid)).attr("size", std::to_string(size)).attr("used", std::to_string(u));
        OwnedEvent e = b.build();
        e.ev.device_used = u;
        return feed(e);
    }
    void annotate(uint64_t id, const std::string& k, const std::string& v) {
        if (d->on_annotation && d->on_annotation(obj, id, str(k), str(v)) != MSMS_OK) {
            std::fprintf(stderr, "on_annotation failed\n");
            std::exit(1);
        }
    }
    void finding(const std::string& table, const std::vector<std::pair<std::string, std::string>>& cols) {
        std::vector<msms_kv> kv;
        for (auto& c : cols) kv.push_back({str(c.first), str(c.second)});
        if (d->on_finding && d->on_finding(obj, str(table), kv.data(), static_cast<uint32_t>(kv.size())) != MSMS_OK) {
            std::fprintf(stderr, "on_finding failed\n");
            std::exit(1);
        }
    }
    void finish() {
        msms_error err{};
        check(d->finish(obj, &err), "finish", err);
        d->destroy(obj);
        obj = nullptr;
    }
};

void rich(Driver& h) {
    h.feed(EventBuilder(MSMS_EV_SYSTEM, MSMS_T_START_TRACE).device(MSMS_DEV_NA, -1));
    h.feed(EventBuilder::step(1));
    const uint16_t NPU = MSMS_DEV_NPU, CPU = MSMS_DEV_CPU;
    uint64_t hal = h.malloc_(0x7f0000000000, 64 << 20, MSMS_T_HAL, NPU, 0, "CANN@HCCL", "halMemAlloc\ninit_device\nmain", 1);
    (void)hal;
    // a Python function around an operator with an inner operator
    uint64_t py_start = h.ts + 500;
    h.feed(EventBuilder::op("aten::linear", true).device(MSMS_DEV_NA, -1));
    uint64_t w = h.malloc_(0x10000, 4 << 20, MSMS_T_PTA, NPU, 0, "PTA@weight", "model.py(10): __init__\ntrain.py(5): main", 2);
    h.feed(EventBuilder::op("aten::mm", true));
    uint64_t act = h.malloc_(0x500000, 8 << 20, MSMS_T_PTA, NPU, 0, "PTA@ops@aten", "model.py(20): forward\ntrain.py(9): main", 3);
    h.feed(EventBuilder::kernel("MatMul_kernel").aux(1, 17).attr("streamId", "1").attr("taskId", "17"));
    h.feed(EventBuilder(MSMS_EV_KERNEL_LAUNCH, MSMS_T_KERNEL_START).name("MatMul_kernel"));
    h.feed(EventBuilder(MSMS_EV_KERNEL_LAUNCH, MSMS_T_KERNEL_END).name("MatMul_kernel"));
    h.feed(EventBuilder::access(0x500000, MSMS_T_WRITE).device(NPU, 0));
    h.feed(EventBuilder::op("aten::mm", false));
    h.feed(EventBuilder::op("aten::linear", false));
    h.feed(EventBuilder(MSMS_EV_PY_TRACE, MSMS_T_PY_CALL).name("model.py(20): forward").aux(py_start));
    uint64_t rf_start = h.ts + 100;
    uint64_t grad = h.malloc_(0x900000, 2 << 20, MSMS_T_PTA, NPU, 0, "PTA@gradient", "model.py(30): backward\ntrain.py(12): main", 4);
    h.feed(EventBuilder(MSMS_EV_PY_TRACE, MSMS_T_PY_RECORD_FUNCTION).name("backward_pass").aux(rf_start));
    h.feed(EventBuilder::mark("step start", MSMS_T_RANGE_START).aux(9));
    uint64_t host = h.malloc_(0x20000, 1 << 20, MSMS_T_HOST, CPU, -1, "", "malloc\nload_data\nmain", 5, 8);
    h.feed(EventBuilder::mark("checkpoint saved"));
    h.free_(0x500000, MSMS_T_PTA, NPU, 0);
    h.feed(EventBuilder::mark("", MSMS_T_RANGE_END).aux(9));
    h.feed(EventBuilder::step(2));
    // temporaries, then the peak
    for (int i = 0; i < 20; ++i) h.malloc_(0x1000000 + i * 0x100000, (i + 1) << 16, MSMS_T_PTA, NPU, 0, "PTA@ops@aten", "model.py(40): tmp\ntrain.py(14): main", 6);
    for (int i = 0; i < 20; ++i) h.free_(0x1000000 + i * 0x100000, MSMS_T_PTA, NPU, 0);
    h.free_(0x20000, MSMS_T_HOST, CPU, -1, 8);
    h.malloc_(0x30000, 3 << 20, MSMS_T_HOST, CPU, -1, "", "malloc\nleaky_cache\nmain", 7, 8);
    h.feed(EventBuilder(MSMS_EV_SNAPSHOT, MSMS_T_SNAPSHOT).name("Memory Snapshot").attr("allocated", "123").attr("note", "say \"hi\""));
    h.feed(EventBuilder::step(3));
    h.annotate(act, "inefficient_type", "early_allocation");
    h.finding("leaks", {{"device", "0"}, {"allocation_id", std::to_string(grad - grad + 4)}, {"addr", "0x0000000000900000"},
                        {"size", std::to_string(2 << 20)}, {"step", "2"}, {"kernel", "MatMul_kernel"}});
    h.finding("leaks", {{"device", "cpu"}, {"allocation_id", "26"}, {"addr", "0x0000000000030000"},
                        {"size", std::to_string(3 << 20)}, {"step", "3"}, {"kernel", "N/A"}});
    h.finding("inefficient", {{"allocation_id", "3"}, {"type", "early_allocation"}, {"size", std::to_string(8 << 20)},
                              {"malloc_api", "aten::mm"}, {"first_access_api", "aten::mm"}});
    h.finding("owners", {{"device", "0"}, {"owner", "PTA@weight"}, {"bytes", std::to_string(4 << 20)}});
    (void)w;
    (void)host;
}

// A caching allocator on npu:0: two 2 MiB driver blocks (HAL), PTA blocks
// carved from them, one freed; the second driver block is released at the
// end; a PTA block outside every driver block.
void carve(Driver& h) {
    const uint16_t NPU = MSMS_DEV_NPU;
    const uint64_t A = 0x7f0000000000, B = 0x7f0000400000;
    h.malloc_(A, 2 << 20, MSMS_T_HAL, NPU, 0, "", "halMemAlloc+0x10 in /usr/lib/libascend_hal.so\nNpuCachingAllocator::malloc+0x44 at alloc.cpp:120 in /usr/lib/libtorch_npu.so", 1);
    h.malloc_(A, 4096, MSMS_T_PTA, NPU, 0, "", "at::empty+0x1a at Empty.cpp:88 in /usr/lib/libtorch_cpu.so", 2);
    h.malloc_(A + 4096, 8192, MSMS_T_PTA, NPU, 0, "", "at::empty+0x1a at Empty.cpp:88 in /usr/lib/libtorch_cpu.so", 2);
    h.malloc_(A + 65536, 1 << 20, MSMS_T_PTA, NPU, 0, "", "at::empty+0x1a at Empty.cpp:88 in /usr/lib/libtorch_cpu.so", 2);
    h.free_(A + 4096, MSMS_T_PTA, NPU, 0);
    h.malloc_(B, 2 << 20, MSMS_T_HAL, NPU, 0, "", "halMemAlloc+0x10 in /usr/lib/libascend_hal.so", 3);
    h.malloc_(B + 512, 512, MSMS_T_PTA, NPU, 0, "", "", 0);
    h.free_(B + 512, MSMS_T_PTA, NPU, 0);
    h.free_(B, MSMS_T_HAL, NPU, 0);
    h.malloc_(0x1000, 256, MSMS_T_PTA, NPU, 0, "", "", 0);
}

// An import phase of N host malloc/free pairs, then 8 training steps of 50
// operators (a PTA block each), 100 Python calls and an mstx mark per step,
// and a leak (trace downsampling).
void train(Driver& h, long n) {
    const uint16_t CPU = MSMS_DEV_CPU;
    for (long i = 0; i < n; ++i) {
        uint64_t ptr = 0x100000000ull + static_cast<uint64_t>(i % 64) * 0x10000;
        h.malloc_(ptr, 64 + static_cast<uint64_t>(i % 1000), MSMS_T_HOST, CPU, -1, "", "", 0);
        h.free_(ptr, MSMS_T_HOST, CPU, -1);
    }
    for (uint64_t step = 1; step <= 8; ++step) {
        h.feed(EventBuilder::step(step));
        for (int k = 0; k < 50; ++k) {
            h.feed(EventBuilder::op("aten::addmm", true));
            uint64_t ptr = 0x900000000ull + static_cast<uint64_t>(k) * 0x100000;
            h.malloc_(ptr, 4096 * static_cast<uint64_t>(k + 1), MSMS_T_PTA, CPU, -1, "PTA@ops@aten", "", 0);
            h.feed(EventBuilder::op("aten::addmm", false));
            if (k != 49 || step != 8) h.free_(ptr, MSMS_T_PTA, CPU, -1);
        }
        for (int c = 0; c < 100; ++c) {
            uint64_t start = h.ts + 10;
            h.feed(EventBuilder(MSMS_EV_PY_TRACE, MSMS_T_PY_CALL).name("model.py(20): forward").aux(start));
        }
        h.feed(EventBuilder::mark("step " + std::to_string(step) + " done"));
    }
    h.finding("leaks", {{"device", "cpu"}, {"allocation_id", std::to_string(h.next_alloc)}, {"size", "204800"},
                        {"step", "8"}, {"kernel", "N/A"}});
}

void big(Driver& h, long n) {
    const char* owners[] = {"HOST@dataloader", "HOST@model", "HOST@optimizer", "", "HOST@cache"};
    std::vector<std::string> stacks;
    for (int s = 0; s < 50; ++s)
        stacks.push_back("malloc\nsite_" + std::to_string(s) + "(src/file" + std::to_string(s % 7) + ".c:" + std::to_string(10 + s) + ")\nmain");
    const int W = 512;
    std::vector<uint64_t> win(W, 0);
    uint32_t x = 1;
    for (long i = 0; i < n / 2; ++i) {
        x = x * 1664525u + 1013904223u;
        int slot = static_cast<int>(i % W);
        if (win[slot]) h.free_(win[slot], MSMS_T_HOST, MSMS_DEV_CPU, -1);
        // a slow wave so that the curve has a shape and a peak
        uint64_t base = 64 + (x >> 20) % 2048;
        double phase = static_cast<double>(i) / static_cast<double>(n / 2 + 1);
        uint64_t size = base * (phase < 0.6 ? 1 + static_cast<uint64_t>(phase * 10) : 3);
        uint64_t ptr = 0x100000000ull + static_cast<uint64_t>(i) * 0x10000;
        int site = static_cast<int>((x >> 8) % 50);
        h.malloc_(ptr, size, MSMS_T_HOST, MSMS_DEV_CPU, -1, owners[site % 5], stacks[site], static_cast<uint64_t>(site + 1));
        win[slot] = ptr;
        if (i % 100000 == 0) h.feed(EventBuilder::step(static_cast<uint64_t>(i / 100000)), 0);
    }
    h.finding("leaks", {{"device", "cpu"}, {"allocation_id", "1"}, {"size", "100"}, {"step", "1"}, {"kernel", "N/A"}});
    h.finding("leaks", {{"device", "cpu"}, {"allocation_id", "2"}, {"size", "200"}, {"step", "1"}, {"kernel", "N/A"}});
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 4) {
        std::fprintf(stderr, "usage: sinks_driver <plugin.so> <output_dir> rich|empty|carve|big N|train N [key=value...]\n");
        return 2;
    }
    std::string error;
    const msms_plugin_descriptor* d = msmemscope::testing::load_descriptor(argv[1], &error);
    if (!d) {
        std::fprintf(stderr, "cannot load %s: %s\n", argv[1], error.c_str());
        return 1;
    }
    std::string scenario = argv[3];
    int first_opt = 4;
    long n = 0;
    if (scenario == "big" || scenario == "train") {
        n = argc > 4 ? std::atol(argv[4]) : 100000;
        first_opt = 5;
    }
    std::vector<std::pair<std::string, std::string>> opts;
    for (int i = first_opt; i < argc; ++i) {
        std::string a = argv[i];
        size_t eq = a.find('=');
        if (eq != std::string::npos) opts.emplace_back(a.substr(0, eq), a.substr(eq + 1));
    }
    Driver h(d);
    h.create(opts);
    h.begin(argv[2]);
    if (scenario == "rich") rich(h);
    else if (scenario == "big") big(h, n);
    else if (scenario == "carve") carve(h);
    else if (scenario == "train") train(h, n);
    else if (scenario != "empty") {
        std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
        return 2;
    }
    h.finish();
    for (auto& l : h.logs) std::printf("log: %s\n", l.c_str());
    for (auto& r : h.reports) std::printf("report: %s\n", r.c_str());
    std::printf("ok\n");
    return 0;
}
