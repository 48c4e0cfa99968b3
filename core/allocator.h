// allocator.h: the process object behind a tracepool_t: the backend, one device_cache per device,
// and the map from addresses handed out to their blocks.
//
// Rule (capture before lock): whatever a request needs that may take other locks or call into a host
// language (stack capture, Python frames) is gathered by tracer::capture before any allocator lock;
// reports and the OOM report are built with no allocator lock held.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "base/config.h"
#include "device_cache.h"
#include "base/fork_guard.h"
#include "pointer_map.h"
#include "trace/tracer.h"

namespace tracepool::core {

struct report;

class allocator final : public fork_participant {
 public:
  static status create(const config& cfg, std::unique_ptr<allocator>* out);
  ~allocator();

  status malloc(size_t size, int device, backend::stream_handle stream, void** out);
  status free(void* ptr);
  status record_stream(void* ptr, backend::stream_handle stream);
  status empty_cache(int device);  // -1: every device
  status stats(int device, device_stats* out);
  status reset_peak(int device);
  status reset_accumulated(int device);
  status set_limit(int device, size_t bytes);
  status memory_info(int device, size_t* free_bytes, size_t* total_bytes);
  status validate();

  // Attribution (issue 3): marks, reports, and the report of the last out-of-memory error.
  status mark(const char* label);
  status make_report(const char* reason, report* out);
  // format: "json", "text", or nullptr/"" to choose by path (".json" -> json). path "stderr" prints.
  status write_report(const char* path, const char* format);
  status write_oom_report(const char* path, const char* format);
  tracer& call_sites() { return *tracer_; }
  // Every block of a device, for reports.
  status collect_blocks(int device, std::vector<block_record>* out);

  int device_count() const { return static_cast<int>(devices_.size()); }
  backend::backend& device_backend() { return *backend_; }
  size_t live_blocks() { return live_.size(); }

  // Note [Fork] in fork_guard.h. Order: the call-site table's and the marks' locks (never nested with
  // the rest), the OOM report's, the pointer map's shards, then each device (its pools, then its
  // device lock), then the backend's: record_stream nests a shard over a pool lock, a pool lock is
  // held over the device lock and over backend calls, and nothing nests the other way.
  void lock_for_fork() override;
  void unlock_after_fork(bool child) override;

 private:
  allocator(const config& cfg, std::unique_ptr<backend::backend> be, std::unique_ptr<tracer> tr);
  status out_of_memory(int device, size_t size);
  status check_device(int device) const;
  stream_pool* pool_of(int device, backend::stream_handle stream);
  status reject_free(void* ptr);
  status refuse_inherited_device(int device);
  template <typename Fn>
  status for_devices(int device, Fn&& fn);

  const uint64_t instance_;  // distinguishes instances in the thread-local pool cache
  std::unique_ptr<backend::backend> backend_;
  std::vector<std::unique_ptr<device_cache>> devices_;
  pointer_map live_;
  std::unique_ptr<tracer> tracer_;
  const bool print_oom_report_;

  std::atomic<uint64_t> ooms_printed_{0};
  std::atomic<bool> device_inherited_{false};  // a fork child's backend is its parent's (Note [Fork])
  std::mutex oom_mutex_;
  std::shared_ptr<const report> last_oom_;  // guarded by oom_mutex_
};

}  // namespace tracepool::core
