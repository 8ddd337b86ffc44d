// libmsms_kernel_launch_hook.so — Ascend kernel launches and ACL init/fini,
// preloaded into the target when the kernel_launch collector is selected.
//
// KERNEL_LAUNCH/KERNEL_LAUNCH rows (when the run wants "launch" at --level=kernel,
// as upstream: IsNeedTraceKernelLaunch), one per
// launch as the user called it (a launch made by the runtime inside another
// hooked launch is not counted twice):
//   runtime: rtKernelLaunch, rtKernelLaunchWithHandleV2, rtKernelLaunchWithFlagV2,
//            rtAicpuKernelLaunchExWithArgs
//   ACL:     aclrtLaunchKernel, aclrtLaunchKernelV2, aclrtLaunchKernelWithConfig,
//            aclrtLaunchKernelWithHostArgs
// Name: the kernel name the runtime gives — the stub name registered with
// rtFunctionRegister, the name looked up with aclrtBinaryGetFunction (or
// aclrtGetFunctionName), the op name of an AI CPU launch; N/A otherwise.
// Device: aclrtGetDevice. aux0 = stream id, aux1 = task id (from
// rtGetTaskIdAndStreamID when the runtime has it, else the stream's id from
// aclrtStreamGetId/rtGetStreamId and task id 0).
//
// SYSTEM ACL_INIT / ACL_FINI after aclInit / aclFinalize (whatever the events).
#include <msmemscope/agent.h>

#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#include "npu_common.h"

