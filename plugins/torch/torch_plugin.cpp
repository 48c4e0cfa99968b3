// torch_plugin.cpp: the two functions PyTorch's CUDAPluggableAllocator calls, on tracepool_default().
// PyTorch passes the device and current stream at alloc, and the alloc-time size, device and stream
// at free (notes/pytorch.md §1.1). Its wrapper drops a NULL result silently, so failures are told on
// stderr here; the count of such messages is capped so a failing loop cannot flood the log.
#include <atomic>
#include <cstdio>

#include "tracepool/tracepool.h"

namespace {

std::atomic<int> messages_left{64};

void tell(const char* what, int status) {
  if (messages_left.fetch_sub(1, std::memory_order_relaxed) <= 0) return;
  std::fprintf(stderr, "tracepool: %s failed: %s: %s\n", what, tracepool_status_string(status),
               tracepool_last_error());
}

}  // namespace

extern "C" {

void* tracepool_torch_alloc(size_t size, int device, void* stream) {
  tracepool_t* tp = tracepool_default();
  if (tp == nullptr) {
    tell("tracepool_default (TRACEPOOL_CONF)", TRACEPOOL_ERR_UNAVAILABLE);
    return nullptr;
  }
  void* ptr = nullptr;
  const int rc = tracepool_malloc(tp, size, device, stream, &ptr);
  if (rc != TRACEPOOL_OK) tell("tracepool_torch_alloc", rc);
  return ptr;
}

void tracepool_torch_free(void* ptr, size_t /*size*/, int /*device*/, void* stream) {
  tracepool_t* tp = tracepool_default();
  if (tp == nullptr) return;
  const int rc = tracepool_free(tp, ptr, stream);
  if (rc != TRACEPOOL_OK) tell("tracepool_torch_free", rc);
}

}  // extern "C"
