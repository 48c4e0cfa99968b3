// allocations.cpp: the interposer's wrappers of what the driver hands out (Note [Interposer] in intercept.cpp):
// device memory, stream-ordered, pinned host and VMM allocations, each recorded as observed memory.
#include "intercept.h"

using namespace tracepool::intercept;

// ---- Allocations --------------------------------------------------------------------------------------
// Each: the driver's function, then what it made, recorded; a free: forgotten, then the driver's function.
// A function the driver lacks is never handed out, so `real` finds it for every call that reaches here,
// except through the exported names in a program linked against a driver without them: CUDA_ERROR_NOT_FOUND.

TRACEPOOL_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* ptr, size_t size) {
  TRACEPOOL_REAL(cuMemAlloc_v2);
  const CUresult r = driver(ptr, size);
  seen_device(r, ptr, size, TRACEPOOL_OBSERVED_DEVICE, "cuMemAlloc");
  return r;
}

TRACEPOOL_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* ptr, size_t* pitch, size_t width, size_t height,
                                             unsigned int element) {
  TRACEPOOL_REAL(cuMemAllocPitch_v2);
  const CUresult r = driver(ptr, pitch, width, height, element);
  if (r == CUDA_SUCCESS && pitch != nullptr) seen_device(r, ptr, *pitch * height, TRACEPOOL_OBSERVED_DEVICE, "cuMemAllocPitch");
  else if (r == CUDA_ERROR_OUT_OF_MEMORY) seen_device(r, ptr, width * height, TRACEPOOL_OBSERVED_DEVICE, "cuMemAllocPitch");
  return r;
}

TRACEPOOL_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* ptr, size_t size, unsigned int flags) {
  TRACEPOOL_REAL(cuMemAllocManaged);
  const CUresult r = driver(ptr, size, flags);
  seen_device(r, ptr, size, TRACEPOOL_OBSERVED_MANAGED, "cuMemAllocManaged");
  return r;
}

TRACEPOOL_EXPORT CUresult cuMemFree_v2(CUdeviceptr ptr) {
  TRACEPOOL_REAL(cuMemFree_v2);
  gone(as_pointer(ptr));
  return driver(ptr);
}

TRACEPOOL_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* ptr, size_t size, CUstream stream) {
  TRACEPOOL_REAL(cuMemAllocAsync);
  const CUresult r = driver(ptr, size, stream);
  seen_device(r, ptr, size, TRACEPOOL_OBSERVED_DEVICE, "cuMemAllocAsync");
  return r;
}

TRACEPOOL_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* ptr, size_t size, CUstream stream) {
  TRACEPOOL_REAL(cuMemAllocAsync_ptsz);
  const CUresult r = driver(ptr, size, stream);
  seen_device(r, ptr, size, TRACEPOOL_OBSERVED_DEVICE, "cuMemAllocAsync");
  return r;
}

TRACEPOOL_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* ptr, size_t size, CUmemoryPool pool, CUstream stream) {
  TRACEPOOL_REAL(cuMemAllocFromPoolAsync);
  const CUresult r = driver(ptr, size, pool, stream);
  seen_device(r, ptr, size, TRACEPOOL_OBSERVED_DEVICE, "cuMemAllocFromPoolAsync");
  return r;
}

TRACEPOOL_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* ptr, size_t size, CUmemoryPool pool, CUstream stream) {
  TRACEPOOL_REAL(cuMemAllocFromPoolAsync_ptsz);
  const CUresult r = driver(ptr, size, pool, stream);
  seen_device(r, ptr, size, TRACEPOOL_OBSERVED_DEVICE, "cuMemAllocFromPoolAsync");
  return r;
}

TRACEPOOL_EXPORT CUresult cuMemFreeAsync(CUdeviceptr ptr, CUstream stream) {
  TRACEPOOL_REAL(cuMemFreeAsync);
  gone(as_pointer(ptr));
  return driver(ptr, stream);
}

TRACEPOOL_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr ptr, CUstream stream) {
  TRACEPOOL_REAL(cuMemFreeAsync_ptsz);
  gone(as_pointer(ptr));
  return driver(ptr, stream);
}

TRACEPOOL_EXPORT CUresult cuMemHostAlloc(void** ptr, size_t size, unsigned int flags) {
  TRACEPOOL_REAL(cuMemHostAlloc);
  const CUresult r = driver(ptr, size, flags);
  if (r == CUDA_SUCCESS && ptr != nullptr && !recording) seen(*ptr, size, current_device(), TRACEPOOL_OBSERVED_HOST, "cuMemHostAlloc");
  return r;
}

TRACEPOOL_EXPORT CUresult cuMemAllocHost_v2(void** ptr, size_t size) {
  TRACEPOOL_REAL(cuMemAllocHost_v2);
  const CUresult r = driver(ptr, size);
  if (r == CUDA_SUCCESS && ptr != nullptr && !recording) seen(*ptr, size, current_device(), TRACEPOOL_OBSERVED_HOST, "cuMemAllocHost");
  return r;
}

TRACEPOOL_EXPORT CUresult cuMemFreeHost(void* ptr) {
  TRACEPOOL_REAL(cuMemFreeHost);
  gone(ptr);
  return driver(ptr);
}

// VMM: the physical memory is made by cuMemCreate and goes with the last of cuMemRelease and cuMemUnmap;
// it is recorded under its handle, which is what cuMemRelease names (reserving and mapping address space
// allocates nothing).
TRACEPOOL_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                                      unsigned long long flags) {
  TRACEPOOL_REAL(cuMemCreate);
  const CUresult r = driver(handle, size, prop, flags);
  if (r == CUDA_ERROR_OUT_OF_MEMORY && prop != nullptr && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE)
    refused(size, prop->location.id, "cuMemCreate");
  if (r == CUDA_SUCCESS && handle != nullptr && !recording) {
    const CUmemLocationType where = prop != nullptr ? prop->location.type : CU_MEM_LOCATION_TYPE_INVALID;
    const bool on_host = where == CU_MEM_LOCATION_TYPE_HOST || where == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
                         where == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
    seen(reinterpret_cast<const void*>(static_cast<uintptr_t>(*handle)), size,
         where == CU_MEM_LOCATION_TYPE_DEVICE ? prop->location.id : current_device(),
         on_host ? TRACEPOOL_OBSERVED_HOST : TRACEPOOL_OBSERVED_DEVICE, "cuMemCreate");
  }
  return r;
}

TRACEPOOL_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  TRACEPOOL_REAL(cuMemRelease);
  gone(reinterpret_cast<const void*>(static_cast<uintptr_t>(handle)));
  return driver(handle);
}
