// call_site_table.h: call stacks interned to small ids (notes/stacks.md §7.1-4), with what each
// site holds. A block stores only its site id; frames, tags and counters live here.
//
// Invariants:
//   - id 0 is "unknown" (capture off, not sampled, or the table full) and has no record;
//   - a record never moves or changes its key once `ready` is set, so reports read it without locks;
//   - the counters are in weighted units (see sampler.h): bytes are estimated bytes, blocks are
//     estimated blocks times block_unit. With sampling off every weight is 1 and they are exact.
//
// Locking: one spin lock per shard (chosen by hash) guards that shard's index; interning a stack seen
// before costs a hash, one uncontended lock and a compare. A new site's record is made under it (a
// host allocation, once per site). Spin locks rather than mutexes also because fork() takes every
// shard (Note [Fork]), and TSan's deadlock detector cannot follow one thread holding more than 64
// mutexes. Counters are relaxed atomics.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "script_frames.h"
#include "base/spin_lock.h"

namespace tracepool::core {

inline constexpr int64_t block_unit = 1 << 16;  // fixed point for estimated block counts

// A site's live bytes across the marks: fell at some mark, rose at how many (counted up to 2), and
// rose into the latest. Enough to tell growth over any number of marks (report.h, is_growing).
struct site_trend {
  bool fell = false;
  uint8_t rises = 0;
  bool rose_last = false;
};

// The key of a site is its native frames, its script frames (two opaque words each,
// script_frames.h) and its tag set. Script frames are described once, after interning, by the
// thread that interned them (`script` stays null until then, or if the provider could not).
struct site_record {
  uint64_t hash = 0;
  uint32_t tags = 0;           // tag set (tags.h)
  uint32_t depth = 0;          // native frames, innermost first
  uint32_t script_depth = 0;   // script frames, innermost first, after the native ones in `frames`
  // A site lent as a thread origin: the latest site at which the lending thread reached the driver
  // since (0: none yet), whose script frames its threads borrow instead (Note [Thread origins]).
  std::atomic<uint32_t> latest{0};
  std::unique_ptr<uintptr_t[]> frames;  // depth + script_depth * words_per_script_frame words
  std::atomic<bool> ready{false};
  std::atomic<script_frame*> script{nullptr};  // script_depth described frames, set once

  // How live bytes moved from mark to mark, over every mark made (tracer::mark; guarded by the
  // tracer's marks lock).
  int64_t live_at_last_mark = 0;
  site_trend trend;

  // The counters every allocation and free of the site updates (Note [Site counters]): the
  // allocating threads' line, then the freeing threads' line.
  alignas(64) std::atomic<int64_t> total_bytes{0};  // allocated since creation
  std::atomic<int64_t> total_blocks{0};             // x block_unit
  std::atomic<int64_t> peak_bytes{0};               // highest live bytes
  std::atomic<int64_t> freed_seen{0};               // freed_bytes as the allocating side last read it
  alignas(64) std::atomic<int64_t> freed_bytes{0};  // freed since creation

