#include "stats.h"

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

std::vector<std::pair<std::string, int64_t>> memory_stat_items(const device_stats& st) {
  static const char* const columns[] = {"small_pool", "large_pool", "all"};  // pool_kind order, then all
  std::vector<std::pair<std::string, int64_t>> out;
  for (int k = 0; k < stat_kind_count; ++k)
    for (int c : {all_pools, static_cast<int>(pool_kind::small), static_cast<int>(pool_kind::large)}) {
      const stat& s = st.table.at(static_cast<stat_kind>(k), c);
      const std::string prefix = std::string(stat_kind_name(static_cast<stat_kind>(k))) + "." + columns[c] + ".";
      out.emplace_back(prefix + "current", s.current);
      out.emplace_back(prefix + "peak", s.peak);
      out.emplace_back(prefix + "allocated", s.allocated);
      out.emplace_back(prefix + "freed", s.freed);
    }
  const event_counters& e = st.counters;
  out.emplace_back("num_alloc_retries", static_cast<int64_t>(e.num_alloc_retries));
  out.emplace_back("num_ooms", static_cast<int64_t>(e.num_ooms));
  out.emplace_back("num_device_alloc", static_cast<int64_t>(e.num_device_alloc));
  out.emplace_back("num_device_free", static_cast<int64_t>(e.num_device_free));
  out.emplace_back("num_invalid_frees", static_cast<int64_t>(e.num_invalid_frees));
  out.emplace_back("limit_bytes", static_cast<int64_t>(st.limit_bytes));
  return out;
}

}  // namespace tracepool::core
