// libmsms_cuda_hook.so — the target side of the cuda collector.
//
// Interposes the CUDA driver API's memory and launch entry points. A program
// reaches the driver in three ways, and all three end in the wrappers below:
//   1. linked against libcuda.so.1: our exported cu* symbols come first
//      (LD_PRELOAD) and call the real ones found with dlsym(RTLD_NEXT);
//   2. dlopen("libcuda.so.1") + dlsym(handle, "cu...") : we interpose dlsym
//      and hand back our wrapper for the names we hook;
//   3. cuGetProcAddress / cuGetProcAddress_v2, which is how the CUDA runtime
//      (cudaMalloc, kernel launches) finds every driver function: we wrap it
//      and replace the returned pointer for the names and ABI versions we hook.
// The driver's own types are declared in cuda_driver_api.h, so neither the
// build nor the tests need the CUDA toolkit.
//
// Events: device memory as MALLOC/FREE type HAL (Attr driver:cuda,
// alloc_type:alloc|pitch|managed|async|create|map), pinned host memory as
// HOST_PINNED on device cpu, CUDA_ERROR_OUT_OF_MEMORY as OOM_DETAIL/
// OOM_TRIGGER, kernel launches as KERNEL_LAUNCH (only with --events=launch and
// --level=kernel, as upstream gates its kernel launches).
// msms_cuda_snapshot() (exported, for the Python package) writes SNAPSHOT rows.
#include <msmemscope/agent.h>
#include <msmemscope/driver_order.hpp>
#include <msmemscope/dlsym_hook.hpp>
#include <msmemscope/snapshot_attrs.h>
#include <msmemscope/spin_lock.hpp>

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <iterator>
#include <map>
#include <unordered_map>

#include "cuda_driver_api.h"
#include "cuda_hooks_internal.h"

#define MSMS_EXPORT extern "C" __attribute__((visibility("default")))

using msmemscope::dlsym_fn;

// The dlsym interposer (msmemscope/dlsym_hook.hpp): for a handle's lookup of
// a name we hook, msms_cuda_dlsym_pre hands back our wrapper.
extern "C" {
__attribute__((visibility("hidden"))) dlsym_fn msms_cuda_real_dlsym = nullptr;
__attribute__((visibility("hidden"))) void* msms_cuda_dlsym_pre(void* handle, const char* name);
}
MSMEMSCOPE_DLSYM_HOOK(msms_cuda_dlsym_pre, msms_cuda_real_dlsym)

