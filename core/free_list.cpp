#include "free_list.h"

namespace tracepool::core {

void small_free_list::insert(block* b) {
  block*& head = oversize(b) ? oversize_ : heads_[bin_of(b->size)];
  b->bin_prev = nullptr;
  b->bin_next = head;
  if (head != nullptr) head->bin_prev = b;
  head = b;
  if (oversize(b)) {
    ++oversize_count_;
    return;
  }
  mark(bin_of(b->size));
  ++count_;
}

void small_free_list::erase(block* b) {
  block*& head = oversize(b) ? oversize_ : heads_[bin_of(b->size)];
  if (b->bin_prev != nullptr) b->bin_prev->bin_next = b->bin_next;
  else head = b->bin_next;
  if (b->bin_next != nullptr) b->bin_next->bin_prev = b->bin_prev;
  b->bin_prev = b->bin_next = nullptr;
  if (oversize(b)) {
    --oversize_count_;
    return;
  }
  if (head == nullptr) unmark(bin_of(b->size));
  --count_;
}

// The first non-empty bin at or above the request's: two bit scans, one in the request's word and,
// failing that, one in the summary. Failing both, an oversize block (each holds any small request).
block* small_free_list::best_fit(size_t rounded) const {
  if (rounded > small_segment_size) return nullptr;
  const size_t bin = bin_of(rounded);
  size_t word = bin / 64;
  uint64_t bits = words_[word] & (~uint64_t{0} << (bin % 64));
  if (bits == 0) {
    const uint64_t higher = word + 1 >= words_.size() ? 0 : summary_ & (~uint64_t{0} << (word + 1));
    if (higher == 0) return oversize_;
    word = static_cast<size_t>(__builtin_ctzll(higher));
    bits = words_[word];
  }
  return heads_[word * 64 + static_cast<size_t>(__builtin_ctzll(bits))];
}

bool small_free_list::contains(const block* b) const {
  for (const block* p = oversize(b) ? oversize_ : heads_[bin_of(b->size)]; p != nullptr; p = p->bin_next)
    if (p == b) return true;
  return false;
}

void small_free_list::mark(size_t bin) {
  words_[bin / 64] |= uint64_t{1} << (bin % 64);
  summary_ |= uint64_t{1} << (bin / 64);
}

void small_free_list::unmark(size_t bin) {
  words_[bin / 64] &= ~(uint64_t{1} << (bin % 64));
  if (words_[bin / 64] == 0) summary_ &= ~(uint64_t{1} << (bin / 64));
}

block* large_free_list::best_fit(size_t rounded) const {
  block key;
  key.size = rounded;
  key.ptr = nullptr;
  auto it = set_.lower_bound(&key);
  return it == set_.end() ? nullptr : *it;
}

}  // namespace tracepool::core
