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
//     freed up to that count is idle on the device (safe_seq). Fences are recorded lazily, only when
//     another stream of the device runs short, so the hot path records no event: an event recorded
//     after the free completes after the work that preceded the free, which is what reuse needs.
//     Whole free segments that are fenced move to the stream that needs them.
//   - record_stream: a block used on other streams too gets one event per such stream at free and
//     stays "pending free" (still active) until all have completed (polled at each malloc).
// Limits: a freed block of a partly used segment is reused only on its own stream; other streams get
// whole segments. Releasing segments to the device needs no fence: cuMemFree synchronizes.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "block.h"

namespace tracepool::core {

class stream_reuse {
 public:
  stream_reuse(backend::backend& be, int device, backend::stream_handle stream)
      : backend_(be), device_(device), stream_(stream) {}
  ~stream_reuse();
  stream_reuse(const stream_reuse&) = delete;
  stream_reuse& operator=(const stream_reuse&) = delete;

  // ---- Fences (caller holds the pool's lock) ----
  uint64_t next_free_seq() { return ++free_seq_; }
  bool safe_for_other_streams(const block& b) const { return b.free_seq <= safe_seq_; }
  // Records a fence if frees are not yet covered and none is in flight; then polls it.
  status fence();
  // Blocks until every free so far is safe for other streams.
  status synchronize();

  // ---- record_stream (caller holds the pool's lock) ----
  // Records one event per stream in b.stream_uses; the block becomes pending until they complete.
  status defer_free(block* b);
  bool has_pending() const { return !pending_.empty(); }
  // Moves the blocks whose events have all completed into `ready`; blocks until then if `wait`.
  void collect_ready(std::vector<block*>* ready, bool wait);

  size_t pending_count() const { return pending_.size(); }

 private:
  struct pending_block {
    block* b;
    std::vector<backend::event_handle> events;
  };
  status poll_fence();

  backend::backend& backend_;
  int device_;
  backend::stream_handle stream_;
  uint64_t free_seq_ = 0;         // frees so far on this pool
  uint64_t safe_seq_ = 0;         // frees known complete on the device (fresh memory has seq 0)
  backend::event_handle fence_event_ = nullptr;
  uint64_t fence_seq_ = 0;        // free_seq_ when fence_event_ was recorded
  std::vector<pending_block> pending_;
};

}  // namespace tracepool::core
