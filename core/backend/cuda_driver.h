// cuda_driver.h: the CUDA driver, loaded at run time (ARCHITECTURE.md, decision 1). libcuda.so.1 is
// dlopen'ed and every entry point the CUDA backend uses is resolved through cuGetProcAddress, so the
// library loads on machines without a GPU and says why at first use. The backend (cuda_backend.cpp)
// calls the driver only through a driver_api.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include "backend.h"

namespace tracepool::backend {

// Every entry point used, as X(member, symbol, type of its CUDA 12.0 version).
#define TRACEPOOL_CUDA_ENTRY_POINTS(X)                                                    \
  X(get_error_name, cuGetErrorName, PFN_cuGetErrorName_v6000)                             \
  X(get_error_string, cuGetErrorString, PFN_cuGetErrorString_v6000)                       \
  X(init, cuInit, PFN_cuInit_v2000)                                                       \
  X(device_get_count, cuDeviceGetCount, PFN_cuDeviceGetCount_v2000)                       \
  X(device_get, cuDeviceGet, PFN_cuDeviceGet_v2000)                                       \
  X(device_get_pci_bus_id, cuDeviceGetPCIBusId, PFN_cuDeviceGetPCIBusId_v4010)            \
  X(primary_ctx_retain, cuDevicePrimaryCtxRetain, PFN_cuDevicePrimaryCtxRetain_v7000)     \
  X(primary_ctx_get_state, cuDevicePrimaryCtxGetState, PFN_cuDevicePrimaryCtxGetState_v7000) \
  X(ctx_get_current, cuCtxGetCurrent, PFN_cuCtxGetCurrent_v4000)                          \
  X(ctx_set_current, cuCtxSetCurrent, PFN_cuCtxSetCurrent_v4000)                          \
  X(mem_get_info, cuMemGetInfo, PFN_cuMemGetInfo_v3020)                                   \
  X(mem_alloc, cuMemAlloc, PFN_cuMemAlloc_v3020)                                          \
  X(mem_free, cuMemFree, PFN_cuMemFree_v3020)                                             \
  X(event_create, cuEventCreate, PFN_cuEventCreate_v2000)                                 \
  X(event_destroy, cuEventDestroy, PFN_cuEventDestroy_v4000)                              \
  X(event_record, cuEventRecord, PFN_cuEventRecord_v2000)                                 \
  X(event_query, cuEventQuery, PFN_cuEventQuery_v2000)                                    \
  X(event_synchronize, cuEventSynchronize, PFN_cuEventSynchronize_v2000)                  \
  X(stream_create, cuStreamCreate, PFN_cuStreamCreate_v2000)                              \
  X(stream_destroy, cuStreamDestroy, PFN_cuStreamDestroy_v4000)                           \
  X(stream_synchronize, cuStreamSynchronize, PFN_cuStreamSynchronize_v2000)               \
  X(ctx_synchronize, cuCtxSynchronize, PFN_cuCtxSynchronize_v2000)                        \
  X(launch_host_func, cuLaunchHostFunc, PFN_cuLaunchHostFunc_v10000)                      \
  X(exchange_capture_mode, cuThreadExchangeStreamCaptureMode, PFN_cuThreadExchangeStreamCaptureMode_v10010) \
  X(stream_get_capture_info, cuStreamGetCaptureInfo, PFN_cuStreamGetCaptureInfo_v11030)   \
  X(graph_node_get_dependencies, cuGraphNodeGetDependencies, PFN_cuGraphNodeGetDependencies_v10000) \
  X(device_get_attribute, cuDeviceGetAttribute, PFN_cuDeviceGetAttribute_v2000)            \
  X(device_can_access_peer, cuDeviceCanAccessPeer, PFN_cuDeviceCanAccessPeer_v4000)       \
  X(mem_get_granularity, cuMemGetAllocationGranularity, PFN_cuMemGetAllocationGranularity_v10020) \
  X(mem_address_reserve, cuMemAddressReserve, PFN_cuMemAddressReserve_v10020)             \
  X(mem_address_free, cuMemAddressFree, PFN_cuMemAddressFree_v10020)                      \
  X(mem_create, cuMemCreate, PFN_cuMemCreate_v10020)                                      \
  X(mem_release, cuMemRelease, PFN_cuMemRelease_v10020)                                   \
  X(mem_map, cuMemMap, PFN_cuMemMap_v10020)                                               \
  X(mem_unmap, cuMemUnmap, PFN_cuMemUnmap_v10020)                                         \
  X(mem_set_access, cuMemSetAccess, PFN_cuMemSetAccess_v10020)

struct driver_api {
#define TRACEPOOL_DECLARE_ENTRY_POINT(member, symbol, type) type member = nullptr;
  TRACEPOOL_CUDA_ENTRY_POINTS(TRACEPOOL_DECLARE_ENTRY_POINT)
#undef TRACEPOOL_DECLARE_ENTRY_POINT
};

// Loads libcuda.so.1 and resolves every entry point into *api; unavailable, with the reason (no
// driver, the toolkit's stub library, a driver older than CUDA 12.0), where one is missing.
status load_driver(driver_api* api) noexcept;

// cuInit, then the number of devices into *count; unavailable, naming CUDA_VISIBLE_DEVICES, where
// there is none.
status init_driver(const driver_api& api, int* count) noexcept;

// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)", or the bare code where the driver has no name for
// it. The text lives until this thread's next call.
const char* describe(const driver_api& api, CUresult r) noexcept;

}  // namespace tracepool::backend