namespace {

typedef int rtError_t;
typedef int aclError;
typedef void* rtStream_t;
typedef void* aclrtStream;
typedef void* aclrtFuncHandle;
typedef void* aclrtBinHandle;

const char* const kRtLibs[] = {"libruntime.so", nullptr};
const char* const kAclLibs[] = {"libascendcl.so", "libascendcl_impl.so", "libacl_rt_impl.so", nullptr};
const char* const kAllLibs[] = {"libascendcl.so", "libruntime.so", "libascendcl_impl.so", "libacl_rt_impl.so", nullptr};

constexpr rtError_t RT_ERROR_RESERVED = 0x7ffffff;
constexpr aclError ACL_ERROR_RT_FAILURE = 507899;

__thread int t_launch_depth __attribute__((tls_model("initial-exec"))) = 0;

// ---- kernel names: key (stub function or function handle) -> name -------
constexpr uint32_t kNames = 4096;
constexpr uint32_t kNameLen = 128;
struct NameSlot {
    const void* key;
    char name[kNameLen];
};
NameSlot g_names[kNames];
msms_npu::SpinLock g_names_lock;

uint32_t slot_of(const void* key) {
    uint64_t k = reinterpret_cast<uint64_t>(key);
    k ^= k >> 29;
    k *= 0xbf58476d1ce4e5b9ull;
    k ^= k >> 32;
    return static_cast<uint32_t>(k) & (kNames - 1);
}

void remember_name(const void* key, const char* name) {
    if (!key || !name) return;
    g_names_lock.lock();
    uint32_t i = slot_of(key);
    for (uint32_t n = 0; n < kNames; ++n, i = (i + 1) & (kNames - 1)) {
        if (g_names[i].key == key || g_names[i].key == nullptr) {
            g_names[i].key = key;
            strncpy(g_names[i].name, name, kNameLen - 1);
            g_names[i].name[kNameLen - 1] = 0;
            break;
        }
    }
    g_names_lock.unlock();
}

bool lookup_name(const void* key, char* out, size_t cap) {
    if (!key) return false;
    bool found = false;
    g_names_lock.lock();
    uint32_t i = slot_of(key);
    for (uint32_t n = 0; n < kNames; ++n, i = (i + 1) & (kNames - 1)) {
        if (g_names[i].key == nullptr) break;
        if (g_names[i].key == key) {
            strncpy(out, g_names[i].name, cap - 1);
            out[cap - 1] = 0;
            found = true;
            break;
        }
    }
    g_names_lock.unlock();
    return found;
}

// ---- runtime queries -------------------------------------------------------
template <class F>
F any_fn(const char* name) {
    return reinterpret_cast<F>(msms_npu::resolve_any(name, kAllLibs));
}

int16_t current_device() {
    using fn = aclError (*)(int32_t*);
    static fn get = any_fn<fn>("aclrtGetDevice");
    int32_t dev = -1;
    if (get && get(&dev) == 0 && dev >= 0) return static_cast<int16_t>(dev);
    using rtfn = rtError_t (*)(int32_t*);
    static rtfn rt_get = any_fn<rtfn>("rtGetDevice");
    if (rt_get && rt_get(&dev) == 0 && dev >= 0) return static_cast<int16_t>(dev);
    return -1;
}

void stream_and_task(void* stream, uint64_t& stream_id, uint64_t& task_id) {
    using task_fn = rtError_t (*)(uint32_t*, uint32_t*);
    static task_fn last = any_fn<task_fn>("rtGetTaskIdAndStreamID");
    uint32_t t = 0, s = 0;
    if (last && last(&t, &s) == 0) {
        stream_id = s;
        task_id = t;
        return;
    }
    task_id = 0;
    stream_id = 0;
    int32_t id = -1;
    using id_fn = int (*)(void*, int32_t*);
    static id_fn acl_id = any_fn<id_fn>("aclrtStreamGetId");
    static id_fn rt_id = any_fn<id_fn>("rtGetStreamId");
    if (acl_id && acl_id(stream, &id) == 0 && id >= 0) stream_id = static_cast<uint64_t>(id);
    else if (rt_id && rt_id(stream, &id) == 0 && id >= 0) stream_id = static_cast<uint64_t>(id);
}

void func_handle_name(aclrtFuncHandle fh, char* out, size_t cap) {
    out[0] = 0;
    if (lookup_name(fh, out, cap)) return;
    using fn = aclError (*)(aclrtFuncHandle, uint32_t, char*);
    static fn get = any_fn<fn>("aclrtGetFunctionName");
    if (get && get(fh, static_cast<uint32_t>(cap), out) == 0) {
        out[cap - 1] = 0;
        return;
    }
    out[0] = 0;
}

void stub_name(const void* stub, char* out, size_t cap) {
    out[0] = 0;
    lookup_name(stub, out, cap);
}

// Outermost hooked launch on this thread only.
struct LaunchScope {
    bool outer;
    LaunchScope() : outer(t_launch_depth++ == 0) {}
    ~LaunchScope() { --t_launch_depth; }
};

void record_launch(const char* name, void* stream) {
    if (!msms_agent_wants("kernel_launch")) return;
    if (!msms_agent_enter()) return;
    uint64_t sid = 0, tid = 0;
    stream_and_task(stream, sid, tid);
    int16_t dev = current_device();
    msms_agent_event(MSMS_EV_KERNEL_LAUNCH, MSMS_T_KERNEL_LAUNCH, dev >= 0 ? MSMS_DEV_NPU : MSMS_DEV_NA, dev, 0, 0,
                     sid, tid, name && *name ? name : nullptr, nullptr);
    msms_agent_leave();
}

void record_system(uint16_t type) {
    if (!msms_agent_enter()) return;
    msms_agent_event(MSMS_EV_SYSTEM, type, MSMS_DEV_NA, -1, 0, 0, 0, 0, nullptr, nullptr);
    msms_agent_leave();
}

template <class F>
F next_rt(const char* name) {
    return reinterpret_cast<F>(msms_npu::resolve_next(name, kRtLibs));
}
template <class F>
F next_acl(const char* name) {
    return reinterpret_cast<F>(msms_npu::resolve_next(name, kAclLibs));
}

}  // namespace

#define MSMS_EXPORT extern "C" __attribute__((visibility("default")))

