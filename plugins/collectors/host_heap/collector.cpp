// Host-side descriptor of the host_heap collector: the CLI preloads its hook
// library into the target when device `cpu` is selected and alloc/free
// events are wanted.
#include <msmemscope/plugin.hpp>

namespace {

class HostHeapCollector : public msmemscope::ICollector {
public:
    static constexpr const char* kTypeName = "host_heap";
    static constexpr const char* kVersion = "1.0.0";
    static constexpr const char* kDescription =
        "host heap: malloc, free, calloc, realloc, posix_memalign, aligned_alloc, memalign, valloc, "
        "reallocarray, pvalloc (Event Type HOST, device cpu)";
    static constexpr const char* kEvents = "alloc,free";
    static constexpr const char* kAgentLibrary = "libmsms_host_heap_hook.so";
    static constexpr const char* kDevices = "cpu";

    HostHeapCollector(msmemscope::Host, const msmemscope::Options&) {}
};

}  // namespace

MSMEMSCOPE_PLUGIN(HostHeapCollector)
