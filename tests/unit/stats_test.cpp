#include <gtest/gtest.h>

#include <vector>

#include "test_support.h"

namespace tracepool::core {
using tracepool::testing::current;
using tracepool::testing::host_allocator;
using tracepool::testing::stats_of;

TEST(Stats, AllocationCountsRoundedAndRequestedBytes) {
  auto a = host_allocator();
  void* p = nullptr;
  ASSERT_EQ(a->malloc(1000, 0, nullptr, &p), status::ok);
  const auto s = stats_of(*a);
  EXPECT_EQ(current(s, stat_kind::allocation), 1);
  EXPECT_EQ(current(s, stat_kind::allocated_bytes), 1024);
  EXPECT_EQ(current(s, stat_kind::requested_bytes), 1000);
  EXPECT_EQ(current(s, stat_kind::active_bytes), 1024);
  EXPECT_EQ(current(s, stat_kind::segment), 1);
  EXPECT_EQ(current(s, stat_kind::reserved_bytes), 2 << 20);
  EXPECT_EQ(current(s, stat_kind::inactive_split), 1) << "the rest of the 2 MiB segment";
  EXPECT_EQ(current(s, stat_kind::inactive_split_bytes), (2 << 20) - 1024);
  EXPECT_EQ(s.table.at(stat_kind::allocated_bytes, static_cast<int>(pool_kind::small)).current, 1024);
  EXPECT_EQ(s.table.at(stat_kind::allocated_bytes, static_cast<int>(pool_kind::large)).current, 0);
  ASSERT_EQ(a->free(p), status::ok);
  const auto t = stats_of(*a);
  EXPECT_EQ(current(t, stat_kind::allocated_bytes), 0);
  EXPECT_EQ(current(t, stat_kind::inactive_split), 0) << "merged back into a whole free segment";
  EXPECT_EQ(t.table.at(stat_kind::allocated_bytes, all_pools).peak, 1024);
  EXPECT_EQ(t.table.at(stat_kind::allocated_bytes, all_pools).allocated, 1024);
  EXPECT_EQ(t.table.at(stat_kind::allocated_bytes, all_pools).freed, 1024);
}

TEST(Stats, PeakTracksHighestCurrentAndResets) {
  auto a = host_allocator();
  std::vector<void*> ptrs(8);
  for (auto& p : ptrs) ASSERT_EQ(a->malloc(1 << 20, 0, nullptr, &p), status::ok);
  for (size_t i = 0; i < 6; ++i) ASSERT_EQ(a->free(ptrs[i]), status::ok);
  auto s = stats_of(*a);
  EXPECT_EQ(s.table.at(stat_kind::allocated_bytes, all_pools).peak, 8 << 20);
  EXPECT_EQ(current(s, stat_kind::allocated_bytes), 2 << 20);
  ASSERT_EQ(a->reset_peak(0), status::ok);
  s = stats_of(*a);
  EXPECT_EQ(s.table.at(stat_kind::allocated_bytes, all_pools).peak, 2 << 20);
  EXPECT_EQ(s.table.at(stat_kind::reserved_bytes, all_pools).peak, s.table.at(stat_kind::reserved_bytes, all_pools).current);
  ASSERT_EQ(a->reset_accumulated(0), status::ok);
  s = stats_of(*a);
  EXPECT_EQ(s.table.at(stat_kind::allocation, all_pools).allocated, 0);
  EXPECT_EQ(s.counters.num_device_alloc, 0u);
  EXPECT_EQ(current(s, stat_kind::allocation), 2) << "reset_accumulated keeps currents";
  for (size_t i = 6; i < 8; ++i) ASSERT_EQ(a->free(ptrs[i]), status::ok);
}

TEST(Stats, CountsDeviceAllocationsAndFrees) {
  auto a = host_allocator();
  void* p = nullptr;
  ASSERT_EQ(a->malloc(30 << 20, 0, nullptr, &p), status::ok);
  ASSERT_EQ(a->free(p), status::ok);
  ASSERT_EQ(a->empty_cache(0), status::ok);
  const auto s = stats_of(*a);
  EXPECT_EQ(s.counters.num_device_alloc, 1u);
  EXPECT_EQ(s.counters.num_device_free, 1u);
  EXPECT_EQ(current(s, stat_kind::reserved_bytes), 0);
  EXPECT_EQ(s.table.at(stat_kind::reserved_bytes, static_cast<int>(pool_kind::large)).peak, 30 << 20);
}

TEST(Stats, PeakOfSeveralStreamsIsAnUpperBound) {
  // stats.h: block stats are per stream; the device peak is the sum of the streams' peaks.
  auto a = host_allocator();
  void *p = nullptr, *q = nullptr;
  ASSERT_EQ(a->malloc(1 << 20, 0, reinterpret_cast<void*>(0x1000), &p), status::ok);
  ASSERT_EQ(a->free(p), status::ok);
  ASSERT_EQ(a->malloc(1 << 20, 0, reinterpret_cast<void*>(0x2000), &q), status::ok);
  ASSERT_EQ(a->free(q), status::ok);
  const int64_t peak = stats_of(*a).table.at(stat_kind::allocated_bytes, all_pools).peak;
  EXPECT_GE(peak, 1 << 20) << "never below the true peak";
  EXPECT_LE(peak, 2 << 20) << "never above the sum of the streams' peaks";
}

}  // namespace tracepool::core
