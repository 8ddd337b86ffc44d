// Test doubles for plugin authors: build events, run a plugin's descriptor
// against a fake host without the msmemscope runtime, and look at what it
// emitted, annotated, reported and found.
//
//     #include <msmemscope/testing.hpp>
//     using msmemscope::testing::EventBuilder;
//
//     int main(int argc, char** argv) {  // argv[1]: the built plugin .so
//         msmemscope::testing::PluginHarness h(msmemscope::testing::require_descriptor(argv[1]));
//         h.create({{"threshold", "5"}});
//         h.begin();
//         h.feed(EventBuilder::malloc(0x1000, 64).at(10));
//         h.finish();
//         return h.reports.size() == 1 ? 0 : 1;
//     }
#pragma once

#include <dlfcn.h>

#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "abi.h"
#include "entry.hpp"
#include "plugin.hpp"

namespace msmemscope::testing {

// An owned event that can be turned into an msms_event view.
struct OwnedEvent {
    msms_event ev{};
    std::string name, py_stack, c_stack;
    std::string alloc_caller;  // ABI 1.4 (msms_event.alloc_caller)
    std::vector<std::pair<std::string, std::string>> attrs;
    mutable std::vector<msms_kv> kv;

    OwnedEvent() {
        ev.struct_size = sizeof(msms_event);
        ev.device_id = -1;
        ev.pool_used = ev.pool_total = ev.process_used = ev.device_used = -1;
    }
    const msms_event& view() const {
        kv.clear();
        for (auto& a : attrs) kv.push_back({str(a.first), str(a.second)});
        msms_event& e = const_cast<msms_event&>(ev);
        e.attrs = kv.data();
        e.attr_count = static_cast<uint32_t>(kv.size());
        e.name = str(name);
        e.py_stack = str(py_stack);
        e.c_stack = str(c_stack);
        e.alloc_caller = str(alloc_caller);
        return ev;
    }
    std::string attr(const std::string& key) const {
        for (auto& a : attrs)
            if (a.first == key) return a.second;
        return "";
    }
};

// Fluent builder: EventBuilder::malloc(ptr, size).pool(MSMS_T_PTA).device(MSMS_DEV_NPU, 0).at(100).id(7)
class EventBuilder {
public:
    EventBuilder(uint16_t kind, uint16_t type) {
        e_.ev.kind = kind;
        e_.ev.type = type;
        e_.ev.pid = 1;
        e_.ev.tid = 1;
    }
    static EventBuilder malloc(uint64_t ptr, uint64_t size, uint16_t pool = MSMS_T_HOST) {
        EventBuilder b(MSMS_EV_MALLOC, pool);
        b.e_.ev.ptr = ptr;
        b.e_.ev.size = size;
        b.e_.ev.device_kind = MSMS_DEV_CPU;
        return b;
    }
    static EventBuilder free(uint64_t ptr, uint16_t pool = MSMS_T_HOST) {
        EventBuilder b(MSMS_EV_FREE, pool);
        b.e_.ev.ptr = ptr;
        b.e_.ev.device_kind = MSMS_DEV_CPU;
        return b;
    }
    static EventBuilder step(uint64_t n) {
        EventBuilder b(MSMS_EV_SYSTEM, MSMS_T_STEP);
        b.e_.name = std::to_string(n);
        b.e_.ev.aux0 = n;
        return b;
    }
    static EventBuilder op(const std::string& name, bool start) {
        EventBuilder b(MSMS_EV_OP_LAUNCH, start ? MSMS_T_ATEN_START : MSMS_T_ATEN_END);
        b.e_.name = name;
        return b;
    }
    static EventBuilder kernel(const std::string& name) {
        EventBuilder b(MSMS_EV_KERNEL_LAUNCH, MSMS_T_KERNEL_LAUNCH);
        b.e_.name = name;
        return b;
    }
    static EventBuilder mark(const std::string& msg, uint16_t type = MSMS_T_MARK) {
        EventBuilder b(MSMS_EV_MSTX, type);
        b.e_.name = msg;
        return b;
    }
    static EventBuilder access(uint64_t ptr, uint16_t type = MSMS_T_READ) {
        EventBuilder b(MSMS_EV_ACCESS, type);
        b.e_.ev.ptr = ptr;
        return b;
    }
    EventBuilder& at(uint64_t ts) { e_.ev.timestamp_ns = ts; return *this; }
    EventBuilder& id(uint64_t v) { e_.ev.id = v; return *this; }
    EventBuilder& pool(uint16_t t) { e_.ev.type = t; return *this; }
    EventBuilder& device(uint16_t kind, int16_t id) { e_.ev.device_kind = kind; e_.ev.device_id = id; return *this; }
    EventBuilder& size(uint64_t s) { e_.ev.size = s; return *this; }
    EventBuilder& allocation_id(uint64_t a) { e_.ev.allocation_id = a; return *this; }
    EventBuilder& used(int64_t u) { e_.ev.pool_used = u; return *this; }
    EventBuilder& total(int64_t t) { e_.ev.pool_total = t; return *this; }
    EventBuilder& thread(uint32_t tid) { e_.ev.tid = tid; return *this; }
    EventBuilder& process(uint32_t pid) { e_.ev.pid = pid; return *this; }
    EventBuilder& name(const std::string& n) { e_.name = n; return *this; }
    EventBuilder& aux(uint64_t a0, uint64_t a1 = 0) { e_.ev.aux0 = a0; e_.ev.aux1 = a1; return *this; }
    EventBuilder& attr(const std::string& k, const std::string& v) { e_.attrs.emplace_back(k, v); return *this; }
    EventBuilder& py_stack(const std::string& s) { e_.py_stack = s; return *this; }
    EventBuilder& c_stack(const std::string& s) { e_.c_stack = s; return *this; }
    // The allocator's caller of a host block with a Python stack only (ABI 1.4).
    EventBuilder& alloc_caller(const std::string& s, uint64_t id = 0) {
        e_.alloc_caller = s;
        e_.ev.alloc_caller_id = id;
        return *this;
    }
    OwnedEvent build() const { return e_; }
    operator OwnedEvent() const { return e_; }

private:
    OwnedEvent e_;
};

inline OwnedEvent own(const msms_event& ev) {
    OwnedEvent o;
    o.ev = ev;
    o.name = std::string(view(ev.name));
    o.py_stack = std::string(view(ev.py_stack));
    o.c_stack = std::string(view(ev.c_stack));
    if (ev.struct_size >= offsetof(msms_event, alloc_caller_id) + sizeof(ev.alloc_caller_id)) {
        o.alloc_caller = std::string(view(ev.alloc_caller));
    } else {
        o.ev.alloc_caller = msms_str{};
        o.ev.alloc_caller_id = 0;
    }
    for (uint32_t i = 0; i < ev.attr_count; ++i)
        o.attrs.emplace_back(std::string(view(ev.attrs[i].key)), std::string(view(ev.attrs[i].value)));
    return o;
}

// Runs one plugin through its C descriptor, as the host would, and records
// every host call it makes. Also usable as the "capturing sink" of a test:
// the events it delivered (with the plugin's add_attr changes) are kept.
class PluginHarness {
public:
    explicit PluginHarness(const msms_plugin_descriptor* d) : d_(d) {
        api_.struct_size = sizeof(api_);
        api_.host = this;
        api_.log = [](void* h, int level, msms_str m) { self(h)->logs.emplace_back(level, std::string(view(m))); };
        api_.add_attr = [](void* h, msms_str k, msms_str v) -> int {
            auto* s = self(h);
            if (!s->current_) return MSMS_ERR_INVALID_ARGUMENT;
            for (auto& a : s->current_->attrs)
                if (a.first == view(k)) {
                    a.second = std::string(view(v));
                    return MSMS_OK;
                }
            s->current_->attrs.emplace_back(std::string(view(k)), std::string(view(v)));
            return MSMS_OK;
        };
        api_.annotate = [](void* h, uint64_t id, msms_str k, msms_str v) -> int {
            self(h)->annotations[id][std::string(view(k))] = std::string(view(v));
            return MSMS_OK;
        };
        api_.emit = [](void* h, const msms_event* ev) -> int {
            self(h)->emitted.push_back(own(*ev));
            return MSMS_OK;
        };
        api_.add_finding = [](void* h, msms_str table, const msms_kv* cols, uint32_t n) -> int {
            std::map<std::string, std::string> row;
            for (uint32_t i = 0; i < n; ++i) row[std::string(view(cols[i].key))] = std::string(view(cols[i].value));
            self(h)->findings[std::string(view(table))].push_back(row);
            return MSMS_OK;
        };
        api_.report = [](void* h, msms_str line) { self(h)->reports.emplace_back(view(line)); };
        api_.progress = [](void* h, const msms_progress* p) -> int {
            if (!p || p->struct_size < offsetof(msms_progress, flags) + sizeof(p->flags)) return MSMS_ERR_INVALID_ARGUMENT;
            self(h)->progress.push_back({std::string(view(p->what)), p->done, p->total, p->unit, p->flags});
            return MSMS_OK;
        };
    }
    // Plays an older host: the host API struct the plugin gets claims this
    // size (e.g. offsetof(msms_host_api, progress) for a 1.1 host), so the
    // plugin must not call what lies beyond. Call before create().
    void set_host_api_size(uint32_t size) { api_.struct_size = size; }
    ~PluginHarness() {
        if (obj_) d_->destroy(obj_);
    }
    const msms_plugin_descriptor* descriptor() const { return d_; }

