// timeline.cpp: allocated and reserved bytes over time, walked back from now through the allocation
// history (Note [Timeline from the history] in timeline.h).
#include "report/timeline.h"

#include <algorithm>

namespace tracepool::core {

namespace {

// The figures after each of `events` (one device's, oldest first), walking back from `now`.
std::vector<timeline_point> walk_back(const std::vector<const history_entry*>& events, const device_figures& now) {
  std::vector<timeline_point> points(events.size());
  int64_t allocated = now.allocated_bytes, reserved = now.reserved_bytes;
  for (size_t i = events.size(); i-- > 0;) {
    const history_entry& e = *events[i];
    points[i] = timeline_point{e.time_ns, std::max<int64_t>(allocated, 0), std::max<int64_t>(reserved, 0)};
    const auto size = static_cast<int64_t>(e.size);
    switch (e.action) {
      case history_action::alloc: allocated -= size; break;
      case history_action::free: allocated += size; break;
      case history_action::segment_alloc: reserved -= size; break;
      case history_action::segment_free: reserved += size; break;
      case history_action::oom: break;
    }
  }
  return points;
}

// At most timeline_points_kept points: runs of consecutive points, each its last time and highest
// figures, then the last point as it is (the figures now).
std::vector<timeline_point> thinned(const std::vector<timeline_point>& points) {
  if (points.size() <= timeline_points_kept) return points;
  std::vector<timeline_point> out;
  out.reserve(timeline_points_kept);
  const size_t runs = timeline_points_kept - 1, before_last = points.size() - 1;
  for (size_t run = 0; run < runs; ++run) {
    const size_t begin = run * before_last / runs;
    const size_t end = (run + 1) * before_last / runs;
    timeline_point kept = points[end - 1];
    for (size_t i = begin; i < end; ++i) {
      kept.allocated_bytes = std::max(kept.allocated_bytes, points[i].allocated_bytes);
      kept.reserved_bytes = std::max(kept.reserved_bytes, points[i].reserved_bytes);
    }
    out.push_back(kept);
  }
  out.push_back(points.back());
  return out;
}

}  // namespace

std::vector<device_timeline> timelines_from(const std::vector<history_entry>& entries,
                                            const std::vector<device_figures>& now) {
  std::vector<device_timeline> out;
  for (const device_figures& d : now) {
    std::vector<const history_entry*> events;
    for (const history_entry& e : entries)
      if (e.device == d.device) events.push_back(&e);
    if (events.empty()) continue;
    out.push_back(device_timeline{d.device, thinned(walk_back(events, d))});
  }
  return out;
}

}  // namespace tracepool::core
