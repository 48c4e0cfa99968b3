// torch_plugin.cpp: the two functions PyTorch's CUDAPluggableAllocator calls, on tracepool_default().
// PyTorch passes the device and current stream at alloc, and the alloc-time size, device and stream
// at free (notes/pytorch.md §1.1). Its wrapper drops a NULL result silently, so failures are told on
// stderr here, once per entry point and status: a failing loop cannot flood the log, and a failure of
// a new kind is still told.
#include <atomic>
#include <cstdint>
#include <cstdio>

#include "tracepool/tracepool.h"

namespace {

enum entry { entry_default, entry_alloc, entry_free, entry_empty_cache, entry_fraction, entry_record_stream, entries };
constexpr const char* entry_names[entries] = {"tracepool_default (TRACEPOOL_CONF)", "tracepool_torch_alloc",
                                              "tracepool_torch_free", "torch.cuda.empty_cache",
                                              "torch.cuda.set_per_process_memory_fraction", "Tensor.record_stream"};
std::atomic<uint32_t> told[entries];  // bit -status: that failure has been told

void tell(entry what, int status) {
  const uint32_t bit = status < 0 && status > -32 ? 1u << -status : 1u;
  if (told[what].fetch_or(bit, std::memory_order_relaxed) & bit) return;
  std::fprintf(stderr, "tracepool: %s failed: %s: %s (further %s failures of this kind are not printed)\n",
               entry_names[what], tracepool_status_string(status), tracepool_last_error(), entry_names[what]);
}

}  // namespace

extern "C" {

void* tracepool_torch_alloc(size_t size, int device, void* stream) {
  tracepool_t* tp = tracepool_default();
  if (tp == nullptr) {
    tell(entry_default, TRACEPOOL_ERR_UNAVAILABLE);
    return nullptr;
  }
  // Tagged "torch": in a process where CuPy and Numba share the pool, the report says which runtime
  // asked (a repeated push costs a compare; tags.cpp).
  void* ptr = nullptr;
  const bool tagged = tracepool_tag_push("torch") == TRACEPOOL_OK;
  const int rc = tracepool_malloc(tp, size, device, stream, &ptr);
  if (tagged) (void)tracepool_tag_pop();
  if (rc != TRACEPOOL_OK) tell(entry_alloc, rc);
  return ptr;
}

void tracepool_torch_free(void* ptr, size_t /*size*/, int /*device*/, void* stream) {
  tracepool_t* tp = tracepool_default();
  if (tp == nullptr) return;
  const int rc = tracepool_free(tp, ptr, stream);
  if (rc != TRACEPOOL_OK) tell(entry_free, rc);
}

void tracepool_torch_empty_cache(void) {
  tracepool_t* tp = tracepool_default();
  if (tp == nullptr) return;
  if (const int rc = tracepool_empty_cache(tp, -1); rc != TRACEPOOL_OK) tell(entry_empty_cache, rc);
}

// torch.cuda.set_per_process_memory_fraction: the fraction of the device's total memory that
// tracepool may reserve on it (PyTorch's meaning), as a byte limit.
void tracepool_torch_set_memory_fraction(double fraction, int device) {
  tracepool_t* tp = tracepool_default();
  if (tp == nullptr) return;
  size_t free_bytes = 0, total = 0;
  int rc = tracepool_mem_get_info(tp, device, &free_bytes, &total);
  if (rc == TRACEPOOL_OK) {
    if (!(fraction > 0.0 && fraction <= 1.0)) {
      std::fprintf(stderr, "tracepool: set_per_process_memory_fraction(%g): expected a fraction in (0, 1]\n", fraction);
      return;
    }
    // 1.0 lifts the cap; anything less caps at that share of the device (at least one byte).
    const size_t limit = fraction >= 1.0 ? 0 : static_cast<size_t>(fraction * static_cast<double>(total)) + 1;
    rc = tracepool_set_limit(tp, device, limit);
  }
  if (rc != TRACEPOOL_OK) tell(entry_fraction, rc);
}

void tracepool_torch_record_stream(void* ptr, void* stream) {
  tracepool_t* tp = tracepool_default();
  if (tp == nullptr) return;
  if (const int rc = tracepool_record_stream(tp, ptr, stream); rc != TRACEPOOL_OK) tell(entry_record_stream, rc);
}

}  // extern "C"
