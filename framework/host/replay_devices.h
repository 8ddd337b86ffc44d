// --replay without --device: the devices a capture holds events of, so that a
// replay reproduces the run as it was recorded (its rows, its _ascend/_cuda/
// _cpu folder) whatever --device defaults to.
#pragma once

#include <string>
#include <vector>

namespace msms {

// "npu:N", "cuda:N", "cpu" in first-seen order; empty when the capture cannot
// be read (the replay itself then reports why) or holds no device events.
std::vector<std::string> capture_devices(const std::string& capture_path);

}  // namespace msms
