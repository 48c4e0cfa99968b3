#include "pointer_map.h"

namespace tracepool::core {

namespace {
// Bits of the hash that pick a slot; the top 6 picked the shard.
size_t home_slot(uint64_t h, size_t capacity) { return static_cast<size_t>(h >> 20) & (capacity - 1); }
}  // namespace

block* pointer_map::shard::find(void* key) const {
  if (slots.empty()) return nullptr;
  const size_t mask = slots.size() - 1;
  for (size_t i = home_slot(hash(key), slots.size());; i = (i + 1) & mask) {
    if (slots[i].key == key) return slots[i].value;
    if (slots[i].key == nullptr) return nullptr;
  }
}

void pointer_map::shard::grow() {
  std::vector<slot> old = std::move(slots);
  slots.assign(old.empty() ? 64 : old.size() * 2, slot{});
  used = 0;
  for (const slot& s : old)
    if (s.key != nullptr) insert(s.key, s.value);
}

void pointer_map::shard::insert(void* key, block* value) {
  if ((used + 1) * 2 > slots.size()) grow();  // load factor at most 1/2 keeps probes short
  const size_t mask = slots.size() - 1;
  size_t i = home_slot(hash(key), slots.size());
  while (slots[i].key != nullptr) i = (i + 1) & mask;
  slots[i] = slot{key, value};
  ++used;
}

// Backward-shift deletion: later entries of the probe run move into the hole, so lookups never need
// tombstones.
block* pointer_map::shard::erase(void* key) {
  if (slots.empty()) return nullptr;
  const size_t mask = slots.size() - 1;
  size_t i = home_slot(hash(key), slots.size());
  while (slots[i].key != key) {
    if (slots[i].key == nullptr) return nullptr;
    i = (i + 1) & mask;
  }
  block* found = slots[i].value;
  for (size_t j = (i + 1) & mask; slots[j].key != nullptr; j = (j + 1) & mask) {
    const size_t home = home_slot(hash(slots[j].key), slots.size());
    // Move j into the hole at i unless j's home lies cyclically in (i, j].
    const bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
    if (!stays) {
      slots[i] = slots[j];
      i = j;
    }
  }
  slots[i] = slot{};
  --used;
  return found;
}

void pointer_map::insert(void* ptr, block* b) {
  shard& s = shard_of(ptr);
  std::lock_guard<spin_lock> lock(s.guard);
  s.insert(ptr, b);
}

block* pointer_map::take(void* ptr) {
  shard& s = shard_of(ptr);
  std::lock_guard<spin_lock> lock(s.guard);
  return s.erase(ptr);
}

void pointer_map::lock_all() {
  for (shard& s : shards_) s.guard.lock_for_fork();
}

void pointer_map::unlock_all() {
  for (shard& s : shards_) s.guard.unlock_after_fork();
}

size_t pointer_map::size() {
  size_t n = 0;
  for (shard& s : shards_) {
    std::lock_guard<spin_lock> lock(s.guard);
    n += s.used;
  }
  return n;
}

}  // namespace tracepool::core
