// libmsms_hal_hook.so — Ascend driver memory, preloaded into the target when
// the hal collector is selected (--device=npu[:N] or cpu).
//
// Interposes (signatures of libascend_hal / libascendcl, COMPAT §7):
//   drvError_t halMemAlloc(void **pp, unsigned long long size, unsigned long long flag)
//   drvError_t halMemFree(void *pp)
//   drvError_t halMemCreate(drv_mem_handle_t **handle, size_t size, const struct drv_mem_prop *prop, uint64_t flag)
//   drvError_t halMemRelease(drv_mem_handle_t *handle)
//   aclError   aclrtHostRegisterV2(void *ptr, uint64_t size, uint32_t flag)
//   aclError   aclrtHostUnregister(void *ptr)
// The driver calls go to the ...Inner entry points when the driver exports
// them (newer drivers), else to the next definition of the plain name.
//
// Records (Event Type HAL, or HOST_PINNED for host memory):
//   MALLOC: device from the flag (bits 0-9; memory space host -> cpu),
//           aux0 = the flag word (halMemCreate: a flag word built from the
//           drv_mem_prop, so that module id and page type decode the same
//           way), Attr extras owner:CANN@<module>, page_type, alloc_type.
//   FREE:   recorded after the real call, with the device of its MALLOC,
//           and only when the driver gave the memory back: a refused free
//           (a handle to halMemFree, an address to halMemRelease, ...)
//           writes no row and keeps the block; a warning on stderr says so.
//           halMemFree of an address the hook never saw allocated (made
//           before the hooks went in: without the CLI, before the first
//           msmemscope.start()) is passed on too, with the place the driver
//           gives for it (drvMemGetAttribute): the host pairs it with
//           nothing, writes no row and says so once per pool at the end, as
//           for cuda. halMemRelease and aclrtHostUnregister of what it never
//           saw record nothing (the reasons are at those hooks).
//   OOM_DETAIL/OOM_TRIGGER when the driver answers DRV_ERROR_OUT_OF_MEMORY:
//           size = requested bytes, aux0 = flag, aux1 = return code,
//           Name = the function.
// Also exports msms_npu_snapshot() (see below).
#include <msmemscope/agent.h>
#include <msmemscope/driver_order.hpp>
#include <msmemscope/snapshot_attrs.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <atomic>

#include "npu_common.h"

