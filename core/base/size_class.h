// size_class.h: how requests are rounded and which segment serves them (PyTorch's proven policy,
// notes/pytorch.md §2.1). Pure functions, tested with tables in tests/unit/size_class_test.cpp.
#pragma once

#include <cstddef>

namespace tracepool::core {

inline constexpr size_t min_block_size = 512;            // every size is a multiple; blocks stay 512-aligned
inline constexpr size_t small_request_max = 1u << 20;    // requests up to 1 MiB use the small pool
inline constexpr size_t small_segment_size = 2u << 20;   // small segments are 2 MiB
inline constexpr size_t large_segment_size = 20u << 20;  // requests up to 10 MiB share 20 MiB segments
inline constexpr size_t min_large_alloc = 10u << 20;     // above this a segment is sized to the request
inline constexpr size_t large_round = 2u << 20;          // ... rounded up to 2 MiB
// Larger requests are rejected as absurd (invalid argument), not attempted: 2^50 bytes is 1 PiB.
inline constexpr size_t max_request = size_t{1} << 50;

enum class pool_kind : int { small = 0, large = 1 };
inline constexpr int pool_kind_count = 2;

// pre: 0 < size <= max_request.
constexpr size_t round_size(size_t size) {
  return size < min_block_size ? min_block_size : (size + min_block_size - 1) / min_block_size * min_block_size;
}

constexpr pool_kind pool_kind_for(size_t rounded) {
  return rounded <= small_request_max ? pool_kind::small : pool_kind::large;
}

// Size of the segment to obtain from the device when no cached block fits `rounded`.
constexpr size_t segment_size_for(size_t rounded) {
  if (rounded <= small_request_max) return small_segment_size;
  if (rounded < min_large_alloc) return large_segment_size;
  return (rounded + large_round - 1) / large_round * large_round;
}

// Whether a free block of `block_size` serving `rounded` keeps the remainder as a free block.
// Small blocks split whenever a minimal block remains; large ones only when over 1 MiB remains,
// so that large segments are not cut into slivers no large request can use. In a growable segment
// (Note [Growable segments] in block.h) every block splits, as in PyTorch's expandable segments:
// a sliver merges again with the free stretch beside it, and its pieces can be unmapped.
constexpr bool should_split(pool_kind kind, size_t block_size, size_t rounded, bool growable = false) {
  const size_t remaining = block_size - rounded;
  return kind == pool_kind::small || growable ? remaining >= min_block_size : remaining > small_request_max;
}

}  // namespace tracepool::core
