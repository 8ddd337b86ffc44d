/*
 * NVTX v3's tool-injection protocol, as much of it as msmemscope uses, declared
 * here so that nothing needs the NVTX headers. The NVTX library in the target
 * (header-only nvToolsExt, or libnvToolsExt) reads NVTX_INJECTION64_PATH on its
 * first call, dlopens that library, calls its exported
 *     int InitializeInjectionNvtx2(NvtxGetExportTableFunc getExportTable)
 * and the tool asks getExportTable(ETID_CALLBACKS) for GetModuleFunctionTable,
 * which gives, per module, an array of pointers to the library's function
 * pointer slots; the tool overwrites the slots it implements. The ids and the
 * event-attribute layout below are those of nvToolsExt.h / nvtxTypes.h.
 */
#ifndef MSMEMSCOPE_NVTX_INJECTION_API_H
#define MSMEMSCOPE_NVTX_INJECTION_API_H

#include <stddef.h>
#include <stdint.h>
#include <wchar.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void (*NvtxFunctionPointer)(void);
typedef NvtxFunctionPointer** NvtxFunctionTable;
typedef const void* (*NvtxGetExportTableFunc)(uint32_t exportTableId);
typedef int (*NvtxInitializeInjectionFunc)(NvtxGetExportTableFunc getExportTable);

enum { MSMS_NVTX_ETID_CALLBACKS = 1, MSMS_NVTX_ETID_VERSIONINFO = 3 };

typedef struct {
    size_t struct_size;
    int (*GetModuleFunctionTable)(int module, NvtxFunctionTable* out_table, unsigned int* out_size);
} NvtxExportTableCallbacks;

typedef struct {
    size_t struct_size;
    uint32_t version;
    uint32_t reserved0;
    void (*SetInjectionNvtxVersion)(uint32_t version);
} NvtxExportTableVersionInfo;

/* NvtxCallbackModule */
enum { MSMS_NVTX_CB_MODULE_CORE = 1, MSMS_NVTX_CB_MODULE_CORE2 = 5 };

/* NvtxCallbackIdCore */
enum {
    MSMS_NVTX_CBID_CORE_MarkEx = 1,
    MSMS_NVTX_CBID_CORE_MarkA = 2,
    MSMS_NVTX_CBID_CORE_MarkW = 3,
    MSMS_NVTX_CBID_CORE_RangeStartEx = 4,
    MSMS_NVTX_CBID_CORE_RangeStartA = 5,
    MSMS_NVTX_CBID_CORE_RangeStartW = 6,
    MSMS_NVTX_CBID_CORE_RangeEnd = 7,
    MSMS_NVTX_CBID_CORE_RangePushEx = 8,
    MSMS_NVTX_CBID_CORE_RangePushA = 9,
    MSMS_NVTX_CBID_CORE_RangePushW = 10,
    MSMS_NVTX_CBID_CORE_RangePop = 11,
    MSMS_NVTX_CBID_CORE_SIZE = 16
};

/* NvtxCallbackIdCore2 */
enum {
    MSMS_NVTX_CBID_CORE2_DomainMarkEx = 1,
    MSMS_NVTX_CBID_CORE2_DomainRangeStartEx = 2,
    MSMS_NVTX_CBID_CORE2_DomainRangeEnd = 3,
    MSMS_NVTX_CBID_CORE2_DomainRangePushEx = 4,
    MSMS_NVTX_CBID_CORE2_DomainRangePop = 5,
    MSMS_NVTX_CBID_CORE2_DomainRegisterStringA = 10,
    MSMS_NVTX_CBID_CORE2_DomainRegisterStringW = 11,
    MSMS_NVTX_CBID_CORE2_SIZE = 16
};

/* nvtxMessageType_t */
enum {
    MSMS_NVTX_MESSAGE_UNKNOWN = 0,
    MSMS_NVTX_MESSAGE_TYPE_ASCII = 1,
    MSMS_NVTX_MESSAGE_TYPE_UNICODE = 2,
    MSMS_NVTX_MESSAGE_TYPE_REGISTERED = 3
};

typedef uint64_t nvtxRangeId_t;
typedef struct nvtxDomainRegistration_st* nvtxDomainHandle_t;
typedef struct nvtxStringRegistration_st* nvtxStringHandle_t;

typedef union {
    const char* ascii;
    const wchar_t* unicode;
    nvtxStringHandle_t registered;
} nvtxMessageValue_t;

/* nvtxEventAttributes_v2 */
typedef struct {
    uint16_t version;
    uint16_t size;
    uint32_t category;
    int32_t colorType;
    uint32_t color;
    int32_t payloadType;
    int32_t reserved0;
    union {
        uint64_t ullValue;
        int64_t llValue;
        double dValue;
        uint32_t uiValue;
        int32_t iValue;
        float fValue;
    } payload;
    int32_t messageType;
    nvtxMessageValue_t message;
} nvtxEventAttributes_t;

#ifdef __cplusplus
}
#endif
#endif
