// allocator.h: the process object behind a tracepool_t: the backend, one device_cache per device,
// and the map from addresses handed out to their blocks.
//
// Rule (capture before lock): whatever a request needs that may take other locks or call into a host
// language (stack capture, Python frames) is gathered by the caller before malloc() and passed in as
// `site`; nothing under an allocator lock calls out.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "config.h"
#include "device_cache.h"
#include "pointer_map.h"

namespace tracepool::core {

class allocator {
 public:
  static status create(const config& cfg, std::unique_ptr<allocator>* out);
  ~allocator();

  status malloc(size_t size, int device, backend::stream_handle stream, void** out, uint32_t site = 0);
  status free(void* ptr);
  status record_stream(void* ptr, backend::stream_handle stream);
  status empty_cache(int device);  // -1: every device
  status stats(int device, device_stats* out);
  status reset_peak(int device);
  status reset_accumulated(int device);
  status set_limit(int device, size_t bytes);
  status memory_info(int device, size_t* free_bytes, size_t* total_bytes);
  status validate();

  int device_count() const { return static_cast<int>(devices_.size()); }
  backend::backend& device_backend() { return *backend_; }
  size_t live_blocks() { return live_.size(); }

 private:
  allocator(const config& cfg, std::unique_ptr<backend::backend> be);
  status check_device(int device) const;
  stream_pool* pool_of(int device, backend::stream_handle stream);
  status reject_free(void* ptr);
  template <typename Fn>
  status for_devices(int device, Fn&& fn);

  const uint64_t instance_;  // distinguishes instances in the thread-local pool cache
  std::unique_ptr<backend::backend> backend_;
  std::vector<std::unique_ptr<device_cache>> devices_;
  pointer_map live_;
};

}  // namespace tracepool::core