namespace {

void init_real_dlsym() {
    if (!msms_cuda_real_dlsym) msms_cuda_real_dlsym = msmemscope::find_real_dlsym(reinterpret_cast<const void*>(&msms_cuda_dlsym_pre));
}

// ---------------------------------------------------------------- slots
// One slot per hooked export: the real function behind our wrapper.
enum SlotId {
    S_GPA_V1, S_GPA_V2,
    S_MemAlloc, S_MemAllocPitch, S_MemAllocManaged, S_MemFree,
    S_MemAllocAsync, S_MemAllocAsync_ptsz, S_MemAllocFromPoolAsync, S_MemAllocFromPoolAsync_ptsz,
    S_MemFreeAsync, S_MemFreeAsync_ptsz,
    S_MemCreate, S_MemRelease, S_MemMap, S_MemUnmap,
    S_MemAllocHost, S_MemHostAlloc, S_MemFreeHost, S_MemHostRegister_v1, S_MemHostRegister_v2, S_MemHostUnregister,
    S_LaunchKernel, S_LaunchKernel_ptsz, S_LaunchKernelEx, S_LaunchKernelEx_ptsz,
    S_LaunchCooperativeKernel, S_LaunchCooperativeKernel_ptsz,
    S_COUNT
};

// Driver functions we call but do not wrap.
enum AuxId { A_CtxGetDevice, A_FuncGetName, A_MemGetInfo, A_PrimaryCtxGetState, A_PrimaryCtxRetain,
             A_PrimaryCtxRelease, A_CtxPushCurrent, A_CtxPopCurrent, A_COUNT };
const char* const kAuxNames[A_COUNT] = {"cuCtxGetDevice", "cuFuncGetName", "cuMemGetInfo_v2",
                                        "cuDevicePrimaryCtxGetState", "cuDevicePrimaryCtxRetain",
                                        "cuDevicePrimaryCtxRelease_v2", "cuCtxPushCurrent_v2",
                                        "cuCtxPopCurrent_v2"};

std::atomic<void*> g_real[S_COUNT];
std::atomic<void*> g_aux[A_COUNT];

struct Export {
    const char* symbol;   // the exported name (dlsym, direct linking)
    const char* base;     // the name cuGetProcAddress is asked for
    int min_version;      // the ABI version this export implements ...
    int max_version;      // ... up to (exclusive); a newer ABI has its own row
    bool ptsz;            // per-thread default stream variant
    SlotId slot;
    void* wrapper;
};
extern const Export kExports[];
extern const size_t kExportCount;

void* driver_handle() {
    static std::atomic<void*> h{nullptr};
    void* p = h.load(std::memory_order_acquire);
    if (p) return p;
    p = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (!p) p = dlopen("libcuda.so", RTLD_LAZY | RTLD_NOLOAD);
    if (p) h.store(p, std::memory_order_release);
    return p;
}

// The next definition after us (direct linking), else the one in an already
// loaded libcuda (loaded with RTLD_LOCAL by a runtime).
// (`self`, our wrapper, is never the answer: loaded into a running process,
// RTLD_NEXT may search a scope we are in ourselves.)
void* lookup_real(const char* symbol, const void* self) {
    init_real_dlsym();
    if (!msms_cuda_real_dlsym) return nullptr;
    void* p = msms_cuda_real_dlsym(RTLD_NEXT, symbol);
    if (p == self) p = nullptr;
    if (!p) {
        if (void* h = driver_handle()) p = msms_cuda_real_dlsym(h, symbol);
    }
    return p;
}

const Export* export_by_slot(SlotId s) {
    for (size_t i = 0; i < kExportCount; ++i)
        if (kExports[i].slot == s) return &kExports[i];
    return nullptr;
}

void* resolve_slot(SlotId s) {
    const Export* e = export_by_slot(s);
    void* p = e ? lookup_real(e->symbol, e->wrapper) : nullptr;
    if (p && p != e->wrapper) {
        g_real[s].store(p, std::memory_order_release);
        return p;
    }
    return nullptr;
}

template <class F>
inline F real(SlotId s) {
    void* p = g_real[s].load(std::memory_order_acquire);
    if (__builtin_expect(p == nullptr, 0)) p = resolve_slot(s);
    return reinterpret_cast<F>(p);
}

template <class F>
inline F aux(AuxId a) {
    void* p = g_aux[a].load(std::memory_order_acquire);
    if (!p) {
        p = lookup_real(kAuxNames[a], nullptr);
        if (p) g_aux[a].store(p, std::memory_order_release);
    }
    return reinterpret_cast<F>(p);
}

int16_t current_device() {
    auto f = aux<PFN_cuCtxGetDevice>(A_CtxGetDevice);
    CUdevice d = 0;
    if (f && f(&d) == MSMS_CUDA_SUCCESS && d >= 0) return static_cast<int16_t>(d);
    return 0;
}

// ---------------------------------------------------------------- block table
// Where each live block was recorded, so that its FREE names the same device
// (and kind) even when another context is current at free time.
struct Place {
    int16_t dev;   // device id, -1 for host memory
    uint64_t size;
};

// A VMM physical handle (cuMemCreate). The driver gives its memory back once
// the handle is released AND its last mapping unmapped, whichever comes last
// (cuMemRelease): a handle released while mapped stays here, `released`,
// and its FREE is written at the unmap of its last mapping.
struct Handle {
    int16_t dev;  // device id, -1 for host memory
    uint64_t size;
    uint32_t mappings = 0;  // mappings this table knows of (VmMap)
    bool released = false;
};

// A VMM mapping (cuMemMap): a view of its handle's memory.
struct VmMap {
    int16_t dev;
    uint64_t size;    // mapped length
    uint64_t handle;  // whose memory it maps: its unmap may give that back
    // Its MALLOC was recorded, or will be as a shadow row. False for a mapping
    // made while collection was off that the agent could not remember: kept
    // for its handle's count of mappings only.
    bool recorded;
};

using msmemscope::SpinLock;

SpinLock g_lock;
// Never destroyed: frees may arrive from atexit handlers after static
// destructors would have run.
std::unordered_map<uint64_t, Place>* g_blocks;    // device pointers
std::unordered_map<uint64_t, Handle>* g_handles;  // VMM physical handles
std::map<uint64_t, VmMap>* g_maps;                // VMM mappings by address

template <class V>
void remember(std::unordered_map<uint64_t, V>*& m, uint64_t key, V v) {
    g_lock.lock();
    if (!m) m = new std::unordered_map<uint64_t, V>();
    (*m)[key] = v;
    g_lock.unlock();
}

template <class V>
bool forget(std::unordered_map<uint64_t, V>* m, uint64_t key, V& out) {
    g_lock.lock();
    bool found = false;
    if (m) {
        auto it = m->find(key);
        if (it != m->end()) {
            out = it->second;
            m->erase(it);
            found = true;
        }
    }
    g_lock.unlock();
    return found;
}

template <class V>
bool peek(std::unordered_map<uint64_t, V>* m, uint64_t key, V& out) {
    g_lock.lock();
    bool found = false;
    if (m) {
        auto it = m->find(key);
        if (it != m->end()) {
            out = it->second;
            found = true;
        }
    }
    g_lock.unlock();
    return found;
}

// A mapping of `handle` at ptr: its handle's memory now lives at least until
// it is unmapped.
void remember_mapping(uint64_t ptr, const VmMap& m) {
    g_lock.lock();
    if (!g_maps) g_maps = new std::map<uint64_t, VmMap>();
    (*g_maps)[ptr] = m;
    if (g_handles) {
        auto h = g_handles->find(m.handle);
        if (h != g_handles->end()) ++h->second.mappings;
    }
    g_lock.unlock();
}

// cuMemRelease of a handle still mapped: the driver keeps its memory until
// the last unmap, so the handle is only marked released (true); false when
// no mapping of it is known (its FREE is written now, as before).
bool release_while_mapped(uint64_t handle) {
    g_lock.lock();
    bool mapped = false;
    if (g_handles) {
        auto h = g_handles->find(handle);
        if (h != g_handles->end() && h->second.mappings > 0) {
            h->second.released = true;
            mapped = true;
        }
    }
    g_lock.unlock();
    return mapped;
}

// What one cuMemUnmap ends, up to kMax mappings at a time (take_mappings):
// the mappings in its range and the handles whose last mapping it was, once
// released. Fixed arrays, so that taking them allocates nothing.
struct Unmapped {
    static constexpr int kMax = 64;
    struct Gone {
        uint64_t key;  // a mapping's address or a handle
        int16_t dev;
        bool recorded;
    };
    Gone maps[kMax];
    Gone handles[kMax];
    int n_maps = 0, n_handles = 0;
};

// One mapping of `handle` fewer (g_lock held): true, with the handle taken
// out of the table into `gone`, when that was its last and it was released.
bool last_mapping_of_released(uint64_t handle, Unmapped::Gone& gone) {
    if (!g_handles) return false;
    auto h = g_handles->find(handle);
    if (h == g_handles->end() || h->second.mappings == 0) return false;
    if (--h->second.mappings > 0 || !h->second.released) return false;
    gone = {h->first, h->second.dev, true};
    g_handles->erase(h);
    return true;
}

// Takes up to Unmapped::kMax of the mappings in [ptr, ptr + size) out of
// the table, after the driver unmapped that range (which it does only when
// the range cuts no mapping: cuMemUnmap): the caller takes again while a
// batch comes back full. A mapping the table has reaching out of the range
// is one it knows wrongly; it is left alone.
Unmapped take_mappings(uint64_t ptr, uint64_t size) {
    Unmapped u;
    const uint64_t end = ptr + size;
    g_lock.lock();
    if (g_maps) {
        for (auto it = g_maps->lower_bound(ptr); it != g_maps->end() && it->first < end && u.n_maps < Unmapped::kMax;) {
            if (it->first + it->second.size > end) {
                ++it;
                continue;
            }
            u.maps[u.n_maps++] = {it->first, it->second.dev, it->second.recorded};
            if (last_mapping_of_released(it->second.handle, u.handles[u.n_handles])) ++u.n_handles;
            it = g_maps->erase(it);
        }
    }
    g_lock.unlock();
    return u;
}

// ---------------------------------------------------------------- recording
inline bool want_memory() { return msms_agent_wants("alloc") || msms_agent_wants("free"); }

// Each hooked allocation and free holds the collector's order lock across
// [driver call + its row] (msmemscope/driver_order.hpp says why).
struct DriverOrder : msmemscope::DriverOrder {
    DriverOrder() : msmemscope::DriverOrder(want_memory()) {}
};
__attribute__((constructor)) void free_driver_order_at_fork() { msmemscope::DriverOrder::free_in_forked_children(); }

// The driver took the memory back: it said so, or its context is gone, and
// all the memory of that context with it (frees at the program's exit,
// after the driver shut down).
bool given_back(CUresult rc) {
    return rc == MSMS_CUDA_SUCCESS || rc == MSMS_CUDA_ERROR_DEINITIALIZED ||
           rc == MSMS_CUDA_ERROR_CONTEXT_IS_DESTROYED;
}

// The first refused frees are told one by one, then once that more follow.
constexpr int kRefusedToldOneByOne = 16;
std::atomic<int> g_refused_told{0};

// A free the driver refused (a pointer it did not allocate or inside a
// block, a handle already released, an unmap that cuts a mapping): it gave
// nothing back, so no FREE row is written and the hooks' tables keep the
// block, mapping or handle. The user is told on stderr, as the agent's
// warnings are: no row kind of the dump says that a free failed (OOM_DETAIL
// is a failed allocation for lack of memory, and the oom analysis reads
// it). `what` is the call as the program made it, e.g. "cuMemFree_v2(0x...)".
// Silent while collection is off (before start(), between two ranges,
// before --steps' step): no row would have been written then either, and
// the block stays as it was, as in the driver.
void refused_free(CUresult rc, const char* what) {
    if (!want_memory() || !msms_agent_attached() || !msms_agent_collecting()) return;
    int told = g_refused_told.fetch_add(1, std::memory_order_relaxed);
    char msg[320];
    if (told < kRefusedToldOneByOne)
        snprintf(msg, sizeof(msg),
                 "[msmemscope] warning: %s failed with CUresult %d: the driver gave nothing back, so no FREE row "
                 "is written and the profile keeps the memory as held\n",
                 what, static_cast<int>(rc));
    else if (told == kRefusedToldOneByOne)
        snprintf(msg, sizeof(msg),
                 "[msmemscope] warning: more CUDA frees failed; they are not told one by one (no FREE row for "
                 "them either)\n");
    else
        return;
    ssize_t w = write(2, msg, strlen(msg));
    (void)w;
}

// The call's text for refused_free: "<func>(0x<ptr>)" or, with a size,
// "<func>(0x<ptr>, <size>)".
struct CallText {
    char text[96];
    CallText(const char* func, uint64_t ptr) {
        snprintf(text, sizeof(text), "%s(0x%016llx)", func, static_cast<unsigned long long>(ptr));
    }
    CallText(const char* func, uint64_t ptr, uint64_t size) {
        snprintf(text, sizeof(text), "%s(0x%016llx, %llu)", func, static_cast<unsigned long long>(ptr),
                 static_cast<unsigned long long>(size));
    }
};

// Holds the agent's reentrancy guard for one recording.
struct Recording {
    bool on;
    explicit Recording(bool wanted) : on(wanted && msms_agent_enter()) {}
    ~Recording() {
        if (on) msms_agent_leave();
    }
    Recording(const Recording&) = delete;
    Recording& operator=(const Recording&) = delete;
};

const char* const kAttrAlloc = "driver:cuda,alloc_type:alloc";
const char* const kAttrPitch = "driver:cuda,alloc_type:pitch";
const char* const kAttrManaged = "driver:cuda,alloc_type:managed";
const char* const kAttrAsync = "driver:cuda,alloc_type:async";
const char* const kAttrCreate = "driver:cuda,alloc_type:create";
// virtual:true: the mapped memory is the cuMemCreate block's; the host keeps
// mappings out of device_used/process_used so it is not counted twice.
const char* const kAttrMap = "driver:cuda,alloc_type:map,virtual:true";
const char* const kAttrPinned = "pinned:true,driver:cuda,alloc_type:alloc";
const char* const kAttrPinnedRegister = "pinned:true,driver:cuda,alloc_type:register";
const char* const kAttrPinnedCreate = "pinned:true,driver:cuda,alloc_type:create";
const char* const kAttrPinnedMap = "pinned:true,driver:cuda,alloc_type:map,virtual:true";

// Memory is wanted and the agent is in, but collection is off
// (--collect-mode=deferred before start(), or between two ranges).
bool collection_off() { return want_memory() && msms_agent_attached() && !msms_agent_collecting(); }

// Collection off: the agent remembers the block and writes it as a MALLOC with Attr
// shadow:true when collection starts (agent.h), as the HAL hook does, so
// that its FREE in a later range pairs with it; `attrs`, the extras its
// MALLOC carries when collecting, follow shadow:true (driver:cuda,
// alloc_type; a mapping's virtual:true, so that the host counts its memory
// once). Not inside the agent's own work (the agent refuses that).
bool off_alloc(uint16_t type, uint16_t kind, int16_t dev, uint64_t ptr, uint64_t size, const char* attrs) {
    return collection_off() && msms_agent_off_alloc_attrs(type, kind, dev, ptr, size, attrs);
}

void record_device_alloc(uint64_t ptr, uint64_t size, const char* attrs) {
    Recording r(want_memory());
    if (!r.on) {
        if (collection_off()) {
            int16_t dev = current_device();
            if (off_alloc(MSMS_T_HAL, MSMS_DEV_CUDA, dev, ptr, size, attrs)) remember(g_blocks, ptr, Place{dev, size});
        }
        return;
    }
    int16_t dev = current_device();
    remember(g_blocks, ptr, Place{dev, size});
    msms_agent_alloc(MSMS_T_HAL, MSMS_DEV_CUDA, dev, ptr, size, 0, attrs);
}

void record_device_free(uint64_t ptr) {
    if (!ptr) return;
    Recording r(want_memory());
    if (!r.on) {
        // Collection off (between two ranges): a block a range recorded gets
        // its FREE, on its device, when collection starts again (agent.h).
        Place p{0, 0};
        if (collection_off() && forget(g_blocks, ptr, p))
            msms_agent_off_free_device(MSMS_T_HAL, MSMS_DEV_CUDA, p.dev, ptr);
        return;
    }
    Place p{0, 0};
    if (!forget(g_blocks, ptr, p)) p.dev = current_device();
    msms_agent_free(MSMS_T_HAL, MSMS_DEV_CUDA, p.dev, ptr);
}

void record_pinned_alloc(const void* ptr, uint64_t size, const char* attrs) {
    Recording r(want_memory());
    if (!r.on) {
        off_alloc(MSMS_T_HOST_PINNED, MSMS_DEV_CPU, -1, reinterpret_cast<uint64_t>(ptr), size, attrs);
        return;
    }
    msms_agent_alloc(MSMS_T_HOST_PINNED, MSMS_DEV_CPU, -1, reinterpret_cast<uint64_t>(ptr), size, 0, attrs);
}

void record_pinned_free(const void* ptr) {
    if (!ptr) return;
    Recording r(want_memory());
    if (!r.on) {
        // Collection off: a block remembered while it was off is forgotten;
        // one a range recorded gets its FREE when collection starts again
        // (the host drops a FREE that pairs with no MALLOC: a block from
        // before the hooks went in).
        if (collection_off())
            msms_agent_off_free_device(MSMS_T_HOST_PINNED, MSMS_DEV_CPU, -1, reinterpret_cast<uint64_t>(ptr));
        return;
    }
    msms_agent_free(MSMS_T_HOST_PINNED, MSMS_DEV_CPU, -1, reinterpret_cast<uint64_t>(ptr));
}

// The FREE of a VMM handle or mapping recorded on `dev` (-1: host memory,
// HOST_PINNED); with collection off (`off`), written when it starts again.
void record_vmm_free(bool off, int16_t dev, uint64_t key) {
    const uint16_t type = dev < 0 ? MSMS_T_HOST_PINNED : MSMS_T_HAL;
    const uint16_t kind = dev < 0 ? MSMS_DEV_CPU : MSMS_DEV_CUDA;
    if (off) msms_agent_off_free_device(type, kind, dev < 0 ? -1 : dev, key);
    else msms_agent_free(type, kind, dev < 0 ? -1 : dev, key);
}

// The rows of a cuMemUnmap the driver carried out: one FREE per mapping in
// its range, however many (taken Unmapped::kMax at a time), and one per
// released handle whose last mapping it was.
void record_unmap(uint64_t ptr, uint64_t size) {
    Recording r(want_memory());
    // Collection off: the mappings a range recorded get their FREE when
    // it starts again; one made while it was off is forgotten (the agent
    // remembered it for a shadow MALLOC, cuMemMap).
    const bool off = !r.on && collection_off();
    if (!r.on && !off) return;
    for (bool first = true;; first = false) {
        Unmapped u = take_mappings(ptr, size);
        if (first && u.n_maps == 0 && !off) {
            // a mapping made before the hooks went in: the host says so
            u.maps[0] = {ptr, current_device(), true};
            u.n_maps = 1;
        }
        for (int i = 0; i < u.n_maps; ++i) {
            const Unmapped::Gone& m = u.maps[i];
            // A mapping the agent could not remember while off: no MALLOC
            // will come; collecting, its FREE still tells the host.
            if (m.recorded || !off) record_vmm_free(off, m.dev, m.key);
        }
        // A released handle whose last mapping this was: the driver
        // gives its memory back now, so its FREE row is written here and
        // its time is this unmap's, not its cuMemRelease's.
        for (int i = 0; i < u.n_handles; ++i) record_vmm_free(off, u.handles[i].dev, u.handles[i].key);
        if (u.n_maps < Unmapped::kMax) return;
    }
}

// A failed allocation: only out-of-memory feeds the oom analysis.
void record_failure(CUresult rc, const char* func, int16_t dev_kind_cpu, uint64_t size, uint64_t flags) {
    if (rc != MSMS_CUDA_ERROR_OUT_OF_MEMORY) return;
    Recording r(want_memory());
    if (!r.on) return;
    if (dev_kind_cpu)
        msms_agent_event(MSMS_EV_OOM_DETAIL, MSMS_T_OOM_TRIGGER, MSMS_DEV_CPU, -1, 0, size, flags,
                         static_cast<uint64_t>(rc), func, "driver:cuda");
    else
        msms_agent_event(MSMS_EV_OOM_DETAIL, MSMS_T_OOM_TRIGGER, MSMS_DEV_CUDA, current_device(), 0, size, flags,
                         static_cast<uint64_t>(rc), func, "driver:cuda");
}

std::atomic<uint64_t> g_task_id{0};

void record_launch(CUfunction f, CUstream stream) {
    if (!msms_agent_wants("kernel_launch")) return;
    Recording r(true);
    if (!r.on) return;
    const char* name = nullptr;
    if (f) {
        auto get_name = aux<PFN_cuFuncGetName>(A_FuncGetName);
        if (!get_name || get_name(&name, f) != MSMS_CUDA_SUCCESS) name = nullptr;
    }
    uint64_t task = g_task_id.fetch_add(1, std::memory_order_relaxed) + 1;
    msms_agent_event(MSMS_EV_KERNEL_LAUNCH, MSMS_T_KERNEL_LAUNCH, MSMS_DEV_CUDA, current_device(), 0, 0,
                     reinterpret_cast<uint64_t>(stream), task, name, nullptr);
}

}  // namespace

