// observer.h: what the allocator publishes, and the interface of those who listen: the call-site
// counters and marks (trace/tracer.h), the allocation history (history.h) and, from above core, the
// out-of-memory report (report/oom_reporter.h). See Note [Observers].
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"

namespace tracepool::core {

// Note [Observers]
// The allocator tells what happens through one seam: it builds an event and hands it to every
// subscribed observer, in subscription order, on the thread that caused it. When, and under what:
//   - alloc: once the block is handed out and recorded; no allocator lock held;
//   - free: as the caller's free is accepted, before the pool takes the block back, so that no
//     thread is handed the same address before its free has been told (a history stays in order);
//     a free the pool then refuses (a backend failure) is told again as an alloc of the same block;
//   - segment_alloc: as the device says yes, under the growing stream pool's lock, before any block
//     of the segment is handed out; segment_free: once the backend has the memory back, no lock;
//   - oom: after the cache was emptied and the retry failed; no allocator lock held;
//   - mark: no allocator lock held.
// An observer never calls back into tracepool, into a host language, or anything that blocks; under a
// pool lock (segment_alloc) it may take only a leaf lock of its own. Its locks are taken before fork()
// (lock_for_fork), after the allocator's own: see the lock order in allocator.h.
// Statistics are the one listener kept inside the pools (stream_pool updates its stat_table under the
// lock it already holds): PyTorch's memory_stats must agree exactly with the blocks at every moment,
// and an outside listener would need a lock or atomics of its own on every allocation.

struct block_event {
  const void* ptr;
  size_t size;       // rounded, as the device holds it
  size_t requested;  // what the caller asked for
  int device;
  void* stream;
  uint32_t site;   // call_site_table id, 0 if unknown
  uint32_t birth;  // marks made before the allocation
};

struct segment_event {
  const void* ptr;
  size_t size;
  int device;
  void* stream;   // the stream pool it was obtained for, or released from
  uint32_t site;  // the allocation that made the device grow
};

struct oom_event {
  int device;
  size_t requested;
  void* stream;
  uint32_t site;
  size_t device_free;   // bytes the device had free, as its backend says
  const char* message;  // why the device said no (the allocator's error message)
  std::string* detail;  // observers may append lines; they follow the message in the error
};

struct mark_event {
  const char* label;   // valid UTF-8, checked
  int64_t live_bytes;  // requested bytes live on all devices
};

class observer {
 public:
  virtual ~observer() = default;
  virtual void on_alloc(const block_event&) {}
  virtual void on_free(const block_event&) {}
  virtual void on_segment_alloc(const segment_event&) {}
  virtual void on_segment_free(const segment_event&) {}
  virtual void on_oom(const oom_event&) {}
  virtual status on_mark(const mark_event&) { return status::ok; }
  // Every lock of the observer, and their release (Note [Fork] in base/fork_guard.h).
  virtual void lock_for_fork() {}
  virtual void unlock_after_fork() {}
};

// The subscribers of one allocator. Subscribing is rare (at creation, when a report side attaches) and
// may race publishing: an observer is published to from the moment subscribe() returns. Observers
// are never removed; each must outlive the allocator (its owner destroys the allocator first).
class observer_list {
 public:
  static constexpr int capacity = 8;

  status subscribe(observer* o) {
    for (auto& slot : list_) {
      observer* empty = nullptr;
      if (slot.compare_exchange_strong(empty, o, std::memory_order_release, std::memory_order_relaxed))
        return status::ok;
    }
    return fail(status::internal, "subscribe: %d observers already", capacity);
  }

  // About 2 ns an observer (one virtual call), and one load to see the list end.
  template <typename Event, typename Fn>
  void publish(const Event& e, Fn on) const {
    for (const auto& slot : list_) {
      observer* o = slot.load(std::memory_order_acquire);
      if (o == nullptr) return;
      (o->*on)(e);
    }
  }
  void alloc(const block_event& e) const { publish(e, &observer::on_alloc); }
  void free(const block_event& e) const { publish(e, &observer::on_free); }
  void segment_alloc(const segment_event& e) const { publish(e, &observer::on_segment_alloc); }
  void segment_free(const segment_event& e) const { publish(e, &observer::on_segment_free); }
  void oom(const oom_event& e) const { publish(e, &observer::on_oom); }
  // Every observer is told; the first failure is returned.
  status mark(const mark_event& e) const {
    status first = status::ok;
    for (const auto& slot : list_) {
      observer* o = slot.load(std::memory_order_acquire);
      if (o == nullptr) break;
      if (status s = o->on_mark(e); s != status::ok && first == status::ok) first = s;
    }
    return first;
  }

  void lock_for_fork() const {
    for (const auto& slot : list_)
      if (observer* o = slot.load(std::memory_order_acquire)) o->lock_for_fork();
  }
  void unlock_after_fork() const {
    for (size_t i = capacity; i-- > 0;)
      if (observer* o = list_[i].load(std::memory_order_acquire)) o->unlock_after_fork();
  }

 private:
  std::atomic<observer*> list_[capacity] = {};  // filled from the front, never emptied
};

}  // namespace tracepool::core
