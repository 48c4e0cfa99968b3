// allocator.h: the process object behind a tracepool_t: the backend, one device_cache per device,
// the map from addresses handed out to their blocks, and the observers it publishes to
// (Note [Observers] in observer.h).
//
// Rule (capture before lock): whatever a request needs that may take other locks or call into a host
// language (stack capture, script frames) is gathered by tracer::capture before any allocator lock;
// reports and the OOM report are built by their observers with no allocator lock held.
//
// Note [Lock order]
// Every lock tracepool takes while holding another, outermost first (a host's GIL comes before all
// of them: nothing under a tracepool lock calls into a host language):
//   0. the route table's lock (private_pool.h), taken alone while a route's filter runs;
//   1. a pointer-map shard (pointer_map.h), only in record_stream, which holds it over:
//   2. a stream pool's lock (stream_pool.h); another pool's is only try_lock'ed under it;
//   3. the device lock (device_cache.h), and, not nested with it, the backend's own locks
//      (cuMemAlloc, event pools, host emulation) and an observer's leaf lock (history.h);
//   4. nothing: the backend, the device lock and observer locks nest nothing.
// Taken alone, never with another held: the call-site table's shards and the marks' lock
// (trace/tracer.h, during capture and marks), the tag and symbolizer locks, the OOM reporter's, the
// table of observed memory (observed.h).
// Device work that may block (cuMemAlloc, cuMemFree, event synchronisation) runs under at most one
// pool lock, never under the device lock. TSan checks this order in CI: spin locks tell TSan they are
// locks (base/spin_lock.h), and tests/unit/concurrency_test.cpp takes every nesting above on threads.
// fork() takes them all in this order (Note [Fork] in base/fork_guard.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/backend.h"
#include "base/config.h"
#include "base/fork_guard.h"
#include "device_cache.h"
#include "history.h"
#include "observed.h"
#include "observer.h"
#include "pointer_map.h"
#include "private_pool.h"
#include "trace/tracer.h"

namespace tracepool::core {

class allocator final : public fork_participant {
 public:
  static status create(const config& cfg, std::unique_ptr<allocator>* out);
  ~allocator();

  // `at_least`: a block size the host's own rounding asks for (PyTorch's roundup_power2_divisions),
  // which tracepool rounds up to its 512 bytes; below `size` or past max_request it is ignored.
  status malloc(size_t size, int device, backend::stream_handle stream, void** out, size_t at_least = 0);
  status free(void* ptr);
  status record_stream(void* ptr, backend::stream_handle stream);
  // Memory the caller got outside the pool (Note [Observed memory] in observed.h): recorded with the
  // calling thread's call site, tags and marks, and its free; `source` as check_source reads it.
  status observe_alloc(const void* ptr, size_t size, int device, observed_kind kind, const char* source);
  status observe_free(const void* ptr);
  // A request of `size` bytes that the caller's own source refused for want of memory (the driver said
  // out of memory to a cudaMalloc the interposer saw): the out-of-memory report is made as for the pool's
  // own. Returns status::out_of_memory, the message saying what the report found.
  status observe_oom(size_t size, int device, const char* source);
  observed_memory& observed() { return observed_; }
  status empty_cache(int device);  // -1: every device
  status stats(int device, device_stats* out);
  status reset_peak(int device);
  status reset_accumulated(int device);
  status set_limit(int device, size_t bytes);
  // Whether record_stream blocks freed during a capture are reused inside it where the graph allows
  // (Note [Reuse inside a capture] in stream_reuse.h); starts as TRACEPOOL_CONF's capture_reuse.
  void set_capture_reuse(bool on) { gate_.set_reuse_in_capture(on); }
  bool capture_reuse() const { return gate_.reuses_in_capture(); }
  status memory_info(int device, size_t* free_bytes, size_t* total_bytes);
  // backend::processes (report time): false, with the reason in *why, for a bad device too.
  bool processes(int device, std::vector<backend::process_usage>* out, std::string* why);
  status validate();

