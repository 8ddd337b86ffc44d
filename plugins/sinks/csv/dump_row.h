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
void append_dump_row(std::string& out, const msms_event& ev);
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
