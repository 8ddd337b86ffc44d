// Which memscope_dump rows a sink writes: msMemScope writes exactly the event
// classes given to --events (Dump::ShouldDumpEvent, upstream 69fbe9c) even when
// more are collected for the analyses (--events=alloc: no FREE rows, although
// the leak analysis still sees every free). MALLOC -> alloc, FREE -> free,
// OP_LAUNCH and KERNEL_LAUNCH -> launch, ACCESS -> access; every other row
// (SYSTEM, MSTX, SNAPSHOT, OOM, python trace) is always written.
// The host fills the sinks' "write_events" option from --events.
#pragma once

#include <string>
#include <string_view>

#include <msmemscope/abi.h>

namespace msms {

class WrittenEvents {
public:
    static constexpr msms_option_spec kOptionSpec = {
        "write_events", MSMS_OPT_LIST, "all", "all|none|alloc|free|launch|access", 0, 0,
        "memory rows written (set by the host from --events): alloc, free, launch, access, all or none"};

    static WrittenEvents from_option(std::string_view v, char sep = ',') {
        WrittenEvents w;
        if (v == "all" || v.empty()) return w;
        w.mask_ = 0;
        size_t start = 0;
        while (start <= v.size()) {
            size_t comma = v.find(sep, start);
            if (comma == std::string_view::npos) comma = v.size();
            std::string_view item = v.substr(start, comma - start);
            if (item == "all") w.mask_ = kAll;
            else if (item == "alloc") w.mask_ |= bit(MSMS_EV_MALLOC);
            else if (item == "free") w.mask_ |= bit(MSMS_EV_FREE);
            else if (item == "launch") w.mask_ |= bit(MSMS_EV_OP_LAUNCH) | bit(MSMS_EV_KERNEL_LAUNCH);
            else if (item == "access") w.mask_ |= bit(MSMS_EV_ACCESS);
            start = comma + 1;
        }
        return w;
    }

    // The Python API's config(events=...) between two ranges: the range's
    // START_TRACE carries Attr events:<listed, '|'-separated, or none>, and
    // what is written follows it from that row on.
    bool wants(const msms_event& ev) {
        if (ev.kind == MSMS_EV_SYSTEM && ev.type == MSMS_T_START_TRACE) {
            for (uint32_t i = 0; i < ev.attr_count; ++i) {
                std::string_view k(ev.attrs[i].key.data, ev.attrs[i].key.size);
                if (k != kRangeAttr) continue;
                std::string_view v(ev.attrs[i].value.data, ev.attrs[i].value.size);
                *this = v == "none" ? from_option("none") : v == "all" ? WrittenEvents() : from_option(v, '|');
            }
        }
        return static_cast<const WrittenEvents&>(*this).wants(ev);
    }

    bool wants(const msms_event& ev) const {
        switch (ev.kind) {
        case MSMS_EV_MALLOC:
        case MSMS_EV_FREE:
        case MSMS_EV_ACCESS:
        case MSMS_EV_OP_LAUNCH:
        case MSMS_EV_KERNEL_LAUNCH:
            return (mask_ & bit(ev.kind)) != 0;
        default:
            return true;
        }
    }
    bool all() const { return mask_ == kAll; }
    static constexpr std::string_view kRangeAttr = "events";

private:
    static constexpr unsigned bit(unsigned kind) { return 1u << kind; }
    static constexpr unsigned kAll = ~0u;
    unsigned mask_ = kAll;
};

}  // namespace msms
