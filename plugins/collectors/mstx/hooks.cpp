// libmsms_mstx_hook.so — the mstx tool: marks, ranges and framework memory
// pools reported through mstx (Ascend's ms_tools_ext, or sdk/mstx here).
//
// How it gets called: mstx loads its tool on the first mstx call — the
// library named by MSTX_INJECTION_PATH, else whatever exports
// InitInjectionMstx in the process (sdk/mstx/include/mstx/mstx_injection.h).
// This library is preloaded by the CLI and, from its constructor (before the
// program's main), also sets MSTX_INJECTION_PATH to its own path, so that
// both lookups find it (an mstx build that only honours the variable, and
// one that only searches the process). A value the user had set is replaced
// while profiling: the profiler must receive the marks.
//
// Rows (device N/A: marks belong to the program, not to one device):
//   MSTX Mark         Name = message
//   MSTX Range_start  Name = message, aux0 = range id (the id returned)
//   MSTX Range_end    Name = the start's message when known, aux0 = range id
//   (domain marks/ranges: the same rows)
// Memory-pool domains (pool type by domain name, as upstream):
//   ptaCaching, msleaks -> PTA; ptaWorkspace -> PTA_WORKSPACE; atb -> ATB;
//   mindsporeMemPool -> MINDSPORE.
//   mstxMemHeapRegister: the pool's reserved bytes (Attr total of its blocks)
//   mstxMemRegionsRegister: MALLOC of each block (device = deviceId)
//   mstxMemRegionsUnregister: FREE of each block
#include <msmemscope/agent.h>

#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>

#include "mstx/mstx_injection.h"
#include "npu_common.h"