// ---------------------------------------------------------------- names
MSMS_EXPORT rtError_t rtFunctionRegister(void* binHandle, const void* stubFunc, const char* stubName,
                                         const void* kernelInfoExt, uint32_t funcMode) {
    using fn = decltype(&rtFunctionRegister);
    static fn real = next_rt<fn>("rtFunctionRegister");
    if (!real) return RT_ERROR_RESERVED;
    rtError_t ret = real(binHandle, stubFunc, stubName, kernelInfoExt, funcMode);
    if (ret == 0) remember_name(stubFunc, stubName);
    return ret;
}

MSMS_EXPORT aclError aclrtBinaryGetFunction(const aclrtBinHandle binHandle, const char* kernelName,
                                            aclrtFuncHandle* funcHandle) {
    using fn = decltype(&aclrtBinaryGetFunction);
    static fn real = next_acl<fn>("aclrtBinaryGetFunction");
    if (!real) return ACL_ERROR_RT_FAILURE;
    aclError ret = real(binHandle, kernelName, funcHandle);
    if (ret == 0 && funcHandle) remember_name(*funcHandle, kernelName);
    return ret;
}

// ---------------------------------------------------------------- runtime
MSMS_EXPORT rtError_t rtKernelLaunch(const void* stubFunc, uint32_t blockDim, void* args, uint32_t argsSize,
                                     void* smDesc, rtStream_t stm) {
    using fn = decltype(&rtKernelLaunch);
    static fn real = next_rt<fn>("rtKernelLaunch");
    if (!real) return RT_ERROR_RESERVED;
    LaunchScope scope;
    rtError_t ret = real(stubFunc, blockDim, args, argsSize, smDesc, stm);
    if (ret == 0 && scope.outer) {
        char name[kNameLen];
        stub_name(stubFunc, name, sizeof(name));
        record_launch(name, stm);
    }
    return ret;
}

MSMS_EXPORT rtError_t rtKernelLaunchWithHandleV2(void* hdl, const uint64_t tilingKey, uint32_t blockDim,
                                                 void* argsInfo, void* smDesc, rtStream_t stm, const void* cfgInfo) {
    using fn = decltype(&rtKernelLaunchWithHandleV2);
    static fn real = next_rt<fn>("rtKernelLaunchWithHandleV2");
    if (!real) return RT_ERROR_RESERVED;
    LaunchScope scope;
    rtError_t ret = real(hdl, tilingKey, blockDim, argsInfo, smDesc, stm, cfgInfo);
    if (ret == 0 && scope.outer) record_launch(nullptr, stm);
    return ret;
}

MSMS_EXPORT rtError_t rtKernelLaunchWithFlagV2(const void* stubFunc, uint32_t blockDim, void* argsInfo, void* smDesc,
                                               rtStream_t stm, uint32_t flags, const void* cfgInfo) {
    using fn = decltype(&rtKernelLaunchWithFlagV2);
    static fn real = next_rt<fn>("rtKernelLaunchWithFlagV2");
    if (!real) return RT_ERROR_RESERVED;
    LaunchScope scope;
    rtError_t ret = real(stubFunc, blockDim, argsInfo, smDesc, stm, flags, cfgInfo);
    if (ret == 0 && scope.outer) {
        char name[kNameLen];
        stub_name(stubFunc, name, sizeof(name));
        record_launch(name, stm);
    }
    return ret;
}

MSMS_EXPORT rtError_t rtAicpuKernelLaunchExWithArgs(const uint32_t kernelType, const char* const opName,
                                                    const uint32_t blockDim, const void* argsInfo, void* const smDesc,
                                                    const rtStream_t stm, const uint32_t flags) {
    using fn = decltype(&rtAicpuKernelLaunchExWithArgs);
    static fn real = next_rt<fn>("rtAicpuKernelLaunchExWithArgs");
    if (!real) return RT_ERROR_RESERVED;
    LaunchScope scope;
    rtError_t ret = real(kernelType, opName, blockDim, argsInfo, smDesc, stm, flags);
    if (ret == 0 && scope.outer) record_launch(opName, stm);
    return ret;
}

