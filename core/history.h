// history.h: the allocation history (TRACEPOOL_CONF history:N): the last N allocator events, each
// with its time, address, size, stream, device and call site, kept in a ring. An observer
// (Note [Observers] in observer.h); the PyTorch memory-snapshot export draws its device_traces from it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/config.h"
#include "base/spin_lock.h"
#include "history_labels.h"
#include "observer.h"

namespace tracepool::core {

enum class history_action : uint8_t { alloc, free, segment_alloc, segment_free, oom };

struct history_entry {
  uint64_t time_ns;   // CLOCK_REALTIME (recorded as clock ticks, converted by entries())
  uintptr_t address;  // oom: the bytes the device had free
  size_t size;        // rounded block size, segment size; oom: bytes requested
  size_t requested;   // alloc, free: bytes the caller asked for
  uintptr_t stream;
  uint32_t site;
  history_labels::id label;  // the device's user metadata and compiled region then (history_labels.h)
  uint8_t device;            // devices past 255 are not recorded (PyTorch's device index is 8 bits too)
  history_action action;
};
static_assert(sizeof(history_entry) == 48, "history:N's cost per entry, as the configuration help says");

class history final : public observer {
 public:
  // pre: 0 < capacity <= max_history_entries (base/config.h). The ring is reserved, not touched.
  static status create(size_t capacity, std::unique_ptr<history>* out);

  unsigned events() const override { return alloc_events | free_events | segment_events | oom_events; }
  void on_alloc(const block_event& e) override;
  void on_free(const block_event& e) override;
  void on_segment_alloc(const segment_event& e) override;
  void on_segment_free(const segment_event& e) override;
  void on_oom(const oom_event& e) override;

  // The entries kept, oldest first, the newest `most` of them at most; *recorded: how many were
  // recorded in all (older ones are gone).
  std::vector<history_entry> entries(uint64_t* recorded = nullptr, size_t most = SIZE_MAX) const;
  size_t capacity() const;
  // Events are labelled from `labels` (which must outlive the history) from now on; with none, none.
  void label_with(const history_labels* labels) { labels_.store(labels, std::memory_order_release); }
  const history_labels* labels() const { return labels_.load(std::memory_order_acquire); }

  // Which events carry a call site, as each is recorded (PyTorch's _record_memory_history `context`):
  // allocations (alloc, segment_alloc, oom) their own, or none; frees (free, segment_free) the
  // allocation's (history:N's way), none, or the call site that freed it, which costs a stack capture
  // at each free (a segment_free: the call that released it, such as empty_cache, where one is known).
  enum class free_sites : uint8_t { allocation, none, freeing };
  void set_sites(bool alloc_sites, free_sites frees) {
    alloc_sites_.store(alloc_sites, std::memory_order_relaxed);
    free_sites_.store(frees, std::memory_order_relaxed);
  }
  // Whether a free should capture its call site for this history (block_event::freed_at).
  bool wants_freeing_sites() const {
    return recording() && free_sites_.load(std::memory_order_relaxed) == free_sites::freeing;
  }

  // Turned on and off at run time (PyTorch's _record_memory_history): while off, events are not
  // recorded. `resize` keeps the newest entries that fit; `clear` forgets them all.
  void set_recording(bool on) { recording_.store(on, std::memory_order_relaxed); }
  bool recording() const { return recording_.load(std::memory_order_relaxed); }
  status resize(size_t capacity);
  void clear();

  void lock_for_fork() override { lock_.lock(); }
  void unlock_after_fork() override { lock_.unlock(); }

 private:
  history(size_t capacity, std::unique_ptr<history_entry[]> ring);
  void record(int device, history_entry e);  // labels e for `device`, unless past history_entry::device

  uint32_t alloc_site(uint32_t site) const { return alloc_sites_.load(std::memory_order_relaxed) ? site : 0; }
  uint32_t free_site(uint32_t allocation_site, uint32_t freeing_site) const;

  std::atomic<const history_labels*> labels_{nullptr};
  std::atomic<bool> recording_{true};
  std::atomic<bool> alloc_sites_{true};
  std::atomic<free_sites> free_sites_{free_sites::allocation};
  size_t capacity_;  // guarded by lock_
  // At creation, for entries(): the ticks, CLOCK_MONOTONIC (the ticks' rate is measured against it,
  // since the wall clock may step) and CLOCK_REALTIME (what times are reported in).
  const uint64_t start_ticks_;
  const uint64_t start_monotonic_ns_;
  const uint64_t start_ns_;
  mutable spin_lock lock_;                 // a leaf: taken under a pool lock at segment_alloc, nothing under it
  std::unique_ptr<history_entry[]> ring_;  // guarded by lock_; time_ns holds ticks until entries()
  uint64_t recorded_ = 0;                  // guarded by lock_
  size_t next_ = 0;                        // guarded by lock_; recorded_ % capacity_, without dividing
};

}  // namespace tracepool::core