// ---------------------------------------------------------------- wrappers
extern "C" {

MSMS_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
    auto f = real<PFN_cuMemAlloc_v2>(S_MemAlloc);
    if (!f) return MSMS_CUDA_ERROR_NOT_INITIALIZED;
    DriverOrder order;
    CUresult rc = f(dptr, bytesize);
    if (rc == MSMS_CUDA_SUCCESS && dptr) record_device_alloc(*dptr, bytesize, kAttrAlloc);
    else record_failure(rc, "cuMemAlloc_v2", 0, bytesize, 0);
    return rc;
}

MSMS_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                                        unsigned int elem) {
    auto f = real<PFN_cuMemAllocPitch_v2>(S_MemAllocPitch);
    if (!f) return MSMS_CUDA_ERROR_NOT_INITIALIZED;
    DriverOrder order;
    CUresult rc = f(dptr, pitch, width, height, elem);
    if (rc == MSMS_CUDA_SUCCESS && dptr && pitch) record_device_alloc(*dptr, *pitch * height, kAttrPitch);
    else record_failure(rc, "cuMemAllocPitch_v2", 0, width * height, 0);
    return rc;
}

MSMS_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
    auto f = real<PFN_cuMemAllocManaged>(S_MemAllocManaged);
    if (!f) return MSMS_CUDA_ERROR_NOT_INITIALIZED;
    DriverOrder order;
    CUresult rc = f(dptr, bytesize, flags);
    if (rc == MSMS_CUDA_SUCCESS && dptr) record_device_alloc(*dptr, bytesize, kAttrManaged);
    else record_failure(rc, "cuMemAllocManaged", 0, bytesize, flags);
    return rc;
}

