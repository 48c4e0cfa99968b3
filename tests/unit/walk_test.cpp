// The cfi unwinder's remembered walks (Note [Remembered walks] in core/trace/cfi_unwinder.cpp): a walk
// that repeats one from the same stack pointer is recalled from the stack words it depended on, and
// the serial it recalls must name exactly the frames a fresh walk gives, however the frames beyond
// the ones that match differ.
#include <alloca.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <vector>

#include "report_support.h"
#include "trace/cfi_unwinder.h"

namespace {

using tracepool::core::cfi_backtrace;
using tracepool::core::cfi_unwinder_supported;
using tracepool::core::cfi_walks;

constexpr size_t max_frames = 48;

struct walk_result {
  std::vector<uintptr_t> frames;
  uint64_t serial = 0;
};

bool (*stop_at)(uintptr_t) = nullptr;
uint64_t stop_key = 0;
uintptr_t stop_address = 0;
bool stop_here(uintptr_t ra) { return ra == stop_address; }

// One call instruction for remembered and fresh walks alike, so both start from the same place.
__attribute__((noinline)) void capture_here(bool remember, walk_result* out) {
  uintptr_t frames[max_frames];
  uint64_t serial = 0;
  const size_t n = cfi_backtrace(frames, max_frames, stop_at, stop_key, remember ? &serial : nullptr);
  out->frames.assign(frames, frames + n);
  out->serial = serial;
  KEEP_FRAME();
}

// Callers with the same code and frame layout at different addresses: called through one pointer
// from one place, each runs at the same stack depth, so their walks start from the same rsp.
template <int K>
__attribute__((noinline)) void caller(bool remember, walk_result* out) {
  capture_here(remember, out);
  KEEP_FRAME();
}

// Six frames between capture_here and outer<K>, the same functions at the same depths whatever K.
template <int Hops>
__attribute__((noinline)) void hop(bool remember, walk_result* out) {
  if constexpr (Hops == 0)
    capture_here(remember, out);
  else
    hop<Hops - 1>(remember, out);
  KEEP_FRAME();
}

// Differ only seven frames out, beyond the hops.
template <int K>
__attribute__((noinline)) void outer(bool remember, walk_result* out) {
  hop<5>(remember, out);
  KEEP_FRAME();
}

// An rbp-based frame (alloca keeps a frame pointer), whose callers differ beyond it.
__attribute__((noinline)) void with_alloca(bool remember, walk_result* out, size_t n) {
  volatile char* buf = static_cast<volatile char*>(alloca(n));
  buf[0] = 1;
  capture_here(remember, out);
  KEEP_FRAME();
}

template <int K>
__attribute__((noinline)) void over_alloca(bool remember, walk_result* out) {
  with_alloca(remember, out, 64);
  KEEP_FRAME();
}

using path_fn = void (*)(bool, walk_result*);

volatile int two = 2;  // a trip count the compiler cannot unroll: one call instruction for both walks

// The frames each serial was handed out with (by the walk that remembered it).
std::map<uint64_t, std::vector<uintptr_t>> frames_of_serial;

// Runs each path `rounds` times in turn, through one call instruction, remembering, and checks every
// capture against a fresh walk of the same path: a walk writes the fresh walk's frames, a recall
// (no frames) names them by the serial of the walk that wrote them. Returns the serials per path.
std::vector<std::vector<uint64_t>> check_paths(const std::vector<path_fn>& paths, int rounds,
                                               size_t frames_at_least = 5) {
  std::vector<std::vector<uint64_t>> serials(paths.size());
  for (int round = 0; round < rounds; ++round)
    for (size_t i = 0; i < paths.size(); ++i) {
      walk_result walks[2];  // fresh, remembered
      for (int k = 0; k < two; ++k) paths[i](k == 1, &walks[k]);
      EXPECT_GE(walks[0].frames.size(), frames_at_least);
      const uint64_t serial = walks[1].serial;
      if (walks[1].frames.empty() && serial != 0) {
        const auto known = frames_of_serial.find(serial);
        EXPECT_TRUE(known != frames_of_serial.end()) << "path " << i << " recalled a serial no walk made";
        if (known != frames_of_serial.end())
          EXPECT_EQ(known->second, walks[0].frames) << "path " << i << ", round " << round << " recalled other frames";
      } else {
        EXPECT_EQ(walks[1].frames, walks[0].frames) << "path " << i << ", round " << round;
        if (serial != 0) frames_of_serial[serial] = walks[1].frames;
      }
      serials[i].push_back(serial);
    }
  return serials;
}

void expect_recalled_and_told_apart(const std::vector<std::vector<uint64_t>>& serials) {
  for (size_t i = 0; i < serials.size(); ++i) {
    EXPECT_NE(serials[i][0], 0u);
    for (uint64_t s : serials[i]) EXPECT_EQ(s, serials[i][0]) << "path " << i << " was walked again";
    for (size_t j = 0; j < i; ++j) EXPECT_NE(serials[i][0], serials[j][0]) << "paths " << i << " and " << j;
  }
}

class RememberedWalks : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cfi_unwinder_supported()) GTEST_SKIP() << "the cfi unwinder needs x86-64 Linux";
    stop_at = nullptr;
    stop_key = 0;
  }
};

