/* libmsms_watch.so: the target-side half of watch. The Python package (or any
 * code in the profiled process) calls msms_watch_crc64 to hash a tensor's
 * bytes without copying them into Python, and msms_watch_record to send one
 * checkpoint to the host (the event contract is in ../README.md). */
#include <stdio.h>
#include <string.h>

#include <msmemscope/agent.h>

#include "../crc64.h"

#define MSMS_WATCH_EXPORT __attribute__((visibility("default")))

MSMS_WATCH_EXPORT uint64_t msms_watch_crc64(const void* data, size_t n) { return msms_crc64(data, n); }

/* One checkpoint of one watched tensor: `op` and `count` name the operator
 * (count-th call of that op), `watched` the op whose outputs are watched,
 * `idx` the tensor, `after` 0 before / 1 after the op. data/n is hashed here;
 * with file (a .bin of those bytes written by the caller, moved into
 * watch_dump by the host) the hash goes with it (data may then be NULL:
 * no hash). Returns 0 when recorded. */
MSMS_WATCH_EXPORT int msms_watch_record(const char* op, uint64_t count, const char* watched, uint64_t idx, int after,
                                        const void* data, size_t n, const char* file, uint16_t device_kind,
                                        int16_t device_id) {
    char attrs[4096];
    int len;
    if (file && *file && data)  /* the bytes' hash too: which op changed them */
        len = snprintf(attrs, sizeof(attrs),
                       "op:%s,count:%llu,watched:%s,idx:%llu,when:%s,size:%llu,file:%s,crc64:%016llx", op,
                       (unsigned long long)count, watched, (unsigned long long)idx, after ? "after" : "before",
                       (unsigned long long)n, file, (unsigned long long)msms_crc64(data, n));
    else if (file && *file)
        len = snprintf(attrs, sizeof(attrs), "op:%s,count:%llu,watched:%s,idx:%llu,when:%s,size:%llu,file:%s", op,
                       (unsigned long long)count, watched, (unsigned long long)idx, after ? "after" : "before",
                       (unsigned long long)n, file);
    else
        len = snprintf(attrs, sizeof(attrs), "op:%s,count:%llu,watched:%s,idx:%llu,when:%s,size:%llu,crc64:%016llx",
                       op, (unsigned long long)count, watched, (unsigned long long)idx, after ? "after" : "before",
                       (unsigned long long)n, (unsigned long long)msms_crc64(data, n));
    if (len < 0 || (size_t)len >= sizeof(attrs)) return 1;
    if (!msms_agent_enter()) return 2;
    msms_agent_event(MSMS_EV_MSTX, MSMS_T_MARK, device_kind, device_id, 0, n, 0, 0, "msmemscope.watch", attrs);
    msms_agent_leave();
    return 0;
}