// The frees write their row after the driver's answer, and none when it
// refuses (refused_free); DriverOrder keeps the rows in the driver's order.
MSMS_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
    auto f = real<PFN_cuMemFree_v2>(S_MemFree);
    if (!f) return MSMS_CUDA_ERROR_NOT_INITIALIZED;
    DriverOrder order;
    CUresult rc = f(dptr);
    if (given_back(rc)) record_device_free(dptr);
    else if (dptr) refused_free(rc, CallText("cuMemFree_v2", dptr).text);
    return rc;
}

#define MSMS_ALLOC_ASYNC(NAME, SLOT)                                                          \
    MSMS_EXPORT CUresult NAME(CUdeviceptr* dptr, size_t bytesize, CUstream stream) {          \
        auto f = real<PFN_cuMemAllocAsync>(SLOT);                                             \
        if (!f) return MSMS_CUDA_ERROR_NOT_INITIALIZED;                                       \
        DriverOrder order;                                                                    \
        CUresult rc = f(dptr, bytesize, stream);                                              \
        if (rc == MSMS_CUDA_SUCCESS && dptr) record_device_alloc(*dptr, bytesize, kAttrAsync); \
        else record_failure(rc, #NAME, 0, bytesize, 0);                                       \
        return rc;                                                                            \
    }
MSMS_ALLOC_ASYNC(cuMemAllocAsync, S_MemAllocAsync)
MSMS_ALLOC_ASYNC(cuMemAllocAsync_ptsz, S_MemAllocAsync_ptsz)

#define MSMS_ALLOC_FROM_POOL(NAME, SLOT)                                                                \
    MSMS_EXPORT CUresult NAME(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream stream) { \
        auto f = real<PFN_cuMemAllocFromPoolAsync>(SLOT);                                               \
        if (!f) return MSMS_CUDA_ERROR_NOT_INITIALIZED;                                                 \
        DriverOrder order;                                                                              \
        CUresult rc = f(dptr, bytesize, pool, stream);                                                  \
        if (rc == MSMS_CUDA_SUCCESS && dptr) record_device_alloc(*dptr, bytesize, kAttrAsync);           \
        else record_failure(rc, #NAME, 0, bytesize, 0);                                                 \
        return rc;                                                                                      \
    }
MSMS_ALLOC_FROM_POOL(cuMemAllocFromPoolAsync, S_MemAllocFromPoolAsync)
MSMS_ALLOC_FROM_POOL(cuMemAllocFromPoolAsync_ptsz, S_MemAllocFromPoolAsync_ptsz)

#define MSMS_FREE_ASYNC(NAME, SLOT)                                    \
    MSMS_EXPORT CUresult NAME(CUdeviceptr dptr, CUstream stream) {     \
        auto f = real<PFN_cuMemFreeAsync>(SLOT);                       \
        if (!f) return MSMS_CUDA_ERROR_NOT_INITIALIZED;                \
        DriverOrder order;                                             \
        CUresult rc = f(dptr, stream);                                 \
        if (given_back(rc)) record_device_free(dptr);                  \
        else if (dptr) refused_free(rc, CallText(#NAME, dptr).text);   \
        return rc;                                                     \
    }
MSMS_FREE_ASYNC(cuMemFreeAsync, S_MemFreeAsync)
MSMS_FREE_ASYNC(cuMemFreeAsync_ptsz, S_MemFreeAsync_ptsz)

// ---- virtual memory management (PyTorch's expandable segments)
MSMS_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                                 unsigned long long flags) {
    auto f = real<PFN_cuMemCreate>(S_MemCreate);
    if (!f) return MSMS_CUDA_ERROR_NOT_INITIALIZED;
    DriverOrder order;
    CUresult rc = f(handle, size, prop, flags);
    bool host = prop && prop->location.type >= MSMS_CU_MEM_LOCATION_TYPE_HOST;
    if (rc == MSMS_CUDA_SUCCESS && handle) {
        Recording r(want_memory());
        if (!r.on && collection_off()) {
            // collection off: a shadow MALLOC at the next start (off_alloc)
            Handle h{-1, size};
            if (!host)
                h.dev = prop && prop->location.type == MSMS_CU_MEM_LOCATION_TYPE_DEVICE
                            ? static_cast<int16_t>(prop->location.id)
                            : current_device();
            if (host ? off_alloc(MSMS_T_HOST_PINNED, MSMS_DEV_CPU, -1, *handle, size, kAttrPinnedCreate)
                     : off_alloc(MSMS_T_HAL, MSMS_DEV_CUDA, h.dev, *handle, size, kAttrCreate))
                remember(g_handles, *handle, h);
        } else if (r.on) {
            if (host) {
                remember(g_handles, *handle, Handle{-1, size});
                msms_agent_alloc(MSMS_T_HOST_PINNED, MSMS_DEV_CPU, -1, *handle, size, 0, kAttrPinnedCreate);
            } else {
                int16_t dev = prop && prop->location.type == MSMS_CU_MEM_LOCATION_TYPE_DEVICE
                                  ? static_cast<int16_t>(prop->location.id)
                                  : current_device();
                remember(g_handles, *handle, Handle{dev, size});
                msms_agent_alloc(MSMS_T_HAL, MSMS_DEV_CUDA, dev, *handle, size, 0, kAttrCreate);
            }
        }
    } else {
        record_failure(rc, "cuMemCreate", host ? 1 : 0, size, flags);
    }
    return rc;
}

MSMS_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
    auto f = real<PFN_cuMemRelease>(S_MemRelease);
    if (!f) return MSMS_CUDA_ERROR_NOT_INITIALIZED;
    DriverOrder order;
    CUresult rc = f(handle);
    if (!given_back(rc)) {
        // (an unknown handle, or one already released: the table keeps it)
        refused_free(rc, CallText("cuMemRelease", handle).text);
        return rc;
    }
    // Still mapped: no FREE now, the memory is in use until the last
    // cuMemUnmap, which writes the handle's FREE (cuMemUnmap below).
    if (release_while_mapped(handle)) return rc;
    {
        Recording r(want_memory());
        if (!r.on) {
            // collection off: forgotten if made while it was off, else its
            // FREE (on its device) when collection starts again
            Handle h{0, 0};
            if (collection_off() && forget(g_handles, handle, h)) record_vmm_free(true, h.dev, handle);
        } else {
            Handle h{0, 0};
            if (!forget(g_handles, handle, h)) h.dev = current_device();
            record_vmm_free(false, h.dev, handle);
        }
    }
    return rc;
}

MSMS_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                              unsigned long long flags) {
    auto f = real<PFN_cuMemMap>(S_MemMap);
    if (!f) return MSMS_CUDA_ERROR_NOT_INITIALIZED;
    DriverOrder order;
    CUresult rc = f(ptr, size, offset, handle, flags);
    if (rc == MSMS_CUDA_SUCCESS) {
        Recording r(want_memory());
        // Collection off: a shadow MALLOC at the next start, with the
        // mapping's Attr (virtual:true: the host counts the memory under the
        // handle only), so that its unmap in a later range pairs with it.
        const bool off = !r.on && collection_off();
        if (r.on || off) {
            Handle h{0, 0};
            if (!peek(g_handles, handle, h)) h.dev = current_device();
            bool recorded = true;
            if (off)
                recorded = h.dev < 0 ? off_alloc(MSMS_T_HOST_PINNED, MSMS_DEV_CPU, -1, ptr, size, kAttrPinnedMap)
                                     : off_alloc(MSMS_T_HAL, MSMS_DEV_CUDA, h.dev, ptr, size, kAttrMap);
            // Kept here even when the agent could not remember it for a
            // shadow MALLOC: it still holds its handle's memory (cuMemRelease).
            remember_mapping(ptr, VmMap{h.dev, size, handle, recorded});
            if (r.on && h.dev < 0) msms_agent_alloc(MSMS_T_HOST_PINNED, MSMS_DEV_CPU, -1, ptr, size, 0, kAttrPinnedMap);
            else if (r.on) msms_agent_alloc(MSMS_T_HAL, MSMS_DEV_CUDA, h.dev, ptr, size, 0, kAttrMap);
        }
    }
    return rc;
}

MSMS_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
    auto f = real<PFN_cuMemUnmap>(S_MemUnmap);
    if (!f) return MSMS_CUDA_ERROR_NOT_INITIALIZED;
    DriverOrder order;
    CUresult rc = f(ptr, size);
    // Refused (the range cuts a mapping: the driver unmaps nothing): the
    // mappings stay in the table, mapped, and their handles held.
    if (given_back(rc)) record_unmap(ptr, size);
    else refused_free(rc, CallText("cuMemUnmap", ptr, size).text);
    return rc;
}