  // Estimated live bytes now (exact with sampling off and no allocation or free racing the read).
  int64_t live_bytes() const {
    const int64_t freed = freed_bytes.load(std::memory_order_acquire);
    return std::max<int64_t>(0, total_bytes.load(std::memory_order_acquire) - freed);
  }
};

// Note [Site counters]
// In a PyTorch training step the thread that frees a block is often not the one that allocated it:
// the main thread allocates a forward activation and the autograd thread frees it in backward, and
// the other way round for gradients. One line of counters per site, updated by both, moved between
// their cores twice per block, at a cross-core transfer each (about 100 ns on the H200's host,
// measured: the site counters were 110-158 ns per event there). So a site keeps two lines: what
// its allocating threads write (bytes and blocks allocated, the peak) and what its freeing threads
// write (bytes freed). Live bytes are their difference. Each line stays with the thread that writes
// it, and allocating reads the freeing side only when it might make a new peak: the allocating line
// remembers the freed bytes it last read (`freed_seen`, which only lags, as freed bytes only rise),
// so total - freed_seen bounds live bytes from above; while that bound is not above the peak, the
// peak cannot move and the other line is not touched. A site whose blocks live through a step reads
// it about once per step (at its first allocation, the step before's frees not yet seen), instead
// of moving two lines per block. The peak stays exact when a site's allocations and frees do not
// race each other; racing ones can move it by the bytes of that race (a free that is read late hides
// a peak; one counted after its block was handed out again, below, raises it by that block).
//
// Even on its own core, a site's line is rarely still in the cache: a step runs kernels' launch code,
// autograd and the optimizer between two allocations of one site, and the counters cost ~100 ns an
// event on the H200's host, waiting on the line. So the line is fetched early and written late: an
// allocation fetches it once its site is known (tracer::capture) and counts once the pool has handed
// out the block; a free fetches it when told (observer `free`) and counts when the pool has taken the
// block back (`freed`). The pool's few hundred ns of work hide the fetch.

class call_site_table {
 public:
  call_site_table();
  ~call_site_table();
  call_site_table(const call_site_table&) = delete;
  call_site_table& operator=(const call_site_table&) = delete;

  // The id of (frames, tags), interned on first sight; 0 if the table is full or memory ran out.
  // `frames` holds `depth` native frames, then `script_depth` script frames of two words each.
  uint32_t intern(const uintptr_t* frames, uint32_t depth, uint32_t script_depth, uint32_t tags);
  // Publishes the description of a site's script frames (the first one wins; a loser's array
  // is deleted). Takes ownership of `described`.
  void describe(uint32_t id, script_frame* described);
  // pre: 0 < id < end() and the id came from intern() (or ready() is true).
  site_record& at(uint32_t id) { return chunks_[id >> chunk_bits].load(std::memory_order_acquire)[id & chunk_mask]; }
  // One past the largest id handed out; records below it may still be filling (check ready()).
  uint32_t end() const { return next_id_.load(std::memory_order_acquire); }
  bool ready(uint32_t id);
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

  // Every shard, then the chunk lock: the order in which intern() nests them (Note [Fork]).
  void lock_all();
  void unlock_all();

  void on_alloc(uint32_t id, int64_t bytes, int64_t blocks);
  void on_free(uint32_t id, int64_t bytes);
  // Fetch the line on_alloc or on_free will write, so that the pool's work hides the fetch
  // (Note [Site counters]).
  void prefetch_alloc_side(uint32_t id) { __builtin_prefetch(&at(id).total_bytes, 1); }
  void prefetch_free_side(uint32_t id) { __builtin_prefetch(&at(id).freed_bytes, 1); }

  static constexpr uint32_t max_sites = 1u << 22;

 private:
  static constexpr uint32_t chunk_bits = 12, chunk_mask = (1u << chunk_bits) - 1;
  static constexpr uint32_t chunk_count = max_sites >> chunk_bits;
  static constexpr size_t shard_count = 64;

  struct shard {
    spin_lock guard;
    std::vector<uint32_t> slots;  // open addressing; 0 = empty
    size_t used = 0;
  };

  struct key {
    uint64_t hash;
    const uintptr_t* frames;
    uint32_t depth, script_depth, tags;
    size_t words() const { return depth + size_t{script_depth} * words_per_script_frame; }
  };
  uint32_t find(shard& sh, const key& k);
  uint32_t add(shard& sh, const key& k);
  site_record* slot_for(uint32_t id);

  shard shards_[shard_count];
  std::atomic<site_record*> chunks_[chunk_count] = {};
  std::mutex chunk_mutex_;
  std::atomic<uint32_t> next_id_{1};
  std::atomic<uint64_t> dropped_{0};
};

uint64_t hash_stack(const uintptr_t* words, size_t count, uint32_t depth, uint32_t tags);

}  // namespace tracepool::core
