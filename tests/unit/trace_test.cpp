// The pieces of attribution below the C API: call-site interning, tags, sampling weights, growth.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "report/report.h"
#include "trace/call_site_table.h"
#include "trace/sampler.h"
#include "trace/tags.h"

namespace tracepool::core {
namespace {

TEST(CallSiteTable, SameStackAndTagsGiveTheSameIdOthersDiffer) {
  call_site_table t;
  const uintptr_t a[] = {0x1000, 0x2000, 0x3000};
  const uintptr_t b[] = {0x1000, 0x2000, 0x3001};
  const uint32_t ia = t.intern(a, 3, 0, 0);
  EXPECT_NE(ia, 0u);
  EXPECT_EQ(t.intern(a, 3, 0, 0), ia);
  EXPECT_NE(t.intern(b, 3, 0, 0), ia);
  EXPECT_NE(t.intern(a, 2, 0, 0), ia) << "a prefix is another stack";
  EXPECT_NE(t.intern(a, 3, 0, 5), ia) << "other tags, another site";
  EXPECT_EQ(t.at(ia).depth, 3u);
  EXPECT_EQ(t.at(ia).frames[2], 0x3000u);
  EXPECT_EQ(t.end(), 5u);
}

TEST(CallSiteTable, InterpreterFramesArePartOfTheKey) {
  call_site_table t;
  const uintptr_t native_only[] = {0x1000, 0x2000, 0x3000, 0x4000};
  const uint32_t n = t.intern(native_only, 4, 0, 0);
  const uint32_t s = t.intern(native_only, 2, 1, 0);  // same words: 2 native frames + 1 interpreter frame
  EXPECT_NE(n, s) << "the split between native and interpreter frames is part of the key";
  EXPECT_EQ(t.intern(native_only, 2, 1, 0), s);
  EXPECT_EQ(t.at(s).script_depth, 1u);
  EXPECT_EQ(t.at(s).script.load(), nullptr) << "described only when the capturing thread says so";
  t.describe(s, new script_frame[1]{{"f.py", "g", 3, script_frame_entry}});
  t.describe(s, new script_frame[1]{{"other.py", "h", 4, 0}});  // a racing loser is dropped
  ASSERT_NE(t.at(s).script.load(), nullptr);
  EXPECT_EQ(t.at(s).script.load()[0].line, 3);
}

TEST(CallSiteTable, CountersTrackLivePeakAndTotal) {
  call_site_table t;
  const uintptr_t a[] = {0x42};
  const uint32_t id = t.intern(a, 1, 0, 0);
  t.on_alloc(id, 100, block_unit);
  t.on_alloc(id, 50, block_unit);
  t.on_free(id, 100);
  t.on_alloc(id, 10, block_unit);  // total - freed_seen = 160 is above the peak: the frees are read
  EXPECT_EQ(t.at(id).live_bytes(), 60);
  EXPECT_EQ(t.at(id).peak_bytes.load(), 150);
  EXPECT_EQ(t.at(id).total_bytes.load(), 160);
  EXPECT_EQ(t.at(id).total_blocks.load(), 3 * block_unit);
  t.on_free(id, 50);
  t.on_free(id, 10);
  for (int i = 0; i < 20; ++i) {  // frees the allocating side has not read yet never make a peak
    t.on_alloc(id, 100, block_unit);
    t.on_free(id, 100);
  }
  EXPECT_EQ(t.at(id).live_bytes(), 0);
  EXPECT_EQ(t.at(id).peak_bytes.load(), 150);
  t.on_alloc(id, 100, block_unit);
  t.on_alloc(id, 100, block_unit);
  EXPECT_EQ(t.at(id).peak_bytes.load(), 200) << "a new peak is seen however stale freed_seen was";
}

// Note [Site counters]: one thread allocates a site's blocks, another frees them, in turns, as the
// main and autograd threads of a training step do. The peak is the most ever live, exactly.
TEST(CallSiteTable, PeakIsExactWhenAnotherThreadFrees) {
  call_site_table t;
  const uintptr_t a[] = {0x43};
  const uint32_t id = t.intern(a, 1, 0, 0);
  std::atomic<int> turn{0};  // even: the allocator's turn, odd: the freer's
  constexpr int steps = 200;
  auto step_blocks = [](int step) { return 1 + (step * 7) % 5; };  // 1..5 blocks of 64 bytes
  std::thread freer([&] {
    for (int step = 0; step < steps; ++step) {
      while (turn.load(std::memory_order_acquire) != 2 * step + 1) std::this_thread::yield();
      for (int b = 0; b < step_blocks(step); ++b) t.on_free(id, 64);
      turn.store(2 * step + 2, std::memory_order_release);
    }
  });
  for (int step = 0; step < steps; ++step) {
    while (turn.load(std::memory_order_acquire) != 2 * step) std::this_thread::yield();
    for (int b = 0; b < step_blocks(step); ++b) t.on_alloc(id, 64, block_unit);
    turn.store(2 * step + 1, std::memory_order_release);
  }
  freer.join();
  EXPECT_EQ(t.at(id).live_bytes(), 0);
  EXPECT_EQ(t.at(id).peak_bytes.load(), 5 * 64);
  t.on_alloc(id, 64, block_unit);  // live 64, below the peak: the allocating side may skip the read
  EXPECT_EQ(t.at(id).peak_bytes.load(), 5 * 64);
}

TEST(CallSiteTable, ConcurrentInterningAgreesOnIds) {
  call_site_table t;
  constexpr int threads = 8, stacks = 2000;
  std::vector<std::vector<uint32_t>> ids(threads, std::vector<uint32_t>(stacks));
  std::vector<std::thread> pool;
  for (int th = 0; th < threads; ++th)
    pool.emplace_back([&, th] {
      for (int s = 0; s < stacks; ++s) {
        const int k = (s * 7 + th * 13) % stacks;  // every thread, every stack, in a different order
        const uintptr_t frames[] = {0x400000u + static_cast<uintptr_t>(k), 0x500000};
        ids[th][k] = t.intern(frames, 2, 0, 0);
      }
    });
  for (auto& p : pool) p.join();
  std::set<uint32_t> distinct(ids[0].begin(), ids[0].end());
  EXPECT_EQ(distinct.size(), static_cast<size_t>(stacks));
  for (int th = 1; th < threads; ++th) EXPECT_EQ(ids[th], ids[0]);
  EXPECT_EQ(t.end(), static_cast<uint32_t>(stacks + 1));
}

TEST(Tags, NestedPushesNameTheSetOutermostFirst) {
  ASSERT_EQ(current_tags(), 0u);
  ASSERT_EQ(push_tag("epoch"), status::ok);
  ASSERT_EQ(push_tag("validation"), status::ok);
  const uint32_t set = current_tags();
  EXPECT_EQ(tag_labels(set), (std::vector<std::string>{"epoch", "validation"}));
  ASSERT_EQ(pop_tag(), status::ok);
  ASSERT_EQ(push_tag("validation"), status::ok);
  EXPECT_EQ(current_tags(), set) << "the same stack of labels is the same set";
  ASSERT_EQ(pop_tag(), status::ok);
  ASSERT_EQ(pop_tag(), status::ok);
  EXPECT_EQ(current_tags(), 0u);
  EXPECT_EQ(push_tag("bad\nlabel"), status::invalid_argument);
}

// A push repeated around every allocation (a host's hook) takes a per-thread shortcut: it must give the
// same sets as the registry, whatever buffer the label comes in and whatever was pushed around it.
TEST(Tags, RepeatedPushesAndPopsKeepTheRegistrysSets) {
  ASSERT_EQ(current_tags(), 0u);
  char buffer[16] = "cupy";
  ASSERT_EQ(push_tag(buffer), status::ok);
  const uint32_t cupy = current_tags();
  ASSERT_EQ(pop_tag(), status::ok);
  std::strcpy(buffer, "numba");  // the same address, another label
  ASSERT_EQ(push_tag(buffer), status::ok);
  EXPECT_EQ(tag_labels(current_tags()), (std::vector<std::string>{"numba"}));
  ASSERT_EQ(pop_tag(), status::ok);
  ASSERT_EQ(push_tag("epoch"), status::ok);  // another parent: "cupy" under it is another set
  ASSERT_EQ(push_tag("cupy"), status::ok);
  EXPECT_EQ(tag_labels(current_tags()), (std::vector<std::string>{"epoch", "cupy"}));
  ASSERT_EQ(pop_tag(), status::ok);
  ASSERT_EQ(pop_tag(), status::ok);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(push_tag("cupy"), status::ok);
    EXPECT_EQ(current_tags(), cupy);
    ASSERT_EQ(pop_tag(), status::ok);
    EXPECT_EQ(current_tags(), 0u);
  }
  ASSERT_EQ(push_tag("cupy"), status::ok);
  ASSERT_EQ(push_tag("cupy"), status::ok);  // nested under itself: a new set, then back
  EXPECT_EQ(tag_labels(current_tags()), (std::vector<std::string>{"cupy", "cupy"}));
  ASSERT_EQ(pop_tag(), status::ok);
  EXPECT_EQ(current_tags(), cupy);
  ASSERT_EQ(pop_tag(), status::ok);
  EXPECT_EQ(current_tags(), 0u);
  EXPECT_EQ(pop_tag(), status::invalid_argument);
  std::string too_long(max_label_bytes + 1, 'x');  // the shortcut never skips the checks of a new label
  EXPECT_EQ(push_tag(too_long.c_str()), status::invalid_argument);
}

TEST(Sampler, WeightIsTheInverseOfTheSampleProbability) {
  sampler off(0, 1);
  EXPECT_TRUE(off.sample(1));
  EXPECT_EQ(off.weight(12345), 1.0);
  sampler s(1 << 20, 1);
  EXPECT_NEAR(s.weight(1 << 20), 1.0 / (1.0 - std::exp(-1.0)), 1e-9);
  EXPECT_NEAR(s.weight(512), 2048.5, 0.5);
  EXPECT_NEAR(s.weight(size_t{64} << 20), 1.0, 1e-12);
}

TEST(Sampler, SampledFractionMatchesTheProbability) {
  sampler s(64 * 1024, 99);
  int hits = 0;
  constexpr int n = 200000;
  for (int i = 0; i < n; ++i) hits += s.sample(4096);
  const double p = -std::expm1(-4096.0 / (64 * 1024));
  EXPECT_NEAR(hits, n * p, 5 * std::sqrt(n * p * (1 - p)));
}

TEST(Growth, NeedsTwoRisesNoFallAndARiseIntoTheLastMark) {
  EXPECT_TRUE(is_growing({1, 2, 3}));
  EXPECT_TRUE(is_growing({0, 1, 1, 2}));
  EXPECT_FALSE(is_growing({0, 5, 5, 5})) << "built once (optimizer state)";
  EXPECT_FALSE(is_growing({1, 2, 3, 3})) << "stopped growing";
  EXPECT_FALSE(is_growing({1, 3, 2, 4})) << "fell once";
  EXPECT_FALSE(is_growing({1, 2}));
  EXPECT_FALSE(is_growing({}));
}

}  // namespace
}  // namespace tracepool::core