namespace {

using msms_npu::BlockInfo;
using msms_npu::put;
using msms_npu::put_u64;

typedef int drvError_t;
struct drv_mem_handle;
typedef struct drv_mem_handle drv_mem_handle_t;
struct drv_mem_prop {
    uint32_t side;
    uint32_t devid;
    uint32_t module_id;
    uint32_t pg_type;
    uint32_t mem_type;
    uint64_t reserve;
};
typedef int aclError;

constexpr drvError_t DRV_ERROR_NONE = 0;
constexpr drvError_t DRV_ERROR_OUT_OF_MEMORY = 6;
constexpr drvError_t DRV_ERROR_NOT_SUPPORT = 0xfffe;
constexpr drvError_t DRV_ERROR_RESERVED = 0xffff;
constexpr aclError ACL_SUCCESS = 0;
constexpr aclError ACL_ERROR_INTERNAL_ERROR = 500000;
constexpr uint32_t ACL_HOST_REG_PINNED = 0x10000000u;

// drvMemGetAttribute(DVdeviceptr vptr, struct DVattribute *attr), the
// driver's answer to "what memory is this address" (the runtime asks it,
// e.g. NpuDriver::PtrGetRealLocation). memType bits as the driver's header;
// devId holds for memory mapped on a device. Newer drivers have 8 reserved
// words where older ones had 1: room for more.
struct DVattribute {
    uint32_t memType, resv1, resv2, devId, pageSize;
    uint32_t resv[16];
};
constexpr uint32_t DV_MEM_SVM_DEVICE = 0x0004;
constexpr uint32_t DV_MEM_LOCK_HOST = 0x0008;
constexpr uint32_t DV_MEM_LOCK_DEV = 0x0010;
constexpr uint32_t DV_MEM_LOCK_DEV_DVPP = 0x0020;

// flag word layout
constexpr unsigned kSpaceShift = 10;
constexpr unsigned long long kSpaceMask = 0xFull << kSpaceShift;
constexpr unsigned long long kHugeBit = 1ull << 17;
constexpr unsigned long long kGiantBit = 1ull << 31;
constexpr unsigned kModuleShift = 56;
constexpr unsigned kSpaceHost = 2;
constexpr unsigned kSpaceDevice = 1;

// Module ids of the driver's module table (names as the driver logs them).
const char* const kModules[] = {
    "SLOG", "IDEDD", "IDEDH", "HCCL", "FMK", "HIAIENGINE", "DVPP", "RUNTIME", "CCE", "HDC",
    "DRV", "MDCFUSION", "MDCLOCATION", "MDCPERCEPTION", "MDCFSM", "MDCCOMMON", "MDCMONITOR",
    "MDCBSWP", "MDCDEFAULT", "MDCSC", "MDCPNC", "MLL", "DEVMM", "KERNEL", "LIBMEDIA", "CCECPU",
    "ASCENDDK", "ROS", "HCCP", "ROCE", "TEFUSION", "PROFILING", "DP", "APP", "TS", "TSDUMP",
    "AICPU", "LP", "TDT", "FE", "MD", "MB", "ME", "IMU", "IMP", "GE", "MDCFUSA", "CAMERA",
    "ASCENDCL", "TEEOS", "ISP", "SIS", "HSM", "DSS", "PROCMGR", "BBOX", "AIVECTOR", "TBE", "FV",
    "MDCMAP", "TUNE", "HSS", "FFTS", "OP", "UDF", "HICAID", "TSYNC", "AUDIO", "TPRT",
    "ASCENDCKERNEL", "ASYS", "ATRACE", "RTC", "SYSMONITOR", "AML"};

const char* module_name(unsigned id) {
    return id < sizeof(kModules) / sizeof(kModules[0]) ? kModules[id] : "UNKNOWN";
}

const char* const kHalLibs[] = {"libascend_hal.so", nullptr};
const char* const kAclLibs[] = {"libascendcl.so", "libascendcl_impl.so", "libacl_rt_impl.so", nullptr};

msms_npu::WantedDevices g_devices;
msms_npu::PtrTable<> g_blocks;

using alloc_fn = drvError_t (*)(void**, unsigned long long, unsigned long long);
using free_fn = drvError_t (*)(void*);
using create_fn = drvError_t (*)(drv_mem_handle_t**, size_t, const drv_mem_prop*, uint64_t);
using release_fn = drvError_t (*)(drv_mem_handle_t*);
using host_reg_fn = aclError (*)(void*, uint64_t, uint32_t);
using host_unreg_fn = aclError (*)(void*);

// Inner entry point if the driver has it, else the next plain definition.
template <class F>
F driver_fn(const char* inner, const char* plain) {
    void* f = msms_npu::resolve_any(inner, kHalLibs);
    if (!f) f = msms_npu::resolve_next(plain, kHalLibs);
    return reinterpret_cast<F>(f);
}

bool wants_memory() { return msms_agent_wants("alloc") || msms_agent_wants("free"); }

// Each hooked allocation and free holds the collector's order lock across
// [driver call + its row] (msmemscope/driver_order.hpp says why).
struct DriverOrder : msmemscope::DriverOrder {
    DriverOrder() : msmemscope::DriverOrder(wants_memory()) {}
};
__attribute__((constructor)) void free_driver_order_at_fork() { msmemscope::DriverOrder::free_in_forked_children(); }

// The first refused frees are told one by one, then once that more follow.
constexpr int kRefusedToldOneByOne = 16;
std::atomic<int> g_refused_told{0};

// A free the driver refused gave nothing back: no FREE row is written and
// the table keeps the block; the user is told on stderr, as the agent's
// warnings are (no row kind of the dump says that a free failed;
// OOM_DETAIL is a failed allocation for lack of memory). Silent while
// collection is off (before start(), between two ranges, before --steps'
// step): no row would have been written then either.
void refused_free(const char* func, const void* ptr, int ret) {
    if (!ptr || !wants_memory() || !msms_agent_attached() || !msms_agent_collecting()) return;
    int told = g_refused_told.fetch_add(1, std::memory_order_relaxed);
    char msg[320];
    if (told < kRefusedToldOneByOne)
        snprintf(msg, sizeof(msg),
                 "[msmemscope] warning: %s(0x%016llx) failed with error %d: the driver gave nothing back, so no "
                 "FREE row is written and the profile keeps the memory as held\n",
                 func, static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(ptr)), ret);
    else if (told == kRefusedToldOneByOne)
        snprintf(msg, sizeof(msg),
                 "[msmemscope] warning: more NPU frees failed; they are not told one by one (no FREE row for "
                 "them either)\n");
    else
        return;
    ssize_t w = write(2, msg, strlen(msg));
    (void)w;
}

