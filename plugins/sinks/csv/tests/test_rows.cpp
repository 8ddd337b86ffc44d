// python_trace rows: the stream writer (which keeps the previous row's
// leading digits and ids) writes exactly what the stateless function does.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dump_row.h"

namespace {

msms_event trace_event(const std::string& name, uint64_t start, uint64_t end, uint32_t tid, uint32_t pid) {
    msms_event ev{};
    ev.struct_size = sizeof(ev);
    ev.kind = MSMS_EV_PY_TRACE;
    ev.name = {name.data(), static_cast<uint32_t>(name.size())};
    ev.aux0 = start;
    ev.timestamp_ns = end;
    ev.tid = tid;
    ev.pid = pid;
    return ev;
}

}  // namespace

TEST_CASE("PythonTraceRowWriter matches append_python_trace_row row for row") {
    const std::string plain = "/work/app/train.py(26): fib", quoted = "f(1): a,b";
    struct Row {
        const std::string* name;
        uint64_t start, end;
        uint32_t tid, pid;
    };
    const uint64_t t = 1764480000123456789ull;
    std::vector<Row> rows = {
        {&plain, t, t + 150, 7, 100},
        {&plain, t + 200, t + 350, 7, 100},                  // same leading digits
        {&quoted, t + 99999000, t + 100000500, 7, 100},      // end crosses a 10^8 boundary
        {&plain, t + 100000600, t + 100000700, 8, 100},      // another thread
        {&plain, t + 100000800, t + 200000000, 8, 101},      // another process
        {&plain, 0, 5, 8, 101},                              // below 10^8: no padding
        {&plain, 99999999, 100000000, 8, 101},
        {&plain, 100000000, 100000001, 8, 101},
        {&plain, UINT64_MAX - 1, UINT64_MAX, UINT32_MAX, UINT32_MAX},
        {&plain, t, t + 1, 7, 100},                          // back to the first values
    };
    msms::PythonTraceRowWriter writer;
    for (const Row& r : rows) {
        msms_event ev = trace_event(*r.name, r.start, r.end, r.tid, r.pid);
        std::string expect, got;
        msms::append_python_trace_row(expect, ev);
        writer.append(got, ev);
        CHECK(got == expect);
    }
    std::string one;
    msms::append_python_trace_row(one, trace_event(plain, t, t + 150, 7, 100));
    CHECK(one == "/work/app/train.py(26): fib,1764480000123456789,1764480000123456939,7,100\n");
}
