// Out of memory and injected faults leave the pool consistent: a clean TRACEPOOL_ERR_OOM, stats that
// agree with validate(), and nothing leaked once everything is freed.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "report/oom_reporter.h"
#include "report/report.h"
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

namespace {
constexpr size_t MiB = size_t{1} << 20;

// Classic segments whatever TRACEPOOL_TEST_CONF says: what classic segments leave cached is the point.
std::unique_ptr<allocator> classic_allocator(const std::string& extra) {
  config cfg;
  EXPECT_EQ(parse_config(("backend:host,validate:on,segments:classic," + extra).c_str(), &cfg), status::ok)
      << last_error();
  std::unique_ptr<allocator> a;
  EXPECT_EQ(allocator::create(cfg, &a), status::ok) << last_error();
  return a;
}

// 15 blocks of 4 MiB (three 20 MiB segments, or three pieces), then every other one freed: 32 MiB
// cached in eight 4 MiB blocks, none beside another, 28 MiB live, on a 64 MiB device with 4 MiB free.
std::vector<void*> fragment(allocator& a) {
  std::vector<void*> blocks(15);
  for (void*& p : blocks) EXPECT_EQ(a.malloc(4 * MiB, 0, nullptr, &p), status::ok) << last_error();
  for (size_t i = 0; i < blocks.size(); i += 2) EXPECT_EQ(a.free(blocks[i]), status::ok);
  std::vector<void*> kept;
  for (size_t i = 1; i < blocks.size(); i += 2) kept.push_back(blocks[i]);
  return kept;
}

// The free bytes in whole 2 MiB pages, counted from the blocks themselves: classic segments on the
// host backend are mmap'd, page-aligned only to 4 KiB.
int64_t free_bytes_in_whole_pages(allocator& a) {
  std::vector<block_record> blocks;
  EXPECT_EQ(a.collect_blocks(0, &blocks), status::ok);
  int64_t bytes = 0;
  for (const block_record& b : blocks) {
    if (b.live || b.pending) continue;
    const uintptr_t first = (b.address + 2 * MiB - 1) / (2 * MiB), end = (b.address + b.size) / (2 * MiB);
    if (end > first) bytes += static_cast<int64_t>((end - first) * 2 * MiB);
  }
  return bytes;
}

// The message of a failed request of `bytes`, with the OOM report's lines.
std::string oom_message(allocator& a, size_t bytes) {
  void* p = nullptr;
  EXPECT_EQ(a.malloc(bytes, 0, nullptr, &p), status::out_of_memory);
  return last_error();
}

void free_all(allocator& a, const std::vector<void*>& blocks) {
  for (void* p : blocks) EXPECT_EQ(a.free(p), status::ok);
}
}  // namespace

TEST(OutOfMemory, MessageSaysHowMuchIsFragmentationAndThatGrowableSegmentsWouldFit) {
  auto a = classic_allocator("host_capacity:64MiB");
  oom_reporter reporter(*a, /*print=*/false);
  ASSERT_EQ(a->subscribe(&reporter), status::ok);
  const std::vector<void*> kept = fragment(*a);
  const int64_t pages = free_bytes_in_whole_pages(*a);
  ASSERT_GE(pages, 16 * int64_t{MiB}) << "a 4 MiB block holds one whole 2 MiB page at least";
  const std::string msg = oom_message(*a, 8 * MiB);  // no 8 MiB block cached, no 20 MiB segment free
  EXPECT_NE(msg.find("segment of 20.00 MiB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Fragmentation: 28.00 MiB of the 32.00 MiB cached lies outside the largest free block "
                     "(4.00 MiB)."),
            std::string::npos)
      << msg;
  EXPECT_NE(
      msg.find("Growable segments (TRACEPOOL_CONF=segments:growable) would likely have fit it: they give back the " +
               human_bytes(pages) + " of free cache in whole 2 MiB pages, and the device has 4.00 MiB free."),
      std::string::npos)
      << msg;
  free_all(*a, kept);
}