struct Where {
    uint16_t type, kind;
    int16_t id;
};

Where where_of(unsigned long long flag) {
    unsigned space = static_cast<unsigned>((flag & kSpaceMask) >> kSpaceShift);
    if (space == kSpaceHost) return {MSMS_T_HOST_PINNED, MSMS_DEV_CPU, -1};
    return {MSMS_T_HAL, MSMS_DEV_NPU, static_cast<int16_t>(flag & 0x3FF)};
}

bool device_wanted(const Where& w) {
    return w.kind == MSMS_DEV_CPU ? g_devices.cpu() : g_devices.npu(w.id);
}

// The Attr extras of a block's MALLOC.
void malloc_attrs(char (&attrs)[160], const Where& w, unsigned long long flag, bool create) {
    size_t n = 0;
    attrs[0] = 0;
    if (w.type == MSMS_T_HOST_PINNED) {
        n = put(attrs, n, sizeof(attrs), "pinned:true");
    } else {
        n = put(attrs, n, sizeof(attrs), "owner:CANN@");
        n = put(attrs, n, sizeof(attrs), module_name(static_cast<unsigned>(flag >> kModuleShift)));
        n = put(attrs, n, sizeof(attrs), ",page_type:");
        n = put(attrs, n, sizeof(attrs), (flag & kGiantBit) ? "giant" : (flag & kHugeBit) ? "huge" : "normal");
        n = put(attrs, n, sizeof(attrs), create ? ",alloc_type:create" : ",alloc_type:alloc");
    }
}

void record_malloc(void* ptr, unsigned long long size, unsigned long long flag, bool create) {
    if (!ptr) return;
    char attrs[160];
    if (!msms_agent_enter()) {
        // Collection off: the agent remembers the block for a shadow MALLOC
        // when it starts (agent.h), with the extras its MALLOC would carry
        // (owner, page_type, alloc_type); its free is then reported as usual.
        Where w = where_of(flag);
        uint64_t p = reinterpret_cast<uint64_t>(ptr);
        if (msms_agent_attached() && !msms_agent_collecting() && wants_memory() && device_wanted(w)) {
            malloc_attrs(attrs, w, flag, create);
            if (msms_agent_off_alloc_attrs(w.type, w.kind, w.id, p, size, attrs))
                g_blocks.put(p, BlockInfo{w.type, w.kind, w.id, 0, size});
        }
        return;
    }
    Where w = where_of(flag);
    if (wants_memory() && device_wanted(w)) {
        malloc_attrs(attrs, w, flag, create);
        uint64_t p = reinterpret_cast<uint64_t>(ptr);
        g_blocks.put(p, BlockInfo{w.type, w.kind, w.id, 0, size});
        msms_agent_alloc(w.type, w.kind, w.id, p, size, flag, attrs);
    }
    msms_agent_leave();
}