// ---- pinned host memory
MSMS_EXPORT CUresult cuMemAllocHost_v2(void** pp, size_t bytesize) {
    auto f = real<PFN_cuMemAllocHost_v2>(S_MemAllocHost);
    if (!f) return MSMS_CUDA_ERROR_NOT_INITIALIZED;
    DriverOrder order;
    CUresult rc = f(pp, bytesize);
    if (rc == MSMS_CUDA_SUCCESS && pp) record_pinned_alloc(*pp, bytesize, kAttrPinned);
    else record_failure(rc, "cuMemAllocHost_v2", 1, bytesize, 0);
    return rc;
}

MSMS_EXPORT CUresult cuMemHostAlloc(void** pp, size_t bytesize, unsigned int flags) {
    auto f = real<PFN_cuMemHostAlloc>(S_MemHostAlloc);
    if (!f) return MSMS_CUDA_ERROR_NOT_INITIALIZED;
    DriverOrder order;
    CUresult rc = f(pp, bytesize, flags);
    if (rc == MSMS_CUDA_SUCCESS && pp) record_pinned_alloc(*pp, bytesize, kAttrPinned);
    else record_failure(rc, "cuMemHostAlloc", 1, bytesize, flags);
    return rc;
}

MSMS_EXPORT CUresult cuMemFreeHost(void* p) {
    auto f = real<PFN_cuMemFreeHost>(S_MemFreeHost);
    if (!f) return MSMS_CUDA_ERROR_NOT_INITIALIZED;
    DriverOrder order;
    CUresult rc = f(p);
    if (given_back(rc)) record_pinned_free(p);
    else if (p) refused_free(rc, CallText("cuMemFreeHost", reinterpret_cast<uint64_t>(p)).text);
    return rc;
}

