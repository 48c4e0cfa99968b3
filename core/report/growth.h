// growth.h: which call sites grow. Two ways, one per kind of mark (Note [Growth without marks] in
// tracer.h): the program's marks, told exactly from each site's trend; or, when the program made
// none, the automatic marks, told by the test of Note [Growth by window floors].
#pragma once

#include <cstdint>
#include <vector>

#include "trace/call_site_table.h"

namespace tracepool::core {

// Growing across the program's marks: the live bytes at the marks never fell, rose at least twice,
// and rose into the latest mark. One rise is what a lazily built buffer (optimizer state) looks like.
bool is_growing(const std::vector<int64_t>& live_at_marks);
bool trend_is_growing(const site_trend& t);

// Note [Growth by window floors]
// Automatic marks come at any phase of a program's work (a sample may land mid-step, with the step's
// temporaries live), so a site's series is noisy, and a test must not flag noise: with thousands of
// sites, even a 1% false-positive rate flags dozens. The series is cut into growth_windows
// consecutive windows of (nearly) equal length, each reduced to its floor, its lowest value: what the
// site holds for good at that time, whatever churns above it. A site grows when
//   - its floors never fall from one window to the next,
//   - they rise at two windows at least, and
//   - one of those rises comes in the second half of the run (window 9 of 16 or later),
// which a model built once (flat), optimizer state made at the first step or a cuBLAS workspace
// (one rise), and a warm-up cache that fills and stops (rises early, then flat) all fail, and a
// leak that steps up once an epoch passes from its third epoch on.
// False positives: for a site without a trend, its values exchangeable (every order equally likely),
// the floors are exchangeable too, and never falling means them coming in sorted order: 1/16!
// when they are distinct. Ties make sorted orders likelier; two rises need three floor levels at
// least, and the worst case, floors at a middle level but for rare lower and higher ones (1 in 15
// each), is 7e-4. Eight windows were tried first: that worst case is 4e-3, and simulated noise of
// four levels came out at 2.4e-3. tests/unit/growth_test.cpp measures the rate on trendless series of
// four kinds and three lengths: at most 1.4e-4 (14 of 100000). The test needs two marks a window at least (min_growth_marks): with one, a floor is a
// single sample, and a site that is empty but for rare bursts is flagged when its last two samples
// land on bursts in rising order (1.2e-3 measured on 16 marks).
inline constexpr size_t growth_windows = 16;

inline constexpr size_t min_growth_marks = 2 * growth_windows;

// The floor of each window of `series`; empty when it has fewer than min_growth_marks values.
std::vector<int64_t> window_floors(const std::vector<int64_t>& series);
// The test above, over window_floors' output (false when it is empty).
bool floors_growing(const std::vector<int64_t>& floors);

}  // namespace tracepool::core
