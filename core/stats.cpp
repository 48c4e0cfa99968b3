#include "stats.h"

#include <type_traits>

namespace tracepool::core {

void stat_table::reset_peak() {
  for (auto& column : cells_)
    for (auto& s : column) s.reset_peak();
}

void stat_table::reset_accumulated() {
  for (auto& column : cells_)
    for (auto& s : column) s.reset_accumulated();
}

stat_table& stat_table::operator+=(const stat_table& o) {
  for (size_t c = 0; c < cells_.size(); ++c)
    for (size_t k = 0; k < cells_[c].size(); ++k) cells_[c][k] += o.cells_[c][k];
  return *this;
}

const char* stat_kind_name(stat_kind k) {
  static const char* const names[stat_kind_count] = {
#define TRACEPOOL_STAT_NAME_(name) #name,
      TRACEPOOL_STAT_MAP(TRACEPOOL_STAT_NAME_)
#undef TRACEPOOL_STAT_NAME_
  };
  return names[static_cast<int>(k)];
}

namespace {

// Every figure of a device with its torch.cuda.memory_stats() name, in a fixed order, as a reference:
// memory_stat_items reads them, set_memory_stat writes one.
template <typename DeviceStats, typename Fn>
void visit_memory_stats(DeviceStats& st, Fn&& fn) {
  static const char* const columns[] = {"small_pool", "large_pool", "all"};  // pool_kind order, then all
  for (int k = 0; k < stat_kind_count; ++k)
    for (int c : {all_pools, static_cast<int>(pool_kind::small), static_cast<int>(pool_kind::large)}) {
      auto& s = st.table.at(static_cast<stat_kind>(k), c);
      const std::string prefix = std::string(stat_kind_name(static_cast<stat_kind>(k))) + "." + columns[c] + ".";
      fn(prefix + "current", s.current);
      fn(prefix + "peak", s.peak);
      fn(prefix + "allocated", s.allocated);
      fn(prefix + "freed", s.freed);
    }
  auto& e = st.counters;
  fn("num_alloc_retries", e.num_alloc_retries);
  fn("num_ooms", e.num_ooms);
  fn("num_device_alloc", e.num_device_alloc);
  fn("num_device_free", e.num_device_free);
  fn("num_invalid_frees", e.num_invalid_frees);
  fn("limit_bytes", st.limit_bytes);
}

}  // namespace

std::vector<std::pair<std::string, int64_t>> memory_stat_items(const device_stats& st) {
  std::vector<std::pair<std::string, int64_t>> out;
  visit_memory_stats(
      st, [&](std::string name, const auto& value) { out.emplace_back(std::move(name), static_cast<int64_t>(value)); });
  return out;
}

bool set_memory_stat(const std::string& name, int64_t value, device_stats* st) {
  bool found = false;
  visit_memory_stats(*st, [&](const std::string& n, auto& field) {
    if (found || n != name) return;
    field = static_cast<std::remove_reference_t<decltype(field)>>(value);
    found = true;
  });
  return found;
}

}  // namespace tracepool::core
