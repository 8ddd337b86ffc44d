#include "dump_row.h"

#include <msmemscope/plugin.hpp>

#include <algorithm>
#include <cstring>

#include "util/csv.h"
#include "util/text.h"

namespace msms {

const char* const kDumpHeader =
    "ID,Event,Event Type,Name,Timestamp(ns),Process Id,Thread Id,Device Id,Ptr,Attr,Call Stack(Python),Call Stack(C)";
const char* const kPythonTraceHeader = "FuncInfo,StartTime(ns),EndTime(ns),Thread Id,Process Id";

std::string render_attr(const msms_kv* attrs, uint32_t n) {
    std::string s = "{";
    for (uint32_t i = 0; i < n; ++i) {
        if (i) s += ',';
        s.append(attrs[i].key.data, attrs[i].key.size);
        s += ':';
        s.append(attrs[i].value.data, attrs[i].value.size);
    }
    s += '}';
    return s;
}

std::string render_attr(const std::vector<std::pair<std::string, std::string>>& attrs) {
    std::string s = "{";
    for (size_t i = 0; i < attrs.size(); ++i) {
        if (i) s += ',';
        s += attrs[i].first;
        s += ':';
        s += attrs[i].second;
    }
    s += '}';
    return s;
}

namespace {
// s as the inside of a quoted CSV field: quotes doubled.
inline void append_quoted_body(std::string& out, msms_str s) {
    const char* p = s.data;
    const char* end = s.data + s.size;
    while (p < end) {
        const char* q = static_cast<const char*>(std::memchr(p, '"', static_cast<size_t>(end - p)));
        if (!q) {
            out.append(p, static_cast<size_t>(end - p));
            return;
        }
        out.append(p, static_cast<size_t>(q - p + 1));
        out += '"';
        p = q + 1;
    }
}
}  // namespace

int memory_attr_rank(std::string_view k) {
    // by length first: one or two comparisons per key (a hot path)
    switch (k.size()) {
    case 4:
        if (k == "addr") return 1;
        if (k == "size") return 2;
        if (k == "used") return 4;
        if (k == "type") return 6;
        break;
    case 5:
        if (k == "total") return 3;
        if (k == "owner") return 7;
        break;
    case 6:
        if (k == "pinned") return 3;
        if (k == "shadow") return 5;
        break;
    case 9:
        if (k == "page_type") return 9;
        break;
    case 10:
        if (k == "alloc_type") return 10;
        break;
    case 13:
        if (k == "allocation_id") return 0;
        break;
    case 16:
        if (k == "inefficient_type") return 8;
        break;
    default: break;
    }
    return 11;
}

const char* oom_row_name(const msms_event& ev) {
    if (ev.kind != MSMS_EV_OOM_DETAIL) return nullptr;
    switch (ev.type) {
    case MSMS_T_OOM_TRIGGER: return "OOM_Trigger";
    case MSMS_T_OOM_RECENT_ALLOC: return "OOM_RecentAlloc";
    case MSMS_T_OOM_TOP_ALLOC: return "OOM_TopAlloc";
    default: return nullptr;
    }
}

bool is_memory_row(uint16_t kind) { return kind == MSMS_EV_MALLOC || kind == MSMS_EV_FREE || kind == MSMS_EV_ACCESS; }

void order_memory_attrs(std::vector<std::pair<std::string, std::string>>& attrs) {
    std::stable_sort(attrs.begin(), attrs.end(), [](const auto& a, const auto& b) {
        return memory_attr_rank(a.first) < memory_attr_rank(b.first);
    });
}

void append_dump_row_head(std::string& out, const msms_event& ev) {
    append_uint(out, ev.id);
    out += ',';
    const char* kind = msms_event_kind_name(ev.kind);
    out += kind ? kind : "N/A";
    out += ',';
    const char* type = msms_event_type_name(ev.type);
    out += type ? type : "N/A";
    out += ',';
    if (const char* oom = oom_row_name(ev)) out += oom;
    else if (ev.name.size) csv_field(out, msmemscope::view(ev.name));
    else out += "N/A";
    out += ',';
    append_uint(out, ev.timestamp_ns);
    out += ',';
    append_uint(out, ev.pid);
    out += ',';
    append_uint(out, ev.tid);
    out += ',';
}

namespace {
void append_attr(std::string& out, const msms_kv& kv) {
    append_quoted_body(out, kv.key);
    out += ':';
    append_quoted_body(out, kv.value);
}
}  // namespace

void append_dump_row_tail(std::string& out, const msms_event& ev) {
    out += ',';
    bool memory = is_memory_row(ev.kind);
    if (memory) append_hex_ptr(out, ev.ptr);
    else out += "N/A";
    out += ',';
    // The quoted "{k:v,...}" field, built in place; empty where upstream
    // writes no Attr (rows without attributes: most SYSTEM, MSTX, OP_LAUNCH).
    if (!memory) {
        if (ev.attr_count) {
            out += "\"{";
            for (uint32_t i = 0; i < ev.attr_count; ++i) {
                if (i) out += ',';
                append_attr(out, ev.attrs[i]);
            }
            out += "}\"";
        }
    } else {
        // upstream's order; an ACCESS row also gets `addr` (its Ptr) when
        // its collector did not give one. Index kSynthAddr = that addr.
        constexpr uint32_t kMax = 64, kSynthAddr = UINT32_MAX;
        uint32_t order[kMax + 1];
        int rank[kMax + 1];
        uint32_t n = 0;
        bool has_addr = false;
        for (uint32_t i = 0; i < ev.attr_count && n < kMax; ++i) {
            std::string_view k = msmemscope::view(ev.attrs[i].key);
            has_addr |= k == "addr";
            int r = memory_attr_rank(k);
            uint32_t j = n++;
            while (j > 0 && rank[j - 1] > r) {  // stable insertion
                order[j] = order[j - 1];
                rank[j] = rank[j - 1];
                --j;
            }
            order[j] = i;
            rank[j] = r;
        }
        if (ev.kind == MSMS_EV_ACCESS && !has_addr) {
            uint32_t j = n++;
            while (j > 0 && rank[j - 1] > 1) {
                order[j] = order[j - 1];
                rank[j] = rank[j - 1];
                --j;
            }
            order[j] = kSynthAddr;
            rank[j] = 1;
        }
        out += "\"{";
        for (uint32_t i = 0; i < n; ++i) {
            if (i) out += ',';
            if (order[i] == kSynthAddr) {
                out += "addr:";
                append_hex_ptr(out, ev.ptr);
            } else {
                append_attr(out, ev.attrs[order[i]]);
            }
        }
        // attributes beyond kMax (never in practice) in their own order
        for (uint32_t i = kMax; i < ev.attr_count; ++i) {
            out += ',';
            append_attr(out, ev.attrs[i]);
        }
        out += "}\"";
    }
    out += ',';
    if (ev.py_stack.size) csv_field(out, msmemscope::view(ev.py_stack), true);
    out += ',';
    if (ev.c_stack.size) csv_field(out, msmemscope::view(ev.c_stack), true);
    out += '\n';
}

void append_dump_row(std::string& out, const msms_event& ev, std::string_view device) {
    append_dump_row_head(out, ev);
    if (!device.empty()) {
        out += device;
    } else {
        switch (ev.device_kind) {
        case MSMS_DEV_CPU: out += "cpu"; break;
        case MSMS_DEV_NPU:
        case MSMS_DEV_CUDA: append_uint(out, static_cast<uint64_t>(ev.device_id < 0 ? 0 : ev.device_id)); break;
        default: out += "N/A";
        }
    }
    append_dump_row_tail(out, ev);
}

void append_python_trace_row(std::string& out, const msms_event& ev) { PythonTraceRowWriter().append(out, ev); }

char* PythonTraceRowWriter::put_stamp(char* p, uint64_t v, Stamp& s) {
    constexpr uint64_t k1e8 = 100000000ull;
    if (v == 0) {  // no time recorded: upstream writes N/A
        std::memcpy(p, "N/A", 3);
        return p + 3;
    }
    uint64_t high = v / k1e8;
    if (high == 0) return format_uint(p, v);
    if (high != s.high) {
        s.high = high;
        s.len = static_cast<size_t>(format_uint(s.text, high) - s.text);
    }
    std::memcpy(p, s.text, s.len);
    return format_8_digits(p + s.len, static_cast<uint32_t>(v - high * k1e8));
}

void PythonTraceRowWriter::append(std::string& out, const msms_event& ev) {
    csv_field(out, msmemscope::view(ev.name));
    if (ev.tid != tid_ || ev.pid != pid_) {
        tid_ = ev.tid;
        pid_ = ev.pid;
        char* q = ids_;
        *q++ = ',';
        q = format_uint(q, ev.tid);
        *q++ = ',';
        q = format_uint(q, ev.pid);
        *q++ = '\n';
        ids_len_ = static_cast<size_t>(q - ids_);
    }
    char buf[2 * 21 + sizeof(ids_)];
    char* p = buf;
    *p++ = ',';
    p = put_stamp(p, ev.aux0, start_);
    *p++ = ',';
    p = put_stamp(p, ev.timestamp_ns, end_);
    std::memcpy(p, ids_, ids_len_);
    p += ids_len_;
    out.append(buf, static_cast<size_t>(p - buf));
}

}  // namespace msms