#define MSMS_HOST_REGISTER(NAME, SLOT)                                                           \
    MSMS_EXPORT CUresult NAME(void* p, size_t bytesize, unsigned int flags) {                    \
        auto f = real<PFN_cuMemHostRegister>(SLOT);                                              \
        if (!f) return MSMS_CUDA_ERROR_NOT_INITIALIZED;                                          \
        DriverOrder order;                                                                       \
        CUresult rc = f(p, bytesize, flags);                                                     \
        if (rc == MSMS_CUDA_SUCCESS) record_pinned_alloc(p, bytesize, kAttrPinnedRegister);      \
        else record_failure(rc, #NAME, 1, bytesize, flags);                                      \
        return rc;                                                                               \
    }
MSMS_HOST_REGISTER(cuMemHostRegister, S_MemHostRegister_v1)
MSMS_HOST_REGISTER(cuMemHostRegister_v2, S_MemHostRegister_v2)

MSMS_EXPORT CUresult cuMemHostUnregister(void* p) {
    auto f = real<PFN_cuMemHostUnregister>(S_MemHostUnregister);
    if (!f) return MSMS_CUDA_ERROR_NOT_INITIALIZED;
    DriverOrder order;
    CUresult rc = f(p);
    if (given_back(rc)) record_pinned_free(p);
    else if (p) refused_free(rc, CallText("cuMemHostUnregister", reinterpret_cast<uint64_t>(p)).text);
    return rc;
}

// ---- kernel launch
#define MSMS_LAUNCH(NAME, SLOT)                                                                                 \
    MSMS_EXPORT CUresult NAME(CUfunction fn, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, \
                              unsigned int by, unsigned int bz, unsigned int shmem, CUstream stream,            \
                              void** params, void** extra) {                                                    \
        auto f = real<PFN_cuLaunchKernel>(SLOT);                                                                \
        if (!f) return MSMS_CUDA_ERROR_NOT_INITIALIZED;                                                         \
        record_launch(fn, stream);                                                                              \
        return f(fn, gx, gy, gz, bx, by, bz, shmem, stream, params, extra);                                     \
    }
MSMS_LAUNCH(cuLaunchKernel, S_LaunchKernel)
MSMS_LAUNCH(cuLaunchKernel_ptsz, S_LaunchKernel_ptsz)

#define MSMS_LAUNCH_EX(NAME, SLOT)                                                                       \
    MSMS_EXPORT CUresult NAME(const CUlaunchConfig* config, CUfunction fn, void** params, void** extra) { \
        auto f = real<PFN_cuLaunchKernelEx>(SLOT);                                                       \
        if (!f) return MSMS_CUDA_ERROR_NOT_INITIALIZED;                                                  \
        record_launch(fn, config ? config->hStream : nullptr);                                           \
        return f(config, fn, params, extra);                                                             \
    }
MSMS_LAUNCH_EX(cuLaunchKernelEx, S_LaunchKernelEx)
MSMS_LAUNCH_EX(cuLaunchKernelEx_ptsz, S_LaunchKernelEx_ptsz)

#define MSMS_LAUNCH_COOP(NAME, SLOT)                                                                            \
    MSMS_EXPORT CUresult NAME(CUfunction fn, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, \
                              unsigned int by, unsigned int bz, unsigned int shmem, CUstream stream,            \
                              void** params) {                                                                  \
        auto f = real<PFN_cuLaunchCooperativeKernel>(SLOT);                                                     \
        if (!f) return MSMS_CUDA_ERROR_NOT_INITIALIZED;                                                         \
        record_launch(fn, stream);                                                                              \
        return f(fn, gx, gy, gz, bx, by, bz, shmem, stream, params);                                            \
    }
MSMS_LAUNCH_COOP(cuLaunchCooperativeKernel, S_LaunchCooperativeKernel)
MSMS_LAUNCH_COOP(cuLaunchCooperativeKernel_ptsz, S_LaunchCooperativeKernel_ptsz)

// ---- cuGetProcAddress
MSMS_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags);
MSMS_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                         CUdriverProcAddressQueryResult* status);

}  // extern "C"

