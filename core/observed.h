// observed.h: memory a runtime got outside tracepool's pool and told tracepool about
// (tracepool_observe_alloc): recorded, never served, cached or freed.
//
// Note [Observed memory]
// Rationale: what nvidia-smi counts beyond the pool (a library's own cudaMalloc, NCCL's buffers, an
// arena such as XLA's) has no call site unless someone tells us. A runtime that keeps its own
// allocator, or an interposer on the driver, calls tracepool_observe_alloc and tracepool_observe_free;
// tracepool records the block with the same call site, tags and marks as a pool block, so that
// reports list it, tell its growth and merge or diff it like any other. Approach:
//   - the block's call site is captured with one more tag, innermost: "outside the pool: SOURCE"
//     (pinned host memory: "pinned host: SOURCE"), so that it is a site of its own, apart from the
//     pool blocks of the same line, and every report names its kind and source the way it names tags;
//   - the tracer counts it as it counts pool blocks (live bytes per site, at every mark), so growth
//     needs nothing new; the statistics (PyTorch's memory_stats names) do not: they are the pool's;
//   - the table is a leaf lock of its own, taken alone (Note [Lock order] in allocator.h) and by fork;
//   - a pointer is observed once until its free; a live block of tracepool's own pool (by its start),
//     a second observation of a pointer and the free of a pointer never observed are refused, changing
//     nothing. The caller tells the free before the memory goes back, or another thread may be given
//     the address first.
// Limits: with call sites off (or the site table full) the block has no site, so no tag: it is counted
// in the device's observed bytes and among the sites' "no call site" entry, without its source. Pinned
// host memory counts in the device's share of its site, as the device whose context made it.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"

namespace tracepool::core {

enum class observed_kind : int { device = 0, managed = 1, host = 2 };
inline constexpr int observed_kinds = 3;

// The tag an observed block's call site carries: "outside the pool: nccl", "pinned host: cudart".
std::string observed_tag(observed_kind kind, const char* source);

// Reads a source name as tracepool_observe_alloc takes it: a tag label's rule (check_name in
// trace/tags.h), at most 32 bytes; invalid_argument naming `what` otherwise.
status check_source(const char* what, const char* source);

struct observed_block {
  uintptr_t address = 0;
  size_t size = 0;
  int device = 0;
  observed_kind kind = observed_kind::device;
  uint32_t site = 0;
  uint32_t birth = 0;
};

class observed_memory {
 public:
  // invalid_argument (nothing recorded) if `b.address` is observed already.
  status add(const observed_block& b);
  // The block observed at `address`, removed; invalid_argument if there is none.
  status take(uintptr_t address, observed_block* out);
  // Every block observed on `device` now, by address.
  std::vector<observed_block> blocks(int device);

  void lock_for_fork() { mutex_.lock(); }
  void unlock_after_fork() { mutex_.unlock(); }

 private:
  std::mutex mutex_;  // a leaf: guards blocks_
  std::unordered_map<uintptr_t, observed_block> blocks_;
};

}  // namespace tracepool::core
