// One memscope_dump row (COMPAT §4) as CSV text, and the python_trace row
// (COMPAT §5). Shared by the CSV sink and the tools that rewrite dump files.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <msmemscope/abi.h>

namespace msms {

extern const char* const kDumpHeader;         // the exact header line, no newline
extern const char* const kPythonTraceHeader;

// "{k:v,k:v}"
std::string render_attr(const msms_kv* attrs, uint32_t n);
std::string render_attr(const std::vector<std::pair<std::string, std::string>>& attrs);
// A row; `device` (when not empty) is written as its Device Id instead of
// the event's own: rows without a device go into every device's file with
// that file's id, as upstream writes the current device of the thread.
void append_dump_row(std::string& out, const msms_event& ev, std::string_view device = {});
// The same row in two parts, before and after the Device Id field (with
// their commas): kept for files of devices seen later.
void append_dump_row_head(std::string& out, const msms_event& ev);
void append_dump_row_tail(std::string& out, const msms_event& ev);

// Upstream's Attr order for MALLOC/FREE/ACCESS rows (csrc/analysis/dump.cpp):
// allocation_id, addr, size, total|pinned, used, shadow, type, owner,
// inefficient_type, page_type, alloc_type; other keys after them in their
// own order. Other rows keep their order.
int memory_attr_rank(std::string_view key);
// upstream's Name of an OOM_DETAIL row (OOM_Trigger, OOM_RecentAlloc,
// OOM_TopAlloc; the failed function is in Attr func), else nullptr.
const char* oom_row_name(const msms_event& ev);
bool is_memory_row(uint16_t kind);
// `attrs` in that order (stable), for memory rows.
void order_memory_attrs(std::vector<std::pair<std::string, std::string>>& attrs);
// One python_trace row on its own (PythonTraceRowWriter below for a stream).
void append_python_trace_row(std::string& out, const msms_event& ev);

// The same rows, written faster for one stream: a timestamp's digits above
// its last eight change only every 0.1 s, and a stream's process and thread
// ids rarely, so both are kept formatted from the previous row.
class PythonTraceRowWriter {
public:
    void append(std::string& out, const msms_event& ev);

private:
    struct Stamp {
        uint64_t high = UINT64_MAX;  // value / 10^8 of the digits in `text`
        char text[24];
        size_t len = 0;
    };
    static char* put_stamp(char* p, uint64_t v, Stamp& s);
    Stamp start_, end_;
    uint64_t tid_ = UINT64_MAX, pid_ = UINT64_MAX;
    char ids_[48];  // ",tid,pid\n"
    size_t ids_len_ = 0;
};

}  // namespace msms