TEST_F(RememberedWalks, ARepeatedWalkIsRecalledWithTheSameFrames) {
  const auto before = cfi_walks();
  const auto serials = check_paths({caller<0>}, 5);
  expect_recalled_and_told_apart(serials);
  const auto after = cfi_walks();
  EXPECT_GE(after.replayed - before.replayed, 4u) << "the walks after the first are recalled";
}

TEST_F(RememberedWalks, CallersAtTheSameDepthAreToldApart) {
  expect_recalled_and_told_apart(check_paths({caller<1>, caller<2>, caller<3>}, 4));
}

TEST_F(RememberedWalks, FramesThatDifferFurtherOutAreToldApart) {
  expect_recalled_and_told_apart(check_paths({outer<1>, outer<2>}, 4));
}

TEST_F(RememberedWalks, RbpBasedFramesAreRecalledExactly) {
  expect_recalled_and_told_apart(check_paths({over_alloca<1>, over_alloca<2>}, 4));
}

// More paths from one stack pointer than a set of remembered walks holds (8 ways): evicted walks are
// walked again, and every capture is still right.
TEST_F(RememberedWalks, MorePathsThanTheCacheHoldsStayRight) {
  const auto before = cfi_walks();
  check_paths({caller<10>, caller<11>, caller<12>, caller<13>, caller<14>, caller<15>, caller<16>, caller<17>,
               caller<18>, caller<19>, caller<30>, caller<31>},
              3);
  const auto after = cfi_walks();
  EXPECT_LT(after.replayed - before.replayed, 24u) << "12 paths in 8 ways: some were evicted and walked again";
}

// A walk that stopped early is not recalled for a capture without that stop, nor under another key.
TEST_F(RememberedWalks, TheStopAndItsKeyArePartOfTheWalk) {
  const auto whole = check_paths({caller<20>}, 2);
  walk_result direct;
  caller<20>(false, &direct);
  ASSERT_GT(direct.frames.size(), 4u);
  stop_address = direct.frames[1];  // the return into caller<20>: the same from every call of it
  stop_at = stop_here;
  stop_key = 1;
  const auto stopped = check_paths({caller<20>}, 3, 2);
  walk_result short_walk;
  caller<20>(false, &short_walk);
  EXPECT_EQ(short_walk.frames.size(), 2u);
  stop_key = 2;  // what stop() tests has changed: a walk of its own
  const auto rekeyed = check_paths({caller<20>}, 2, 2);
  EXPECT_NE(rekeyed[0][0], stopped[0][0]);
  stop_at = nullptr;
  stop_key = 0;
  const auto again = check_paths({caller<20>}, 2);
  EXPECT_NE(again[0][0], stopped[0][0]);
  EXPECT_NE(stopped[0][0], whole[0][0]);
}

}  // namespace
