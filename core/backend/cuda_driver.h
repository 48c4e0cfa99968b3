// cuda_driver.h: the CUDA driver, loaded at run time (ARCHITECTURE.md, decision 1). libcuda.so.1 is
// dlopen'ed and every entry point the CUDA backend uses is resolved through cuGetProcAddress, so the
// library loads on machines without a GPU and says why at first use. The backend (cuda_backend.cpp)
// calls the driver only through a driver_api.
#pragma once

#include "backend.h"
#include "cuda_abi.h"

namespace tracepool::backend {

// Every entry point used, as X(member, base name, type of what cuGetProcAddress returns for it at CUDA 12.0).
#define TRACEPOOL_CUDA_ENTRY_POINTS(X)                                                    \
  X(get_error_name, cuGetErrorName, cuGetErrorName_t)                             \
  X(get_error_string, cuGetErrorString, cuGetErrorString_t)                       \
  X(init, cuInit, cuInit_t)                                                       \
  X(device_get_count, cuDeviceGetCount, cuDeviceGetCount_t)                       \
  X(device_get, cuDeviceGet, cuDeviceGet_t)                                       \
  X(device_get_pci_bus_id, cuDeviceGetPCIBusId, cuDeviceGetPCIBusId_t)            \
  X(primary_ctx_retain, cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain_t)     \
  X(primary_ctx_get_state, cuDevicePrimaryCtxGetState, cuDevicePrimaryCtxGetState_t) \
  X(ctx_get_current, cuCtxGetCurrent, cuCtxGetCurrent_t)                          \
  X(ctx_set_current, cuCtxSetCurrent, cuCtxSetCurrent_t)                          \
  X(mem_get_info, cuMemGetInfo, cuMemGetInfo_v2_t)                                   \
  X(mem_alloc, cuMemAlloc, cuMemAlloc_v2_t)                                          \
  X(mem_free, cuMemFree, cuMemFree_v2_t)                                             \
  X(event_create, cuEventCreate, cuEventCreate_t)                                 \
  X(event_destroy, cuEventDestroy, cuEventDestroy_v2_t)                              \
  X(event_record, cuEventRecord, cuEventRecord_t)                                 \
  X(event_query, cuEventQuery, cuEventQuery_t)                                    \
  X(event_synchronize, cuEventSynchronize, cuEventSynchronize_t)                  \
  X(stream_create, cuStreamCreate, cuStreamCreate_t)                              \
  X(stream_destroy, cuStreamDestroy, cuStreamDestroy_v2_t)                           \
  X(stream_synchronize, cuStreamSynchronize, cuStreamSynchronize_t)               \
  X(ctx_synchronize, cuCtxSynchronize, cuCtxSynchronize_t)                        \
  X(launch_host_func, cuLaunchHostFunc, cuLaunchHostFunc_t)                      \
  X(exchange_capture_mode, cuThreadExchangeStreamCaptureMode, cuThreadExchangeStreamCaptureMode_t) \
  X(stream_get_capture_info, cuStreamGetCaptureInfo, cuStreamGetCaptureInfo_v2_t)   \
  X(graph_node_get_dependencies, cuGraphNodeGetDependencies, cuGraphNodeGetDependencies_t) \
  X(device_get_attribute, cuDeviceGetAttribute, cuDeviceGetAttribute_t)            \
  X(device_can_access_peer, cuDeviceCanAccessPeer, cuDeviceCanAccessPeer_t)       \
  X(mem_get_granularity, cuMemGetAllocationGranularity, cuMemGetAllocationGranularity_t) \
  X(mem_address_reserve, cuMemAddressReserve, cuMemAddressReserve_t)             \
  X(mem_address_free, cuMemAddressFree, cuMemAddressFree_t)                      \
  X(mem_create, cuMemCreate, cuMemCreate_t)                                      \
  X(mem_release, cuMemRelease, cuMemRelease_t)                                   \
  X(mem_map, cuMemMap, cuMemMap_t)                                               \
  X(mem_unmap, cuMemUnmap, cuMemUnmap_t)                                         \
  X(mem_set_access, cuMemSetAccess, cuMemSetAccess_t)

struct driver_api {
#define TRACEPOOL_DECLARE_ENTRY_POINT(member, symbol, type) type* member = nullptr;
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
