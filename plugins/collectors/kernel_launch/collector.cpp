// Host-side descriptor of the kernel_launch collector (Ascend runtime).
// Preloads libmsms_kernel_launch_hook.so into the target when an npu device
// is selected. KERNEL_LAUNCH rows are recorded when "launch" is among the
// events and kernel is among the levels (--level=kernel or kernel,op; the
// default level, op, records framework operators only, as upstream);
// SYSTEM ACL_INIT/ACL_FINI whenever it is loaded,
// which is why it also declares alloc/free (selected for every npu run).
#include <msmemscope/plugin.hpp>

namespace {

class KernelLaunchCollector : public msmemscope::ICollector {
public:
    static constexpr const char* kTypeName = "kernel_launch";
    static constexpr const char* kVersion = "1.0.0";
    static constexpr const char* kDescription =
        "Ascend kernel launches: rtKernelLaunch*, rtAicpuKernelLaunchExWithArgs, aclrtLaunchKernel* "
        "(KERNEL_LAUNCH with kernel name, streamId, taskId); aclInit/aclFinalize (SYSTEM ACL_INIT/ACL_FINI)";
    static constexpr const char* kEvents = "launch,alloc,free";
    static constexpr const char* kAgentLibrary = "libmsms_kernel_launch_hook.so";
    static constexpr const char* kDevices = "npu";

    KernelLaunchCollector(msmemscope::Host, const msmemscope::Options&) {}
};

}  // namespace

MSMEMSCOPE_PLUGIN(KernelLaunchCollector)
