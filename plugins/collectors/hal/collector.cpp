// Host-side descriptor of the hal collector (Ascend driver memory). The CLI
// preloads libmsms_hal_hook.so into the target when an npu device (or cpu,
// for pinned host memory) is selected and alloc/free events are wanted.
#include <msmemscope/plugin.hpp>

namespace {

class HalCollector : public msmemscope::ICollector {
public:
    static constexpr const char* kTypeName = "hal";
    static constexpr const char* kVersion = "1.0.0";
    static constexpr const char* kDescription =
        "Ascend driver memory: halMemAlloc/halMemFree, halMemCreate/halMemRelease (Event Type HAL, "
        "HOST_PINNED for host memory), aclrtHostRegisterV2/aclrtHostUnregister (HOST_PINNED), "
        "out-of-memory failures (OOM_TRIGGER)";
    static constexpr const char* kEvents = "alloc,free";
    static constexpr const char* kAgentLibrary = "libmsms_hal_hook.so";
    static constexpr const char* kDevices = "npu,cpu";

    HalCollector(msmemscope::Host, const msmemscope::Options&) {}
};

}  // namespace

MSMEMSCOPE_PLUGIN(HalCollector)
