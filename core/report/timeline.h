// timeline.h: each device's allocated and reserved bytes over time, from the allocation history
// (TRACEPOOL_CONF history:N), for reports to draw (the HTML report's timeline).
//
// Note [Timeline from the history]
// The history keeps the last N events, not the figures: the figures after each event are found by
// walking back from the statistics now, undoing one event at a time (an alloc took its block's
// rounded size from allocated_bytes, a segment_alloc its size from reserved_bytes, frees the other
// way). The walk covers what the ring still holds; events older than it are summed in the first
// figure. The statistics are those read when the report collected its blocks, just before the ring
// is copied, so an event made in between shifts the series by that event (allocation is not stopped
// for a report); figures are clamped at 0. A series
// of more than timeline_points_kept events is cut into one run fewer of consecutive events, each kept
// as its last event's time and the highest figures within it, so that no peak is lost, and ends with
// the last event's figures as they are (the statistics now).
#pragma once

#include <cstdint>
#include <vector>

#include "history.h"

namespace tracepool::core {

struct timeline_point {
  uint64_t time_ns = 0;  // CLOCK_REALTIME
  int64_t allocated_bytes = 0;
  int64_t reserved_bytes = 0;
};

struct device_timeline {
  int device = 0;
  std::vector<timeline_point> points;  // oldest first
};

inline constexpr size_t timeline_points_kept = 1024;
// The newest events a report reads from the history for its timeline (48 MiB of them): a history of
// up to 2^26 events is not copied whole for every report (an OOM report included); the events before
// them are summed in the first figure, as those the ring dropped are.
inline constexpr size_t timeline_events_read = size_t{1} << 20;

// The figures now of one device, where the walk back starts.
struct device_figures {
  int device = 0;
  int64_t allocated_bytes = 0;
  int64_t reserved_bytes = 0;
};

// One timeline per device of `now` that the entries (oldest first) name; devices without an event
// are left out.
std::vector<device_timeline> timelines_from(const std::vector<history_entry>& entries,
                                            const std::vector<device_figures>& now);

}  // namespace tracepool::core
