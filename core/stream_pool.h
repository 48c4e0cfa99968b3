// stream_pool.h: the cached memory of one (device, stream): its segments, their blocks, the free
// lists, best fit with split and merge, and the block statistics. Invariants: block.h, checked by
// validate().
//
// Locking: every member except the constructor and stream() requires mutex() to be held. Nothing
// under it calls into a host language or takes another pool's lock (except by try_lock, see
// device_cache).
#pragma once

#include <atomic>
#include <mutex>
#include <vector>

#include "backend/backend.h"
#include "block.h"
#include "free_list.h"
#include "private_pool.h"
#include "stats.h"
#include "stream_reuse.h"

namespace tracepool::core {

class stream_pool {
 public:
  // `pool`: the private pool it belongs to (Note [Private pools] in private_pool.h), 0 for the default.
  stream_pool(backend::backend& be, const capture_gate& gate, int device, backend::stream_handle stream,
              uint64_t pool = 0);
  ~stream_pool();  // the segments must have been disowned already
  stream_pool(const stream_pool&) = delete;
  stream_pool& operator=(const stream_pool&) = delete;

  std::mutex& mutex() { return mutex_; }
  backend::stream_handle stream() const { return stream_; }
  uint64_t pool() const { return pool_; }
  // A pool whose blocks are never split (PyTorch's MemPool(no_split=True)): each allocation takes a
  // whole free block, so each segment holds one block. Set by device_cache, under no lock.
  void set_no_split(bool on) { no_split_.store(on, std::memory_order_relaxed); }
  bool no_split() const { return no_split_.load(std::memory_order_relaxed); }
  // Whether it grows by classic segments only: a private pool's do (Note [Private pools]).
  bool classic_only() const { return pool_ != 0; }

  // Smallest free block of the kind that holds `rounded`, or nullptr.
  block* find_free(size_t rounded, pool_kind kind) const;
  // Hands out free block `b` (split if worthwhile) for a request of `requested` bytes.
  block* allocate(block* b, size_t rounded, size_t requested, block_tag tag);
  // ---- Pool checkpoints (Note [Pool checkpoints] in private_pool.h) ----
  // Whether [ptr, ptr + size) lies inside one segment of this pool, with memory behind all of it, and
  // becomes free once every block allocated in it is freed: no pending free overlaps it, nor an
  // allocated block with record_stream streams, unless `can_wait` (for their events).
  bool restorable(const char* ptr, size_t size, bool can_wait) const;
  // Hands out [ptr, ptr + size) of this pool's free memory as one block, exactly there: the free
  // block holding it keeps what lies before and after. nullptr (nothing changed) if no free block
  // holds it whole. May throw bad_alloc before any change.
  block* allocate_at(char* ptr, size_t size, size_t requested, block_tag tag);
  // Takes back an allocated block; with record_stream streams it becomes pending until they are done.
  status free(block* b);
  // Finishes pending frees whose events completed (all of them, waiting, if `wait`).
  // `stream_alive`: the caller is allocating on this pool's stream (see stream_reuse::on_free).
  void process_pending(bool wait, bool stream_alive);
  bool has_pending() const { return reuse_.has_pending(); }
  // No capture is running any more: what was read of their graphs is dropped (stream_reuse).
  void forget_graph() { reuse_.forget_graph(); }
  // In a forked child that cannot use its parent's device state (Note [Fork]): pending frees finish
  // and record_stream uses are forgotten, with no backend call.
  void forget_device_work();
  // Adds a segment that is free as a whole (new from the device, or moved from another pool).
  void adopt(segment* s);
  // Takes back a segment this pool disowned for release when the backend refused it; its last use
  // (free_seq) and last holder stay what they were.
  void readopt(segment* s);
  // Removes and returns the smallest whole free segment of `kind` with at least `rounded` bytes that
  // other streams may use (fencing this pool's stream if needed); nullptr if there is none.
  segment* disown_safe_segment(size_t rounded, pool_kind kind);
  // Removes every whole free segment, for release to the device (the caller deletes each segment
  // and its block once the backend has its memory, or readopts it). Growable segments stay.
  void disown_free_segments(std::vector<segment*>* out);

  // ---- Growable segments (Note [Growable segments] in block.h); device_cache maps and unmaps ----
  // This pool's growable segment of `kind`, or nullptr.
  segment* growable(pool_kind kind) const { return growable_[static_cast<int>(kind)]; }
  // Takes in new growable segment `s`, whose one block (first) is unmapped.
  void adopt_growable(segment* s);
  // Removes growable segment `s`, unmapped as a whole; the caller frees its range and deletes it.
  void disown_growable(segment* s);
  // Where `rounded` bytes fit once pieces are mapped: the unmapped block of `s` that, mapped from its
  // start, makes with the free block before it one free block of at least `rounded` bytes with the
  // fewest new pieces; *bytes: how much of it to map, whole pieces; *least: the fewest whole pages
  // (`page` bytes each) that would do, the last piece cut short. nullptr if no stretch is large enough.
  block* growth_room(const segment* s, size_t rounded, size_t page, size_t* bytes, size_t* least) const;
  // The first `bytes` of unmapped block `u` now have memory behind them: they become free, merged
  // with a free block before them. pre: keep_spares(1).
  void mapped(block* u, size_t bytes, uint32_t site);
  // A stretch of whole mappings inside a free block of a growable segment: unmap() can take it back.
  struct free_pieces {
    block* b;
    char* begin;
    size_t bytes;
    bool idle;  // the block's last use is known complete on the device (else wait for it first)
  };
  void unmappable(const segment* s, std::vector<free_pieces>* out) const;
  // The first `bytes` of stretch `p` (whole mappings) no longer have memory behind them: the free
  // block keeps its ends, the middle becomes unmapped, and a stretch of `piece` bytes now wholly
  // unmapped loses its splits. pre: keep_spares(2).
  void unmapped(const free_pieces& p, size_t bytes);
  // Makes sure the next `n` blocks split off need no host allocation (throws bad_alloc), so that
  // once the device has mapped or unmapped memory, recording it cannot fail.
  void keep_spares(size_t n);

  // Record another stream that uses allocated block `b` (Tensor.record_stream).
  void record_stream(block* b, backend::stream_handle used_on);

  // Appends a record of every block that has memory behind it, for reports.
  void collect(std::vector<block_record>* out) const;

  const stat_table& stats() const { return stats_; }
  stat_table& stats() { return stats_; }
  status validate() const;

 private:
  void hand_out(block* b, size_t requested, block_tag tag);
  block* block_at(const char* ptr) const;
  block* new_block();
  void recycle(block* b);
  void insert_free(block* b);
  void erase_free(block* b);
  void release_to_free_list(block* b, bool stream_alive);
  void merge_into_free_list(block* b);
  block* split_off(block* b, size_t at);
  block* merge_unmapped(block* u);
  void absorb(block* left, block* right);
  void disown(segment* s);
  void link(segment* s);
  void unlink(segment* s);
  status validate_segment(const segment* s, stat_table* seen) const;
  status validate_block(const segment* s, const block* b) const;
  status validate_splits(const segment* s) const;

  std::mutex mutex_;
  backend::stream_handle stream_;
  uint64_t pool_;
  std::atomic<bool> no_split_{false};
  small_free_list small_;
  large_free_list large_;
  stat_table stats_;
  stream_reuse reuse_;
  segment* segments_ = nullptr;  // intrusive list through segment::pool_next
  block* spare_ = nullptr;       // recycled block structs, linked through bin_next
  size_t spares_ = 0;
  segment* growable_[pool_kind_count] = {};
};

}  // namespace tracepool::core
