// NVTX marks and ranges, received through NVTX's own injection mechanism (no
// relinking of the target): the NVTX library in the target loads the library
// named by NVTX_INJECTION64_PATH and calls its InitializeInjectionNvtx2. This
// hook library is that library: its constructor sets NVTX_INJECTION64_PATH to
// its own path when the variable is unset (a user's own setting, e.g. another
// tool's, is left alone; MSMEMSCOPE_CUDA_NVTX=0 turns this off).
//
// Rows, the same as the mstx collector's (device N/A: marks belong to the
// program, not to one device):
//   MSTX Mark         Name = message
//   MSTX Range_start  Name = message, aux0 = range id
//   MSTX Range_end    Name = the start's message when known, aux0 = range id
// nvtxRangeStart/End use the id we return; nvtxRangePush/Pop have none, so
// one is synthesized from the same counter (per-thread stack). A range named
// "step start" therefore drives steps exactly like an mstx range.
#include <msmemscope/agent.h>
#include <msmemscope/spin_lock.hpp>

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>

#include "nvtx_injection_api.h"

#define MSMS_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

std::atomic<uint64_t> g_next_range{0};

constexpr int kNameLen = 128;

using msmemscope::SpinLock;

// Open start/end ranges (by id, most recent 1024), for the end row's name.
constexpr uint32_t kRanges = 1024;
struct RangeSlot {
    uint64_t id;
    char name[kNameLen];
};
RangeSlot g_ranges[kRanges];
SpinLock g_range_lock;

// Push/pop ranges of this thread.
constexpr int kMaxDepth = 64;
struct PushStack {
    uint64_t ids[kMaxDepth];
    char names[kMaxDepth][kNameLen];
    int depth;
};
thread_local PushStack t_stack;

void copy_name(char* dst, const char* src) {
    if (!src) src = "";
    strncpy(dst, src, kNameLen - 1);
    dst[kNameLen - 1] = 0;
}

// Registered strings (nvtxDomainRegisterStringA/W): we hand out our own copy
// as the handle, so that a message of type REGISTERED can be read back.
struct Registered {
    char text[1];
};

void record(uint16_t type, const char* message, uint64_t range_id) {
    if (!msms_agent_enter()) return;
    msms_agent_event(MSMS_EV_MSTX, type, MSMS_DEV_NA, -1, 0, 0, range_id, 0, message && *message ? message : nullptr,
                     nullptr);
    msms_agent_leave();
}

// Wide to narrow without allocation: ASCII kept, anything else as '?'.
struct Narrow {
    char buf[512];
    explicit Narrow(const wchar_t* w) {
        size_t i = 0;
        if (w)
            for (; w[i] && i + 1 < sizeof(buf); ++i) buf[i] = (w[i] > 0 && w[i] < 128) ? static_cast<char>(w[i]) : '?';
        buf[i] = 0;
    }
};

// The message of an event-attribute structure, as text.
struct Message {
    char buf[512];
    const char* text = nullptr;
    explicit Message(const nvtxEventAttributes_t* a) {
        buf[0] = 0;
        if (!a) return;
        switch (a->messageType) {
        case MSMS_NVTX_MESSAGE_TYPE_ASCII: text = a->message.ascii; break;
        case MSMS_NVTX_MESSAGE_TYPE_UNICODE: {
            Narrow n(a->message.unicode);
            memcpy(buf, n.buf, sizeof(buf));
            text = buf;
            break;
        }
        case MSMS_NVTX_MESSAGE_TYPE_REGISTERED:
            text = a->message.registered ? reinterpret_cast<const Registered*>(a->message.registered)->text : nullptr;
            break;
        default: break;
        }
    }
};


// ---- CORE
void mark_a(const char* msg) { record(MSMS_T_MARK, msg, 0); }
void mark_w(const wchar_t* msg) { record(MSMS_T_MARK, Narrow(msg).buf, 0); }
void mark_ex(const nvtxEventAttributes_t* a) { record(MSMS_T_MARK, Message(a).text, 0); }

nvtxRangeId_t range_start_a(const char* msg) {
    uint64_t id = g_next_range.fetch_add(1, std::memory_order_relaxed) + 1;
    g_range_lock.lock();
    RangeSlot& slot = g_ranges[id % kRanges];
    slot.id = id;
    copy_name(slot.name, msg);
    g_range_lock.unlock();
    record(MSMS_T_RANGE_START, msg, id);
    return id;
}
nvtxRangeId_t range_start_w(const wchar_t* msg) { return range_start_a(Narrow(msg).buf); }
nvtxRangeId_t range_start_ex(const nvtxEventAttributes_t* a) { return range_start_a(Message(a).text); }
void range_end(nvtxRangeId_t id) {
    char name[kNameLen];
    name[0] = 0;
    g_range_lock.lock();
    RangeSlot& slot = g_ranges[id % kRanges];
    if (id != 0 && slot.id == id) {
        memcpy(name, slot.name, kNameLen);
        slot.id = 0;
    }
    g_range_lock.unlock();
    record(MSMS_T_RANGE_END, name, id);
}

// Returns the level of the pushed range (0 = outermost), like NVTX.
int range_push_a(const char* msg) {
    uint64_t id = g_next_range.fetch_add(1, std::memory_order_relaxed) + 1;
    PushStack& s = t_stack;
    if (s.depth < kMaxDepth) {
        s.ids[s.depth] = id;
        copy_name(s.names[s.depth], msg);
    }
    int level = s.depth++;
    record(MSMS_T_RANGE_START, msg, id);
    return level;
}
int range_push_w(const wchar_t* msg) { return range_push_a(Narrow(msg).buf); }
int range_push_ex(const nvtxEventAttributes_t* a) { return range_push_a(Message(a).text); }
// Returns the level of the popped range, -1 when none was open.
int range_pop() {
    PushStack& s = t_stack;
    if (s.depth <= 0) return -1;
    int level = --s.depth;
    if (level < kMaxDepth) record(MSMS_T_RANGE_END, s.names[level], s.ids[level]);
    else record(MSMS_T_RANGE_END, nullptr, 0);
    return level;
}

