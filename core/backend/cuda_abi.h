// cuda_abi.h: the part of the CUDA driver API that tracepool calls or wraps, declared here so that
// nothing in tracepool needs the CUDA Toolkit's headers to build (a CPU laptop builds and runs the host
// backend; the CUDA backend and the interposer load the driver at run time anyway).
//
// Written from NVIDIA's CUDA Driver API reference, with the names it uses, so the code reads like its
// documentation. Only the ABI matters: handles are pointers to structures never defined, results and
// enumerations are int-sized, and each entry point is declared with the ABI it is exported under
// (cuMemAlloc_v2, the CUDA 12.0 versions that the backend asks cuGetProcAddress for). Enumerations
// list only the values tracepool uses; the driver may return others. Structure and enumeration names
// differ from cuda.h's tags (CUmemLocation here, struct CUmemLocation_st there), so a program that
// includes both, in different files, has no two definitions of one type.
//
// tests/unit/cuda_abi_test.cpp checks every declaration here against the toolkit's cuda.h and
// cudaTypedefs.h where those are installed: constants, structure layouts, and each entry point's
// parameters (count, sizes, pointer or value, what a pointer points to).
#pragma once

#include <cstddef>
#include <cstdint>

using cuuint64_t = uint64_t;
using CUdeviceptr = unsigned long long;
using CUdevice = int;
using CUmemGenericAllocationHandle = unsigned long long;

using CUcontext = struct CUctx_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUlibrary = struct CUlib_st*;
using CUkernel = struct CUkern_st*;
using CUmemoryPool = struct CUmemPoolHandle_st*;
using CUgraph = struct CUgraph_st*;
using CUgraphNode = struct CUgraphNode_st*;
struct CUctxCreateParams;  // only passed on
struct CUlaunchConfig;     // only passed on

enum CUresult : int {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_DEINITIALIZED = 4,
  CUDA_ERROR_STUB_LIBRARY = 34,
  CUDA_ERROR_LOSSY_QUERY = 402,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_CONTEXT_IS_DESTROYED = 709,
  CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
};

enum CUdevice_attribute : int { CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102 };
enum CUevent_flags : int { CU_EVENT_DISABLE_TIMING = 0x2 };
enum CUstream_flags : int { CU_STREAM_NON_BLOCKING = 0x1 };
enum CUdriverProcAddress_flags : int { CU_GET_PROC_ADDRESS_LEGACY_STREAM = 0x1 };
enum CUdriverProcAddressQueryResult : int {
  CU_GET_PROC_ADDRESS_SUCCESS = 0,
  CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2,
};
enum CUstreamCaptureStatus : int { CU_STREAM_CAPTURE_STATUS_NONE = 0, CU_STREAM_CAPTURE_STATUS_ACTIVE = 1 };
enum CUstreamCaptureMode : int { CU_STREAM_CAPTURE_MODE_RELAXED = 2 };

// Virtual memory management (cuMemCreate, cuMemMap, cuMemSetAccess).
enum CUmemAllocationType : int { CU_MEM_ALLOCATION_TYPE_PINNED = 0x1 };
enum CUmemAllocationHandleType : int {};
enum CUmemAllocationGranularity_flags : int { CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 0x1 };
enum CUmemAccess_flags : int { CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 0x3 };
enum CUmemLocationType : int {
  CU_MEM_LOCATION_TYPE_INVALID = 0x0,
  CU_MEM_LOCATION_TYPE_DEVICE = 0x1,
  CU_MEM_LOCATION_TYPE_HOST = 0x2,
  CU_MEM_LOCATION_TYPE_HOST_NUMA = 0x3,
  CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT = 0x4,
};
struct CUmemLocation {
  CUmemLocationType type;
  int id;  // the device's ordinal, for CU_MEM_LOCATION_TYPE_DEVICE
};
struct CUmemAllocationProp {
  CUmemAllocationType type;
  CUmemAllocationHandleType requestedHandleTypes;
  CUmemLocation location;
  void* win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;
    unsigned char reserved[4];
  } allocFlags;
};
struct CUmemAccessDesc {
  CUmemLocation location;
  CUmemAccess_flags flags;
};

// Passed on, never read: their values are the caller's.
enum CUjit_option : int {};
enum CUlibraryOption : int {};
enum CUfunction_attribute : int {};
enum CUfunc_cache : int {};

using CUhostFn = void (*)(void* data);

