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
// four levels came out at 2.4e-3. tests/unit/growth_test.cpp measures the rate on trendless series
// of six kinds and three lengths: at most 2.3e-4 (23 of 100000, "mostly zero, rare bursts of two
// sizes" at 32 marks; the four kinds measured first, at most 1.6e-4). The test needs two marks
// a window at least (long_series_marks): with one, a floor is a single sample, and a site that is
// empty but for rare bursts is flagged when its last two samples land on bursts in rising order
// (1.2e-3 measured on 16 marks).
//
// Note [Growth in short runs]
// A run of a few seconds may have fewer marks than that (issue 35: three epochs in 12 s, 31 marks;
// the spacing of automatic marks follows their cost, Note [Growth without marks] in tracer.h). Its
// series is told from short_series_windows windows of two marks at least (min_growth_marks) by a
// stricter test, of clean steps: besides the three conditions above (the second-half rise in window
// 5 to 7 of 8, not only in the last, so that it is held for two windows at least),
//   - at each rise, every value before the rising window is at most its floor: the site never held
//     as much before that window as it holds from then on.
// The growth the issue names passes: validation outputs kept in a list come in steps, the list's site
// holding nothing else, and in a 3-epoch run the second step lands in window 6 of 8. A leak that the
// same site also churns above does not (a temporary of the site's before a rise is above its floor):
// short runs are told only when their growth is clean, longer ones under churn too. Eight windows of
// the plain test flag 4e-3 of trendless series (above); the clean-step condition keeps a window
// whose floor caught a rare low from counting as a step (its other values are higher), and holding
// the last rise for two windows keeps one window's two rare highs from counting as one. Measured as
// above on eight lengths from 16 to 31: at most 1.1e-4 (11 of 100000, the same kind at 16 marks); it
// is 3.5e-3 without the two conditions. Fewer than 16 marks tell nothing: the report says to mark
// each epoch.
inline constexpr size_t growth_windows = 16;       // of a series of long_series_marks or more
inline constexpr size_t short_series_windows = 8;  // of a shorter one (Note [Growth in short runs])

inline constexpr size_t long_series_marks = 2 * growth_windows;
inline constexpr size_t min_growth_marks = 2 * short_series_windows;

// The floor of each window of `series`: growth_windows of them from long_series_marks values on,
// short_series_windows from min_growth_marks, none below.
std::vector<int64_t> window_floors(const std::vector<int64_t>& series);
// The test above for `series`, given its window_floors (false when they are empty).
bool floors_growing(const std::vector<int64_t>& series, const std::vector<int64_t>& floors);

}  // namespace tracepool::core