    // Returns the status; the error text is in last_error.
    int create(const std::vector<std::pair<std::string, std::string>>& options = {}) {
        std::vector<msms_kv> kv;
        for (auto& o : options) kv.push_back({str(o.first), str(o.second)});
        msms_error err{};
        int rc = d_->create(&api_, kv.data(), static_cast<uint32_t>(kv.size()), &obj_, &err);
        last_error = err.message;
        return rc;
    }
    int begin(const std::string& output_dir = ".", const std::string& ts = "20260101000000") {
        msms_run_info r{};
        r.struct_size = sizeof(r);
        r.pid = 1;
        r.output_dir = str(output_dir);
        r.timestamp = str(ts);
        r.config_json = str(config_json);
        r.command_line = str(command_line);
        // As the host does (ABI 1.3): the folder exists (made here, with its
        // parents) and the plugin gets its descriptor, opened without
        // following links; the harness keeps it open until it is destroyed.
        std::string why;
        dir_fd_.reset(files::open_dir(AT_FDCWD, output_dir, true, why));
        r.output_dir_fd = dir_fd_.get();
        msms_error err{};
        int rc = d_->begin ? d_->begin(obj_, &r, &err) : MSMS_OK;
        last_error = err.message;
        return rc;
    }
    // Delivers one event (ids and timestamps are filled in when 0).
    int feed(OwnedEvent e) {
        if (e.ev.id == 0) e.ev.id = ++next_id_;
        else next_id_ = e.ev.id;
        if (e.ev.timestamp_ns == 0) e.ev.timestamp_ns = next_id_ * 1000;
        delivered.push_back(std::move(e));
        current_ = &delivered.back();
        int rc = d_->on_event(obj_, &current_->view());
        current_ = nullptr;
        return rc;
    }
    int annotate(uint64_t id, const std::string& k, const std::string& v) {
        return d_->on_annotation ? d_->on_annotation(obj_, id, str(k), str(v)) : MSMS_OK;
    }
    int finish() {
        msms_error err{};
        int rc = d_->finish ? d_->finish(obj_, &err) : MSMS_OK;
        last_error = err.message;
        return rc;
    }
    // The attrs an analyzer added to delivered event number `id`.
    const OwnedEvent* event(uint64_t id) const {
        for (auto& e : delivered)
            if (e.ev.id == id) return &e;
        return nullptr;
    }

