// device_cache.h: everything tracepool caches on one device: one stream_pool per stream, the
// segments obtained from the backend (classic, or growable: Note [Growable segments] in block.h), the
// byte limit, and the allocation ladder with its OOM retry.
//
// Locking: mutex_ (the device lock) guards pools_, segments_, segment statistics and counters. It is
// taken under a pool's lock, never the other way (Note [Lock order] in allocator.h).
//
// Validation (validate:on, and debug builds): every pool is checked after each operation on it. A
// broken invariant is a bug in tracepool; the operation then fails with status::internal naming the
// invariant (an allocation gives its block back first), and the process goes on.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "observer.h"
#include "private_pool.h"
#include "stats.h"
#include "stream_pool.h"

namespace tracepool::core {

// A private pool still retained, as reports name it (Note [Private pools]).
struct private_pool_info {
  uint64_t pool = 0;
  uint32_t site = 0;  // the call that created it
  std::string label;  // its kind ("CUDA graph", "torch.cuda.MemPool"); "" until label_pool names it
};

class device_cache {
 public:
  // Segment events go to `observers` (Note [Observers]), which must outlive the device_cache.
  // `growable`: segments:growable, where the backend can map memory into reserved ranges.
  device_cache(backend::backend& be, const capture_gate& gate, int device, size_t limit, bool validate,
               const observer_list& observers, bool growable = false);
  ~device_cache();  // gives every segment back to the backend, live blocks included
  device_cache(const device_cache&) = delete;
  device_cache& operator=(const device_cache&) = delete;

  int device() const { return device_; }
  // Whether pools grow growable segments (segments:growable was asked for and the backend can).
  bool growable() const { return growable_; }
  // The pool of `stream` in private pool `pool` (0: the default one), created on first use. Stream
  // pools live as long as the device_cache. pre: `pool` is 0 or retained.
  stream_pool* pool_for(backend::stream_handle stream, uint64_t pool = 0);

  // ---- Private pools (Note [Private pools] in private_pool.h) ----
  // Creates private pool `pool` (nonzero) with one use, or adds a use; `site` names it in reports.
  status retain_pool(uint64_t pool, uint32_t site);
  // Drops a use; at none the pool retires and its free memory goes back (see the Note).
  status release_pool(uint64_t pool);
  // Uses of `pool` (0 if it does not exist or has retired).
  int pool_use_count(uint64_t pool);
  bool pool_exists(uint64_t pool);
  // Finishes every pool's pending record_stream frees that can be (events of frees made during a
  // capture are recorded first); gives nothing back; drops what was read of the captures' graphs.
  // For when the last route closes.
  void process_pending();
  // PyTorch's emptyCache(mempool_id): a retired pool's whole free segments go back to the device; a
  // retained one keeps everything. `released_by`: as empty_cache's.
  status empty_pool(uint64_t pool, uint32_t released_by = 0);
  // The addresses of `pool`'s allocated blocks.
  void pool_blocks(uint64_t pool, std::vector<void*>* out);
  // Note [Pool checkpoints] in private_pool.h. The allocated blocks of `pool`, in address order;
  // invalid_argument if `pool` is not retained.
  status checkpoint(uint64_t pool, std::vector<pool_checkpoint::held>* out);
  // Whether `cp`'s pool is retained and every block of `cp` can be restored (stream_pool::restorable);
  // names the first that cannot.
  status check_restorable(const pool_checkpoint& cp, bool can_wait);
  // Finishes the pending frees of `pool`'s stream pools, waiting for their events if `wait`.
  void finish_pending(uint64_t pool, bool wait);
  // Hands out checkpointed block `h` of `pool` again, at its address (stream_pool::allocate_at).
  status restore_block(uint64_t pool, const pool_checkpoint::held& h, block** out);
  // PyTorch's MemPool options (Note [Private pools]): `no_split`, its blocks are never split, each
  // allocation a segment of its own (classic segments, sized to the request); `use_on_oom`, an
  // allocation of the default pool that does not fit even after the cache was emptied takes a free
  // block of this pool on its stream, which returns to this pool when freed. invalid_argument if
  // `pool` is not retained.
  status set_pool_options(uint64_t pool, bool no_split, bool use_on_oom);
  status pool_options(uint64_t pool, bool* no_split, bool* use_on_oom);
  // New segments of `pool` come from `source` (PyTorch's MemPool(allocator=...)), classic ones,
  // and go back to it. invalid_argument if `pool` is not retained or has segments already.
  status set_pool_source(uint64_t pool, std::shared_ptr<const segment_source> source);
  // Names the kind of a retained pool in reports; invalid_argument if `pool` is not retained.
  status label_pool(uint64_t pool, std::string label);
  // Every private pool still retained, by id. A block whose pool is not among them is ordinary
  // memory: its pool retired (or it is the default pool's).
  std::vector<private_pool_info> retained_pools();

