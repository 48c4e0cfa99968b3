// Growable segments (Note [Growable segments] in core/block.h) on the host backend, which emulates
// reserved ranges and their pieces: where memory goes, what goes back and when, and what the
// statistics say. The other suites run again with segments:growable (tests/CMakeLists.txt).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_support.h"

namespace tracepool::core {
namespace {

using testing::current;
using testing::host_allocator;
using testing::stats_of;

constexpr size_t MiB = size_t{1} << 20;
constexpr int64_t piece = 20 << 20;  // a large-pool piece

backend::stream_handle stream(int i) { return reinterpret_cast<backend::stream_handle>(4096 * (1 + i)); }

std::unique_ptr<allocator> growable(const std::string& extra = "") {
  return host_allocator("segments:growable" + (extra.empty() ? "" : "," + extra));
}

// The free tail of what is mapped serves a larger request once a piece is added behind it: 12 MiB
// cached plus 20 MiB more hold 30 MiB on a 40 MiB device. Classic segments need a 30 MiB segment
// beside the cached 20 MiB one, and so an out-of-memory retry (OutOfMemory.ReleasesCachedSegmentsAndRetries).
TEST(Growable, ALargeRequestExtendsTheFreeTailInsteadOfANewSegment) {
  auto a = growable("host_capacity:40MiB");
  void *p = nullptr, *q = nullptr;
  ASSERT_EQ(a->malloc(12 * MiB, 0, nullptr, &p), status::ok);
  ASSERT_EQ(a->free(p), status::ok);
  ASSERT_EQ(a->malloc(30 * MiB, 0, nullptr, &q), status::ok) << last_error();
  EXPECT_EQ(q, p) << "the cached block grew in place";
  const auto s = stats_of(*a);
  EXPECT_EQ(s.counters.num_alloc_retries, 0u);
  EXPECT_EQ(s.counters.num_device_alloc, 2u) << "two pieces mapped, one at a time";
  EXPECT_EQ(current(s, stat_kind::reserved_bytes), 2 * piece);
  EXPECT_EQ(current(s, stat_kind::segment), 1) << "one growable segment";
  ASSERT_EQ(a->free(q), status::ok);
}

// reserved_bytes: bytes mapped; segment: growable segments; num_device_alloc/free: map and unmap
// calls, a piece each; inactive_split leaves growable segments out, as PyTorch does.
TEST(Growable, StatisticsCountMappedBytesAndPieces) {
  auto a = growable();
  void *small = nullptr, *large = nullptr;
  ASSERT_EQ(a->malloc(1000, 0, nullptr, &small), status::ok);
  ASSERT_EQ(a->malloc(25 * MiB, 0, nullptr, &large), status::ok);
  auto s = stats_of(*a);
  EXPECT_EQ(current(s, stat_kind::reserved_bytes), int64_t{2 << 20} + 2 * piece);
  EXPECT_EQ(s.table.at(stat_kind::reserved_bytes, static_cast<int>(pool_kind::small)).current, 2 << 20);
  EXPECT_EQ(current(s, stat_kind::segment), 2) << "a small and a large growable segment";
  EXPECT_EQ(s.counters.num_device_alloc, 3u);
  EXPECT_EQ(current(s, stat_kind::inactive_split), 0);
  EXPECT_EQ(current(s, stat_kind::allocated_bytes), 1024 + 25 * int64_t{MiB});
  ASSERT_EQ(a->free(small), status::ok);
  ASSERT_EQ(a->free(large), status::ok);
  ASSERT_EQ(a->empty_cache(0), status::ok);
  s = stats_of(*a);
  EXPECT_EQ(current(s, stat_kind::reserved_bytes), 0);
  EXPECT_EQ(current(s, stat_kind::segment), 0) << "nothing mapped: the ranges went back";
  EXPECT_EQ(s.counters.num_device_free, 3u);
  backend::host_ledger l;
  ASSERT_TRUE(backend::read_host_ledger(a->device_backend(), &l));
  EXPECT_EQ(l.bytes_in_use, 0u);
}

// The gain over classic segments: the free middle of a segment still in use goes back to the device,
// and a later request maps where the fewest new pieces make it fit.
TEST(Growable, EmptyCacheUnmapsTheFreePiecesOfASegmentStillInUse) {
  auto a = growable();
  void *first = nullptr, *middle = nullptr, *last = nullptr;
  ASSERT_EQ(a->malloc(20 * MiB, 0, nullptr, &first), status::ok);   // piece 0
  ASSERT_EQ(a->malloc(60 * MiB, 0, nullptr, &middle), status::ok);  // pieces 1-3
  ASSERT_EQ(a->malloc(10 * MiB, 0, nullptr, &last), status::ok);    // half of piece 4
  EXPECT_EQ(static_cast<char*>(middle), static_cast<char*>(first) + 20 * MiB);
  EXPECT_EQ(static_cast<char*>(last), static_cast<char*>(middle) + 60 * MiB);
  ASSERT_EQ(a->free(middle), status::ok);
  EXPECT_EQ(current(stats_of(*a), stat_kind::reserved_bytes), 5 * piece);
  ASSERT_EQ(a->empty_cache(0), status::ok);
  EXPECT_EQ(current(stats_of(*a), stat_kind::reserved_bytes), 2 * piece) << "pieces 1-3 went back";
  EXPECT_EQ(stats_of(*a).counters.num_device_free, 3u);

  // Reports see two stretches of mapped memory, as PyTorch's snapshots show expandable segments.
  std::vector<block_record> blocks;
  ASSERT_EQ(a->collect_blocks(0, &blocks), status::ok);
  std::vector<std::pair<uintptr_t, size_t>> segments;
  for (const block_record& r : blocks)
    if (segments.empty() || segments.back().first != r.segment) segments.emplace_back(r.segment, r.segment_size);
  ASSERT_EQ(segments.size(), 2u);
  EXPECT_EQ(segments[0], std::make_pair(reinterpret_cast<uintptr_t>(first), size_t{20} * MiB));
  EXPECT_EQ(segments[1], std::make_pair(reinterpret_cast<uintptr_t>(last), size_t{20} * MiB));

  // 50 MiB: the hole needs 3 pieces, the 10 MiB free after `last` needs 2 more: it goes there.
  void* big = nullptr;
  ASSERT_EQ(a->malloc(50 * MiB, 0, nullptr, &big), status::ok);
  EXPECT_EQ(static_cast<char*>(big), static_cast<char*>(last) + 10 * MiB);
  EXPECT_EQ(current(stats_of(*a), stat_kind::reserved_bytes), 4 * piece);
  // 60 MiB fills the hole again.
  void* refill = nullptr;
  ASSERT_EQ(a->malloc(60 * MiB, 0, nullptr, &refill), status::ok);
  EXPECT_EQ(refill, middle);
  for (void* p : {first, last, big, refill}) ASSERT_EQ(a->free(p), status::ok);
  ASSERT_EQ(a->empty_cache(0), status::ok);
  EXPECT_EQ(current(stats_of(*a), stat_kind::reserved_bytes), 0);
}

// A full device: the retry unmaps what another stream caches, and this stream maps it again. Classic
// segments would move the idle segment to the other stream instead.
TEST(Growable, OutOfMemoryUnmapsFreePiecesOfEveryStreamAndRetries) {
  auto a = growable("host_capacity:64MiB");
  void *p = nullptr, *q = nullptr;
  ASSERT_EQ(a->malloc(40 * MiB, 0, stream(1), &p), status::ok);
  ASSERT_EQ(a->free(p), status::ok);
  ASSERT_EQ(a->malloc(40 * MiB, 0, stream(2), &q), status::ok) << last_error();
  const auto s = stats_of(*a);
  EXPECT_EQ(s.counters.num_alloc_retries, 1u);
  EXPECT_EQ(s.counters.num_device_free, 2u) << "stream 1's two pieces";
  EXPECT_EQ(s.counters.num_device_alloc, 4u) << "nothing mapped before the retry: 40 MiB was more than was free";
  EXPECT_EQ(current(s, stat_kind::reserved_bytes), 2 * piece);
  EXPECT_EQ(current(s, stat_kind::segment), 1) << "stream 1's segment, unmapped, went back";
  ASSERT_EQ(a->free(q), status::ok);
}

// cuMemUnmap does not wait for kernels still reading a freed block: unmapping waits for the device
// first. The host backend cannot wait while a stream is held, so the pieces stay, cached and whole.
TEST(Growable, UnmappingWaitsForTheDevice) {
  auto a = growable();
  backend::backend& be = a->device_backend();
  void* p = nullptr;
  ASSERT_EQ(a->malloc(40 * MiB, 0, stream(1), &p), status::ok);
  void* hold = nullptr;
  ASSERT_EQ(be.hold_stream(0, stream(1), &hold), status::ok);
  ASSERT_EQ(a->free(p), status::ok);  // queued work on stream 1 may still use it
  EXPECT_EQ(a->empty_cache(0), status::backend_error);
  EXPECT_NE(std::string(last_error()).find("could not be waited for"), std::string::npos) << last_error();
  EXPECT_EQ(current(stats_of(*a), stat_kind::reserved_bytes), 2 * piece) << "nothing unmapped";
  EXPECT_EQ(a->validate(), status::ok) << last_error();
  ASSERT_EQ(be.release_hold(hold), status::ok);
  ASSERT_EQ(a->empty_cache(0), status::ok) << last_error();
  EXPECT_EQ(current(stats_of(*a), stat_kind::reserved_bytes), 0);
}

// Emptying the cache after a stream is gone waits for the device, not for the stream: the host
// backend aborts if an event is recorded on a destroyed stream.
TEST(Growable, EmptyCacheAfterAStreamIsDestroyedTouchesNoStream) {
  auto a = growable();
  backend::backend& be = a->device_backend();
  backend::stream_handle s = nullptr;
  ASSERT_EQ(be.create_stream(0, &s), status::ok);
  std::vector<void*> ptrs(40);
  for (auto& p : ptrs) ASSERT_EQ(a->malloc(256 << 10, 0, s, &p), status::ok);
  for (auto p : ptrs) ASSERT_EQ(a->free(p), status::ok);
  ASSERT_EQ(be.destroy_stream(0, s), status::ok);
  EXPECT_EQ(current(stats_of(*a), stat_kind::reserved_bytes), 10 << 20);
  ASSERT_EQ(a->empty_cache(0), status::ok) << last_error();
  EXPECT_EQ(current(stats_of(*a), stat_kind::reserved_bytes), 0);
}

// A request beyond what the device has free maps nothing (the retry empties the cache first); a map
// the device refuses part way keeps what it mapped as cache, and the retry gives that back and maps
// again. Nothing is lost; the statistics and the host's ledger agree.
TEST(Growable, AMapRefusedPartWayKeepsThePiecesMappedBefore) {
  auto a = growable("host_capacity:50MiB,oom_report:off");
  void* p = nullptr;
  EXPECT_EQ(a->malloc(45 * MiB, 0, nullptr, &p), status::out_of_memory) << "three pieces, 60 MiB";
  EXPECT_EQ(p, nullptr);
  auto s = stats_of(*a);
  EXPECT_EQ(s.counters.num_ooms, 1u);
  EXPECT_EQ(s.counters.num_device_alloc, 0u) << "nothing mapped in vain";
  EXPECT_EQ(current(s, stat_kind::segment), 0);

  auto b = growable("fail_alloc:3,oom_report:off");  // the third map fails
  ASSERT_EQ(b->malloc(45 * MiB, 0, nullptr, &p), status::ok) << last_error();
  s = stats_of(*b);
  EXPECT_EQ(s.counters.num_alloc_retries, 1u);
  EXPECT_EQ(s.counters.num_device_free, 2u) << "the two pieces mapped before the failure went back";
  EXPECT_EQ(s.counters.num_device_alloc, 5u);
  EXPECT_EQ(current(s, stat_kind::reserved_bytes), 3 * piece);
  backend::host_ledger l;
  ASSERT_TRUE(backend::read_host_ledger(b->device_backend(), &l));
  EXPECT_EQ(l.bytes_in_use, 3 * size_t{piece});
  ASSERT_EQ(b->free(p), status::ok);
  ASSERT_EQ(b->empty_cache(0), status::ok);
  ASSERT_TRUE(backend::read_host_ledger(b->device_backend(), &l));
  EXPECT_EQ(l.bytes_in_use, 0u);
}

// Small blocks share 2 MiB pieces; free small blocks merge beyond one piece and are still found.
TEST(Growable, SmallBlocksMergeAcrossPiecesAndAreFoundAgain) {
  auto a = growable();
  std::vector<void*> ptrs(12);
  for (auto& p : ptrs) ASSERT_EQ(a->malloc(1 << 20, 0, nullptr, &p), status::ok);
  EXPECT_EQ(current(stats_of(*a), stat_kind::reserved_bytes), 12 << 20) << "two 1 MiB blocks a piece";
  for (auto p : ptrs) ASSERT_EQ(a->free(p), status::ok);  // one free block of 12 MiB
  void* q = nullptr;
  ASSERT_EQ(a->malloc(700 << 10, 0, nullptr, &q), status::ok);
  EXPECT_EQ(q, ptrs[0]) << "the merged block served it";
  EXPECT_EQ(stats_of(*a).counters.num_device_alloc, 6u) << "nothing new mapped";
  ASSERT_EQ(a->empty_cache(0), status::ok);
  EXPECT_EQ(current(stats_of(*a), stat_kind::reserved_bytes), 2 << 20) << "the piece in use stays";
  ASSERT_EQ(a->free(q), status::ok);
}

// Any request up to the limit fits on an empty device: where a whole 20 MiB piece would pass the
// limit, the last piece is cut to the pages the request needs (61 MiB: three pieces and 2 MiB, where
// four pieces would be 80 MiB). Unmapping takes each mapping back whole, the short one too.
TEST(Growable, ARequestUpToTheLimitFitsOnAnEmptyDevice) {
  for (size_t request : {61 * MiB, 64 * MiB, 5 * MiB}) {
    auto a = growable(request == 5 * MiB ? "limit:8MiB" : "limit:64MiB");
    void* p = nullptr;
    ASSERT_EQ(a->malloc(request, 0, nullptr, &p), status::ok) << request << ": " << last_error();
    const int64_t mapped = static_cast<int64_t>((request + 2 * MiB - 1) / (2 * MiB) * (2 * MiB));
    auto s = stats_of(*a);
    EXPECT_EQ(current(s, stat_kind::reserved_bytes), mapped) << request;
    EXPECT_EQ(s.counters.num_device_alloc, request / size_t{piece} + 1) << "whole pieces, then a short one";
    ASSERT_EQ(a->free(p), status::ok);
    ASSERT_EQ(a->empty_cache(0), status::ok) << last_error();
    s = stats_of(*a);
    EXPECT_EQ(current(s, stat_kind::reserved_bytes), 0);
    EXPECT_EQ(current(s, stat_kind::segment), 0);
    EXPECT_EQ(s.counters.num_device_free, s.counters.num_device_alloc) << "one unmap per mapping";
    backend::host_ledger l;
    ASSERT_TRUE(backend::read_host_ledger(a->device_backend(), &l));
    EXPECT_EQ(l.bytes_in_use, 0u);
  }
}

// A short piece in the middle of a segment's life: growth after it maps the rest of its 20 MiB
// stretch as a mapping of its own; unmapping around it takes whole mappings only; once a stretch is
// wholly unmapped again it is mapped as one piece, as before. The host backend refuses any unmap that
// is not whole mappings, and validate:on checks every block after each step.
TEST(Growable, AShortPieceIsMappedAndUnmappedWhole) {
  auto a = growable("limit:64MiB,oom_report:off");
  void *first = nullptr, *second = nullptr, *third = nullptr;
  ASSERT_EQ(a->malloc(50 * MiB, 0, nullptr, &first), status::ok) << last_error();  // pieces 0-2
  ASSERT_EQ(a->malloc(13 * MiB, 0, nullptr, &second), status::ok) << last_error();  // 10 MiB free + 4 MiB short
  EXPECT_EQ(static_cast<char*>(second), static_cast<char*>(first) + 50 * MiB);
  EXPECT_EQ(current(stats_of(*a), stat_kind::reserved_bytes), 64 * int64_t{MiB});
  void* refused = nullptr;
  EXPECT_EQ(a->malloc(2 * MiB, 0, nullptr, &refused), status::out_of_memory) << "the limit holds";
  ASSERT_EQ(a->set_limit(0, 0), status::ok);
  ASSERT_EQ(a->malloc(20 * MiB, 0, nullptr, &third), status::ok) << last_error();  // 1 MiB free + 16 + 20
  EXPECT_EQ(static_cast<char*>(third), static_cast<char*>(second) + 13 * MiB);
  auto s = stats_of(*a);
  EXPECT_EQ(current(s, stat_kind::reserved_bytes), 100 * int64_t{MiB});
  EXPECT_EQ(s.counters.num_device_alloc, 6u) << "3 pieces, 4 MiB, the 16 MiB left of that stretch, 1 piece";

  ASSERT_EQ(a->free(second), status::ok);
  ASSERT_EQ(a->free(third), status::ok);
  ASSERT_EQ(a->empty_cache(0), status::ok) << last_error();  // [60, 100) goes back: three mappings
  s = stats_of(*a);
  EXPECT_EQ(current(s, stat_kind::reserved_bytes), 60 * int64_t{MiB});
  EXPECT_EQ(s.counters.num_device_free, 3u);
  void* again = nullptr;
  ASSERT_EQ(a->malloc(30 * MiB, 0, nullptr, &again), status::ok) << last_error();  // 10 MiB free + one piece
  EXPECT_EQ(static_cast<char*>(again), static_cast<char*>(first) + 50 * MiB);
  EXPECT_EQ(stats_of(*a).counters.num_device_alloc, 7u) << "the stretch is whole again: one piece";
  ASSERT_EQ(a->free(first), status::ok);
  ASSERT_EQ(a->free(again), status::ok);
  ASSERT_EQ(a->empty_cache(0), status::ok) << last_error();
  s = stats_of(*a);
  EXPECT_EQ(current(s, stat_kind::reserved_bytes), 0);
  EXPECT_EQ(current(s, stat_kind::segment), 0);
  EXPECT_EQ(s.counters.num_device_free, 7u);
}

// The same promise whatever the segments: classic ones here (ctest runs this again with
// segments:growable). A request of 10 MiB or more gets a segment of its own size rounded to 2 MiB
// (61 MiB: 62 MiB), so it fits as it is; a smaller large request, whose segment is 20 MiB, gets a
// segment of its own size (rounded to 2 MiB) where 20 MiB would pass the limit.
TEST(LimitedDevice, ARequestUpToTheLimitFitsOnAnEmptyDevice) {
  for (const auto& [request, limit] : {std::pair{61 * MiB, "limit:64MiB"}, std::pair{64 * MiB, "limit:64MiB"},
                                       std::pair{5 * MiB, "limit:8MiB"}, std::pair{8 * MiB, "limit:8MiB"}}) {
    auto a = host_allocator(limit);
    void* p = nullptr;
    ASSERT_EQ(a->malloc(request, 0, nullptr, &p), status::ok) << request << ": " << last_error();
    EXPECT_EQ(current(stats_of(*a), stat_kind::reserved_bytes),
              static_cast<int64_t>((request + 2 * MiB - 1) / (2 * MiB) * (2 * MiB)));
    ASSERT_EQ(a->free(p), status::ok);
  }
  auto a = host_allocator();
  void* p = nullptr;
  ASSERT_EQ(a->malloc(5 * MiB, 0, nullptr, &p), status::ok);
  EXPECT_EQ(current(stats_of(*a), stat_kind::reserved_bytes), 20 * int64_t{MiB}) << "no limit: the usual segment";
  ASSERT_EQ(a->free(p), status::ok);
}

TEST(Growable, ConfigurationNamesTheChoices) {
  config cfg;
  EXPECT_EQ(cfg.segments, segment_choice::automatic);
  EXPECT_EQ(parse_config("segments:growable", &cfg), status::ok);
  EXPECT_EQ(cfg.segments, segment_choice::growable);
  EXPECT_EQ(parse_config("segments:classic", &cfg), status::ok);
  EXPECT_EQ(cfg.segments, segment_choice::classic);
  EXPECT_EQ(parse_config("segments:auto", &cfg), status::ok);
  EXPECT_EQ(cfg.segments, segment_choice::automatic);
  EXPECT_EQ(parse_config("segments:expandable", &cfg), status::bad_config);
  EXPECT_NE(std::string(last_error()).find("auto, classic or growable"), std::string::npos) << last_error();
  // auto on the host backend: classic (on CUDA: growable, where the device can map; cuda_growable
  // conformance and the GPU check cover that).
  auto a = host_allocator("segments:auto");
  EXPECT_FALSE(a->growable_segments(0));
  EXPECT_TRUE(growable()->growable_segments(0));
}

}  // namespace
}  // namespace tracepool::core
