/*
 * The part of the CUDA driver API (cuda.h, toolkit 13.0) that msmemscope's
 * cuda collector and its test doubles use, declared here so that neither the
 * build nor the tests need the CUDA toolkit. Types and enum values are those
 * of the driver ABI; the function types name the exact export they describe
 * (e.g. cuMemAlloc_v2, the one cuda.h's `cuMemAlloc` macro selects).
 */
#ifndef MSMEMSCOPE_CUDA_DRIVER_API_H
#define MSMEMSCOPE_CUDA_DRIVER_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int CUresult; /* enum cudaError_enum */
typedef int CUdevice;
typedef unsigned long long CUdeviceptr; /* CUdeviceptr_v2 */
typedef unsigned long long CUmemGenericAllocationHandle;
typedef unsigned long long cuuint64_t;
typedef struct CUctx_st* CUcontext;
typedef struct CUstream_st* CUstream;
typedef struct CUfunc_st* CUfunction;
typedef struct CUmod_st* CUmodule;
typedef struct CUmemPoolHandle_st* CUmemoryPool;
typedef struct CUctxCreateParams_st CUctxCreateParams;
typedef struct CUlaunchAttribute_st CUlaunchAttribute;

/* CUresult values used here */
enum {
    MSMS_CUDA_SUCCESS = 0,
    MSMS_CUDA_ERROR_INVALID_VALUE = 1,
    MSMS_CUDA_ERROR_OUT_OF_MEMORY = 2,
    MSMS_CUDA_ERROR_NOT_INITIALIZED = 3,
    MSMS_CUDA_ERROR_DEINITIALIZED = 4,
    MSMS_CUDA_ERROR_INVALID_DEVICE = 101,
    MSMS_CUDA_ERROR_INVALID_CONTEXT = 201,
    MSMS_CUDA_ERROR_CONTEXT_IS_DESTROYED = 709,
    MSMS_CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
    MSMS_CUDA_ERROR_INVALID_HANDLE = 400,
    MSMS_CUDA_ERROR_NOT_FOUND = 500
};

/* CUdriverProcAddress_flags */
enum {
    MSMS_CU_GET_PROC_ADDRESS_DEFAULT = 0,
    MSMS_CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1 << 0,
    MSMS_CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 1 << 1
};

/* CUdriverProcAddressQueryResult */
typedef enum {
    MSMS_CU_GET_PROC_ADDRESS_SUCCESS = 0,
    MSMS_CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
    MSMS_CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2
} CUdriverProcAddressQueryResult;

/* CUmemLocationType */
enum {
    MSMS_CU_MEM_LOCATION_TYPE_INVALID = 0,
    MSMS_CU_MEM_LOCATION_TYPE_DEVICE = 1,
    MSMS_CU_MEM_LOCATION_TYPE_HOST = 2,
    MSMS_CU_MEM_LOCATION_TYPE_HOST_NUMA = 3,
    MSMS_CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT = 4
};

/* CUmemAllocationType */
enum { MSMS_CU_MEM_ALLOCATION_TYPE_PINNED = 1 };

typedef struct {
    int type; /* CUmemLocationType */
    int id;
} CUmemLocation;