namespace {

using msms_npu::BlockInfo;

msms_npu::WantedDevices g_devices;
msms_npu::PtrTable<> g_regions;
msms_npu::PtrTable<4096> g_heaps;

// ---------------------------------------------------------------- domains
struct Domain {
    uint16_t pool_type;  // MSMS_T_NONE for a plain (marks-only) domain
    uint16_t pool_index;
    char name[64];
};

enum { kPoolPta, kPoolPtaWs, kPoolAtb, kPoolMs, kPoolCount };
Domain g_pool_domains[kPoolCount] = {
    {MSMS_T_PTA, kPoolPta, "ptaCaching"},
    {MSMS_T_PTA_WORKSPACE, kPoolPtaWs, "ptaWorkspace"},
    {MSMS_T_ATB, kPoolAtb, "atb"},
    {MSMS_T_MINDSPORE, kPoolMs, "mindsporeMemPool"},
};
constexpr uint32_t kMaxDomains = 256;
Domain g_domains[kMaxDomains];
uint32_t g_domain_count = 0;
msms_npu::SpinLock g_domain_lock;

std::atomic<int64_t> g_reserved[kPoolCount][64];

Domain* pool_of(mstxDomainHandle_t h) {
    Domain* d = reinterpret_cast<Domain*>(h);
    if (d >= g_pool_domains && d < g_pool_domains + kPoolCount) return d;
    return nullptr;
}

// ---------------------------------------------------------------- ranges
std::atomic<uint64_t> g_next_range{1};
constexpr uint32_t kRanges = 1024;
constexpr uint32_t kRangeName = 256;
struct RangeSlot {
    uint64_t id;
    char name[kRangeName];
};
RangeSlot g_ranges[kRanges];
msms_npu::SpinLock g_range_lock;

void record_mstx(uint16_t type, const char* name, uint64_t id) {
    if (!msms_agent_enter()) return;
    msms_agent_event(MSMS_EV_MSTX, type, MSMS_DEV_NA, -1, 0, 0, id, 0, name, nullptr);
    msms_agent_leave();
}

void mark(const char* message, aclrtStream) { record_mstx(MSMS_T_MARK, message, 0); }

mstxRangeId range_start(const char* message, aclrtStream) {
    uint64_t id = g_next_range.fetch_add(1);
    g_range_lock.lock();
    RangeSlot& s = g_ranges[id % kRanges];
    s.id = id;
    strncpy(s.name, message ? message : "", kRangeName - 1);
    s.name[kRangeName - 1] = 0;
    g_range_lock.unlock();
    record_mstx(MSMS_T_RANGE_START, message, id);
    return id;
}

void range_end(mstxRangeId id) {
    char name[kRangeName];
    name[0] = 0;
    g_range_lock.lock();
    RangeSlot& s = g_ranges[id % kRanges];
    if (s.id == id && id != 0) {
        memcpy(name, s.name, kRangeName);
        s.id = 0;
    }
    g_range_lock.unlock();
    record_mstx(MSMS_T_RANGE_END, name[0] ? name : nullptr, id);
}

void get_tool_id(uint64_t* id) {
    if (id) *id = MSTX_TOOL_MSLEAKS_ID;
}

mstxDomainHandle_t domain_create(const char* name) {
    if (!name) return nullptr;
    if (!strcmp(name, "ptaCaching") || !strcmp(name, "msleaks"))
        return reinterpret_cast<mstxDomainHandle_t>(&g_pool_domains[kPoolPta]);
    for (auto& d : g_pool_domains)
        if (!strcmp(name, d.name)) return reinterpret_cast<mstxDomainHandle_t>(&d);
    g_domain_lock.lock();
    Domain* found = nullptr;
    for (uint32_t i = 0; i < g_domain_count; ++i)
        if (!strncmp(g_domains[i].name, name, sizeof(g_domains[i].name) - 1)) found = &g_domains[i];
    if (!found && g_domain_count < kMaxDomains) {
        found = &g_domains[g_domain_count++];
        found->pool_type = MSMS_T_NONE;
        strncpy(found->name, name, sizeof(found->name) - 1);
    }
    g_domain_lock.unlock();
    return reinterpret_cast<mstxDomainHandle_t>(found);
}

void domain_destroy(mstxDomainHandle_t) {}
void domain_mark(mstxDomainHandle_t, const char* message, aclrtStream s) { mark(message, s); }
mstxRangeId domain_range_start(mstxDomainHandle_t, const char* message, aclrtStream s) {
    return range_start(message, s);
}
void domain_range_end(mstxDomainHandle_t, mstxRangeId id) { range_end(id); }

// ---------------------------------------------------------------- memory
bool wants_memory() { return msms_agent_wants("alloc") || msms_agent_wants("free"); }

mstxMemHeapHandle_t heap_register(mstxDomainHandle_t domain, mstxMemHeapDesc_t const* desc) {
    Domain* d = pool_of(domain);
    if (!d || !desc || desc->type != MSTX_MEM_TYPE_VIRTUAL_ADDRESS || !desc->typeSpecificDesc) return nullptr;
    auto* r = static_cast<const mstxMemVirtualRangeDesc_t*>(desc->typeSpecificDesc);
    uint64_t key = reinterpret_cast<uint64_t>(r->ptr);
    if (r->deviceId < 64) {
        g_heaps.put(key, BlockInfo{d->pool_type, MSMS_DEV_NPU, static_cast<int16_t>(r->deviceId), d->pool_index, r->size});
        g_reserved[d->pool_index][r->deviceId] += static_cast<int64_t>(r->size);
    }
    return reinterpret_cast<mstxMemHeapHandle_t>(const_cast<void*>(r->ptr));
}

void heap_unregister(mstxDomainHandle_t domain, mstxMemHeapHandle_t heap) {
    Domain* d = pool_of(domain);
    BlockInfo b;
    if (!d || !g_heaps.take(reinterpret_cast<uint64_t>(heap), &b)) return;
    if (b.device_id >= 0 && b.device_id < 64) g_reserved[b.reserved][b.device_id] -= static_cast<int64_t>(b.size);
}

void regions_register(mstxDomainHandle_t domain, mstxMemRegionsRegisterBatch_t const* batch) {
    Domain* d = pool_of(domain);
    if (!d || !batch || batch->regionType != MSTX_MEM_TYPE_VIRTUAL_ADDRESS || !batch->regionDescArray) return;
    auto* r = static_cast<const mstxMemVirtualRangeDesc_t*>(batch->regionDescArray);
    for (size_t i = 0; i < batch->regionCount; ++i) {
        if (batch->regionHandleArrayOut)
            batch->regionHandleArrayOut[i] = reinterpret_cast<mstxMemRegionHandle_t>(const_cast<void*>(r[i].ptr));
    }
    if (!msms_agent_enter()) return;
    if (wants_memory()) {
        for (size_t i = 0; i < batch->regionCount; ++i) {
            int16_t dev = static_cast<int16_t>(r[i].deviceId);
            if (r[i].deviceId >= 64 || !g_devices.npu(dev)) continue;
            uint64_t p = reinterpret_cast<uint64_t>(r[i].ptr);
            char attrs[48];
            size_t n = msms_npu::put(attrs, 0, sizeof(attrs), "total:");
            int64_t total = g_reserved[d->pool_index][dev].load();
            msms_npu::put_u64(attrs, n, sizeof(attrs), total > 0 ? static_cast<uint64_t>(total) : 0);
            g_regions.put(p, BlockInfo{d->pool_type, MSMS_DEV_NPU, dev, d->pool_index, r[i].size});
            msms_agent_alloc(d->pool_type, MSMS_DEV_NPU, dev, p, r[i].size, 0, attrs);
        }
    }
    msms_agent_leave();
}

void regions_unregister(mstxDomainHandle_t domain, mstxMemRegionsUnregisterBatch_t const* batch) {
    Domain* d = pool_of(domain);
    if (!d || !batch || !batch->refArray) return;
    for (size_t i = 0; i < batch->refCount; ++i) {
        const mstxMemRegionRef_t& ref = batch->refArray[i];
        uint64_t p = ref.refType == MSTX_MEM_REGION_REF_TYPE_HANDLE ? reinterpret_cast<uint64_t>(ref.handle)
                                                                    : reinterpret_cast<uint64_t>(ref.pointer);
        BlockInfo b;
        if (!g_regions.take(p, &b)) continue;
        if (msms_agent_enter()) {
            msms_agent_free(b.type, b.device_kind, b.device_id, p);
            msms_agent_leave();
        }
    }
}

template <class F>
void install(mstxFuncTable table, unsigned int size, unsigned int id, F fn) {
    if (id < size && table[id]) *table[id] = reinterpret_cast<mstxFuncPointer>(fn);
}

// Runs before the program's main (and before any mstx call can happen).
__attribute__((constructor)) void name_ourselves() {
    Dl_info info;
    if (dladdr(reinterpret_cast<void*>(&name_ourselves), &info) && info.dli_fname && info.dli_fname[0] == '/') {
        // setenv allocates: those blocks are ours, not the program's.
        int guard = msms_agent_enter();
        setenv(MSTX_INJECTION_PATH_ENV, info.dli_fname, 1);
        if (guard) msms_agent_leave();
    }
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitInjectionMstx(mstxGetModuleFuncTableFunc getFuncTable) {
    if (!getFuncTable) return MSTX_FAIL;
    int ok = 0;
    mstxFuncTable t = nullptr;
    unsigned int n = 0;
    if (getFuncTable(MSTX_API_MODULE_CORE, &t, &n) == MSTX_SUCCESS && t) {
        install(t, n, MSTX_API_CORE_MARK_A, &mark);
        install(t, n, MSTX_API_CORE_RANGE_START_A, &range_start);
        install(t, n, MSTX_API_CORE_RANGE_END, &range_end);
        install(t, n, MSTX_API_CORE_GET_TOOL_ID, &get_tool_id);
        ++ok;
    }
    if (getFuncTable(MSTX_API_MODULE_CORE_DOMAIN, &t, &n) == MSTX_SUCCESS && t) {
        install(t, n, MSTX_API_CORE2_DOMAIN_CREATE_A, &domain_create);
        install(t, n, MSTX_API_CORE2_DOMAIN_DESTROY, &domain_destroy);
        install(t, n, MSTX_API_CORE2_DOMAIN_MARK_A, &domain_mark);
        install(t, n, MSTX_API_CORE2_DOMAIN_RANGE_START_A, &domain_range_start);
        install(t, n, MSTX_API_CORE2_DOMAIN_RANGE_END, &domain_range_end);
        ++ok;
    }
    if (getFuncTable(MSTX_API_MODULE_CORE_MEM, &t, &n) == MSTX_SUCCESS && t) {
        install(t, n, MSTX_API_CORE_MEMHEAP_REGISTER, &heap_register);
        install(t, n, MSTX_API_CORE_MEMHEAP_UNREGISTER, &heap_unregister);
        install(t, n, MSTX_API_CORE_MEM_REGIONS_REGISTER, &regions_register);
        install(t, n, MSTX_API_CORE_MEM_REGIONS_UNREGISTER, &regions_unregister);
        ++ok;
    }
    // Marks and ranges are enough to be useful; an older mstx may lack the
    // memory module.
    return ok > 0 ? MSTX_SUCCESS : MSTX_FAIL;
}