namespace {

// Replaces *pfn (the real function for symbol/version/flags) by our wrapper
// when we hook that name at that ABI version.
void substitute(const char* symbol, void** pfn, int version, cuuint64_t flags) {
    if (!symbol || !pfn || !*pfn || symbol[0] != 'c' || symbol[1] != 'u') return;
    bool want_ptsz = (flags & MSMS_CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    const Export* best = nullptr;
    for (size_t i = 0; i < kExportCount; ++i) {
        const Export& e = kExports[i];
        if (strcmp(e.base, symbol) != 0 || version < e.min_version || version >= e.max_version) continue;
        if (e.ptsz == want_ptsz) {
            best = &e;
            break;
        }
        if (!e.ptsz && !best) best = &e;  // no per-thread variant: the plain one
    }
    if (!best || *pfn == best->wrapper) return;
    g_real[best->slot].store(*pfn, std::memory_order_release);
    *pfn = best->wrapper;
}

}  // namespace

extern "C" {

MSMS_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
    auto f = real<PFN_cuGetProcAddress_v11030>(S_GPA_V1);
    if (!f) return MSMS_CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = f(symbol, pfn, version, flags);
    if (rc == MSMS_CUDA_SUCCESS) substitute(symbol, pfn, version, flags);
    return rc;
}

MSMS_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                         CUdriverProcAddressQueryResult* status) {
    auto f = real<PFN_cuGetProcAddress_v12000>(S_GPA_V2);
    if (!f) return MSMS_CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = f(symbol, pfn, version, flags, status);
    if (rc == MSMS_CUDA_SUCCESS) substitute(symbol, pfn, version, flags);
    return rc;
}

}  // extern "C"

namespace {

#define W(fn) reinterpret_cast<void*>(&fn)
constexpr int kMaxVersion = 1 << 30;
const Export kExports[] = {
    {"cuGetProcAddress", "cuGetProcAddress", 11030, 12000, false, S_GPA_V1, W(cuGetProcAddress)},
    {"cuGetProcAddress_v2", "cuGetProcAddress", 12000, kMaxVersion, false, S_GPA_V2, W(cuGetProcAddress_v2)},
    {"cuMemAlloc_v2", "cuMemAlloc", 3020, kMaxVersion, false, S_MemAlloc, W(cuMemAlloc_v2)},
    {"cuMemAllocPitch_v2", "cuMemAllocPitch", 3020, kMaxVersion, false, S_MemAllocPitch, W(cuMemAllocPitch_v2)},
    {"cuMemAllocManaged", "cuMemAllocManaged", 6000, kMaxVersion, false, S_MemAllocManaged, W(cuMemAllocManaged)},
    {"cuMemFree_v2", "cuMemFree", 3020, kMaxVersion, false, S_MemFree, W(cuMemFree_v2)},
    {"cuMemAllocAsync", "cuMemAllocAsync", 11020, kMaxVersion, false, S_MemAllocAsync, W(cuMemAllocAsync)},
    {"cuMemAllocAsync_ptsz", "cuMemAllocAsync", 11020, kMaxVersion, true, S_MemAllocAsync_ptsz,
     W(cuMemAllocAsync_ptsz)},
    {"cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync", 11020, kMaxVersion, false, S_MemAllocFromPoolAsync,
     W(cuMemAllocFromPoolAsync)},
    {"cuMemAllocFromPoolAsync_ptsz", "cuMemAllocFromPoolAsync", 11020, kMaxVersion, true,
     S_MemAllocFromPoolAsync_ptsz, W(cuMemAllocFromPoolAsync_ptsz)},
    {"cuMemFreeAsync", "cuMemFreeAsync", 11020, kMaxVersion, false, S_MemFreeAsync, W(cuMemFreeAsync)},
    {"cuMemFreeAsync_ptsz", "cuMemFreeAsync", 11020, kMaxVersion, true, S_MemFreeAsync_ptsz, W(cuMemFreeAsync_ptsz)},
    {"cuMemCreate", "cuMemCreate", 10020, kMaxVersion, false, S_MemCreate, W(cuMemCreate)},
    {"cuMemRelease", "cuMemRelease", 10020, kMaxVersion, false, S_MemRelease, W(cuMemRelease)},
    {"cuMemMap", "cuMemMap", 10020, kMaxVersion, false, S_MemMap, W(cuMemMap)},
    {"cuMemUnmap", "cuMemUnmap", 10020, kMaxVersion, false, S_MemUnmap, W(cuMemUnmap)},
    {"cuMemAllocHost_v2", "cuMemAllocHost", 3020, kMaxVersion, false, S_MemAllocHost, W(cuMemAllocHost_v2)},
    {"cuMemHostAlloc", "cuMemHostAlloc", 2020, kMaxVersion, false, S_MemHostAlloc, W(cuMemHostAlloc)},
    {"cuMemFreeHost", "cuMemFreeHost", 2000, kMaxVersion, false, S_MemFreeHost, W(cuMemFreeHost)},
    {"cuMemHostRegister", "cuMemHostRegister", 4000, 6050, false, S_MemHostRegister_v1, W(cuMemHostRegister)},
    {"cuMemHostRegister_v2", "cuMemHostRegister", 6050, kMaxVersion, false, S_MemHostRegister_v2,
     W(cuMemHostRegister_v2)},
    {"cuMemHostUnregister", "cuMemHostUnregister", 4000, kMaxVersion, false, S_MemHostUnregister,
     W(cuMemHostUnregister)},
    {"cuLaunchKernel", "cuLaunchKernel", 4000, kMaxVersion, false, S_LaunchKernel, W(cuLaunchKernel)},
    {"cuLaunchKernel_ptsz", "cuLaunchKernel", 7000, kMaxVersion, true, S_LaunchKernel_ptsz, W(cuLaunchKernel_ptsz)},
    {"cuLaunchKernelEx", "cuLaunchKernelEx", 11060, kMaxVersion, false, S_LaunchKernelEx, W(cuLaunchKernelEx)},
    {"cuLaunchKernelEx_ptsz", "cuLaunchKernelEx", 11060, kMaxVersion, true, S_LaunchKernelEx_ptsz,
     W(cuLaunchKernelEx_ptsz)},
    {"cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel", 9000, kMaxVersion, false, S_LaunchCooperativeKernel,
     W(cuLaunchCooperativeKernel)},
    {"cuLaunchCooperativeKernel_ptsz", "cuLaunchCooperativeKernel", 9000, kMaxVersion, true,
     S_LaunchCooperativeKernel_ptsz, W(cuLaunchCooperativeKernel_ptsz)},
};
#undef W
const size_t kExportCount = sizeof(kExports) / sizeof(kExports[0]);

const Export* export_by_symbol(const char* name) {
    for (size_t i = 0; i < kExportCount; ++i)
        if (strcmp(kExports[i].symbol, name) == 0) return &kExports[i];
    return nullptr;
}

}  // namespace

