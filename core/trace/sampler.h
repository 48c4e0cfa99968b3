// sampler.h: byte sampling (notes/stacks.md §6, §7.2). Each byte allocated is a point of a Poisson
// process of mean gap R bytes; an allocation is sampled when a point falls inside it, so a block of
// s bytes is sampled with probability p(s) = 1 - exp(-s/R) and, once sampled, stands for 1/p(s)
// blocks (Horvitz-Thompson weight): estimates summed over sampled blocks are unbiased.
//
// The not-sampled path is a thread-local subtraction and a sign test. The exponential gap is
// memoryless, so a fresh gap after each sample keeps p(s) exact.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace tracepool::core {

class sampler {
 public:
  // mean_bytes 0: every allocation is sampled with weight 1.
  sampler(size_t mean_bytes, uint64_t seed);

  bool enabled() const { return mean_ != 0; }
  size_t mean_bytes() const { return mean_; }
  // Whether an allocation of `bytes` (> 0) is sampled, on the calling thread's byte stream.
  bool sample(size_t bytes);
  // 1 / p(bytes): how many blocks of this size one sampled block stands for.
  double weight(size_t bytes) const;

 private:
  int64_t next_gap(uint64_t* rng) const;

  const size_t mean_;
  const uint64_t seed_;
  const uint64_t instance_;
  std::atomic<uint64_t> threads_{0};
};

}  // namespace tracepool::core
