#include "growth.h"

#include <algorithm>

namespace tracepool::core {

bool is_growing(const std::vector<int64_t>& v) {
  int rises = 0;
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i] < v[i - 1]) return false;
    rises += v[i] > v[i - 1];
  }
  return rises >= 2 && v.back() > v[v.size() - 2];
}

bool trend_is_growing(const site_trend& t) { return !t.fell && t.rises >= 2 && t.rose_last; }

std::vector<int64_t> window_floors(const std::vector<int64_t>& series) {
  const size_t n = series.size();
  if (n < min_growth_marks) return {};
  std::vector<int64_t> floors(growth_windows);
  for (size_t w = 0; w < growth_windows; ++w) {
    const auto begin = series.begin() + static_cast<std::ptrdiff_t>(w * n / growth_windows);
    const auto end = series.begin() + static_cast<std::ptrdiff_t>((w + 1) * n / growth_windows);
    floors[w] = *std::min_element(begin, end);
  }
  return floors;
}

bool floors_growing(const std::vector<int64_t>& floors) {
  if (floors.size() != growth_windows) return false;
  int rises = 0;
  size_t last_rise = 0;
  for (size_t w = 1; w < floors.size(); ++w) {
    if (floors[w] < floors[w - 1]) return false;
    if (floors[w] > floors[w - 1]) ++rises, last_rise = w;
  }
  return rises >= 2 && last_rise >= growth_windows / 2;
}

}  // namespace tracepool::core
