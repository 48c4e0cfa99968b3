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
#include "tracepool/tracepool_stat_map.h"  // public: capi/include

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

// allocation, segment, ..., requested_bytes: the rows of tracepool_stat_map.h, in its order, which is
// also the order of the C API's tracepool_stat_set_t.
enum class stat_kind : int {
#define TRACEPOOL_STAT_KIND_(name) name,
  TRACEPOOL_STAT_MAP(TRACEPOOL_STAT_KIND_)
#undef TRACEPOOL_STAT_KIND_
};
#define TRACEPOOL_STAT_ONE_(name) +1
inline constexpr int stat_kind_count = 0 TRACEPOOL_STAT_MAP(TRACEPOOL_STAT_ONE_);
#undef TRACEPOOL_STAT_ONE_
// "allocated_bytes": the name of a kind in torch.cuda.memory_stats() keys, and in the C API's structs.
const char* stat_kind_name(stat_kind k);
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
  // The order of the kinds in a column: the five that every alloc and free touch first.
  static constexpr stat_kind slot_order[stat_kind_count] = {
      stat_kind::allocation,           stat_kind::allocated_bytes, stat_kind::active,
      stat_kind::active_bytes,         stat_kind::requested_bytes, stat_kind::inactive_split,
      stat_kind::inactive_split_bytes, stat_kind::segment,         stat_kind::reserved_bytes};
  // slot_order inverted, at compile time: it fails to compile unless slot_order holds every kind once.
  static constexpr std::array<int, stat_kind_count> slots = [] {
    std::array<int, stat_kind_count> slot_of{};
    for (int& s : slot_of) s = -1;
    for (int s = 0; s < stat_kind_count; ++s) {
      int& kind_slot = slot_of[static_cast<int>(slot_order[s])];
      if (kind_slot != -1) throw "stat_table::slot_order names a kind twice";
      kind_slot = s;
    }
    return slot_of;
  }();
  static constexpr int slot(stat_kind k) { return slots[static_cast<int>(k)]; }
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
// Sets the figure called `name` (a memory_stat_items name); false if there is none of that name.
bool set_memory_stat(const std::string& name, int64_t value, device_stats* st);

}  // namespace tracepool::core
