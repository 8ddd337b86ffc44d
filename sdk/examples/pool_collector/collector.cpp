// Host side of the my_pool collector. It only declares things: the hook
// library the host preloads into the target, the devices it serves and the
// events it produces. The host selects it when a run wants one of those
// devices and one of those event classes (e.g. --device=cpu --events=alloc,free).
#include <msmemscope/plugin.hpp>

namespace {

class MyPoolCollector : public msmemscope::ICollector {
public:
    static constexpr const char* kTypeName = "my_pool";
    static constexpr const char* kVersion = "1.0.0";
    static constexpr const char* kDescription = "blocks of the user's mypool (Event Type PTA, device cpu; SDK example)";
    static constexpr const char* kEvents = "alloc,free";
    static constexpr const char* kAgentLibrary = "libmsms_my_pool_hook.so";
    static constexpr const char* kDevices = "cpu";

    MyPoolCollector(msmemscope::Host, const msmemscope::Options&) {}
};

}  // namespace

MSMEMSCOPE_PLUGIN(MyPoolCollector)