// After the driver freed it: a block whose MALLOC was recorded (or
// remembered while collection was off). false: the hook never saw the block.
bool record_free(void* ptr) {
    if (!ptr) return true;
    BlockInfo b;
    if (!g_blocks.take(reinterpret_cast<uint64_t>(ptr), &b)) return false;
    if (!msms_agent_enter()) {
        // Collection off: a block a range recorded gets its FREE, on its
        // device, when collection starts again.
        msms_agent_off_free_device(b.type, b.device_kind, b.device_id, reinterpret_cast<uint64_t>(ptr));
        return true;
    }
    msms_agent_free(b.type, b.device_kind, b.device_id, reinterpret_cast<uint64_t>(ptr));
    msms_agent_leave();
    return true;
}

// Where the driver says the memory at ptr is: device memory (HAL on its
// device; DVPP and SVM memory mapped on a device too), pinned host memory
// (HOST_PINNED on cpu). false: the driver has no drvMemGetAttribute, does
// not know the address, or the memory is on no device yet (SVM not mapped).
bool driver_place(const void* ptr, Where* w) {
    using attr_fn = drvError_t (*)(uint64_t, DVattribute*);
    static const attr_fn query = reinterpret_cast<attr_fn>(msms_npu::resolve_any("drvMemGetAttribute", kHalLibs));
    DVattribute a;
    memset(&a, 0, sizeof(a));
    if (!query || query(reinterpret_cast<uint64_t>(ptr), &a) != DRV_ERROR_NONE) return false;
    const uint32_t t = a.memType;  // tested in the runtime's order: LOCK_DEV first
    if (!(t & DV_MEM_LOCK_DEV) && (t & DV_MEM_LOCK_HOST)) {
        *w = {MSMS_T_HOST_PINNED, MSMS_DEV_CPU, -1};
        return true;
    }
    if (!(t & (DV_MEM_LOCK_DEV | DV_MEM_LOCK_DEV_DVPP | DV_MEM_SVM_DEVICE)) || a.devId > 0x3FF) return false;
    *w = {MSMS_T_HAL, MSMS_DEV_NPU, static_cast<int16_t>(a.devId)};
    return true;
}

// halMemFree of an address the hook never saw allocated, while collecting
// (unseen_place, asked before the driver frees it, `w` after):
// a block made before the hooks went in, or memory the run leaves out
// (--device), which the hook sees but does not keep; never the frees of
// recorded blocks. Passed on, as cuda's hook passes on every free: the
// host finds no MALLOC, writes no row and says at the end, once per device
// pool, how many such frees came. halMemFree also frees pinned host memory
// (halMemAlloc with the host memory space: aclrtMallocHost), so the driver
// is asked what the memory is (one query, which the runtime itself makes
// on every asynchronous copy): a device or cpu the run leaves out records
// nothing; pinned host memory goes to cpu, which the host counts but never
// warns about (as cuda's cuMemFreeHost); an address the driver does not
// know, or a driver without drvMemGetAttribute, records nothing (as before).
__attribute__((noinline, cold)) bool unseen_place(void* ptr, Where* w) {
    // collection off: nothing to pair with later
    return ptr && msms_agent_collecting() && wants_memory() && driver_place(ptr, w) && device_wanted(*w);
}

__attribute__((noinline, cold)) void record_unseen_free(void* ptr, const Where& w) {
    if (!msms_agent_enter()) return;
    msms_agent_free(w.type, w.kind, w.id, reinterpret_cast<uint64_t>(ptr));
    msms_agent_leave();
}

void record_oom(const char* func, unsigned long long size, unsigned long long flag, drvError_t ret) {
    if (!msms_agent_enter()) return;
    Where w = where_of(flag);
    if (device_wanted(w))
        msms_agent_event(MSMS_EV_OOM_DETAIL, MSMS_T_OOM_TRIGGER, w.kind, w.id, 0, size, flag,
                         static_cast<uint64_t>(static_cast<uint32_t>(ret)), func, nullptr);
    msms_agent_leave();
}