TEST(OutOfMemory, MessageSaysWhenGrowableSegmentsWouldNotFitEither) {
  auto a = classic_allocator("host_capacity:64MiB");
  oom_reporter reporter(*a, /*print=*/false);
  ASSERT_EQ(a->subscribe(&reporter), status::ok);
  const std::vector<void*> kept = fragment(*a);
  const int64_t pages = free_bytes_in_whole_pages(*a);
  const std::string msg = oom_message(*a, 48 * MiB);  // more than the 4 MiB free and the 32 MiB cached
  EXPECT_NE(msg.find("Fragmentation: 28.00 MiB of the 32.00 MiB cached"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Growable segments would not have fit it either: free cache in whole pages (" +
                     human_bytes(pages) + ") and the device's free memory (4.00 MiB) come to less than the request."),
            std::string::npos)
      << msg;
  EXPECT_EQ(msg.find("would likely have fit"), std::string::npos) << msg;
  free_all(*a, kept);
}

// The free 4 MiB blocks lie inside 20 MiB pieces still in use: nothing of them could be unmapped.
TEST(OutOfMemory, MessageUnderGrowableSegmentsSaysTheyAreOn) {
  auto a = host_allocator("segments:growable,host_capacity:64MiB");
  oom_reporter reporter(*a, /*print=*/false);
  ASSERT_EQ(a->subscribe(&reporter), status::ok);
  const std::vector<void*> kept = fragment(*a);
  const std::string msg = oom_message(*a, 8 * MiB);  // one more 20 MiB piece: the device has 4 MiB
  EXPECT_NE(msg.find("pieces of 20.00 MiB"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("segment of"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Fragmentation: 28.00 MiB of the 32.00 MiB cached lies outside the largest free block "
                     "(4.00 MiB)."),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("Growable segments are on: the retry gave the free pieces of the cache back to the device"),
            std::string::npos)
      << msg;
  report r;
  ASSERT_EQ(build_report(*a, "demand", &r), status::ok);
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_EQ(r.devices[0].segments, "growable");
  EXPECT_EQ(r.devices[0].free_page_bytes, 32 * int64_t{MiB}) << "a growable range is page-aligned: 2 pages a block";
  free_all(*a, kept);
}

// What the message says comes from the report, which keeps it through a save and a read.
TEST(OutOfMemory, TheReportKeepsSegmentsAndFreePagesThroughJson) {
  auto a = classic_allocator("host_capacity:64MiB");
  const std::vector<void*> kept = fragment(*a);
  report r;
  ASSERT_EQ(build_report(*a, "demand", &r), status::ok);
  const device_summary& d = r.devices.at(0);
  EXPECT_EQ(d.segments, "classic");
  EXPECT_TRUE(d.growable_available) << "the host backend emulates pages";
  EXPECT_EQ(d.cached_bytes, 32 * int64_t{MiB});
  EXPECT_EQ(d.free_page_bytes, free_bytes_in_whole_pages(*a));
  EXPECT_EQ(fragmentation_bytes(d), 28 * int64_t{MiB});
  report back;
  ASSERT_EQ(read_report_json(to_json(r), &back), status::ok) << last_error();
  const device_summary& b = back.devices.at(0);
  EXPECT_EQ(b.segments, d.segments);
  EXPECT_EQ(b.growable_available, d.growable_available);
  EXPECT_EQ(b.free_page_bytes, d.free_page_bytes);
  EXPECT_EQ(to_text(back), to_text(r));
  EXPECT_NE(to_text(r).find("\n  fragmentation 28.00 MiB (cached outside the largest free block); " +
                            human_bytes(d.free_page_bytes) + " of the cache in whole 2 MiB pages; segments: classic\n"),
            std::string::npos)
      << to_text(r);
  free_all(*a, kept);
}

}  // namespace tracepool::core
