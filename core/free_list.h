// free_list.h: the free blocks of one stream pool, one structure per pool kind, each answering
// "smallest free block of at least n bytes" (best fit).
//
// Small pool: free blocks of a classic segment are at most one 2 MiB segment, so sizes take 4096 exact
// values; one intrusive list per size plus a two-level bitmap find the best fit in a few instructions
// (two bit scans), with no allocation. Larger free blocks, which only growable segments have (Note
// [Growable segments] in block.h), are kept on one more intrusive list: any of them holds any small
// request, and a list allocates nothing, so a free cannot fail halfway. Large pool: an ordered set by
// (size, address), as PyTorch (its insert allocates a node: host memory exhaustion there is the one
// failure left, as before).
#pragma once

#include <array>
#include <cstdint>
#include <set>

#include "block.h"

namespace tracepool::core {

struct by_size_then_address {
  bool operator()(const block* a, const block* b) const { return a->size != b->size ? a->size < b->size : a->ptr < b->ptr; }
};

class small_free_list {
 public:
  static constexpr size_t bin_count = small_segment_size / min_block_size;  // 4096: bin i holds size (i+1)*512

  void insert(block* b);
  void erase(block* b);
  block* best_fit(size_t rounded) const;  // nullptr if none; does not remove
  size_t size() const { return count_ + oversize_count_; }
  bool contains(const block* b) const;    // O(bin length); for validate()

 private:
  static bool oversize(const block* b) { return b->size > small_segment_size; }
  static size_t bin_of(size_t size) { return size / min_block_size - 1; }
  void mark(size_t bin);
  void unmark(size_t bin);

  std::array<block*, bin_count> heads_{};
  std::array<uint64_t, bin_count / 64> words_{};  // bit i%64 of word i/64: bin i is non-empty
  uint64_t summary_ = 0;                          // bit w: words_[w] != 0
  size_t count_ = 0;                              // in the bins
  block* oversize_ = nullptr;  // over small_segment_size (growable segments), linked through bin_next
  size_t oversize_count_ = 0;
};

class large_free_list {
 public:
  void insert(block* b) { set_.insert(b); }
  void erase(block* b) { set_.erase(b); }
  block* best_fit(size_t rounded) const;
  size_t size() const { return set_.size(); }
  bool contains(const block* b) const { return set_.count(const_cast<block*>(b)) != 0; }

 private:
  std::set<block*, by_size_then_address> set_;
};

}  // namespace tracepool::core