// Every entry point tracepool calls or wraps, as X(name it is exported under, parameters); each returns
// CUresult. Its type is <name>_t (cuMemAlloc_v2_t). Where cuGetProcAddress resolves a base name
// (cuMemAlloc) at CUDA 12.0, these are the functions it returns.
#define TRACEPOOL_CUDA_FUNCTIONS(X)                                                                       \
  X(cuGetErrorName, (CUresult error, const char** name))                                                    \
  X(cuGetErrorString, (CUresult error, const char** text))                                                  \
  X(cuGetProcAddress, (const char* symbol, void** pfn, int version, cuuint64_t flags))                      \
  X(cuGetProcAddress_v2, (const char* symbol, void** pfn, int version, cuuint64_t flags,                     \
                          CUdriverProcAddressQueryResult* found))                                           \
  X(cuInit, (unsigned int flags))                                                                           \
  X(cuDeviceGetCount, (int* count))                                                                         \
  X(cuDeviceGet, (CUdevice * device, int ordinal))                                                          \
  X(cuDeviceGetPCIBusId, (char* bus_id, int length, CUdevice device))                                       \
  X(cuDeviceGetAttribute, (int* value, CUdevice_attribute attribute, CUdevice device))                      \
  X(cuDeviceCanAccessPeer, (int* can_access, CUdevice device, CUdevice peer))                               \
  X(cuDevicePrimaryCtxRetain, (CUcontext * context, CUdevice device))                                       \
  X(cuDevicePrimaryCtxRelease_v2, (CUdevice device))                                                        \
  X(cuDevicePrimaryCtxReset_v2, (CUdevice device))                                                          \
  X(cuDevicePrimaryCtxGetState, (CUdevice device, unsigned int* flags, int* active))                        \
  X(cuCtxCreate_v2, (CUcontext * context, unsigned int flags, CUdevice device))                             \
  X(cuCtxCreate_v4, (CUcontext * context, CUctxCreateParams * params, unsigned int flags, CUdevice device)) \
  X(cuCtxDestroy_v2, (CUcontext context))                                                                   \
  X(cuCtxGetCurrent, (CUcontext * context))                                                                 \
  X(cuCtxSetCurrent, (CUcontext context))                                                                   \
  X(cuCtxPushCurrent_v2, (CUcontext context))                                                               \
  X(cuCtxPopCurrent_v2, (CUcontext * context))                                                              \
  X(cuCtxGetDevice, (CUdevice * device))                                                                    \
  X(cuCtxSynchronize, ())                                                                                   \
  X(cuCtxEnablePeerAccess, (CUcontext peer, unsigned int flags))                                            \
  X(cuCtxDisablePeerAccess, (CUcontext peer))                                                               \
  X(cuMemGetInfo_v2, (size_t * free, size_t* total))                                                        \
  X(cuMemAlloc_v2, (CUdeviceptr * ptr, size_t size))                                                        \
  X(cuMemAllocPitch_v2, (CUdeviceptr * ptr, size_t* pitch, size_t width, size_t height,                     \
                         unsigned int element_size))                                                        \
  X(cuMemAllocManaged, (CUdeviceptr * ptr, size_t size, unsigned int flags))                                \
  X(cuMemFree_v2, (CUdeviceptr ptr))                                                                        \
  X(cuMemAllocAsync, (CUdeviceptr * ptr, size_t size, CUstream stream))                                     \
  X(cuMemAllocAsync_ptsz, (CUdeviceptr * ptr, size_t size, CUstream stream))                                \
  X(cuMemAllocFromPoolAsync, (CUdeviceptr * ptr, size_t size, CUmemoryPool pool, CUstream stream))          \
  X(cuMemAllocFromPoolAsync_ptsz, (CUdeviceptr * ptr, size_t size, CUmemoryPool pool, CUstream stream))     \
  X(cuMemFreeAsync, (CUdeviceptr ptr, CUstream stream))                                                     \
  X(cuMemFreeAsync_ptsz, (CUdeviceptr ptr, CUstream stream))                                                \
  X(cuMemHostAlloc, (void** ptr, size_t size, unsigned int flags))                                          \
  X(cuMemAllocHost_v2, (void** ptr, size_t size))                                                           \
  X(cuMemFreeHost, (void* ptr))                                                                             \
  X(cuMemGetAllocationGranularity, (size_t * granularity, const CUmemAllocationProp* prop,                  \
                                    CUmemAllocationGranularity_flags option))                               \
  X(cuMemAddressReserve, (CUdeviceptr * ptr, size_t size, size_t alignment, CUdeviceptr address,            \
                          unsigned long long flags))                                                        \
  X(cuMemAddressFree, (CUdeviceptr ptr, size_t size))                                                       \
  X(cuMemCreate, (CUmemGenericAllocationHandle * handle, size_t size, const CUmemAllocationProp* prop,      \
                  unsigned long long flags))                                                                \
  X(cuMemRelease, (CUmemGenericAllocationHandle handle))                                                    \
  X(cuMemMap, (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,            \
               unsigned long long flags))                                                                   \
  X(cuMemUnmap, (CUdeviceptr ptr, size_t size))                                                             \
  X(cuMemSetAccess, (CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count))              \
  X(cuEventCreate, (CUevent * event, unsigned int flags))                                                   \
  X(cuEventDestroy_v2, (CUevent event))                                                                     \
  X(cuEventRecord, (CUevent event, CUstream stream))                                                        \
  X(cuEventQuery, (CUevent event))                                                                          \
  X(cuEventSynchronize, (CUevent event))                                                                    \
  X(cuStreamCreate, (CUstream * stream, unsigned int flags))                                                \
  X(cuStreamCreateWithPriority, (CUstream * stream, unsigned int flags, int priority))                      \
  X(cuStreamDestroy_v2, (CUstream stream))                                                                  \
  X(cuStreamSynchronize, (CUstream stream))                                                                 \
  X(cuStreamGetCaptureInfo_v2, (CUstream stream, CUstreamCaptureStatus * status, cuuint64_t * id,           \
                                CUgraph * graph, const CUgraphNode** dependencies, size_t* count))          \
  X(cuThreadExchangeStreamCaptureMode, (CUstreamCaptureMode * mode))                                        \
  X(cuGraphNodeGetDependencies, (CUgraphNode node, CUgraphNode * dependencies, size_t * count))             \
  X(cuLaunchHostFunc, (CUstream stream, CUhostFn fn, void* data))                                           \
  X(cuModuleLoad, (CUmodule * module, const char* path))                                                    \
  X(cuModuleLoadData, (CUmodule * module, const void* image))                                               \
  X(cuModuleLoadDataEx, (CUmodule * module, const void* image, unsigned int count, CUjit_option* options,   \
                         void** values))                                                                    \
  X(cuModuleLoadFatBinary, (CUmodule * module, const void* image))                                          \
  X(cuModuleUnload, (CUmodule module))                                                                      \
  X(cuLibraryLoadData, (CUlibrary * library, const void* code, CUjit_option* jit_options,                   \
                        void** jit_values, unsigned int jit_count, CUlibraryOption* options,                \
                        void** values, unsigned int count))                                                 \
  X(cuLibraryLoadFromFile, (CUlibrary * library, const char* path, CUjit_option* jit_options,               \
                            void** jit_values, unsigned int jit_count, CUlibraryOption* options,            \
                            void** values, unsigned int count))                                             \
  X(cuLibraryUnload, (CUlibrary library))                                                                   \
  X(cuLaunchKernel, (CUfunction f, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,           \
                     unsigned int block_x, unsigned int block_y, unsigned int block_z, unsigned int shared,  \
                     CUstream stream, void** params, void** extra))                                         \
  X(cuLaunchKernel_ptsz, (CUfunction f, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,      \
                          unsigned int block_x, unsigned int block_y, unsigned int block_z,                 \
                          unsigned int shared, CUstream stream, void** params, void** extra))               \
  X(cuLaunchKernelEx, (const CUlaunchConfig* config, CUfunction f, void** params, void** extra))            \
  X(cuLaunchKernelEx_ptsz, (const CUlaunchConfig* config, CUfunction f, void** params, void** extra))       \
  X(cuFuncGetAttribute, (int* value, CUfunction_attribute attribute, CUfunction f))                         \
  X(cuFuncSetAttribute, (CUfunction f, CUfunction_attribute attribute, int value))                          \
  X(cuFuncSetCacheConfig, (CUfunction f, CUfunc_cache config))                                              \
  X(cuFuncLoad, (CUfunction f))                                                                             \
  X(cuKernelGetFunction, (CUfunction * f, CUkernel kernel))                                                 \
  X(cuKernelGetAttribute, (int* value, CUfunction_attribute attribute, CUkernel kernel, CUdevice device))   \
  X(cuKernelSetAttribute, (CUfunction_attribute attribute, int value, CUkernel kernel, CUdevice device))    \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor, (int* blocks, CUfunction f, int block_size,                \
                                                  size_t shared))                                           \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, (int* blocks, CUfunction f, int block_size,       \
                                                           size_t shared, unsigned int flags))

#define TRACEPOOL_CUDA_FUNCTION_TYPE(name, parameters) using name##_t = CUresult parameters;
TRACEPOOL_CUDA_FUNCTIONS(TRACEPOOL_CUDA_FUNCTION_TYPE)
#undef TRACEPOOL_CUDA_FUNCTION_TYPE