// dlsym(handle, name) for a specific handle and one of our names: our wrapper
// (remembering the real function); anything else: 0, and the trampoline goes
// on to the real dlsym.
extern "C" void* msms_cuda_dlsym_pre(void* handle, const char* name) {
    init_real_dlsym();
    if (handle == RTLD_NEXT || handle == RTLD_DEFAULT || !name || name[0] != 'c' || name[1] != 'u') return nullptr;
    const Export* e = export_by_symbol(name);
    if (!e || !msms_cuda_real_dlsym) return nullptr;
    void* p = msms_cuda_real_dlsym(handle, name);
    if (!p || p == e->wrapper) return nullptr;
    g_real[e->slot].store(p, std::memory_order_release);
    return e->wrapper;
}

namespace msms_cuda {

int current_device_or_none() {
    auto f = aux<PFN_cuCtxGetDevice>(A_CtxGetDevice);
    CUdevice d = 0;
    if (f && f(&d) == MSMS_CUDA_SUCCESS && d >= 0) return d;
    return -1;
}

}  // namespace msms_cuda

// ---------------------------------------------------------------- snapshot
namespace {

bool mem_info(int dev, size_t& free_b, size_t& total_b) {
    auto get_info = aux<PFN_cuMemGetInfo_v2>(A_MemGetInfo);
    if (!get_info) return false;
    if (msms_cuda::current_device_or_none() == dev) return get_info(&free_b, &total_b) == MSMS_CUDA_SUCCESS;
    // Another device: only if its primary context already exists (never
    // create one: that would cost the device memory).
    auto state = aux<PFN_cuDevicePrimaryCtxGetState>(A_PrimaryCtxGetState);
    auto retain = aux<PFN_cuDevicePrimaryCtxRetain>(A_PrimaryCtxRetain);
    auto release = aux<PFN_cuDevicePrimaryCtxRelease_v2>(A_PrimaryCtxRelease);
    auto push = aux<PFN_cuCtxPushCurrent_v2>(A_CtxPushCurrent);
    auto pop = aux<PFN_cuCtxPopCurrent_v2>(A_CtxPopCurrent);
    if (!state || !retain || !release || !push || !pop) return false;
    unsigned int flags = 0;
    int active = 0;
    if (state(dev, &flags, &active) != MSMS_CUDA_SUCCESS || !active) return false;
    CUcontext ctx = nullptr;
    if (retain(&ctx, dev) != MSMS_CUDA_SUCCESS) return false;
    bool ok = false;
    if (push(ctx) == MSMS_CUDA_SUCCESS) {
        ok = get_info(&free_b, &total_b) == MSMS_CUDA_SUCCESS;
        CUcontext popped = nullptr;
        pop(&popped);
    }
    release(dev);
    return ok;
}

}  // namespace

// Writes one SNAPSHOT row per device in device_mask (bit N = device N; 0 = the
// current device): upstream's SNAPSHOT Attr (msmemscope/snapshot_attrs.h)
// with total/free from cuMemGetInfo; extra_attrs ("key:value,..." e.g. the
// PyTorch allocator's reserved/max_reserved/allocated/max_allocated) fill
// those slots (0 when absent, as upstream) and other pairs follow the rates.
// name NULL = "Memory Snapshot".
// Works with or without an active collection range. Returns the number of
// rows written (0 when no device could be asked).
MSMS_EXPORT int msms_cuda_snapshot(uint64_t device_mask, const char* name, const char* extra_attrs) {
    if (!msms_agent_attached()) return 0;
    int guard = msms_agent_enter();
    int rows = 0;
    if (device_mask == 0) {
        int cur = msms_cuda::current_device_or_none();
        device_mask = cur >= 0 && cur < 64 ? (1ull << cur) : 0;
    }
    for (int dev = 0; dev < 64; ++dev) {
        if (!(device_mask & (1ull << dev))) continue;
        size_t free_b = 0, total_b = 0;
        if (!mem_info(dev, free_b, total_b)) continue;
        char attrs[1024];
        msms::format_snapshot_attrs(attrs, sizeof(attrs), total_b, free_b, extra_attrs);
        msms_agent_event(MSMS_EV_SNAPSHOT, MSMS_T_SNAPSHOT, MSMS_DEV_CUDA, static_cast<int16_t>(dev), 0, 0, 0, 0,
                         name && *name ? name : "Memory Snapshot", attrs);
        ++rows;
    }
    if (guard) msms_agent_leave();
    return rows;
}