  // pre: 0 < size <= max_request.
  // `at_least`: a block size the host's rounding asked for (allocator::set_rounding), 0 for none.
  status malloc(stream_pool* pool, size_t size, block_tag tag, block** out, size_t at_least = 0);
  // *taken: the pool has the block (it is no longer the caller's), whatever the status says.
  // `freed_at`: the call site that freed it, if the history wants it (segment_event::freed_at).
  status free(block* b, bool* taken, uint32_t freed_at = 0);
  void record_stream(block* b, backend::stream_handle used_on);
  // Gives fully free segments back to the device. With `wait`, first waits for pending frees. A
  // segment the backend refuses to take stays cached (the first such failure is returned).
  // `released_by`: the call site that asked, if the history wants it (segment_event::freed_at).
  status empty_cache(bool wait, uint32_t released_by = 0);

  device_stats stats();
  // Every block of every pool (pools locked one at a time).
  void collect(std::vector<block_record>* out);
  void reset_peak();
  void reset_accumulated();
  void set_limit(size_t bytes);
  void count_invalid_free();
  // Whether ptr lies inside one of this device's segments.
  bool contains(const void* ptr);
  status validate();

  // Every pool's lock, then the device lock (their nesting order; Note [Fork] in base/fork_guard.h).
  void lock_for_fork();
  // The pools, then the device lock, which keeps pools_ still meanwhile. `forget_device_work`: in a
  // child whose backend stays the parent's, pools stop waiting for device work first.
  void unlock_after_fork(bool forget_device_work);

 private:
  status try_allocate(stream_pool* pool, size_t rounded, size_t size, block_tag tag, block** out);
  segment* take_from_other_streams(stream_pool* pool, size_t rounded, pool_kind kind);
  status grow(stream_pool* pool, size_t rounded, pool_kind kind, uint32_t site, segment** out);
  status release(const std::vector<segment*>& segments, uint32_t released_by);
  // Growable segments (growable_segments.cpp). All under the pool's lock.
  status grow_in_place(stream_pool* pool, size_t rounded, pool_kind kind, uint32_t site, block** out);
  status new_growable(stream_pool* pool, pool_kind kind, uint32_t site, segment** out);
  status map_pieces(stream_pool* pool, block* u, size_t bytes, size_t least, uint32_t site);
  status unmap_free_pieces(stream_pool* pool, uint32_t released_by);
  status unmap_stretch(stream_pool* pool, const stream_pool::free_pieces& p, uint32_t released_by);
  status drop_growable(stream_pool* pool, segment* s);
  bool admit(size_t bytes, const char* what);
  void unmap_all(segment* s);
  status out_of_memory(size_t size, size_t rounded);
  std::vector<stream_pool*> pools_snapshot();
  stream_pool* existing_pool(backend::stream_handle stream, uint64_t pool);
  stream_pool* find_pool(backend::stream_handle stream, uint64_t pool);  // pre: mutex_ held
  status no_pool(const char* what, uint64_t pool) const;  // the error for a pool that is not retained
  status release_free_segments(stream_pool* pool, bool wait, uint32_t released_by = 0);
  bool retired(const stream_pool* pool);
  status check(stream_pool* pool, const char* after);

  struct private_pool {
    int uses = 0;
    uint32_t site = 0;  // the call that created it
    std::string label;  // label_pool's; "" if none
    bool no_split = false;
    bool use_on_oom = false;
    std::shared_ptr<const segment_source> source;
  };
  std::shared_ptr<const segment_source> source_of(const stream_pool* pool);
  status give_back(const segment* seg, void* ptr, size_t bytes, backend::stream_handle stream);
  bool borrow_on_oom(backend::stream_handle stream, size_t rounded, size_t size, block_tag tag, block** out);

  backend::backend& backend_;
  const capture_gate& gate_;
  const int device_;
  const bool validate_;
  const observer_list& observers_;
  const bool growable_;

  std::mutex mutex_;
  std::vector<std::unique_ptr<stream_pool>> pools_;
  std::map<uint64_t, private_pool> private_;  // retained private pools; a retired one is erased
  std::map<const char*, segment*> segments_;  // by start address
  stat_table segment_stats_;                  // segment and reserved_bytes rows only
  event_counters counters_;
  size_t limit_ = 0;
  size_t reserving_ = 0;  // bytes being obtained from the backend right now
  size_t releasing_ = 0;  // bytes being given back (Note [Release order])
  size_t growable_mapped_ = 0;  // bytes mapped in growable segments, for validate()
};

}  // namespace tracepool::core