typedef struct {
    int type;                 /* CUmemAllocationType */
    int requestedHandleTypes; /* CUmemAllocationHandleType */
    CUmemLocation location;
    void* win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp;

typedef struct {
    unsigned int gridDimX, gridDimY, gridDimZ;
    unsigned int blockDimX, blockDimY, blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute* attrs;
    unsigned int numAttrs;
} CUlaunchConfig;

/* ---- function types, named after the export they describe ---- */
typedef CUresult (*PFN_cuGetProcAddress_v11030)(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags);
typedef CUresult (*PFN_cuGetProcAddress_v12000)(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                                CUdriverProcAddressQueryResult* symbolStatus);
typedef CUresult (*PFN_cuInit)(unsigned int flags);
typedef CUresult (*PFN_cuDriverGetVersion)(int* version);
typedef CUresult (*PFN_cuDeviceGet)(CUdevice* device, int ordinal);
typedef CUresult (*PFN_cuDeviceGetCount)(int* count);
typedef CUresult (*PFN_cuCtxCreate_v4)(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags, CUdevice dev);
typedef CUresult (*PFN_cuCtxCreate_v2)(CUcontext* pctx, unsigned int flags, CUdevice dev);
typedef CUresult (*PFN_cuCtxSetCurrent)(CUcontext ctx);
typedef CUresult (*PFN_cuCtxGetCurrent)(CUcontext* pctx);
typedef CUresult (*PFN_cuCtxGetDevice)(CUdevice* device); /* the v1 export "cuCtxGetDevice" */
typedef CUresult (*PFN_cuCtxPushCurrent_v2)(CUcontext ctx);
typedef CUresult (*PFN_cuCtxPopCurrent_v2)(CUcontext* pctx);
typedef CUresult (*PFN_cuDevicePrimaryCtxRetain)(CUcontext* pctx, CUdevice dev);
typedef CUresult (*PFN_cuDevicePrimaryCtxRelease_v2)(CUdevice dev);
typedef CUresult (*PFN_cuDevicePrimaryCtxGetState)(CUdevice dev, unsigned int* flags, int* active);
typedef CUresult (*PFN_cuMemGetInfo_v2)(size_t* free, size_t* total);
typedef CUresult (*PFN_cuMemAlloc_v2)(CUdeviceptr* dptr, size_t bytesize);
typedef CUresult (*PFN_cuMemAllocPitch_v2)(CUdeviceptr* dptr, size_t* pPitch, size_t widthInBytes, size_t height,
                                           unsigned int elementSizeBytes);
typedef CUresult (*PFN_cuMemAllocManaged)(CUdeviceptr* dptr, size_t bytesize, unsigned int flags);
typedef CUresult (*PFN_cuMemFree_v2)(CUdeviceptr dptr);
typedef CUresult (*PFN_cuMemAllocAsync)(CUdeviceptr* dptr, size_t bytesize, CUstream hStream);
typedef CUresult (*PFN_cuMemAllocFromPoolAsync)(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                                CUstream hStream);
typedef CUresult (*PFN_cuMemFreeAsync)(CUdeviceptr dptr, CUstream hStream);
typedef CUresult (*PFN_cuMemCreate)(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                                    unsigned long long flags);
typedef CUresult (*PFN_cuMemRelease)(CUmemGenericAllocationHandle handle);
typedef CUresult (*PFN_cuMemMap)(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                                 unsigned long long flags);
typedef CUresult (*PFN_cuMemUnmap)(CUdeviceptr ptr, size_t size);
typedef CUresult (*PFN_cuMemAddressReserve)(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                            unsigned long long flags);
typedef CUresult (*PFN_cuMemAddressFree)(CUdeviceptr ptr, size_t size);
typedef CUresult (*PFN_cuMemAllocHost_v2)(void** pp, size_t bytesize);
typedef CUresult (*PFN_cuMemHostAlloc)(void** pp, size_t bytesize, unsigned int flags);
typedef CUresult (*PFN_cuMemFreeHost)(void* p);
typedef CUresult (*PFN_cuMemHostRegister)(void* p, size_t bytesize, unsigned int flags); /* v1 and _v2 alike */
typedef CUresult (*PFN_cuMemHostUnregister)(void* p);
typedef CUresult (*PFN_cuModuleLoadData)(CUmodule* module, const void* image);
typedef CUresult (*PFN_cuModuleGetFunction)(CUfunction* hfunc, CUmodule hmod, const char* name);
typedef CUresult (*PFN_cuFuncGetName)(const char** name, CUfunction hfunc);
typedef CUresult (*PFN_cuLaunchKernel)(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                       unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                       unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                       void** kernelParams, void** extra);
typedef CUresult (*PFN_cuLaunchKernelEx)(const CUlaunchConfig* config, CUfunction f, void** kernelParams,
                                         void** extra);
typedef CUresult (*PFN_cuLaunchCooperativeKernel)(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                                  unsigned int gridDimZ, unsigned int blockDimX,
                                                  unsigned int blockDimY, unsigned int blockDimZ,
                                                  unsigned int sharedMemBytes, CUstream hStream,
                                                  void** kernelParams);

#ifdef __cplusplus
}
#endif
#endif
