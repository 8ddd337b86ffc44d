// Host-side descriptor of the cuda collector: when --device names cuda (or
// cuda:N) the CLI preloads libmsms_cuda_hook.so into the target. It records
// the CUDA driver's device, managed, async-pool, virtual (cuMemCreate/Map) and
// pinned host memory, out-of-memory failures, kernel launches (with
// --events=launch) and NVTX marks/ranges (through NVTX_INJECTION64_PATH).
#include <msmemscope/plugin.hpp>

namespace {

class CudaCollector : public msmemscope::ICollector {
public:
    static constexpr const char* kTypeName = "cuda";
    static constexpr const char* kVersion = "1.0.0";
    static constexpr const char* kDescription =
        "CUDA driver: cuMemAlloc*/cuMemFree*, cuMemAllocManaged, cuMemAllocAsync/FromPoolAsync/FreeAsync, "
        "cuMemCreate/Release/Map/Unmap (HAL, device cuda:N), cuMemAllocHost/HostAlloc/FreeHost/HostRegister/"
        "HostUnregister (HOST_PINNED, device cpu), also reached through cuGetProcAddress (the CUDA runtime); "
        "cuLaunchKernel/Ex/CooperativeKernel (KERNEL_LAUNCH); NVTX marks and ranges (MSTX) via "
        "NVTX_INJECTION64_PATH";
    static constexpr const char* kEvents = "alloc,free,launch";
    static constexpr const char* kAgentLibrary = "libmsms_cuda_hook.so";
    static constexpr const char* kDevices = "cuda";

    CudaCollector(msmemscope::Host, const msmemscope::Options&) {}
};

}  // namespace

MSMEMSCOPE_PLUGIN(CudaCollector)
