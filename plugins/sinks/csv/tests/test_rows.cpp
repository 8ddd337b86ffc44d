// python_trace rows as upstream writes them (csrc/analysis/data_handler.cpp
// WriteTraceEvent: "info,start,end,tid,pid", a zero timestamp as N/A), the
// name quoted when it needs it; the stream writer (which keeps the previous
// row's leading digits and ids) and the one-row function give the same text.
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

TEST_CASE("python_trace rows, written one by one and as a stream, are upstream's rows") {
    const std::string plain = "/work/app/train.py(26): fib", quoted = "f(1): a,b";
    struct Row {
        const std::string* name;
        uint64_t start, end;
        uint32_t tid, pid;
        const char* expect;
    };
    const uint64_t t = 1764480000123456789ull;
    std::vector<Row> rows = {
        {&plain, t, t + 150, 7, 100, "/work/app/train.py(26): fib,1764480000123456789,1764480000123456939,7,100\n"},
        {&plain, t + 200, t + 350, 7, 100, "/work/app/train.py(26): fib,1764480000123456989,1764480000123457139,7,100\n"},  // same leading digits
        {&quoted, t + 99999000, t + 100000500, 7, 100, "\"f(1): a,b\",1764480000223455789,1764480000223457289,7,100\n"},  // end crosses a 10^8 boundary
        {&plain, t + 100000600, t + 100000700, 8, 100, "/work/app/train.py(26): fib,1764480000223457389,1764480000223457489,8,100\n"},  // another thread
        {&plain, t + 100000800, t + 200000000, 8, 101, "/work/app/train.py(26): fib,1764480000223457589,1764480000323456789,8,101\n"},  // another process
        {&plain, 0, 5, 8, 101, "/work/app/train.py(26): fib,N/A,5,8,101\n"},  // no start time: N/A; below 10^8: no padding
        {&plain, 99999999, 100000000, 8, 101, "/work/app/train.py(26): fib,99999999,100000000,8,101\n"},
        {&plain, 100000000, 100000001, 8, 101, "/work/app/train.py(26): fib,100000000,100000001,8,101\n"},
        {&plain, UINT64_MAX - 1, UINT64_MAX, UINT32_MAX, UINT32_MAX, "/work/app/train.py(26): fib,18446744073709551614,18446744073709551615,4294967295,4294967295\n"},
        {&plain, t, t + 1, 7, 100, "/work/app/train.py(26): fib,1764480000123456789,1764480000123456790,7,100\n"},  // back to the first values
    };
    msms::PythonTraceRowWriter writer;
    for (const Row& r : rows) {
        msms_event ev = trace_event(*r.name, r.start, r.end, r.tid, r.pid);
        std::string one, streamed;
        msms::append_python_trace_row(one, ev);
        writer.append(streamed, ev);
        CHECK(one == r.expect);
        CHECK(streamed == r.expect);
    }
}

// memscope_dump rows as upstream's current code writes them (COMPAT §8).
namespace {

struct Ev {
    msms_event ev{};
    std::vector<std::pair<std::string, std::string>> a;
    std::vector<msms_kv> kv;
    Ev(uint16_t kind, uint16_t type, std::vector<std::pair<std::string, std::string>> attrs) : a(std::move(attrs)) {
        ev.struct_size = sizeof(ev);
        ev.id = 5;
        ev.kind = kind;
        ev.type = type;
        ev.timestamp_ns = 100;
        ev.pid = ev.tid = 7;
        ev.device_kind = MSMS_DEV_NPU;
        ev.device_id = 1;
        ev.ptr = 0xab0;
        for (auto& [k, v] : a)
            kv.push_back({{k.data(), static_cast<uint32_t>(k.size())}, {v.data(), static_cast<uint32_t>(v.size())}});
        ev.attrs = kv.data();
        ev.attr_count = static_cast<uint32_t>(kv.size());
    }
    std::string row(std::string_view device = {}) const {
        std::string out;
        msms::append_dump_row(out, ev, device);
        return out;
    }
};

}  // namespace

TEST_CASE("memory rows: upstream's Attr order, ours after; ACCESS rows get addr") {
    Ev m(MSMS_EV_MALLOC, MSMS_T_HAL,
         {{"allocation_id", "3"}, {"alloc_type", "alloc"}, {"used", "64"}, {"owner", "CANN@APP"}, {"addr", "0xab0"},
          {"size", "64"}, {"process_used", "64"}, {"page_type", "huge"}, {"total", "128"}, {"inefficient_type", "x"}});
    CHECK(m.row() == "5,MALLOC,HAL,N/A,100,7,7,1,0x0000000000000ab0,\"{allocation_id:3,addr:0xab0,size:64,total:128,"
                     "used:64,owner:CANN@APP,inefficient_type:x,page_type:huge,alloc_type:alloc,process_used:64}\",,\n");
    Ev a(MSMS_EV_ACCESS, MSMS_T_READ,
         {{"dtype", "torch.float32"}, {"shape", "torch.Size([2, 3])"}, {"size", "24"}, {"type", "PTA"},
          {"allocation_id", "3"}});
    CHECK(a.row() == "5,ACCESS,READ,N/A,100,7,7,1,0x0000000000000ab0,\"{allocation_id:3,addr:0x0000000000000ab0,"
                     "size:24,type:PTA,dtype:torch.float32,shape:torch.Size([2, 3])}\",,\n");
    std::vector<std::pair<std::string, std::string>> attrs = {{"owner", "o"}, {"shadow", "true"}, {"size", "1"},
                                                              {"allocation_id", "9"}};
    msms::order_memory_attrs(attrs);
    CHECK(attrs == std::vector<std::pair<std::string, std::string>>{
                       {"allocation_id", "9"}, {"size", "1"}, {"shadow", "true"}, {"owner", "o"}});
}

TEST_CASE("rows without attributes have no Attr; device-less rows take the file's Device Id; OOM names") {
    Ev mark(MSMS_EV_MSTX, MSMS_T_MARK, {});
    mark.ev.device_kind = MSMS_DEV_NA;
    mark.ev.device_id = -1;
    CHECK(mark.row() == "5,MSTX,Mark,N/A,100,7,7,N/A,N/A,,,\n");
    CHECK(mark.row("3") == "5,MSTX,Mark,N/A,100,7,7,3,N/A,,,\n");
    std::string head, tail;
    msms::append_dump_row_head(head, mark.ev);
    msms::append_dump_row_tail(tail, mark.ev);
    CHECK(head + "cpu" + tail == mark.row("cpu"));
    Ev trig(MSMS_EV_OOM_DETAIL, MSMS_T_OOM_TRIGGER, {{"func", "halMemAlloc"}, {"req_size", "8"}});
    CHECK(trig.row() == "5,OOM_DETAIL,OOM_TRIGGER,OOM_Trigger,100,7,7,1,N/A,\"{func:halMemAlloc,req_size:8}\",,\n");
    Ev recent(MSMS_EV_OOM_DETAIL, MSMS_T_OOM_RECENT_ALLOC, {{"pool", "HAL"}});
    Ev top(MSMS_EV_OOM_DETAIL, MSMS_T_OOM_TOP_ALLOC, {{"pool", "HAL"}});
    CHECK(recent.row().find(",OOM_RecentAlloc,") != std::string::npos);
    CHECK(top.row().find(",OOM_TopAlloc,") != std::string::npos);
}
