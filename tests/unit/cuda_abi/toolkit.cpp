// toolkit.cpp: the toolkit's side of cuda_abi_test.cpp, from cuda.h and cudaTypedefs.h. Each of
// cuda_abi.h's entry points is paired with the toolkit's type for the version it is exported as.
#include <cuda.h>
#include <cudaTypedefs.h>

#include "abi_facts.h"

namespace tracepool::abi_check {

#define TRACEPOOL_TOOLKIT_ENTRY_POINTS(X)                                                                \
  X(cuGetErrorName, PFN_cuGetErrorName_v6000)                                                            \
  X(cuGetErrorString, PFN_cuGetErrorString_v6000)                                                        \
  X(cuGetProcAddress, PFN_cuGetProcAddress_v11030)                                                       \
  X(cuGetProcAddress_v2, PFN_cuGetProcAddress_v12000)                                                    \
  X(cuInit, PFN_cuInit_v2000)                                                                            \
  X(cuDeviceGetCount, PFN_cuDeviceGetCount_v2000)                                                        \
  X(cuDeviceGet, PFN_cuDeviceGet_v2000)                                                                  \
  X(cuDeviceGetPCIBusId, PFN_cuDeviceGetPCIBusId_v4010)                                                  \
  X(cuDeviceGetAttribute, PFN_cuDeviceGetAttribute_v2000)                                                \
  X(cuDeviceCanAccessPeer, PFN_cuDeviceCanAccessPeer_v4000)                                              \
  X(cuDevicePrimaryCtxRetain, PFN_cuDevicePrimaryCtxRetain_v7000)                                        \
  X(cuDevicePrimaryCtxRelease_v2, PFN_cuDevicePrimaryCtxRelease_v11000)                                  \
  X(cuDevicePrimaryCtxReset_v2, PFN_cuDevicePrimaryCtxReset_v11000)                                      \
  X(cuDevicePrimaryCtxGetState, PFN_cuDevicePrimaryCtxGetState_v7000)                                    \
  X(cuCtxCreate_v2, PFN_cuCtxCreate_v3020)                                                               \
  X(cuCtxCreate_v4, PFN_cuCtxCreate_v12050)                                                              \
  X(cuCtxDestroy_v2, PFN_cuCtxDestroy_v4000)                                                             \
  X(cuCtxGetCurrent, PFN_cuCtxGetCurrent_v4000)                                                          \
  X(cuCtxSetCurrent, PFN_cuCtxSetCurrent_v4000)                                                          \
  X(cuCtxPushCurrent_v2, PFN_cuCtxPushCurrent_v4000)                                                     \
  X(cuCtxPopCurrent_v2, PFN_cuCtxPopCurrent_v4000)                                                       \
  X(cuCtxGetDevice, PFN_cuCtxGetDevice_v2000)                                                            \
  X(cuCtxSynchronize, PFN_cuCtxSynchronize_v2000)                                                        \
  X(cuCtxEnablePeerAccess, PFN_cuCtxEnablePeerAccess_v4000)                                              \
  X(cuCtxDisablePeerAccess, PFN_cuCtxDisablePeerAccess_v4000)                                            \
  X(cuMemGetInfo_v2, PFN_cuMemGetInfo_v3020)                                                             \
  X(cuMemAlloc_v2, PFN_cuMemAlloc_v3020)                                                                 \
  X(cuMemAllocPitch_v2, PFN_cuMemAllocPitch_v3020)                                                       \
  X(cuMemAllocManaged, PFN_cuMemAllocManaged_v6000)                                                      \
  X(cuMemFree_v2, PFN_cuMemFree_v3020)                                                                   \
  X(cuMemAllocAsync, PFN_cuMemAllocAsync_v11020)                                                         \
  X(cuMemAllocAsync_ptsz, PFN_cuMemAllocAsync_v11020_ptsz)                                               \
  X(cuMemAllocFromPoolAsync, PFN_cuMemAllocFromPoolAsync_v11020)                                         \
  X(cuMemAllocFromPoolAsync_ptsz, PFN_cuMemAllocFromPoolAsync_v11020_ptsz)                               \
  X(cuMemFreeAsync, PFN_cuMemFreeAsync_v11020)                                                           \
  X(cuMemFreeAsync_ptsz, PFN_cuMemFreeAsync_v11020_ptsz)                                                 \
  X(cuMemHostAlloc, PFN_cuMemHostAlloc_v2020)                                                            \
  X(cuMemAllocHost_v2, PFN_cuMemAllocHost_v3020)                                                         \
  X(cuMemFreeHost, PFN_cuMemFreeHost_v2000)                                                              \
  X(cuMemGetAllocationGranularity, PFN_cuMemGetAllocationGranularity_v10020)                             \
  X(cuMemAddressReserve, PFN_cuMemAddressReserve_v10020)                                                 \
  X(cuMemAddressFree, PFN_cuMemAddressFree_v10020)                                                       \
  X(cuMemCreate, PFN_cuMemCreate_v10020)                                                                 \
  X(cuMemRelease, PFN_cuMemRelease_v10020)                                                               \
  X(cuMemMap, PFN_cuMemMap_v10020)                                                                       \
  X(cuMemUnmap, PFN_cuMemUnmap_v10020)                                                                   \
  X(cuMemSetAccess, PFN_cuMemSetAccess_v10020)                                                           \
  X(cuEventCreate, PFN_cuEventCreate_v2000)                                                              \
  X(cuEventDestroy_v2, PFN_cuEventDestroy_v4000)                                                         \
  X(cuEventRecord, PFN_cuEventRecord_v2000)                                                              \
  X(cuEventQuery, PFN_cuEventQuery_v2000)                                                                \
  X(cuEventSynchronize, PFN_cuEventSynchronize_v2000)                                                    \
  X(cuStreamCreate, PFN_cuStreamCreate_v2000)                                                            \
  X(cuStreamCreateWithPriority, PFN_cuStreamCreateWithPriority_v5050)                                    \
  X(cuStreamDestroy_v2, PFN_cuStreamDestroy_v4000)                                                       \
  X(cuStreamSynchronize, PFN_cuStreamSynchronize_v2000)                                                  \
  X(cuStreamGetCaptureInfo_v2, PFN_cuStreamGetCaptureInfo_v11030)                                        \
  X(cuThreadExchangeStreamCaptureMode, PFN_cuThreadExchangeStreamCaptureMode_v10010)                     \
  X(cuGraphNodeGetDependencies, PFN_cuGraphNodeGetDependencies_v10000)                                   \
  X(cuLaunchHostFunc, PFN_cuLaunchHostFunc_v10000)                                                       \
  X(cuModuleLoad, PFN_cuModuleLoad_v2000)                                                                \
  X(cuModuleLoadData, PFN_cuModuleLoadData_v2000)                                                        \
  X(cuModuleLoadDataEx, PFN_cuModuleLoadDataEx_v2010)                                                    \
  X(cuModuleLoadFatBinary, PFN_cuModuleLoadFatBinary_v2000)                                              \
  X(cuModuleUnload, PFN_cuModuleUnload_v2000)                                                            \
  X(cuLibraryLoadData, PFN_cuLibraryLoadData_v12000)                                                     \
  X(cuLibraryLoadFromFile, PFN_cuLibraryLoadFromFile_v12000)                                             \
  X(cuLibraryUnload, PFN_cuLibraryUnload_v12000)                                                         \
  X(cuLaunchKernel, PFN_cuLaunchKernel_v4000)                                                            \
  X(cuLaunchKernel_ptsz, PFN_cuLaunchKernel_v7000_ptsz)                                                  \
  X(cuLaunchKernelEx, PFN_cuLaunchKernelEx_v11060)                                                       \
  X(cuLaunchKernelEx_ptsz, PFN_cuLaunchKernelEx_v11060_ptsz)                                             \
  X(cuFuncGetAttribute, PFN_cuFuncGetAttribute_v2020)                                                    \
  X(cuFuncSetAttribute, PFN_cuFuncSetAttribute_v9000)                                                    \
  X(cuFuncSetCacheConfig, PFN_cuFuncSetCacheConfig_v3000)                                                \
  X(cuFuncLoad, PFN_cuFuncLoad_v12040)                                                                   \
  X(cuKernelGetFunction, PFN_cuKernelGetFunction_v12000)                                                 \
  X(cuKernelGetAttribute, PFN_cuKernelGetAttribute_v12000)                                               \
  X(cuKernelSetAttribute, PFN_cuKernelSetAttribute_v12000)                                               \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor, PFN_cuOccupancyMaxActiveBlocksPerMultiprocessor_v6050)  \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags,                                                \
    PFN_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags_v7000)

facts toolkit() {
  facts f;
  TRACEPOOL_ABI_DESCRIBE_COMMON(f);
#define TRACEPOOL_TOOLKIT_ENTRY_POINT(name, pfn) f.entry_points[#name] = entry_point_of<std::remove_pointer_t<pfn>>();
  TRACEPOOL_TOOLKIT_ENTRY_POINTS(TRACEPOOL_TOOLKIT_ENTRY_POINT)
#undef TRACEPOOL_TOOLKIT_ENTRY_POINT
  return f;
}

}  // namespace tracepool::abi_check