// A flag word equivalent to what halMemCreate was asked for.
unsigned long long flag_of(const drv_mem_prop* prop) {
    unsigned long long f = (prop->devid & 0x3FFu) | (static_cast<unsigned long long>(kSpaceDevice) << kSpaceShift);
    if (prop->pg_type == 1) f |= kHugeBit;
    else if (prop->pg_type == 2) f |= kGiantBit;
    f |= static_cast<unsigned long long>(prop->module_id & 0xFFu) << kModuleShift;
    return f;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) drvError_t halMemAlloc(void** pp, unsigned long long size,
                                                              unsigned long long flag) {
    static alloc_fn real = driver_fn<alloc_fn>("halMemAllocInner", "halMemAlloc");
    if (!real) return DRV_ERROR_NOT_SUPPORT;
    DriverOrder order;
    drvError_t ret = real(pp, size, flag);
    if (ret == DRV_ERROR_NONE) {
        if (pp) record_malloc(*pp, size, flag, false);
    } else if (ret == DRV_ERROR_OUT_OF_MEMORY) {
        record_oom("halMemAlloc", size, flag, ret);
    }
    return ret;
}

__attribute__((visibility("default"))) drvError_t halMemFree(void* pp) {
    static free_fn real = driver_fn<free_fn>("halMemFreeInner", "halMemFree");
    if (!real) return DRV_ERROR_NOT_SUPPORT;
    DriverOrder order;
    // An address the hook never saw: the driver is asked what it is now,
    // while it still knows it.
    BlockInfo seen;
    Where unseen;
    const bool placed = pp && !g_blocks.get(reinterpret_cast<uint64_t>(pp), &seen) && unseen_place(pp, &unseen);
    drvError_t ret = real(pp);
    if (ret != DRV_ERROR_NONE) {
        refused_free("halMemFree", pp, ret);  // (a handle, an address inside a block, a double free)
        return ret;
    }
    if (__builtin_expect(!record_free(pp), 0) && placed) record_unseen_free(pp, unseen);
    return ret;
}

__attribute__((visibility("default"))) drvError_t halMemCreate(drv_mem_handle_t** handle, size_t size,
                                                               const drv_mem_prop* prop, uint64_t flag) {
    static create_fn real = driver_fn<create_fn>("halMemCreateInner", "halMemCreate");
    if (!real) return DRV_ERROR_RESERVED;
    DriverOrder order;
    drvError_t ret = real(handle, size, prop, flag);
    unsigned long long f = prop ? flag_of(prop) : flag;
    if (ret == DRV_ERROR_NONE) {
        if (handle && prop) record_malloc(*handle, size, f, true);
    } else if (ret == DRV_ERROR_OUT_OF_MEMORY) {
        record_oom("halMemCreate", size, f, ret);
    }
    return ret;
}

__attribute__((visibility("default"))) drvError_t halMemRelease(drv_mem_handle_t* handle) {
    static release_fn real = driver_fn<release_fn>("halMemReleaseInner", "halMemRelease");
    if (!real) return DRV_ERROR_RESERVED;
    // A handle the hook never saw records nothing: halMemRelease also ends
    // the handles of halMemRetainAllocationHandle and
    // halMemImportFromShareableHandle, which the hook does not see, and a
    // handle is no address the driver could be asked about.
    DriverOrder order;
    drvError_t ret = real(handle);
    if (ret == DRV_ERROR_NONE) record_free(handle);
    else refused_free("halMemRelease", handle, ret);
    return ret;
}

