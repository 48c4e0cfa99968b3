#include <gtest/gtest.h>

#include <vector>

#include "free_list.h"

namespace tracepool::core {

namespace {
block make(size_t size, uintptr_t addr) {
  block b;
  b.size = size;
  b.ptr = reinterpret_cast<char*>(addr);
  return b;
}
}  // namespace

TEST(SmallFreeList, BestFitIsSmallestBlockThatHolds) {
  small_free_list list;
  block a = make(4096, 0x10000), b = make(1024, 0x20000), c = make(64 * 1024, 0x30000);
  list.insert(&a);
  list.insert(&b);
  list.insert(&c);
  EXPECT_EQ(list.best_fit(512), &b);
  EXPECT_EQ(list.best_fit(1024), &b);
  EXPECT_EQ(list.best_fit(1536), &a);
  EXPECT_EQ(list.best_fit(4608), &c);
  EXPECT_EQ(list.best_fit(65 * 1024), nullptr);
}

TEST(SmallFreeList, FindsAcrossBitmapWords) {
  small_free_list list;
  block big = make(2u << 20, 0x1000000);  // the last bin of the last word
  list.insert(&big);
  EXPECT_EQ(list.best_fit(512), &big);
  EXPECT_EQ(list.best_fit(2u << 20), &big);
  list.erase(&big);
  EXPECT_EQ(list.best_fit(512), nullptr);
  EXPECT_EQ(list.size(), 0u);
}

TEST(SmallFreeList, EraseFromMiddleOfBinKeepsOthers) {
  small_free_list list;
  std::vector<block> same(3);
  for (size_t i = 0; i < same.size(); ++i) same[i] = make(2048, 0x1000 * (i + 1));
  for (auto& b : same) list.insert(&b);
  list.erase(&same[1]);
  EXPECT_TRUE(list.contains(&same[0]));
  EXPECT_FALSE(list.contains(&same[1]));
  EXPECT_TRUE(list.contains(&same[2]));
  list.erase(&same[0]);
  list.erase(&same[2]);
  EXPECT_EQ(list.best_fit(512), nullptr);
}

TEST(LargeFreeList, BestFitPrefersSmallerThenLowerAddress) {
  large_free_list list;
  block a = make(30u << 20, 0x5000000), b = make(20u << 20, 0x9000000), c = make(20u << 20, 0x1000000);
  list.insert(&a);
  list.insert(&b);
  list.insert(&c);
  EXPECT_EQ(list.best_fit(2u << 20), &c);
  EXPECT_EQ(list.best_fit(21u << 20), &a);
  EXPECT_EQ(list.best_fit(31u << 20), nullptr);
}

}  // namespace tracepool::core
