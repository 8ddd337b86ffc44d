// Attr of a SNAPSHOT row as upstream msMemScope writes it
// (csrc/analysis/dump.cpp, Dump::DumpSnapshotEvent), for collectors that
// write SNAPSHOT rows natively (hal, cuda):
//   reserved,max_reserved,allocated,max_allocated,total,free,device_rate,reserved_rate
// in that order; the rates are percentages printed as std::to_string(double)
// does ("%f"). A number the caller does not know is 0, as upstream writes
// when take_snapshot() is given no value for it (MemorySnapshotInfo
// defaults in csrc/python_itf/msleaksmodule.cpp).
//
// extra: NULL or "key:value,..."; its reserved / max_reserved / allocated /
// max_allocated pairs fill those slots, every other pair is appended after
// the rates, in its order. No allocation (usable inside hooks).
#ifndef MSMEMSCOPE_SNAPSHOT_ATTRS_H
#define MSMEMSCOPE_SNAPSHOT_ATTRS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace msms {

// Writes the Attr into out (NUL-terminated, at most cap-1 chars); returns
// its length. An extra pair that does not fit whole is left out.
inline size_t format_snapshot_attrs(char* out, size_t cap, uint64_t total, uint64_t free_b, const char* extra) {
    if (!out || cap == 0) return 0;
    static const char* const kSlots[4] = {"reserved", "max_reserved", "allocated", "max_allocated"};
    unsigned long long slot[4] = {0, 0, 0, 0};
    auto slot_of = [](const char* key, size_t len) -> int {
        for (int i = 0; i < 4; ++i)
            if (strlen(kSlots[i]) == len && strncmp(kSlots[i], key, len) == 0) return i;
        return -1;
    };
    for (const char* p = extra; p && *p;) {
        const char* end = strchr(p, ',');
        size_t len = end ? static_cast<size_t>(end - p) : strlen(p);
        const char* colon = static_cast<const char*>(memchr(p, ':', len));
        int i = colon ? slot_of(p, static_cast<size_t>(colon - p)) : -1;
        if (i >= 0) slot[i] = strtoull(colon + 1, nullptr, 10);
        p = end ? end + 1 : nullptr;
    }
    double device_rate = total > 0 && free_b <= total
                             ? static_cast<double>(total - free_b) / static_cast<double>(total) * 100
                             : 0.0;
    double reserved_rate = slot[0] > 0 ? static_cast<double>(slot[2]) / static_cast<double>(slot[0]) * 100 : 0.0;
    int w = snprintf(out, cap,
                     "reserved:%llu,max_reserved:%llu,allocated:%llu,max_allocated:%llu,total:%llu,free:%llu,"
                     "device_rate:%f,reserved_rate:%f",
                     slot[0], slot[1], slot[2], slot[3], static_cast<unsigned long long>(total),
                     static_cast<unsigned long long>(free_b), device_rate, reserved_rate);
    if (w < 0) {
        out[0] = '\0';
        return 0;
    }
    size_t n = static_cast<size_t>(w) < cap ? static_cast<size_t>(w) : cap - 1;
    for (const char* p = extra; p && *p;) {
        const char* end = strchr(p, ',');
        size_t len = end ? static_cast<size_t>(end - p) : strlen(p);
        const char* colon = static_cast<const char*>(memchr(p, ':', len));
        bool slotted = colon && slot_of(p, static_cast<size_t>(colon - p)) >= 0;
        if (len > 0 && !slotted && n + 1 + len < cap) {
            out[n++] = ',';
            memcpy(out + n, p, len);
            n += len;
            out[n] = '\0';
        }
        p = end ? end + 1 : nullptr;
    }
    return n;
}

}  // namespace msms

#endif
