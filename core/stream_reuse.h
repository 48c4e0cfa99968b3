// stream_reuse.h: when a freed block may be used again, and by which stream. The only unit that
// records or queries events.
//
// Note [Stream reuse]
// Rationale: a caller frees a block as soon as it has *submitted* the last work that uses it, on the
// stream it allocated on. Reusing it on that same stream is safe at once (stream order). Reusing it
// on another stream before that work has finished would race.
// Approach:
//   - Same stream: a freed block goes straight back to its pool's free list.
//   - Other streams: each pool counts its frees (free_seq). A fence is an event recorded on the
//     pool's stream together with the count at that moment; once the event completes, every block
//     freed up to that count is idle on the device (safe_seq). Fences are recorded only inside a
//     free, where the caller's stream is certainly alive (a stream may be destroyed once its blocks
//     are freed, so nothing may later record on it), and rate-limited: at most one fence in flight,
//     and a completed one is noticed by a poll every `poll_every` frees once `poll_interval` has
//     passed. That keeps the driver out of all but a few frees a millisecond. Whole free segments
//     that are fenced move to another stream that runs short; polls from that side only query.
//   - record_stream: a block used on other streams too gets one event per such stream at free and
//     stays "pending free" (still active) until all have completed (polled at each malloc).
// Limits: a freed block of a partly used segment is reused only on its own stream; other streams get
// whole segments. Releasing segments to the device needs no fence: cuMemFree synchronizes.
// While the capture gate is closed (Note [Capture] in private_pool.h) no event is recorded, queried
// or waited for: frees are not fenced, and record_stream frees stay pending, with their events
// recorded once the gate opens (or, where the capture's graph allows it, reused inside the capture:
// Note [Reuse inside a capture]).
//
// Note [Reuse inside a capture]
// Rationale: a record_stream block freed during a capture cannot take events (Note [Capture]), so it
// stays pending until the capture ends, and a long capture that frees such blocks again and again
// holds all of them. Within a capture no event is needed: the graph itself says what runs after what.
// PyTorch's graph_capture_record_stream_reuse (off by default) reuses such a block inside the capture
// once the graph orders every later use after its last ones; tracepool does the same when
// capture_reuse is on (TRACEPOOL_CONF capture_reuse:on, tracepool_set_capture_reuse; the PyTorch
// plugin follows PyTorch's setting at each beginAllocateToPool).
// Approach:
//   - At the free, the block's markers: the capture frontier (the nodes the stream's next work will
//     depend on) of its pool's stream and of every stream it was used on. If one of them is not
//     capturing, or captures another graph, or the frontiers are all empty, it has none and waits for
//     the capture's end as before.
//   - At an allocation on the pool's stream in the same capture: the ancestors of that stream's
//     frontier, walked back through the nodes' dependencies. A block whose markers are all among them
//     is free again: everything the stream submits from now on depends on the frontier, which runs
//     after each marker, which ran after the block's last use on its stream. No event is recorded.
//   - The walked nodes are kept for the capture (ancestors never change: a captured node's
//     dependencies are fixed when it is added), so each node is read once, and dropped when the gate
//     opens. A failed read drops them all, and the blocks stay pending: never unsafe.
//   - Nothing of this costs anything while no pending block has markers (a count says so): with the
//     option off, a capture's allocations do not look at the pending blocks at all.
// Limits: a block is reused only on its pool's stream, as outside captures. Only the graph is read
// (cuStreamGetCaptureInfo, cuGraphNodeGetDependencies), which no capture mode forbids. A read that
// fails (an edge with data, which the CUDA 12.0 entry points cannot describe) is not retried in that
// capture: its blocks wait for the end. The walked nodes assume a stream's frontier only moves on, as
// PyTorch's allocator does: a program that moves it back (cuStreamUpdateCaptureDependencies with
// CU_STREAM_SET_CAPTURE_DEPENDENCIES, cuGraphRemoveDependencies during the capture) must not turn the
// option on.
#pragma once

#include <cstdint>
#include <unordered_set>
#include <vector>

#include "backend/backend.h"
#include "block.h"
#include "private_pool.h"

namespace tracepool::core {

class stream_reuse {
 public:
  stream_reuse(backend::backend& be, const capture_gate& gate, int device, backend::stream_handle stream)
      : backend_(be), gate_(gate), device_(device), stream_(stream) {}
  ~stream_reuse();
  stream_reuse(const stream_reuse&) = delete;
  stream_reuse& operator=(const stream_reuse&) = delete;

  // ---- Fences (caller holds the pool's lock) ----
  // A block is being freed: its free_seq. `stream_alive` says the caller is using this pool's stream
  // right now, so a fence may be recorded on it.
  uint64_t on_free(bool stream_alive);
  bool safe_for_other_streams(const block& b) const { return b.free_seq <= safe_seq_; }
  // Notices a completed fence; never records one (the stream may be gone).
  void poll() { (void)poll_fence(); }

  // ---- record_stream (caller holds the pool's lock) ----
  // Records one event per stream in b.stream_uses; the block becomes pending until they complete.
  status defer_free(block* b);
  bool has_pending() const { return !pending_.empty(); }
  // Moves the blocks whose events have all completed into `ready`; blocks until then if `wait`.
  // During a capture, with `stream_alive` (the caller allocates on this pool's stream), the blocks
  // the graph has made safe instead (Note [Reuse inside a capture]).
  void collect_ready(std::vector<block*>* ready, bool wait, bool stream_alive);
  // The gate opened: what was walked of the captures' graphs is dropped, its memory too.
  void forget_graph() {
    std::unordered_set<backend::graph_node>().swap(visited_);
    visited_capture_ = 0;
    walk_failed_ = false;
  }

  // In a forked child whose backend is the parent's (Note [Fork]): the child can neither see nor
  // wait for device work, so every pending block goes into `ready`, every free counts as complete,
  // and events are dropped without touching the backend.
  void forget_device_work(std::vector<block*>* ready);


 private:
  struct pending_block {
    block* b;
    std::vector<backend::event_handle> events;
    bool deferred;  // freed while the gate was closed: its events are not recorded yet
    uint64_t capture = 0;                     // the capture the markers are nodes of
    std::vector<backend::graph_node> markers;  // Note [Reuse inside a capture]; empty: none
  };
  status record_uses(pending_block* p);
  void mark_last_uses(pending_block* p);
  void collect_safe_in_capture(std::vector<block*>* ready);
  bool walk_ancestors(const std::vector<backend::graph_node>& from);
  status poll_fence();
  void maintain_fence();

  static constexpr uint32_t poll_every = 64;          // frees between clock reads
  static constexpr int64_t poll_interval_ns = 1000000;  // between polls of a fence in flight

  backend::backend& backend_;
  const capture_gate& gate_;
  int device_;
  backend::stream_handle stream_;
  uint64_t free_seq_ = 0;         // frees so far on this pool
  uint64_t safe_seq_ = 0;         // frees known complete on the device (fresh memory has seq 0)
  backend::event_handle fence_event_ = nullptr;
  uint64_t fence_seq_ = 0;        // free_seq_ when fence_event_ was recorded
  uint32_t frees_until_check_ = 0;
  int64_t last_poll_ns_ = 0;
  std::vector<pending_block> pending_;
  size_t marked_ = 0;             // pending blocks with markers
  uint64_t visited_capture_ = 0;  // the capture visited_ belongs to
  std::unordered_set<backend::graph_node> visited_;  // nodes walked back from this stream's frontier: closed under dependencies
  bool walk_failed_ = false;      // a read of visited_capture_'s graph failed: not walked again
};

}  // namespace tracepool::core
