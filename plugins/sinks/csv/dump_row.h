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
void append_python_trace_row(std::string& out, const msms_event& ev);

}  // namespace msms
