// Helpers of the driver hooks (hooks.cpp).
#pragma once

#include <stdint.h>

namespace msms_cuda {

// Device of the calling thread's current context; -1 when there is none or
// the driver is not loaded.
int current_device_or_none();

}  // namespace msms_cuda
