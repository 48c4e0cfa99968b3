#include <gtest/gtest.h>

#include "base/size_class.h"
#include "test_support.h"
#include "tracepool/tracepool.h"

namespace tracepool::core {

TEST(SizeClass, RoundsUpToMultiplesOf512) {
  const struct { size_t in, out; } table[] = {{1, 512}, {511, 512}, {512, 512}, {513, 1024},
                                              {1000, 1024}, {4096, 4096}, {(1 << 20) + 1, (1 << 20) + 512}};
  for (const auto& row : table) EXPECT_EQ(round_size(row.in), row.out) << row.in;
}

TEST(SizeClass, SmallPoolIsUpToOneMiB) {
  EXPECT_EQ(pool_kind_for(512), pool_kind::small);
  EXPECT_EQ(pool_kind_for(1 << 20), pool_kind::small);
  EXPECT_EQ(pool_kind_for((1 << 20) + 512), pool_kind::large);
}

TEST(SizeClass, SegmentSizesFollowPyTorch) {
  EXPECT_EQ(segment_size_for(512), 2u << 20);
  EXPECT_EQ(segment_size_for(1 << 20), 2u << 20);
  EXPECT_EQ(segment_size_for((1 << 20) + 512), 20u << 20);
  EXPECT_EQ(segment_size_for((10u << 20) - 512), 20u << 20);
  EXPECT_EQ(segment_size_for(10u << 20), 10u << 20);
  EXPECT_EQ(segment_size_for((10u << 20) + 512), 12u << 20);
}

TEST(SizeClass, SplitKeepsUsefulRemaindersOnly) {
  EXPECT_TRUE(should_split(pool_kind::small, 2u << 20, (2u << 20) - 512));
  EXPECT_FALSE(should_split(pool_kind::small, 1024, 1024));
  EXPECT_FALSE(should_split(pool_kind::large, 20u << 20, 19u << 20));  // exactly 1 MiB left: not kept
  EXPECT_TRUE(should_split(pool_kind::large, 20u << 20, (19u << 20) - 512));
}

// A host's own rounding (PyTorch's roundup_power2_divisions): the block takes the size it asks for,
// rounded to 512 bytes; requested bytes stay what the caller asked; an answer below the request or past
// the largest request leaves tracepool's rounding.
TEST(SizeClass, AHostsRoundingSetsTheBlockSizeAndNotTheRequestedBytes) {
  auto a = testing::host_allocator();
  const size_t request = (84u << 20) + 100;
  const struct { size_t rounded, block; } table[] = {
      {96u << 20, 96u << 20},                 // PyTorch's four divisions between 64 and 128 MiB
      {(96u << 20) + 1, (96u << 20) + 512},   // rounded to tracepool's 512 bytes
      {0, (84u << 20) + 512},                 // below the request: tracepool's rounding
      {max_request + 1, (84u << 20) + 512},   // past the largest request: tracepool's rounding
  };
  for (const auto& row : table) {
    void* p = nullptr;
    ASSERT_EQ(a->malloc(request, 0, nullptr, &p, row.rounded), status::ok) << last_error();
    const device_stats s = testing::stats_of(*a);
    EXPECT_EQ(testing::current(s, stat_kind::allocated_bytes), static_cast<int64_t>(row.block)) << row.rounded;
    EXPECT_EQ(testing::current(s, stat_kind::requested_bytes), static_cast<int64_t>(request)) << row.rounded;
    ASSERT_EQ(a->free(p), status::ok);
  }
  tracepool_t* tp = nullptr;
  ASSERT_EQ(tracepool_create("backend:host", &tp), TRACEPOOL_OK);
  void* p = nullptr;
  ASSERT_EQ(tracepool_malloc_rounded(tp, 4096, 8192, 0, nullptr, &p), TRACEPOOL_OK);
  tracepool_stats_t st{};
  st.size = sizeof st;
  ASSERT_EQ(tracepool_get_stats(tp, 0, &st), TRACEPOOL_OK);
  EXPECT_EQ(st.allocated_bytes.current, 8192);
  EXPECT_EQ(st.requested_bytes.current, 4096);
  ASSERT_EQ(tracepool_free(tp, p, nullptr), TRACEPOOL_OK);
  EXPECT_EQ(tracepool_malloc_rounded(tp, 4096, 8192, 0, nullptr, nullptr), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tracepool_malloc_rounded(tp, max_request + 1, 0, 0, nullptr, &p), TRACEPOOL_ERR_INVALID_ARGUMENT);
  tracepool_destroy(tp);
}

// The C API's segment size is the one the pool takes from the device: what PyTorch's OOM message names.
TEST(SizeClass, SegmentSizeAtTheCApiIsWhatThePoolReserves) {
  const struct { size_t request, segment; } table[] = {
      {1, 2u << 20}, {1u << 20, 2u << 20}, {(1u << 20) + 1, 20u << 20}, {(10u << 20) - 512, 20u << 20},
      {10u << 20, 10u << 20}, {(10u << 20) + 1, 12u << 20}, {max_request + 1, max_request + 1}};
  for (const auto& row : table) EXPECT_EQ(tracepool_segment_size(row.request), row.segment) << row.request;
  tracepool_t* tp = nullptr;
  ASSERT_EQ(tracepool_create("backend:host", &tp), TRACEPOOL_OK);
  for (const size_t request : {size_t{4096}, size_t{3u << 20}, size_t{(10u << 20) + 1}}) {
    void* p = nullptr;
    ASSERT_EQ(tracepool_malloc(tp, request, 0, nullptr, &p), TRACEPOOL_OK) << tracepool_last_error();
    tracepool_stats_t st{};
    st.size = sizeof st;
    ASSERT_EQ(tracepool_get_stats(tp, 0, &st), TRACEPOOL_OK);
    EXPECT_EQ(st.reserved_bytes.current, static_cast<int64_t>(tracepool_segment_size(request))) << request;
    ASSERT_EQ(tracepool_free(tp, p, nullptr), TRACEPOOL_OK);
    ASSERT_EQ(tracepool_empty_cache(tp, -1), TRACEPOOL_OK);
  }
  tracepool_destroy(tp);
}

}  // namespace tracepool::core
