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

namespace {

size_t window_begin(size_t w, size_t n, size_t windows) { return w * n / windows; }

}  // namespace

std::vector<int64_t> window_floors(const std::vector<int64_t>& series) {
  const size_t n = series.size();
  if (n < min_growth_marks) return {};
  const size_t windows = n >= long_series_marks ? growth_windows : short_series_windows;
  std::vector<int64_t> floors(windows);
  for (size_t w = 0; w < windows; ++w) {
    const auto begin = series.begin() + static_cast<std::ptrdiff_t>(window_begin(w, n, windows));
    const auto end = series.begin() + static_cast<std::ptrdiff_t>(window_begin(w + 1, n, windows));
    floors[w] = *std::min_element(begin, end);
  }
  return floors;
}

bool floors_growing(const std::vector<int64_t>& series, const std::vector<int64_t>& floors) {
  const size_t windows = floors.size(), n = series.size();
  const bool short_series = windows == short_series_windows;  // Note [Growth in short runs]
  if (windows != (n >= long_series_marks ? growth_windows : short_series_windows) || n < min_growth_marks) return false;
  int rises = 0;
  bool rose_late = false;              // in the second half (a short series': not only in its last window)
  int64_t highest_before = floors[0];  // the largest value before window w
  for (size_t w = 1; w < windows; ++w) {
    for (size_t i = window_begin(w - 1, n, windows), end = window_begin(w, n, windows); i < end; ++i)
      highest_before = std::max(highest_before, series[i]);
    if (floors[w] < floors[w - 1]) return false;
    if (floors[w] == floors[w - 1]) continue;
    if (short_series && highest_before > floors[w]) return false;  // not a clean step
    ++rises;
    rose_late = rose_late || (w >= windows / 2 && (!short_series || w + 2 <= windows));
  }
  return rises >= 2 && rose_late;
}

}  // namespace tracepool::core
