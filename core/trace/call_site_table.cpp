#include "call_site_table.h"

#include <cstring>
#include <new>

namespace tracepool::core {

uint64_t hash_stack(const uintptr_t* words, size_t count, uint32_t depth, uint32_t tags) {
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t{tags} << 32) ^ depth ^ (uint64_t{count} << 16);
  for (size_t i = 0; i < count; ++i) {
    h ^= words[i];
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
  }
  return h == 0 ? 1 : h;
}

call_site_table::call_site_table() = default;

call_site_table::~call_site_table() {
  for (uint32_t id = 1, end = next_id_.load(std::memory_order_relaxed); id < end; ++id)
    if (site_record* chunk = chunks_[id >> chunk_bits].load(std::memory_order_relaxed); chunk != nullptr)
      delete[] chunk[id & chunk_mask].script.load(std::memory_order_relaxed);
  for (auto& c : chunks_) delete[] c.load(std::memory_order_relaxed);
}

bool call_site_table::ready(uint32_t id) {
  if (id == 0 || id >= end()) return false;
  site_record* chunk = chunks_[id >> chunk_bits].load(std::memory_order_acquire);
  return chunk != nullptr && chunk[id & chunk_mask].ready.load(std::memory_order_acquire);
}

uint32_t call_site_table::find(shard& sh, const key& k) {
  if (sh.slots.empty()) return 0;
  const size_t mask = sh.slots.size() - 1;
  for (size_t i = (k.hash >> 6) & mask;; i = (i + 1) & mask) {
    const uint32_t id = sh.slots[i];
    if (id == 0) return 0;
    const site_record& r = at(id);
    if (r.hash == k.hash && r.depth == k.depth && r.script_depth == k.script_depth && r.tags == k.tags &&
        std::memcmp(r.frames.get(), k.frames, k.words() * sizeof(uintptr_t)) == 0)
      return id;
  }
}

site_record* call_site_table::slot_for(uint32_t id) {
  std::atomic<site_record*>& chunk = chunks_[id >> chunk_bits];
  site_record* c = chunk.load(std::memory_order_acquire);
  if (c == nullptr) {
    std::lock_guard<std::mutex> lock(chunk_mutex_);
    c = chunk.load(std::memory_order_relaxed);
    if (c == nullptr) {
      c = new site_record[size_t{1} << chunk_bits];
      chunk.store(c, std::memory_order_release);
    }
  }
  return &c[id & chunk_mask];
}

// Under sh.guard.
uint32_t call_site_table::add(shard& sh, const key& k) {
  if ((sh.used + 1) * 2 > sh.slots.size()) {  // keep the load under one half
    std::vector<uint32_t> bigger(sh.slots.empty() ? 64 : sh.slots.size() * 2, 0);
    const size_t mask = bigger.size() - 1;
    for (uint32_t id : sh.slots) {
      if (id == 0) continue;
      size_t i = (at(id).hash >> 6) & mask;
      while (bigger[i] != 0) i = (i + 1) & mask;
      bigger[i] = id;
    }
    sh.slots.swap(bigger);
  }
  uint32_t id = next_id_.load(std::memory_order_relaxed);
  do {
    if (id >= max_sites) return 0;
  } while (!next_id_.compare_exchange_weak(id, id + 1, std::memory_order_acq_rel));
  site_record* r = slot_for(id);
  r->hash = k.hash;
  r->tags = k.tags;
  r->depth = k.depth;
  r->script_depth = k.script_depth;
  r->frames.reset(new uintptr_t[k.words() == 0 ? 1 : k.words()]);
  std::memcpy(r->frames.get(), k.frames, k.words() * sizeof(uintptr_t));
  r->ready.store(true, std::memory_order_release);
  const size_t mask = sh.slots.size() - 1;
  size_t i = (k.hash >> 6) & mask;
  while (sh.slots[i] != 0) i = (i + 1) & mask;
  sh.slots[i] = id;
  ++sh.used;
  return id;
}

uint32_t call_site_table::intern(const uintptr_t* frames, uint32_t depth, uint32_t script_depth, uint32_t tags) {
  key k{0, frames, depth, script_depth, tags};
  k.hash = hash_stack(frames, k.words(), depth, tags);
  shard& sh = shards_[k.hash % shard_count];
  std::lock_guard<spin_lock> lock(sh.guard);
  if (uint32_t id = find(sh, k); id != 0) return id;
  try {
    if (uint32_t id = add(sh, k); id != 0) return id;
  } catch (const std::bad_alloc&) {
  }
  dropped_.fetch_add(1, std::memory_order_relaxed);  // attributed to "unknown" instead
  return 0;
}

void call_site_table::describe(uint32_t id, script_frame* described) {
  script_frame* expected = nullptr;
  if (!at(id).script.compare_exchange_strong(expected, described, std::memory_order_acq_rel)) delete[] described;
}

void call_site_table::lock_all() {
  for (shard& sh : shards_) sh.guard.lock_for_fork();
  chunk_mutex_.lock();
}

void call_site_table::unlock_all() {
  chunk_mutex_.unlock();
  for (shard& sh : shards_) sh.guard.unlock_after_fork();
}

void call_site_table::on_alloc(uint32_t id, int64_t bytes, int64_t blocks) {
  site_record& r = at(id);
  const int64_t total = r.total_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  r.total_blocks.fetch_add(blocks, std::memory_order_relaxed);
  int64_t peak = r.peak_bytes.load(std::memory_order_relaxed);
  // Live bytes are at most total - freed_seen: while that is not above the peak, neither is live
  // (Note [Site counters]).
  if (total - r.freed_seen.load(std::memory_order_relaxed) <= peak) return;
  const int64_t freed = r.freed_bytes.load(std::memory_order_acquire);
  r.freed_seen.store(freed, std::memory_order_relaxed);  // a racing older value only lags: still a bound
  const int64_t live = total - freed;
  while (live > peak && !r.peak_bytes.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
}

void call_site_table::on_free(uint32_t id, int64_t bytes) {
  at(id).freed_bytes.fetch_add(bytes, std::memory_order_release);
}

}  // namespace tracepool::core
