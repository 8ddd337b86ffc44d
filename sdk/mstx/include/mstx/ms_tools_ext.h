/*
 * mstx — marks, ranges and memory-pool reporting for profilers.
 *
 * A small library with the same C names, types and tool-injection protocol
 * as Ascend's mstx (ms_tools_ext.h / libms_tools_ext.so), for machines
 * without CANN. Programs written against it also build against CANN's.
 *
 * Without a tool every call does nothing (range starts return 0). A tool is
 * found on the first call: the library named by the environment variable
 * MSTX_INJECTION_PATH is loaded, else the process is searched, for an
 * exported `int InitInjectionMstx(mstxGetModuleFuncTableFunc)`, which fills
 * the function tables described in mstx/mstx_injection.h.
 */
#ifndef MSMEMSCOPE_MSTX_MS_TOOLS_EXT_H
#define MSMEMSCOPE_MSTX_MS_TOOLS_EXT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef MSTX_API
#define MSTX_API __attribute__((visibility("default")))
#endif

#define MSTX_SUCCESS 0
#define MSTX_FAIL 1

#define MSTX_TOOL_INVALID_ID 0x0
#define MSTX_TOOL_MSPROF_ID 0x1000
#define MSTX_TOOL_MSOPPROF_ID 0x1001
#define MSTX_TOOL_MSSANITIZER_ID 0x1002
#define MSTX_TOOL_MSLEAKS_ID 0x1003

typedef uint64_t mstxRangeId;
typedef void* aclrtStream;

struct mstxDomainRegistration_st;
typedef struct mstxDomainRegistration_st mstxDomainRegistration_t;
typedef mstxDomainRegistration_t* mstxDomainHandle_t;

struct mstxMemHeap_st;
typedef struct mstxMemHeap_st mstxMemHeap_t;
typedef mstxMemHeap_t* mstxMemHeapHandle_t;

struct mstxMemRegion_st;
typedef struct mstxMemRegion_st mstxMemRegion_t;
typedef mstxMemRegion_t* mstxMemRegionHandle_t;

/* A range of device virtual memory: a pool (heap) or a block in it (region). */
typedef struct mstxMemVirtualRangeDesc_t {
    uint32_t deviceId;
    void const* ptr;
    uint64_t size;
} mstxMemVirtualRangeDesc_t;

typedef enum mstxMemHeapUsageType {
    MSTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR = 0
} mstxMemHeapUsageType;

typedef enum mstxMemType {
    MSTX_MEM_TYPE_VIRTUAL_ADDRESS = 0 /* descriptions are mstxMemVirtualRangeDesc_t */
} mstxMemType;

typedef struct mstxMemHeapDesc_t {
    mstxMemHeapUsageType usage;
    mstxMemType type;
    void const* typeSpecificDesc;
} mstxMemHeapDesc_t;

typedef struct mstxMemRegionsRegisterBatch_t {
    mstxMemHeapHandle_t heap;
    mstxMemType regionType;
    size_t regionCount;
    void const* regionDescArray;                 /* regionCount descriptions */
    mstxMemRegionHandle_t* regionHandleArrayOut; /* may be NULL */
} mstxMemRegionsRegisterBatch_t;

typedef enum mstxMemRegionRefType {
    MSTX_MEM_REGION_REF_TYPE_POINTER = 0,
    MSTX_MEM_REGION_REF_TYPE_HANDLE
} mstxMemRegionRefType;

typedef struct mstxMemRegionRef_t {
    mstxMemRegionRefType refType;
    union {
        void const* pointer;
        mstxMemRegionHandle_t handle;
    };
} mstxMemRegionRef_t;

typedef struct mstxMemRegionsUnregisterBatch_t {
    size_t refCount;
    mstxMemRegionRef_t const* refArray;
} mstxMemRegionsUnregisterBatch_t;

/* Marks and ranges. `message` must not be NULL; `stream` may be NULL. */
MSTX_API void mstxMarkA(const char* message, aclrtStream stream);
MSTX_API mstxRangeId mstxRangeStartA(const char* message, aclrtStream stream);
MSTX_API void mstxRangeEnd(mstxRangeId id);
MSTX_API void mstxGetToolId(uint64_t* id);

/* Domains: "ptaCaching", "ptaWorkspace", "atb", "mindsporeMemPool" are the
 * memory-pool domains profilers know; any other name scopes marks. */
MSTX_API mstxDomainHandle_t mstxDomainCreateA(const char* name);
MSTX_API void mstxDomainDestroy(mstxDomainHandle_t domain);
MSTX_API void mstxDomainMarkA(mstxDomainHandle_t domain, const char* message, aclrtStream stream);
MSTX_API mstxRangeId mstxDomainRangeStartA(mstxDomainHandle_t domain, const char* message, aclrtStream stream);
MSTX_API void mstxDomainRangeEnd(mstxDomainHandle_t domain, mstxRangeId id);

/* Memory pools: a heap is the pool's reserved memory, regions are the
 * blocks handed out of it. */
MSTX_API mstxMemHeapHandle_t mstxMemHeapRegister(mstxDomainHandle_t domain, mstxMemHeapDesc_t const* desc);
MSTX_API void mstxMemHeapUnregister(mstxDomainHandle_t domain, mstxMemHeapHandle_t heap);
MSTX_API void mstxMemRegionsRegister(mstxDomainHandle_t domain, mstxMemRegionsRegisterBatch_t const* desc);
MSTX_API void mstxMemRegionsUnregister(mstxDomainHandle_t domain, mstxMemRegionsUnregisterBatch_t const* desc);

#ifdef __cplusplus
}
#endif
#endif