    std::vector<OwnedEvent> delivered;
    std::vector<OwnedEvent> emitted;
    std::map<uint64_t, std::map<std::string, std::string>> annotations;
    std::map<std::string, std::vector<std::map<std::string, std::string>>> findings;
    std::vector<std::string> reports;
    std::vector<std::pair<int, std::string>> logs;
    // ABI 1.2 progress reports, in order.
    struct Progress {
        std::string what;
        uint64_t done, total;
        uint32_t unit, flags;
    };
    std::vector<Progress> progress;
    std::string last_error;
    // The run's configuration as begin() gives it (the host's config.json
    // text); empty unless a test sets it before begin().
    std::string config_json;
    // The process's command line as begin() gives it ("prog arg ..."); empty
    // unless a test sets it before begin().
    std::string command_line;

private:
    static PluginHarness* self(void* h) { return static_cast<PluginHarness*>(h); }
    const msms_plugin_descriptor* d_;
    msms_host_api api_{};
    void* obj_ = nullptr;
    OwnedEvent* current_ = nullptr;
    uint64_t next_id_ = 0;
    files::Fd dir_fd_;  // the run folder given to begin()
};

// Loads a built plugin .so and returns its descriptor (nullptr and the reason
// in *error on failure). The library stays loaded for the test's life.
inline const msms_plugin_descriptor* load_descriptor(const std::string& path, std::string* error = nullptr) {
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        if (error) *error = dlerror();
        return nullptr;
    }
    // Either form of the entry symbol (abi.h), told apart as the host does.
    std::string why;
    msms_entry_fn fn = resolve_entry(lib, why);
    if (!fn) {
        if (error) *error = why;
        return nullptr;
    }
    const msms_plugin_descriptor* d = fn();
    if (!d && error) *error = "the entry returned no descriptor";
    return d;
}

// load_descriptor() for tests: throws std::runtime_error naming the library
// and the reason (test frameworks report it as the test's failure).
inline const msms_plugin_descriptor* require_descriptor(const std::string& path) {
    std::string error;
    const msms_plugin_descriptor* d = load_descriptor(path, &error);
    if (!d) throw std::runtime_error("cannot load plugin " + path + ": " + error);
    return d;
}

}  // namespace msmemscope::testing