// ---- CORE2 (domains); the domain handle is not needed for the rows.
void domain_mark_ex(nvtxDomainHandle_t, const nvtxEventAttributes_t* a) { mark_ex(a); }
nvtxRangeId_t domain_range_start_ex(nvtxDomainHandle_t, const nvtxEventAttributes_t* a) { return range_start_ex(a); }
void domain_range_end(nvtxDomainHandle_t, nvtxRangeId_t id) { range_end(id); }
int domain_range_push_ex(nvtxDomainHandle_t, const nvtxEventAttributes_t* a) { return range_push_ex(a); }
int domain_range_pop(nvtxDomainHandle_t) { return range_pop(); }

nvtxStringHandle_t register_string(const char* s) {
    if (!s) return nullptr;
    int guard = msms_agent_enter();  // our own allocation is not the program's
    size_t n = strlen(s);
    auto* r = static_cast<Registered*>(malloc(sizeof(Registered) + n));
    if (r) memcpy(r->text, s, n + 1);
    if (guard) msms_agent_leave();
    return reinterpret_cast<nvtxStringHandle_t>(r);
}
nvtxStringHandle_t domain_register_string_a(nvtxDomainHandle_t, const char* s) { return register_string(s); }
nvtxStringHandle_t domain_register_string_w(nvtxDomainHandle_t, const wchar_t* s) {
    return register_string(Narrow(s).buf);
}

template <class F>
void install(NvtxFunctionTable table, unsigned int size, unsigned int id, F fn) {
    if (table && id < size && table[id]) *table[id] = reinterpret_cast<NvtxFunctionPointer>(fn);
}

__attribute__((constructor)) void set_injection_path() {
    const char* off = getenv("MSMEMSCOPE_CUDA_NVTX");
    if (off && strcmp(off, "0") == 0) return;
    const char* cur = getenv("NVTX_INJECTION64_PATH");
    if (cur && *cur) return;
    Dl_info info;
    if (!dladdr(reinterpret_cast<void*>(&set_injection_path), &info) || !info.dli_fname || !*info.dli_fname) return;
    int guard = msms_agent_enter();
    setenv("NVTX_INJECTION64_PATH", info.dli_fname, 0);
    if (guard) msms_agent_leave();
}

}  // namespace

MSMS_EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc get_export_table) {
    if (!get_export_table) return 0;
    auto* cb = static_cast<const NvtxExportTableCallbacks*>(get_export_table(MSMS_NVTX_ETID_CALLBACKS));
    if (!cb || cb->struct_size < sizeof(NvtxExportTableCallbacks) || !cb->GetModuleFunctionTable) return 0;
    NvtxFunctionTable t = nullptr;
    unsigned int n = 0;
    if (cb->GetModuleFunctionTable(MSMS_NVTX_CB_MODULE_CORE, &t, &n) && t) {
        install(t, n, MSMS_NVTX_CBID_CORE_MarkEx, &mark_ex);
        install(t, n, MSMS_NVTX_CBID_CORE_MarkA, &mark_a);
        install(t, n, MSMS_NVTX_CBID_CORE_MarkW, &mark_w);
        install(t, n, MSMS_NVTX_CBID_CORE_RangeStartEx, &range_start_ex);
        install(t, n, MSMS_NVTX_CBID_CORE_RangeStartA, &range_start_a);
        install(t, n, MSMS_NVTX_CBID_CORE_RangeStartW, &range_start_w);
        install(t, n, MSMS_NVTX_CBID_CORE_RangeEnd, &range_end);
        install(t, n, MSMS_NVTX_CBID_CORE_RangePushEx, &range_push_ex);
        install(t, n, MSMS_NVTX_CBID_CORE_RangePushA, &range_push_a);
        install(t, n, MSMS_NVTX_CBID_CORE_RangePushW, &range_push_w);
        install(t, n, MSMS_NVTX_CBID_CORE_RangePop, &range_pop);
    } else {
        return 0;
    }
    t = nullptr;
    n = 0;
    if (cb->GetModuleFunctionTable(MSMS_NVTX_CB_MODULE_CORE2, &t, &n) && t) {
        install(t, n, MSMS_NVTX_CBID_CORE2_DomainMarkEx, &domain_mark_ex);
        install(t, n, MSMS_NVTX_CBID_CORE2_DomainRangeStartEx, &domain_range_start_ex);
        install(t, n, MSMS_NVTX_CBID_CORE2_DomainRangeEnd, &domain_range_end);
        install(t, n, MSMS_NVTX_CBID_CORE2_DomainRangePushEx, &domain_range_push_ex);
        install(t, n, MSMS_NVTX_CBID_CORE2_DomainRangePop, &domain_range_pop);
        install(t, n, MSMS_NVTX_CBID_CORE2_DomainRegisterStringA, &domain_register_string_a);
        install(t, n, MSMS_NVTX_CBID_CORE2_DomainRegisterStringW, &domain_register_string_w);
    }
    auto* vi = static_cast<const NvtxExportTableVersionInfo*>(get_export_table(MSMS_NVTX_ETID_VERSIONINFO));
    if (vi && vi->struct_size >= sizeof(NvtxExportTableVersionInfo) && vi->SetInjectionNvtxVersion)
        vi->SetInjectionNvtxVersion(vi->version);
    return 1;
}
