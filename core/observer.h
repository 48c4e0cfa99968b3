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
//     a free the pool then refuses (a backend failure) is told again, to the free listeners, as an
//     alloc of the same block;
//   - freed: once the pool has taken the block back (a refused free is not told), for listeners that
//     only count and would rather not wait on their counters while the pool works: the call-site
//     counters (Note [Site counters] in trace/call_site_table.h) hear free to fetch their line, and
//     freed to update it, after the pool's work has hidden the fetch;
//   - segment_alloc: as the device says yes, under the growing stream pool's lock, before any block
//     of the segment is handed out; segment_free: as the segment leaves the cache, before the backend
//     has the memory (which a grow could then get again), no lock held; a release the backend
//     refuses is told again as a segment_alloc, under the pool's lock that takes the segment back.
//     Growable segments (Note [Growable segments] in block.h) tell each stretch of pieces mapped as a
//     segment_alloc and each stretch unmapped as a segment_free, both under the pool's lock;
//   - oom: after the cache was emptied and the retry failed; no allocator lock held;
//   - mark: no allocator lock held.
// An observer never calls back into tracepool, into a host language, or anything that blocks; under a
// pool lock (segment_alloc, and a growable segment's segment_free) it may take only a leaf lock of its
// own. Its locks are taken before fork() (lock_for_fork), after the allocator's own: see the lock
// order in allocator.h.
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
  uint32_t freed_at = 0;  // a free: the call site that freed it, where the history asks for it (else 0)
};

struct segment_event {
  const void* ptr;
  size_t size;
  int device;
  void* stream;   // the stream pool it was obtained for, or released from
  uint32_t site;  // the allocation that made the device grow
  uint32_t freed_at = 0;  // a segment_free: the call that released it (empty_cache, a full device's malloc), if known
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
  int64_t live_bytes;      // requested bytes live on all devices
  int64_t reserved_bytes;  // reserved on all devices
};

// What an observer listens to (observer::events), so that an event nobody wants costs one load.
enum event_kind : unsigned {
  alloc_events = 1u << 0,
  free_events = 1u << 1,
  segment_events = 1u << 2,
  oom_events = 1u << 3,
  mark_events = 1u << 4,
  freed_events = 1u << 5,
  all_events = (1u << 6) - 1,
};

class observer {
 public:
  virtual ~observer() = default;
  // Read once, when subscribed.
  virtual unsigned events() const { return all_events; }
  virtual void on_alloc(const block_event&) {}
  virtual void on_free(const block_event&) {}
  virtual void on_freed(const block_event&) {}
  // A free told and then refused by the pool: by default heard as the block allocated again.
  virtual void on_unfree(const block_event& e) { on_alloc(e); }
  virtual void on_segment_alloc(const segment_event&) {}
  virtual void on_segment_free(const segment_event&) {}
  virtual void on_oom(const oom_event&) {}
  virtual status on_mark(const mark_event&) { return status::ok; }
  // Every lock of the observer, and their release (Note [Fork] in base/fork_guard.h).
  virtual void lock_for_fork() {}
  virtual void unlock_after_fork() {}
};

// The subscribers of one allocator, one list per kind of event. Subscribing is rare (at creation,
// when a report side attaches) and may race publishing: an observer hears every event published after
// subscribe() returns. Observers are never removed; each must outlive the allocator.
class observer_list {
 public:
  static constexpr int capacity = 8;

  status subscribe(observer* o) {
    if (subscribed_.fetch_add(1, std::memory_order_relaxed) >= capacity) {
      subscribed_.fetch_sub(1, std::memory_order_relaxed);
      return fail(status::internal, "subscribe: %d observers already", capacity);
    }
    const unsigned wanted = o->events();
    for (int k = 0; k < kinds; ++k)
      if (wanted & (1u << k)) add(lists_[k], o);
    add(all_, o);
    return status::ok;
  }

  // Whether anyone listens to `kind`: one load. Lets a caller skip building an event.
  bool wanted(event_kind kind) const { return first(kind) != nullptr; }

  void alloc(const block_event& e) const { publish(alloc_events, e, &observer::on_alloc); }
  void free(const block_event& e) const { publish(free_events, e, &observer::on_free); }
  void freed(const block_event& e) const { publish(freed_events, e, &observer::on_freed); }
  // A free the pool refused, undone for those told of it (as an alloc).
  void unfree(const block_event& e) const { publish(free_events, e, &observer::on_unfree); }
  void segment_alloc(const segment_event& e) const { publish(segment_events, e, &observer::on_segment_alloc); }
  void segment_free(const segment_event& e) const { publish(segment_events, e, &observer::on_segment_free); }
  void oom(const oom_event& e) const { publish(oom_events, e, &observer::on_oom); }
  // Every listener is told; the first failure is returned.
  status mark(const mark_event& e) const {
    status first_failure = status::ok;
    for (const auto& slot : lists_[index(mark_events)]) {
      observer* o = slot.load(std::memory_order_acquire);
      if (o == nullptr) break;
      if (status s = o->on_mark(e); s != status::ok && first_failure == status::ok) first_failure = s;
    }
    return first_failure;
  }

  void lock_for_fork() const {
    for (const auto& slot : all_)
      if (observer* o = slot.load(std::memory_order_acquire)) o->lock_for_fork();
  }
  void unlock_after_fork() const {
    for (size_t i = capacity; i-- > 0;)
      if (observer* o = all_[i].load(std::memory_order_acquire)) o->unlock_after_fork();
  }

 private:
  static constexpr int kinds = 6;
  using list = std::atomic<observer*>[capacity];  // filled from the front, never emptied

  static constexpr int index(event_kind kind) { return __builtin_ctz(kind); }
  static void add(list& l, observer* o) {
    for (auto& slot : l) {
      observer* empty = nullptr;
      if (slot.compare_exchange_strong(empty, o, std::memory_order_release, std::memory_order_relaxed)) return;
    }
  }
  observer* first(event_kind kind) const { return lists_[index(kind)][0].load(std::memory_order_acquire); }

  // About 2 ns a listener (one virtual call), and one load to see the list end.
  template <typename Event, typename Fn>
  void publish(event_kind kind, const Event& e, Fn on) const {
    for (const auto& slot : lists_[index(kind)]) {
      observer* o = slot.load(std::memory_order_acquire);
      if (o == nullptr) return;
      (o->*on)(e);
    }
  }

  list lists_[kinds] = {};
  list all_ = {};  // every observer once, for fork
  std::atomic<int> subscribed_{0};
};

}  // namespace tracepool::core