__attribute__((visibility("default"))) aclError aclrtHostRegisterV2(void* ptr, uint64_t size, uint32_t flag) {
    static host_reg_fn real =
        reinterpret_cast<host_reg_fn>(msms_npu::resolve_next("aclrtHostRegisterV2", kAclLibs));
    if (!real) return ACL_ERROR_INTERNAL_ERROR;
    DriverOrder order;
    aclError ret = real(ptr, size, flag);
    if (ret == ACL_SUCCESS && (flag & ACL_HOST_REG_PINNED) && ptr && msms_agent_enter()) {
        if (wants_memory() && g_devices.cpu()) {
            uint64_t p = reinterpret_cast<uint64_t>(ptr);
            g_blocks.put(p, BlockInfo{MSMS_T_HOST_PINNED, MSMS_DEV_CPU, -1, 0, size});
            msms_agent_alloc(MSMS_T_HOST_PINNED, MSMS_DEV_CPU, -1, p, size, flag, "pinned:true");
        }
        msms_agent_leave();
    }
    return ret;
}

__attribute__((visibility("default"))) aclError aclrtHostUnregister(void* ptr) {
    static host_unreg_fn real =
        reinterpret_cast<host_unreg_fn>(msms_npu::resolve_next("aclrtHostUnregister", kAclLibs));
    if (!real) return ACL_ERROR_INTERNAL_ERROR;
    // Memory the hook never saw registered records nothing: aclrtHostUnregister
    // also ends registrations the hook leaves out (aclrtHostRegister, not
    // hooked; aclrtHostRegisterV2 without ACL_HOST_REG_PINNED), and for cpu
    // the host would only count it (no warning, no row).
    DriverOrder order;
    aclError ret = real(ptr);
    if (ret == ACL_SUCCESS) record_free(ptr);
    else refused_free("aclrtHostUnregister", ptr, ret);
    return ret;
}

// SNAPSHOT of the current device's memory as the driver reports it
// (aclrtGetMemInfo(ACL_HBM_MEM)), for take_snapshot() of the Python API.
//   device_mask: bit i set = device i is wanted; 0 = the current device.
//   name: the Name column ("Memory Snapshot" when NULL or empty).
//   extra_attrs: NULL or "key:value,..." (the Python side's framework
//   numbers): reserved/max_reserved/allocated/max_allocated fill upstream's
//   slots (0 when absent, as upstream), other pairs follow the rates
//   (msmemscope/snapshot_attrs.h has the Attr format).
// Recorded only when the current device is in the mask and wanted by the
// run. Returns 0 when a row was recorded, 1 when the device is not in the
// mask or not wanted, -1 when the runtime is missing or failed, -2 when no
// capture is open. Works without start()/stop() (collection may be off).
__attribute__((visibility("default"))) int msms_npu_snapshot(uint64_t device_mask, const char* name,
                                                             const char* extra_attrs) {
    using get_device_fn = aclError (*)(int32_t*);
    using mem_info_fn = aclError (*)(int, size_t*, size_t*);
    if (!msms_agent_attached()) return -2;
    auto get_device = reinterpret_cast<get_device_fn>(msms_npu::resolve_any("aclrtGetDevice", kAclLibs));
    auto mem_info = reinterpret_cast<mem_info_fn>(msms_npu::resolve_any("aclrtGetMemInfo", kAclLibs));
    if (!get_device || !mem_info) return -1;
    int32_t dev = -1;
    if (get_device(&dev) != ACL_SUCCESS || dev < 0) return -1;
    if (device_mask != 0 && (dev >= 64 || !((device_mask >> dev) & 1u))) return 1;
    if (!g_devices.npu(dev)) return 1;
    size_t free_b = 0, total_b = 0;
    const int ACL_HBM_MEM = 1;
    if (mem_info(ACL_HBM_MEM, &free_b, &total_b) != ACL_SUCCESS) return -1;
    char attrs[1024];
    msms::format_snapshot_attrs(attrs, sizeof(attrs), total_b, free_b, extra_attrs);
    msms_agent_event(MSMS_EV_SNAPSHOT, MSMS_T_SNAPSHOT, MSMS_DEV_NPU, static_cast<int16_t>(dev), 0, 0, total_b, free_b,
                     name && *name ? name : "Memory Snapshot", attrs);
    return 0;
}

}  // extern "C"
