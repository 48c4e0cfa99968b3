// pointer_map.h: address -> block of every block handed out, split into shards by address hash so
// that threads freeing different blocks rarely meet on a lock. Each shard is an open-addressing table
// (linear probing, backward-shift deletion, no tombstones): one cache line touched per lookup in the
// common case, no host allocation except when a shard grows.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "block.h"
#include "base/spin_lock.h"

namespace tracepool::core {

class pointer_map {
 public:
  static constexpr size_t shard_count = 64;

  // pre: ptr is not in the map.
  void insert(void* ptr, block* b);
  // Removes ptr and returns its block; nullptr if absent.
  block* take(void* ptr);
  // The block of ptr, or nullptr; `fn(block*)` runs under the shard's lock so the block cannot be
  // freed meanwhile.
  template <typename Fn>
  bool with_block(void* ptr, Fn&& fn) {
    shard& s = shard_of(ptr);
    std::lock_guard<spin_lock> lock(s.guard);
    block* b = s.find(ptr);
    if (b == nullptr) return false;
    fn(b);
    return true;
  }
  size_t size();
  // Every shard, in index order (Note [Fork] in fork_guard.h).
  void lock_all();
  void unlock_all();

 private:
  struct slot {
    void* key = nullptr;
    block* value = nullptr;
  };
  struct alignas(64) shard {
    spin_lock guard;
    std::vector<slot> slots;  // size is a power of two, or 0
    size_t used = 0;

    block* find(void* key) const;
    void insert(void* key, block* value);
    block* erase(void* key);
    void grow();
  };

  // Blocks are 512-byte aligned: drop the low bits, then mix so neighbouring blocks spread out.
  static uint64_t hash(const void* p) { return (reinterpret_cast<uintptr_t>(p) >> 9) * 0x9E3779B97F4A7C15ull; }
  shard& shard_of(const void* p) { return shards_[hash(p) >> 58]; }

  shard shards_[shard_count];
};

}  // namespace tracepool::core
