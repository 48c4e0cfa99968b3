#include <gtest/gtest.h>

#include "base/size_class.h"

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

}  // namespace tracepool::core
