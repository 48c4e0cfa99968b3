// Growth without marks (Note [Growth without marks], Note [Growth by window floors]): the window-floor
// test on series made to look like a leak, a warm-up, optimizer state and noise, its false-positive
// rate on trendless series, and a program that never marks, through the C API (host backend).
#include <gtest/gtest.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "report/growth.h"
#include "report_support.h"
#include "tracepool/tracepool.h"

namespace {

using tracepool::core::floors_growing;
using tracepool::core::growth_windows;
using tracepool::core::min_growth_marks;
using tracepool::core::short_series_windows;
using tracepool::core::window_floors;
using tracepool::testing::json;
using tracepool::testing::report_of;

bool grows(const std::vector<int64_t>& series) { return floors_growing(series, window_floors(series)); }

// n points of f(i).
template <typename F>
std::vector<int64_t> series(int n, F f) {
  std::vector<int64_t> out;
  for (int i = 0; i < n; ++i) out.push_back(f(i));
  return out;
}

TEST(GrowthFloors, ASteadyLeakGrowsEvenUnderChurn) {
  EXPECT_TRUE(grows(series(64, [](int i) { return 512 * i; })));
  // The same leak seen at random phases of a step, a temporary of 1 MiB live at every third sample.
  EXPECT_TRUE(grows(series(64, [](int i) { return 512 * i + (i % 3 == 0 ? (1 << 20) : 0); })));
}

TEST(GrowthFloors, ALeakThatGrowsOncePerEpochGrowsFromThreeEpochsOn) {
  // Validation outputs kept: flat through each epoch's training, a step up at each validation.
  EXPECT_TRUE(grows(series(90, [](int i) { return int64_t{1 << 20} * (i / 30); })));
  EXPECT_FALSE(grows(series(60, [](int i) { return int64_t{1 << 20} * (i / 30); }))) << "two epochs: one rise";
  EXPECT_TRUE(grows(series(40, [](int i) { return int64_t{1 << 20} * (i / 10); }))) << "four epochs, 10 marks each";
}

TEST(GrowthFloors, BuiltOnceFirstStepStateAndWarmUpDoNotGrow) {
  EXPECT_FALSE(grows(series(64, [](int) { return 100 << 20; }))) << "a model built once";
  EXPECT_FALSE(grows(series(64, [](int i) { return i == 0 ? 0 : 200 << 20; }))) << "optimizer state, first step";
  EXPECT_FALSE(grows(series(64, [](int i) { return std::min(i, 20) * 4096; }))) << "a warm-up cache that fills";
  EXPECT_FALSE(grows(series(64, [](int i) { return i < 2 ? 0 : 32 << 20; }))) << "a cuBLAS workspace";
  EXPECT_FALSE(grows(series(64, [](int i) { return (i % 4) * 4096; }))) << "churn";
  EXPECT_FALSE(grows(series(15, [](int i) { return i * 4096; }))) << "too few marks to tell";
  EXPECT_TRUE(grows(series(16, [](int i) { return i * 4096; }))) << "enough, as a short run";
}

// Note [Growth in short runs]: from 16 to 31 marks, eight windows, and only clean steps count.
TEST(GrowthFloors, AShortRunThatKeepsOutputsEachEpochGrows) {
  // Issue 35's run: 31 marks over three epochs, validation outputs kept in a list as each epoch's
  // validation runs (its last three marks), 0.77, 1.64 and 2.47 GB after the three.
  const int64_t gb = 1000 * 1000 * 1000;
  const std::vector<int64_t> kept = {0, int64_t(0.77 * gb), int64_t(1.64 * gb), int64_t(2.47 * gb)};
  std::vector<int64_t> s = series(31, [&](int i) {
    const int epoch = i / 10, in_epoch = i % 10;  // a last mark after the third epoch
    if (in_epoch < 7 || epoch == 3) return kept[static_cast<size_t>(epoch)];
    return kept[static_cast<size_t>(epoch)] + (kept[static_cast<size_t>(epoch) + 1] - kept[static_cast<size_t>(epoch)]) * (in_epoch - 6) / 3;
  });
  EXPECT_EQ(window_floors(s).size(), short_series_windows);
  EXPECT_TRUE(grows(s));
  for (int n = 16; n < 32; ++n)  // three epochs, whatever the number of marks
    EXPECT_TRUE(grows(series(n, [n](int i) { return int64_t{1 << 20} * (3 * i / n); }))) << n << " marks";
  EXPECT_FALSE(grows(series(20, [](int i) { return int64_t{1 << 20} * (i / 10); }))) << "two epochs: one rise";
}

TEST(GrowthFloors, AShortRunTellsNothingElse) {
  EXPECT_FALSE(grows(series(24, [](int) { return 100 << 20; }))) << "a model built once";
  EXPECT_FALSE(grows(series(24, [](int i) { return i == 0 ? 0 : 200 << 20; }))) << "optimizer state, first step";
  EXPECT_FALSE(grows(series(24, [](int i) { return std::min(i, 8) * 4096; }))) << "a warm-up cache that fills";
  EXPECT_FALSE(grows(series(24, [](int i) { return (i % 4) * 4096; }))) << "churn";
  EXPECT_FALSE(grows(series(24, [](int i) { return (i % 3 == 0 ? (1 << 20) : 0); }))) << "a temporary, now and then";
}

TEST(GrowthFloors, AShortRunCountsOnlyCleanSteps) {
  // A leak under churn at its own site: floors rise in every window, but a temporary of the site's before
  // each rise is above the floor after it. 64 marks tell it (above); 24 do not.
  const auto leak_under_churn = [](int i) { return 512 * i + (i % 3 == 0 ? (1 << 20) : 0); };
  EXPECT_TRUE(grows(series(64, leak_under_churn)));
  EXPECT_FALSE(grows(series(24, leak_under_churn)));
  // Noise of three levels: a floor that caught a rare low in window 0, highs in the last two windows. The
  // floors never fall and rise twice, but window 0 held more (20) than the floor it rose to (10).
  std::vector<int64_t> s = series(24, [](int i) { return i >= 18 ? 20 : 10; });
  s[0] = s[2] = 20, s[1] = 0;
  EXPECT_FALSE(grows(s));
  s[0] = s[2] = 0;  // window 0 all low: a clean step
  EXPECT_TRUE(grows(s));
}

TEST(GrowthFloors, AShortRunsLateRiseMustHoldForTwoWindows) {
  std::vector<int64_t> s = series(24, [](int i) { return i < 3 ? 0 : 10; });  // a clean step at window 1
  s[21] = s[22] = s[23] = 20;  // and one in the last window only
  EXPECT_FALSE(grows(s));
  s[18] = s[19] = s[20] = 20;  // held from window 6
  EXPECT_TRUE(grows(s));
}

TEST(GrowthFloors, AFallAnywhereMeansNotGrowing) {
  std::vector<int64_t> s = series(64, [](int i) { return i * 4096; });
  for (int i = 40; i < 48; ++i) s[i] = 0;  // all of one window dropped: its floor falls
  EXPECT_FALSE(grows(s));
}

// Note [Growth by window floors] and Note [Growth in short runs] say what a site without a trend risks;
// measured here on exchangeable series (independent draws) of six kinds, 100000 series each, of 32, 64
// and 512 marks (sixteen windows) and of eight lengths from 16 to 31 (eight windows, clean steps).
TEST(GrowthFloors, FalsePositivesOnTrendlessSeriesAreRare) {
  std::mt19937_64 rng(20261125);
  const int trials = 100000;
  struct kind {
    const char* name;
    std::function<int64_t()> draw;
  };
  std::uniform_int_distribution<int64_t> wide(0, int64_t{1} << 40), four(0, 3);
  std::uniform_real_distribution<double> unit(0, 1);
  const auto three_levels = [&](double low, double high) {  // 0, 1 or 2: 0 below `low`, 2 from `high`
    const double u = unit(rng);
    return u < low ? 0 : u < high ? 1 : 2;
  };
  const std::vector<kind> kinds = {
      {"distinct values", [&] { return wide(rng); }},
      {"four values", [&] { return four(rng); }},
      {"mostly zero, rare bursts", [&] { return unit(rng) < 0.9 ? 0 : wide(rng); }},
      {"mostly high, rare lows", [&] { return unit(rng) < 0.1 ? four(rng) : int64_t{1} << 30; }},
      {"mostly zero, rare bursts of two sizes", [&] { return three_levels(0.8, 0.9); }},
      {"mostly middle, rare lows and highs", [&] { return three_levels(1.0 / 15, 14.0 / 15); }},
  };
  int worst_long = 0, worst_short = 0;
  for (const kind& k : kinds) {
    const std::vector<int> lengths = {32, 64, 512, 16, 17, 19, 20, 23, 24, 28, 31};
    int most_short = 0, at = 0;
    for (int n : lengths) {
      int flagged = 0;
      std::vector<int64_t> s(static_cast<size_t>(n));
      for (int t = 0; t < trials; ++t) {
        for (int64_t& v : s) v = k.draw();
        flagged += grows(s);
      }
      if (n >= 32) {
        std::printf("[ measured ] %s, %d marks: %d of %d flagged\n", k.name, n, flagged, trials);
        EXPECT_LE(flagged, trials / 2000) << k.name << ", " << n << " marks";
        worst_long = std::max(worst_long, flagged);
      } else if (flagged > most_short) {
        most_short = flagged, at = n;
      }
      if (n < 32) EXPECT_LE(flagged, trials / 5000) << k.name << ", " << n << " marks (eight windows)";
    }
    std::printf("[ measured ] %s, 16 to 31 marks: at most %d of %d flagged (%d marks)\n", k.name, most_short, trials,
                at);
    worst_short = std::max(worst_short, most_short);
  }
  std::printf("[ measured ] worst: %d of %d (16 windows), %d of %d (8 windows, clean steps)\n", worst_long, trials,
              worst_short, trials);
}

// ---- A program that never marks, through the C API ----

std::vector<void*> kept;

__attribute__((noinline)) void* take(tracepool_t* tp, size_t bytes) {
  void* p = nullptr;
  EXPECT_EQ(tracepool_malloc(tp, bytes, 0, nullptr, &p), TRACEPOOL_OK) << tracepool_last_error();
  KEEP_FRAME();
  return p;
}
__attribute__((noinline)) void build_model(tracepool_t* tp) { kept.push_back(take(tp, 8 << 20)); KEEP_FRAME(); }
__attribute__((noinline)) void make_optimizer_state(tracepool_t* tp) {
  kept.push_back(take(tp, 16 << 20));
  KEEP_FRAME();
}
__attribute__((noinline)) void fill_warm_up_cache(tracepool_t* tp) { kept.push_back(take(tp, 64 << 10)); KEEP_FRAME(); }
__attribute__((noinline)) void keep_output(tracepool_t* tp) { kept.push_back(take(tp, 4096)); KEEP_FRAME(); }
__attribute__((noinline)) void churn_activation(tracepool_t* tp) {
  void* p = take(tp, 1 << 20);
  EXPECT_EQ(tracepool_free(tp, p, nullptr), TRACEPOOL_OK);
  KEEP_FRAME();
}

// Longer than twice the spacing, whatever the coarse clock's resolution: every step may mark.
void wait_past(int spacing_ms) {
  timespec res{};
  clock_getres(CLOCK_MONOTONIC_COARSE, &res);
  const long ns = 2L * spacing_ms * 1000000L + res.tv_nsec + 1000000L;
  timespec pause{ns / 1000000000L, ns % 1000000000L};
  nanosleep(&pause, nullptr);
}

// A training loop: a model built once, optimizer state made at the first step, a warm-up cache that
// fills in 5 steps, one output kept every step (the leak) and 100 temporaries made and freed. With
// `boundaries`, the loop says where each step ends (as tracepool.torch does after optimizer.step());
// without, only the samples the library takes as allocations go by mark anything.
json train_without_marks(bool boundaries, int steps = 40) {
  tracepool_t* tp = nullptr;
  EXPECT_EQ(tracepool_create("backend:host,capture:native,auto_mark_ms:1,oom_report:off", &tp), TRACEPOOL_OK);
  kept.clear();
  build_model(tp);
  for (int step = 0; step < steps; ++step) {
    if (step == 0) make_optimizer_state(tp);
    if (step < 5) fill_warm_up_cache(tp);
    keep_output(tp);
    for (int i = 0; i < 100; ++i) churn_activation(tp);
    // Past the spacing, which follows what a mark costs (500 times it): ~10 us a mark in a sanitizer
    // build spaces them 5 ms apart, more than a step of wait_past(1), and 3 in 40 steps found none due.
    wait_past(10);
    if (boundaries) EXPECT_EQ(tracepool_auto_mark(tp, "optimizer step", nullptr), TRACEPOOL_OK);
  }
  const json r = report_of(tp);
  for (void* p : kept) EXPECT_EQ(tracepool_free(tp, p, nullptr), TRACEPOOL_OK);
  kept.clear();
  tracepool_destroy(tp);
  return r;
}

bool flagged(const json& r, const char* function) {
  for (const json& site : r["leaks"])
    for (const json& f : site["frames"])
      if (f["function"].get<std::string>().find(function) != std::string::npos) return site["growing"].get<bool>();
  ADD_FAILURE() << "no live site ran " << function;
  return false;
}

TEST(GrowthWithoutMarks, BoundariesFlagTheLeakAndNothingElse) {
  const json r = train_without_marks(true);
  ASSERT_EQ(r["growth_basis"], "automatic marks") << r.dump(1);
  EXPECT_EQ(r["marks_made"], 0);
  EXPECT_GE(r["auto_marks_made"].get<int>(), 40);
  EXPECT_TRUE(flagged(r, "keep_output"));
  EXPECT_FALSE(flagged(r, "build_model"));
  EXPECT_FALSE(flagged(r, "make_optimizer_state"));
  EXPECT_FALSE(flagged(r, "fill_warm_up_cache"));
  for (const json& m : r["marks"]) ADD_FAILURE() << "an automatic mark among the program's: " << m.dump();
}

// What a timeline draws without marks of the program's: each automatic mark's allocated and reserved
// bytes, and the series of the growing and largest sites (at most 32 of them) over those marks.
TEST(GrowthWithoutMarks, TheGrowingAndLargestSitesKeepTheirSeriesForATimeline) {
  const json r = train_without_marks(true);
  const size_t marks = r["auto_marks"].size();
  ASSERT_GE(marks, 40u);
  for (const json& m : r["auto_marks"])
    EXPECT_GE(m["reserved_bytes"].get<int64_t>(), m["live_bytes"].get<int64_t>()) << m.dump();
  size_t with_series = 0;
  for (const json& site : r["leaks"]) {
    const json& series = site["live_at_auto_marks"];
    if (series.empty()) continue;
    ++with_series;
    ASSERT_EQ(series.size(), marks) << "one value per automatic mark kept";
    bool keeps_output = false;
    for (const json& f : site["frames"]) keeps_output |= f["function"].get<std::string>().find("keep_output") == 0;
    if (!keeps_output) continue;
    EXPECT_TRUE(site["growing"].get<bool>());
    for (size_t i = 1; i < marks; ++i) EXPECT_GE(series[i].get<int64_t>(), series[i - 1].get<int64_t>()) << i;
    EXPECT_GT(series[marks - 1].get<int64_t>(), series[0].get<int64_t>());
  }
  EXPECT_EQ(with_series, std::min<size_t>(r["leaks"].size(), 32));
  EXPECT_FALSE(r["leaks"][0]["live_at_auto_marks"].empty()) << "the largest site has one";
}

TEST(GrowthWithoutMarks, SamplesAloneFlagTheLeak) {
  const json r = train_without_marks(false);
  ASSERT_EQ(r["growth_basis"], "automatic marks") << r.dump(1);
  for (const json& m : r["auto_marks"]) EXPECT_EQ(m["label"], "sample");
  EXPECT_TRUE(flagged(r, "keep_output"));
  EXPECT_FALSE(flagged(r, "build_model"));
  EXPECT_FALSE(flagged(r, "make_optimizer_state"));
  EXPECT_FALSE(flagged(r, "fill_warm_up_cache"));
  const std::string text = tracepool::testing::render(r.dump(), "text");
  EXPECT_NE(text.find("GROWING without marks"), std::string::npos) << text;
  EXPECT_NE(text.find("Growth told without marks"), std::string::npos) << text;
}

// Twenty steps, twenty marks: a short run, told from eight windows (Note [Growth in short runs]).
TEST(GrowthWithoutMarks, AShortRunFlagsTheLeakAndNothingElse) {
  const json r = train_without_marks(true, 20);
  ASSERT_EQ(r["growth_basis"], "automatic marks") << r.dump(1);
  ASSERT_GE(r["auto_marks"].size(), min_growth_marks);
  ASSERT_LT(r["auto_marks"].size(), 32u) << "more marks than steps";
  EXPECT_TRUE(flagged(r, "keep_output"));
  EXPECT_FALSE(flagged(r, "build_model"));
  EXPECT_FALSE(flagged(r, "make_optimizer_state"));
  EXPECT_FALSE(flagged(r, "fill_warm_up_cache"));
  for (const json& site : r["leaks"])
    if (site["growing"].get<bool>()) EXPECT_EQ(site["growth_floors"].size(), short_series_windows);
  const std::string text = tracepool::testing::render(r.dump(), "text");
  EXPECT_NE(text.find("GROWING without marks: lowest live 4.00 KiB in the run's first eighth"), std::string::npos)
      << text;
  EXPECT_NE(text.find("clean steps only"), std::string::npos) << text;
}

// A mark reads every site's counters: with many sites, automatic marks come further apart than
// auto_mark_ms, at auto_mark_time_share times what one costs, the least of the latest eight (Note
// [Growth without marks]).
TEST(GrowthWithoutMarks, SpacingFollowsWhatAMarkCosts) {
  tracepool_t* tp = nullptr;
  ASSERT_EQ(tracepool_create("backend:host,capture:native,auto_mark_ms:1,oom_report:off", &tp), TRACEPOOL_OK);
  kept.clear();
  for (int i = 0; i < 4000; ++i) {  // a site each: the tags differ
    ASSERT_EQ(tracepool_tag_push(("site " + std::to_string(i)).c_str()), TRACEPOOL_OK);
    keep_output(tp);
    ASSERT_EQ(tracepool_tag_pop(), TRACEPOOL_OK);
  }
  // Eight marks of all 4000 sites, each past the spacing of its time.
  const json before = report_of(tp);
  for (int i = 0; i < 8; ++i) {
    wait_past(std::max(1, report_of(tp)["auto_mark_ms"].get<int>()));
    int taken = 0;
    ASSERT_EQ(tracepool_auto_mark(tp, "epoch end", &taken), TRACEPOOL_OK);
    ASSERT_TRUE(taken) << i;
  }
  const json r = report_of(tp);
  const double made = r["auto_marks_made"].get<double>() - before["auto_marks_made"].get<double>();
  const double mean_ms = (r["auto_mark_seconds"].get<double>() - before["auto_mark_seconds"].get<double>()) * 1e3 / made;
  EXPECT_GT(mean_ms, 0.0004) << "4000 sites at ~0.1 us each";
  // The least of eight is at most their mean, and near it when none was preempted.
  EXPECT_LE(r["auto_mark_ms"].get<double>(), 500 * mean_ms + 1) << r["auto_mark_ms"] << " ms apart";
  EXPECT_GE(r["auto_mark_ms"].get<double>() + 1, 0.5 * 500 * mean_ms) << r["auto_mark_ms"] << " ms apart";
  EXPECT_GT(r["auto_mark_ms"].get<int>(), 1) << "more than auto_mark_ms";
  for (void* p : kept) EXPECT_EQ(tracepool_free(tp, p, nullptr), TRACEPOOL_OK);
  kept.clear();
  tracepool_destroy(tp);
}

TEST(GrowthWithoutMarks, TheProgramsOwnMarksTakePrecedence) {
  tracepool_t* tp = nullptr;
  ASSERT_EQ(tracepool_create("backend:host,capture:native,auto_mark_ms:1", &tp), TRACEPOOL_OK);
  kept.clear();
  for (int step = 0; step < 20; ++step) {
    keep_output(tp);
    wait_past(1);
    ASSERT_EQ(tracepool_auto_mark(tp, "optimizer step", nullptr), TRACEPOOL_OK);
  }
  ASSERT_EQ(tracepool_mark(tp, "only one"), TRACEPOOL_OK);
  const json r = report_of(tp);
  EXPECT_EQ(r["growth_basis"], "marks");
  EXPECT_FALSE(flagged(r, "keep_output")) << "one mark of the program's own cannot show growth";
  for (void* p : kept) EXPECT_EQ(tracepool_free(tp, p, nullptr), TRACEPOOL_OK);
  kept.clear();
  tracepool_destroy(tp);
}

TEST(GrowthWithoutMarks, SpacingIsKeptAndOffMeansNone) {
  tracepool_t* tp = nullptr;
  ASSERT_EQ(tracepool_create("backend:host,auto_mark_ms:3600000", &tp), TRACEPOOL_OK);
  int taken = -1;
  ASSERT_EQ(tracepool_auto_mark(tp, "epoch end", &taken), TRACEPOOL_OK);
  EXPECT_EQ(taken, 1);
  ASSERT_EQ(tracepool_auto_mark(tp, "epoch end", &taken), TRACEPOOL_OK);
  EXPECT_EQ(taken, 0) << "an hour has not passed";
  EXPECT_EQ(tracepool_auto_mark(tp, nullptr, &taken), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tracepool_auto_mark(nullptr, "x", &taken), TRACEPOOL_ERR_INVALID_ARGUMENT);
  tracepool_destroy(tp);
  ASSERT_EQ(tracepool_create("backend:host,auto_mark_ms:0", &tp), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_auto_mark(tp, "epoch end", &taken), TRACEPOOL_OK);
  EXPECT_EQ(taken, 0);
  EXPECT_EQ(report_of(tp)["auto_marks_made"], 0);
  tracepool_destroy(tp);
  EXPECT_NE(tracepool_create("backend:host,auto_mark_ms:-1", &tp), TRACEPOOL_OK);
}

}  // namespace
