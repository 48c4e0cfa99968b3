// stats.h: counters with PyTorch's memory_stats() meaning (notes/pytorch.md §2.6).
//
// Block statistics (allocation, active, inactive_split and their bytes, requested_bytes) are kept
// per stream pool, under that pool's lock, so that threads allocating on different streams share no
// cache line. Segment statistics are kept per device under the device lock. A device's figures are
// the sum over its pools. Currents, allocated and freed sums are exact; a summed peak is exact while
// one stream allocates at a time (PyTorch's usual case) and an upper bound otherwise, because an
// exact device-wide peak would need one counter that every allocation on every thread writes.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/size_class.h"

namespace tracepool::core {

struct stat {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t allocated = 0;
  int64_t freed = 0;

  void increase(int64_t n) {
    current += n;
    allocated += n;
    if (current > peak) peak = current;
  }
  void decrease(int64_t n) {
    current -= n;
    freed += n;
  }
  void reset_peak() { peak = current; }
  void reset_accumulated() { allocated = freed = 0; }
  stat& operator+=(const stat& o) {
    current += o.current;
    peak += o.peak;
    allocated += o.allocated;
    freed += o.freed;
    return *this;
  }
};

enum class stat_kind : int {
  allocation,
  segment,
  active,
  inactive_split,
  allocated_bytes,
  reserved_bytes,
  active_bytes,
  inactive_split_bytes,
  requested_bytes,
};
inline constexpr int stat_kind_count = 9;
inline constexpr int all_pools = pool_kind_count;  // index of the "all" column

// One stat per kind, for the small pool, the large pool and both ("all"). Stored by column, with the
// five stats every alloc and free touch first: they share three cache lines per column, which
// matters because between two allocations the host program has usually evicted them.
struct stat_table {
  stat& at(stat_kind k, int column) { return cells_[column][slot(k)]; }
  const stat& at(stat_kind k, int column) const { return cells_[column][slot(k)]; }
  void increase(stat_kind k, pool_kind p, int64_t n) {
    at(k, static_cast<int>(p)).increase(n);
    at(k, all_pools).increase(n);
  }
  void decrease(stat_kind k, pool_kind p, int64_t n) {
    at(k, static_cast<int>(p)).decrease(n);
    at(k, all_pools).decrease(n);
  }
  void reset_peak();
  void reset_accumulated();
  stat_table& operator+=(const stat_table& o);

 private:
  static constexpr int slot(stat_kind k) {
    constexpr int slots[stat_kind_count] = {/*allocation*/ 0, /*segment*/ 7, /*active*/ 2, /*inactive_split*/ 5,
                                            /*allocated_bytes*/ 1, /*reserved_bytes*/ 8, /*active_bytes*/ 3,
                                            /*inactive_split_bytes*/ 6, /*requested_bytes*/ 4};
    return slots[static_cast<int>(k)];
  }
  alignas(64) std::array<std::array<stat, stat_kind_count>, pool_kind_count + 1> cells_{};
};

// Device-wide counters that are not per block.
struct event_counters {
  uint64_t num_alloc_retries = 0;
  uint64_t num_ooms = 0;
  uint64_t num_device_alloc = 0;
  uint64_t num_device_free = 0;
  uint64_t num_invalid_frees = 0;
};

// What get_stats() returns for one device.
struct device_stats {
  stat_table table;
  event_counters counters;
  uint64_t limit_bytes = 0;
};

// The figures of a device under torch.cuda.memory_stats() key names ("allocated_bytes.all.current",
// ..., "num_ooms"), in a fixed order.
std::vector<std::pair<std::string, int64_t>> memory_stat_items(const device_stats& st);

}  // namespace tracepool::core
