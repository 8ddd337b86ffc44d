// Host-side descriptor of the mstx collector: marks, ranges ("step start"
// ranges drive steps) and framework memory pools reported through mstx.
// Serves every device and declares no event class, so it is always loaded.
#include <msmemscope/plugin.hpp>

namespace {

class MstxCollector : public msmemscope::ICollector {
public:
    static constexpr const char* kTypeName = "mstx";
    static constexpr const char* kVersion = "1.0.0";
    static constexpr const char* kDescription =
        "mstx tool (InitInjectionMstx, MSTX_INJECTION_PATH): MSTX Mark/Range_start/Range_end rows; "
        "memory-pool domains ptaCaching/ptaWorkspace/atb/mindsporeMemPool as PTA/PTA_WORKSPACE/ATB/"
        "MINDSPORE MALLOC/FREE";
    static constexpr const char* kAgentLibrary = "libmsms_mstx_hook.so";
    static constexpr const char* kDevices = "*";

    MstxCollector(msmemscope::Host, const msmemscope::Options&) {}
};

}  // namespace

MSMEMSCOPE_PLUGIN(MstxCollector)
