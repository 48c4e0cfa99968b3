// Out of memory and injected faults leave the pool consistent: a clean TRACEPOOL_ERR_OOM, stats that
// agree with validate(), and nothing leaked once everything is freed.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "test_support.h"

namespace tracepool::core {
using tracepool::testing::current;
using tracepool::testing::host_allocator;
using tracepool::testing::stats_of;

namespace {
size_t device_bytes_in_use(allocator& a) {
  size_t free_bytes = 0, total = 0;
  EXPECT_EQ(a.memory_info(0, &free_bytes, &total), status::ok);
  return total - free_bytes;
}
}  // namespace

TEST(OutOfMemory, TransientDeviceFailureIsAbsorbedByTheRetry) {
  auto a = host_allocator("fail_alloc:1");
  void* p = nullptr;
  ASSERT_EQ(a->malloc(4096, 0, nullptr, &p), status::ok) << last_error();
  const auto s = stats_of(*a);
  EXPECT_EQ(s.counters.num_alloc_retries, 1u);
  EXPECT_EQ(s.counters.num_ooms, 0u);
  ASSERT_EQ(a->free(p), status::ok);
}

TEST(OutOfMemory, FailedDeviceAllocationIsCleanAndRecoverable) {
  auto a = host_allocator("fail_above:2MiB");
  void* p = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(a->malloc(4u << 20, 0, nullptr, &p), status::out_of_memory);
  EXPECT_EQ(p, nullptr);
  EXPECT_NE(std::string(last_error()).find("injected failure"), std::string::npos) << last_error();
  auto s = stats_of(*a);
  EXPECT_EQ(s.counters.num_ooms, 1u);
  EXPECT_EQ(current(s, stat_kind::reserved_bytes), 0);
  EXPECT_EQ(a->validate(), status::ok) << last_error();
  ASSERT_EQ(a->malloc(4096, 0, nullptr, &p), status::ok) << "the next call succeeds";
  ASSERT_EQ(a->free(p), status::ok);
}

TEST(OutOfMemory, ReleasesCachedSegmentsAndRetries) {
  auto a = host_allocator("host_capacity:40MiB");
  void *p = nullptr, *q = nullptr;
  ASSERT_EQ(a->malloc(12 << 20, 0, nullptr, &p), status::ok);
  ASSERT_EQ(a->free(p), status::ok);                              // 12 MiB stay cached
  ASSERT_EQ(a->malloc(30 << 20, 0, nullptr, &q), status::ok) << last_error();  // 42 > 40: must free the cache
  const auto s = stats_of(*a);
  EXPECT_EQ(s.counters.num_alloc_retries, 1u);
  EXPECT_EQ(s.counters.num_device_free, 1u);
  EXPECT_EQ(s.counters.num_ooms, 0u);
  EXPECT_EQ(current(s, stat_kind::reserved_bytes), 30 << 20);
  ASSERT_EQ(a->free(q), status::ok);
}

TEST(OutOfMemory, LimitCapsReservedBytesAndSaysSo) {
  auto a = host_allocator("limit:4MiB");
  std::vector<void*> ptrs(4);
  for (auto& p : ptrs) ASSERT_EQ(a->malloc(1 << 20, 0, nullptr, &p), status::ok);  // two 2 MiB segments
  void* extra = nullptr;
  EXPECT_EQ(a->malloc(1 << 20, 0, nullptr, &extra), status::out_of_memory);
  EXPECT_NE(std::string(last_error()).find("limit"), std::string::npos) << last_error();
  EXPECT_LE(current(stats_of(*a), stat_kind::reserved_bytes), 4 << 20);
  ASSERT_EQ(a->free(ptrs[0]), status::ok);
  EXPECT_EQ(a->malloc(1 << 20, 0, nullptr, &extra), status::ok) << "freed memory is reused under the limit";
  ptrs[0] = extra;
  ASSERT_EQ(a->set_limit(0, 0), status::ok);
  for (auto& p : ptrs) ASSERT_EQ(a->free(p), status::ok);
}

TEST(OutOfMemory, MessageNamesSizesAndCache) {
  auto a = host_allocator("host_capacity:64MiB");
  void *keep = nullptr, *p = nullptr;
  ASSERT_EQ(a->malloc(20 << 20, 0, nullptr, &keep), status::ok);
  EXPECT_EQ(a->malloc(50 << 20, 0, nullptr, &p), status::out_of_memory);
  const std::string msg = last_error();
  EXPECT_NE(msg.find("tried to allocate 50.00 MiB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("20.00 MiB allocated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("device 0"), std::string::npos) << msg;
  ASSERT_EQ(a->free(keep), status::ok);
}

// libuv's OOM test, adapted: fail the k-th device allocation for k = 1, 2, ..., run a mixed
// workload each time, and check that every failure is a clean OOM and nothing is lost.
TEST(OutOfMemory, EveryInjectedFailurePointLeavesPoolConsistent) {
  for (int k = 1; k <= 24; ++k) {
    auto a = host_allocator("fail_alloc:" + std::to_string(k));
    std::mt19937 rng(k);
    std::vector<void*> live;
    int failures = 0;
    for (int i = 0; i < 300; ++i) {
      const size_t size = size_t{1} << (9 + rng() % 16);  // 512 B .. 16 MiB
      void* p = nullptr;
      const status s = a->malloc(size, 0, reinterpret_cast<void*>(uintptr_t{4096} * (1 + rng() % 3)), &p);
      if (s == status::out_of_memory) {
        ++failures;
        EXPECT_EQ(p, nullptr);
        continue;
      }
      ASSERT_EQ(s, status::ok) << last_error();
      live.push_back(p);
      if (rng() % 3 == 0) {
        const size_t j = rng() % live.size();
        ASSERT_EQ(a->free(live[j]), status::ok);
        live[j] = live.back();
        live.pop_back();
      }
      if (live.size() > 40) {
        ASSERT_EQ(a->free(live.front()), status::ok);
        live.erase(live.begin());
      }
    }
    EXPECT_LE(failures, 1) << "exactly the k-th device call fails, and a retry may absorb it";
    ASSERT_EQ(a->validate(), status::ok) << "k=" << k << ": " << last_error();
    for (void* p : live) ASSERT_EQ(a->free(p), status::ok);
    ASSERT_EQ(a->empty_cache(-1), status::ok);
    EXPECT_EQ(current(stats_of(*a), stat_kind::reserved_bytes), 0);
    EXPECT_EQ(device_bytes_in_use(*a), 0u) << "k=" << k;
  }
}

TEST(OutOfMemory, FailAboveRejectsOnlyLargeSegments) {
  auto a = host_allocator("fail_above:4MiB");
  void *small = nullptr, *large = nullptr;
  EXPECT_EQ(a->malloc(1 << 20, 0, nullptr, &small), status::ok);
  EXPECT_EQ(a->malloc(2 << 20, 0, nullptr, &large), status::out_of_memory);  // needs a 20 MiB segment
  EXPECT_EQ(stats_of(*a).counters.num_ooms, 1u);
  ASSERT_EQ(a->free(small), status::ok);
  EXPECT_EQ(a->validate(), status::ok);
}

}  // namespace tracepool::core
