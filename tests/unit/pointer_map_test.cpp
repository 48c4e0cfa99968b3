#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "pointer_map.h"

namespace tracepool::core {

TEST(PointerMap, InsertTakeRoundTrip) {
  pointer_map map;
  std::vector<block> blocks(10000);
  for (size_t i = 0; i < blocks.size(); ++i) map.insert(reinterpret_cast<void*>(0x100000 + i * 512), &blocks[i]);
  EXPECT_EQ(map.size(), blocks.size());
  // Remove every other one, then check that lookups of the rest survive backward-shift deletion.
  for (size_t i = 0; i < blocks.size(); i += 2)
    EXPECT_EQ(map.take(reinterpret_cast<void*>(0x100000 + i * 512)), &blocks[i]);
  for (size_t i = 0; i < blocks.size(); ++i) {
    block* found = nullptr;
    map.with_block(reinterpret_cast<void*>(0x100000 + i * 512), [&](block* b) { found = b; });
    EXPECT_EQ(found, i % 2 ? &blocks[i] : nullptr) << i;
  }
}

TEST(PointerMap, TakeOfAbsentKeyIsNull) {
  pointer_map map;
  EXPECT_EQ(map.take(reinterpret_cast<void*>(0x1000)), nullptr);
  block b;
  map.insert(reinterpret_cast<void*>(0x2000), &b);
  EXPECT_EQ(map.take(reinterpret_cast<void*>(0x2000)), &b);
  EXPECT_EQ(map.take(reinterpret_cast<void*>(0x2000)), nullptr);
}

TEST(PointerMap, ConcurrentThreadsKeepTheirOwnKeys) {
  pointer_map map;
  constexpr int threads = 8, per_thread = 5000;
  std::vector<block> blocks(threads * per_thread);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        for (int i = 0; i < per_thread; ++i) {
          const size_t k = static_cast<size_t>(t * per_thread + i);
          map.insert(reinterpret_cast<void*>((k + 1) * 512), &blocks[k]);
        }
        for (int i = 0; i < per_thread; ++i) {
          const size_t k = static_cast<size_t>(t * per_thread + i);
          ASSERT_EQ(map.take(reinterpret_cast<void*>((k + 1) * 512)), &blocks[k]);
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_EQ(map.size(), 0u);
}

}  // namespace tracepool::core
