// A host-owned event: the plain msms_event numbers plus the strings it refers
// to. Sources (a live capture, a saved capture, a memscope_dump CSV/DB) make
// Records; the pipeline turns them into msms_event views for plugins.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <msmemscope/abi.h>

namespace msms {

struct Record {
    msms_event ev{};
    std::string name;
    // Attr entries given by the source (collector extras; or the whole Attr
    // when read back from a dump file, then `complete_attrs` is set).
    std::vector<std::pair<std::string, std::string>> attrs;
    std::string py_stack, c_stack;
    // Stack text kept elsewhere (the symbolizer's cache, which outlives the
    // event): used instead of py_stack / c_stack when set, so the host does
    // not copy every row's stack (2.4 GB for 1M rows with c:32 stacks).
    std::string_view py_ref, c_ref;
    // The allocator's caller (msms_event.alloc_caller: a capture's kStack
    // kind 4), from the symbolizer's cache; empty when none.
    std::string_view caller_ref;
    std::string_view py_text() const { return py_ref.data() ? py_ref : std::string_view(py_stack); }
    std::string_view c_text() const { return c_ref.data() ? c_ref : std::string_view(c_stack); }
    bool complete_attrs = false;
    // What analyzers gave with add_attr during their on_event: applied to
    // `attrs` when that call returns (Pipeline::dispatch), so the views the
    // analyzer holds (ev.attrs, pointing into `attrs`) stay valid and as they
    // were for the whole call.
    std::vector<std::pair<std::string, std::string>> added;
    Record() { reset(); }
    // Back to a fresh record, keeping the strings' and vector's storage (the
    // host reuses one Record per event stream: no allocation per event).
    void reset() {
        ev = msms_event{};
        ev.struct_size = sizeof(msms_event);
        ev.device_id = -1;
        ev.pool_used = ev.pool_total = ev.process_used = ev.device_used = -1;
        name.clear();
        attrs.clear();
        added.clear();
        py_stack.clear();
        c_stack.clear();
        py_ref = c_ref = caller_ref = std::string_view();
        complete_attrs = false;
    }
};

// The value of the record's Attr `key`; nullptr when it has none.
inline const std::string* attr_of(const Record& r, std::string_view key) {
    for (auto& a : r.attrs)
        if (a.first == key) return &a.second;
    return nullptr;
}
// Whether the record's Attr `key` is "true".
inline bool attr_true(const Record& r, std::string_view key) {
    const std::string* v = attr_of(r, key);
    return v && *v == "true";
}

}  // namespace msms
