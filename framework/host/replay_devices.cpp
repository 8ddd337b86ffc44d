#include "replay_devices.h"

#include <algorithm>
#include <cstdint>

#include <msmemscope/abi.h>

#include "capture_reader.h"

namespace msms {

std::vector<std::string> capture_devices(const std::string& capture_path) {
    std::vector<std::string> out;
    CaptureReader reader;
    std::string err;
    if (!reader.open(capture_path, err)) return out;
    RawEvent e;
    int idle = 0;
    for (;;) {
        size_t decoded = 0, popped = 0;
        uint64_t watermark = reader.poll_ordered(0, decoded);
        while (reader.pop(e, watermark)) {
            ++popped;
            std::string d;
            if (e.dev_kind == MSMS_DEV_CPU) d = "cpu";
            else if (e.dev_kind == MSMS_DEV_NPU) d = "npu:" + std::to_string(e.dev_id);
            else if (e.dev_kind == MSMS_DEV_CUDA) d = "cuda:" + std::to_string(e.dev_id);
            else continue;
            if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
        }
        if (watermark == UINT64_MAX || (decoded == 0 && reader.empty())) break;
        if (decoded == 0 && popped == 0 && ++idle > 100) break;  // a capture still being written: enough seen
    }
    return out;
}

}  // namespace msms