  // ---- Private pools (Note [Private pools] in private_pool.h); `pool` is nonzero ----
  // Creates the pool with one use, or adds one (PyTorch's createOrIncrefPool). The calling thread's
  // call site names a new pool in reports.
  status retain_pool(int device, uint64_t pool);
  // Adds a use and opens a route: allocations on `device` the filter accepts come from the pool
  // until end_pool. While any route is open the capture gate is closed (Note [Capture]).
  status begin_pool(int device, uint64_t pool, route_filter_fn filter, void* context, route_release_fn release);
  // Closes every route to the pool on the device (none open is not an error: a failed capture
  // may end twice).
  status end_pool(int device, uint64_t pool);
  status release_pool(int device, uint64_t pool);
  status pool_use_count(int device, uint64_t pool, int* out);
  status empty_pool(int device, uint64_t pool);
  // Addresses of the pool's allocated blocks.
  status pool_blocks(int device, uint64_t pool, std::vector<void*>* out);
  // MemPool(no_split=..., use_on_oom=...): device_cache::set_pool_options.
  status set_pool_options(int device, uint64_t pool, bool no_split, bool use_on_oom);
  status pool_options(int device, uint64_t pool, bool* no_split, bool* use_on_oom);
  // MemPool(allocator=...): device_cache::set_pool_source.
  status set_pool_source(int device, uint64_t pool, std::shared_ptr<const segment_source> source);
  // Note [Pool checkpoints] in private_pool.h: the pool's allocated blocks now (PyTorch's
  // getCheckpointState). invalid_argument if the pool is not retained.
  status checkpoint_pool(int device, uint64_t pool, pool_checkpoint* out);
  // Makes the pool's allocated blocks exactly those of `cp` (setCheckpointPoolState): frees every block
  // it has allocated now (their addresses appended to *freed) and hands out each checkpointed block again
  // at its address (appended to *made; the caller owns them). Checks first and changes nothing if a
  // checkpointed block's memory is no longer the pool's.
  status restore_pool(const pool_checkpoint& cp, std::vector<void*>* freed, std::vector<void*>* made);
  // Names the pool's kind in reports ("CUDA graph"); the label is checked as tags' are (check_label)
  // and copied. invalid_argument if the pool is not retained.
  status label_pool(int device, uint64_t pool, const char* label);
  // Every retained private pool of the device (its site and label), for reports.
  status retained_pools(int device, std::vector<private_pool_info>* out);

  // A named point in time, told to every observer (the tracer keeps it for reports).
  status mark(const char* label);
  // A boundary a host framework saw (an optimizer step, an epoch's end), taken as an automatic mark
  // when the spacing allows (Note [Growth without marks] in tracer.h); *taken says whether it was.
  status auto_mark(const char* label, bool* taken);
  // `o` hears every event from now on (Note [Observers]); it must outlive the allocator.
  status subscribe(observer* o) { return observers_.subscribe(o); }
  tracer& call_sites() { return *tracer_; }
  // The allocation history (TRACEPOOL_CONF history:N, or record_history), or nullptr when it never was on.
  const history* allocation_history() const { return history_view_.load(std::memory_order_acquire); }
  // Turns the history on with room for `entries` events, keeping the newest it has (PyTorch's
  // _record_memory_history); `clear` forgets them first. entries == 0 turns it off and forgets them.
  // `alloc_sites`, `frees`: which events carry a call site from now on (history::set_sites).
  status record_history(size_t entries, bool clear, bool alloc_sites = true,
                        history::free_sites frees = history::free_sites::allocation);
  // What the history's events are labelled with (PyTorch's user metadata and compile contexts), kept
  // whether or not the history is on.
  history_labels& labels() { return labels_; }
  // Every block of a device, for reports.
  status collect_blocks(int device, std::vector<block_record>* out);

  int device_count() const { return static_cast<int>(devices_.size()); }
  // Whether `device` uses growable segments (Note [Growable segments] in block.h); false for a bad device.
  bool growable_segments(int device) const {
    return device >= 0 && device < device_count() && devices_[static_cast<size_t>(device)]->growable();
  }
  backend::backend& device_backend() { return *backend_; }
  size_t live_blocks() { return live_.size(); }

  // Note [Fork] in base/fork_guard.h: every lock, in the order of Note [Lock order] above.
  void lock_for_fork() override;
  void unlock_after_fork(bool child) override;

 private:
  allocator(const config& cfg, std::unique_ptr<backend::backend> be, std::unique_ptr<tracer> tr,
            std::unique_ptr<history> h);
  status out_of_memory(int device, size_t size, backend::stream_handle stream, uint32_t site);
  status capture_observed(observed_kind kind, const char* source, size_t size, block_tag* out);
  status check_device(int device) const;
  stream_pool* pool_of(int device, backend::stream_handle stream);
  status reject_free(void* ptr);
  status refuse_inherited_device(int device);
  bool take_auto_mark(const char* label, uint64_t now_ns, bool sample);
  mark_event mark_figures(const char* label);
  template <typename Fn>
  status for_devices(int device, Fn&& fn);

  status check_pool(int device, uint64_t pool) const;
  uint32_t freeing_site();

  const uint64_t instance_;  // distinguishes instances in the thread-local pool cache
  std::unique_ptr<backend::backend> backend_;
  observed_memory observed_;  // Note [Observed memory]
  std::unique_ptr<tracer> tracer_;    // subscribed first: call-site counters and marks
  history_labels labels_;             // before history_, which reads it
  std::unique_ptr<history> history_;  // subscribed next when history:N is on, or at the first record_history
  std::atomic<const history*> history_view_{nullptr};  // history_, for readers on other threads
  std::mutex history_mutex_;           // guards history_'s creation; taken alone
  observer_list observers_;           // the device caches publish segment events to it too
  capture_gate gate_;                 // closed while a route is open (Note [Capture])
  route_table routes_{gate_};
  std::vector<std::unique_ptr<device_cache>> devices_;
  pointer_map live_;

  std::atomic<bool> device_inherited_{false};  // a fork child's backend is its parent's (Note [Fork])
};

}  // namespace tracepool::core
