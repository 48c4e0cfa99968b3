#include "sampler.h"

#include <atomic>
#include <cmath>

namespace tracepool::core {

namespace {

std::atomic<uint64_t> next_sampler{1};

// The calling thread's position in the byte stream of one sampler (reset when the thread moves to
// another sampler, so a test's fixed seed gives the same samples every run).
struct stream_state {
  uint64_t instance = 0;
  int64_t until = 0;  // bytes left before the next sample point
  uint64_t rng = 0;
};
thread_local stream_state tls_stream;

uint64_t splitmix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

}  // namespace

sampler::sampler(size_t mean_bytes, uint64_t seed)
    : mean_(mean_bytes), seed_(seed), instance_(next_sampler.fetch_add(1)) {}

int64_t sampler::next_gap(uint64_t* rng) const {
  *rng ^= *rng << 13;  // xorshift64
  *rng ^= *rng >> 7;
  *rng ^= *rng << 17;
  const double u = (static_cast<double>(*rng >> 11) + 1.0) * 0x1.0p-53;  // in (0, 1]
  const double gap = -std::log(u) * static_cast<double>(mean_);
  return gap >= 9e18 ? INT64_MAX : static_cast<int64_t>(gap) + 1;
}

bool sampler::sample(size_t bytes) {
  if (mean_ == 0) return true;
  stream_state& st = tls_stream;
  if (st.instance != instance_) {
    // Threads are numbered in the order they first sample here, so a single-threaded workload
    // draws the same samples from the same seed every run.
    const uint64_t thread_number = threads_.fetch_add(1, std::memory_order_relaxed);
    st.instance = instance_;
    st.rng = splitmix(seed_ ^ splitmix(thread_number)) | 1;
    st.until = next_gap(&st.rng);
  }
  st.until -= static_cast<int64_t>(bytes);
  if (st.until > 0) return false;
  st.until = next_gap(&st.rng);
  return true;
}

double sampler::weight(size_t bytes) const {
  if (mean_ == 0) return 1.0;
  return 1.0 / -std::expm1(-static_cast<double>(bytes) / static_cast<double>(mean_));
}

}  // namespace tracepool::core
