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

    // Read in the target (the agent's options) by the Python package's CLI
    // boot: bindings/msmemscope/_boot.py, framework/agent/import_fold.h.
    static const msms_option_spec* options(uint32_t& count) {
        static const msms_option_spec specs[] = {
            {"python_imports", MSMS_OPT_ENUM, "fold", "fold|record", 0, 0,
             "Python targets: host blocks allocated while the interpreter imports modules of the Python installation "
             "(standard library, site-packages) get no row of their own, nor do their frees; those still live are "
             "written together as one block, the imports' heap (a MALLOC at 0xffff800000000000 with Attr "
             "shadow:true,import:true,blocks:N and no stacks, written again as it changes) (fold), or every "
             "allocation and free is written with its stacks (record)"}};
        count = 1;
        return specs;
    }
};

}  // namespace

MSMEMSCOPE_PLUGIN(HostHeapCollector)
