// A host-owned event: the plain msms_event numbers plus the strings it refers
// to. Sources (a live capture, a saved capture, a memscope_dump CSV/DB) make
// Records; the pipeline turns them into msms_event views for plugins.
#pragma once

#include <string>
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
    bool complete_attrs = false;
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
        py_stack.clear();
        c_stack.clear();
        complete_attrs = false;
    }
};


}  // namespace msms
