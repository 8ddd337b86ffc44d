/*
 * The mstx tool-injection protocol (what a profiler implements).
 *
 * On its first call the mstx library loads the tool — dlopen() of the path in
 * MSTX_INJECTION_PATH (RTLD_LAZY | RTLD_LOCAL), or, without it, the symbol
 * already present in the process — and calls the tool's exported
 *
 *     int InitInjectionMstx(mstxGetModuleFuncTableFunc getFuncTable);
 *
 * The tool asks getFuncTable(module, &table, &size) for each module's table;
 * for a function id i of that module (1 <= i < size), table[i] points at the
 * library's slot for function i and the tool stores its own function there:
 *     *table[MSTX_API_CORE_MARK_A] = (mstxFuncPointer)myMark;
 * `size` is the module's *_SIZE value (entry 0 and entry `size` are NULL).
 * InitInjectionMstx returns MSTX_SUCCESS when the tool is in.
 */
#ifndef MSMEMSCOPE_MSTX_INJECTION_H
#define MSMEMSCOPE_MSTX_INJECTION_H

#include "ms_tools_ext.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MSTX_INJECTION_PATH_ENV "MSTX_INJECTION_PATH"
#define MSTX_INJECTION_INIT_SYMBOL "InitInjectionMstx"

typedef enum mstxFuncModule {
    MSTX_API_MODULE_INVALID = 0,
    MSTX_API_MODULE_CORE = 1,
    MSTX_API_MODULE_CORE_DOMAIN = 2,
    MSTX_API_MODULE_CORE_MEM = 3,
    MSTX_API_MODULE_SIZE,
    MSTX_API_MODULE_FORCE_INT = 0x7fffffff
} mstxFuncModule;

typedef enum mstxImplCoreFuncId {
    MSTX_API_CORE_INVALID = 0,
    MSTX_API_CORE_MARK_A = 1,
    MSTX_API_CORE_RANGE_START_A = 2,
    MSTX_API_CORE_RANGE_END = 3,
    MSTX_API_CORE_GET_TOOL_ID = 4,
    MSTX_API_CORE_SIZE,
    MSTX_API_CORE_FORCE_INT = 0x7fffffff
} mstxImplCoreFuncId;

typedef enum mstxImplCoreDomainFuncId {
    MSTX_API_CORE2_INVALID = 0,
    MSTX_API_CORE2_DOMAIN_CREATE_A = 1,
    MSTX_API_CORE2_DOMAIN_DESTROY = 2,
    MSTX_API_CORE2_DOMAIN_MARK_A = 3,
    MSTX_API_CORE2_DOMAIN_RANGE_START_A = 4,
    MSTX_API_CORE2_DOMAIN_RANGE_END = 5,
    MSTX_API_CORE2_SIZE,
    MSTX_API_CORE2_FORCE_INT = 0x7fffffff
} mstxImplCoreDomainFuncId;

typedef enum mstxImplCoreMemFuncId {
    MSTX_API_CORE_MEM_INVALID = 0,
    MSTX_API_CORE_MEMHEAP_REGISTER = 1,
    MSTX_API_CORE_MEMHEAP_UNREGISTER = 2,
    MSTX_API_CORE_MEM_REGIONS_REGISTER = 3,
    MSTX_API_CORE_MEM_REGIONS_UNREGISTER = 4,
    MSTX_API_CORE_MEM_SIZE,
    MSTX_API_CORE_MEM_FORCE_INT = 0x7fffffff
} mstxImplCoreMemFuncId;

typedef void (*mstxFuncPointer)(void);
typedef mstxFuncPointer** mstxFuncTable;
typedef int (*mstxGetModuleFuncTableFunc)(mstxFuncModule module, mstxFuncTable* outTable, unsigned int* outSize);
typedef int (*mstxInitInjectionFunc)(mstxGetModuleFuncTableFunc getFuncTable);

#ifdef __cplusplus
}
#endif
#endif