// ---------------------------------------------------------------- ACL
// A launch by function handle: the kernel's name from the handle.
static void record_handle_launch(aclrtFuncHandle funcHandle, aclrtStream stream) {
    char name[kNameLen];
    func_handle_name(funcHandle, name, sizeof(name));
    record_launch(name, stream);
}

MSMS_EXPORT aclError aclrtLaunchKernel(aclrtFuncHandle funcHandle, uint32_t blockDim, const void* argsData,
                                       size_t argsSize, aclrtStream stream) {
    using fn = decltype(&aclrtLaunchKernel);
    static fn real = next_acl<fn>("aclrtLaunchKernel");
    if (!real) return ACL_ERROR_RT_FAILURE;
    LaunchScope scope;
    aclError ret = real(funcHandle, blockDim, argsData, argsSize, stream);
    if (ret == 0 && scope.outer) record_handle_launch(funcHandle, stream);
    return ret;
}

MSMS_EXPORT aclError aclrtLaunchKernelV2(aclrtFuncHandle funcHandle, uint32_t blockDim, const void* argsData,
                                         size_t argsSize, void* cfg, aclrtStream stream) {
    using fn = decltype(&aclrtLaunchKernelV2);
    static fn real = next_acl<fn>("aclrtLaunchKernelV2");
    if (!real) return ACL_ERROR_RT_FAILURE;
    LaunchScope scope;
    aclError ret = real(funcHandle, blockDim, argsData, argsSize, cfg, stream);
    if (ret == 0 && scope.outer) record_handle_launch(funcHandle, stream);
    return ret;
}

MSMS_EXPORT aclError aclrtLaunchKernelWithConfig(aclrtFuncHandle funcHandle, uint32_t blockDim, aclrtStream stream,
                                                 void* cfg, void* argsHandle, void* reserve) {
    using fn = decltype(&aclrtLaunchKernelWithConfig);
    static fn real = next_acl<fn>("aclrtLaunchKernelWithConfig");
    if (!real) return ACL_ERROR_RT_FAILURE;
    LaunchScope scope;
    aclError ret = real(funcHandle, blockDim, stream, cfg, argsHandle, reserve);
    if (ret == 0 && scope.outer) record_handle_launch(funcHandle, stream);
    return ret;
}

MSMS_EXPORT aclError aclrtLaunchKernelWithHostArgs(aclrtFuncHandle funcHandle, uint32_t blockDim, aclrtStream stream,
                                                   void* cfg, void* hostArgs, size_t argsSize, void* placeHolderArray,
                                                   size_t placeHolderNum) {
    using fn = decltype(&aclrtLaunchKernelWithHostArgs);
    static fn real = next_acl<fn>("aclrtLaunchKernelWithHostArgs");
    if (!real) return ACL_ERROR_RT_FAILURE;
    LaunchScope scope;
    aclError ret = real(funcHandle, blockDim, stream, cfg, hostArgs, argsSize, placeHolderArray, placeHolderNum);
    if (ret == 0 && scope.outer) record_handle_launch(funcHandle, stream);
    return ret;
}

MSMS_EXPORT aclError aclInit(const char* configPath) {
    using fn = decltype(&aclInit);
    static fn real = next_acl<fn>("aclInit");
    if (!real) return ACL_ERROR_RT_FAILURE;
    aclError ret = real(configPath);
    record_system(MSMS_T_ACL_INIT);
    return ret;
}

MSMS_EXPORT aclError aclFinalize(void) {
    using fn = decltype(&aclFinalize);
    static fn real = next_acl<fn>("aclFinalize");
    if (!real) return ACL_ERROR_RT_FAILURE;
    aclError ret = real();
    record_system(MSMS_T_ACL_FINI);
    return ret;
}
