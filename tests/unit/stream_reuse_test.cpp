// Note [Stream reuse] (core/stream_reuse.h), on the host backend, where a hold on a stream stands
// for work still running there.
#include <gtest/gtest.h>

#include <vector>

#include "test_support.h"

namespace tracepool::core {
using tracepool::testing::current;
using tracepool::testing::host_allocator;
using tracepool::testing::stats_of;

namespace {
backend::stream_handle stream(uintptr_t n) { return reinterpret_cast<backend::stream_handle>(n * 4096); }
uint64_t device_allocs(allocator& a) { return stats_of(a).counters.num_device_alloc; }
bool inside(void* p, void* base, size_t size) {
  return static_cast<char*>(p) >= static_cast<char*>(base) && static_cast<char*>(p) < static_cast<char*>(base) + size;
}
}  // namespace

TEST(StreamReuse, SameStreamReusesAtOnceEvenWhileBusy) {
  auto a = host_allocator();
  void* hold = nullptr;
  ASSERT_EQ(a->device_backend().hold_stream(0, stream(1), &hold), status::ok);
  void *p = nullptr, *q = nullptr;
  ASSERT_EQ(a->malloc(4096, 0, stream(1), &p), status::ok);
  ASSERT_EQ(a->free(p), status::ok);
  ASSERT_EQ(a->malloc(4096, 0, stream(1), &q), status::ok);
  EXPECT_EQ(p, q) << "stream order makes same-stream reuse safe";
  EXPECT_EQ(device_allocs(*a), 1u);
  ASSERT_EQ(a->free(q), status::ok);
  a->device_backend().release_hold(hold);
}

TEST(StreamReuse, OtherStreamWaitsForEvent) {
  auto a = host_allocator();
  void* p = nullptr;
  ASSERT_EQ(a->malloc(1 << 20, 0, stream(1), &p), status::ok);
  void* hold = nullptr;  // the kernel that last used p is still running on stream 1
  ASSERT_EQ(a->device_backend().hold_stream(0, stream(1), &hold), status::ok);
  ASSERT_EQ(a->free(p), status::ok);

  void* q = nullptr;
  ASSERT_EQ(a->malloc(1 << 20, 0, stream(2), &q), status::ok);
  EXPECT_FALSE(inside(q, p, 2 << 20)) << "stream 2 must not get memory stream 1 may still use";
  EXPECT_EQ(device_allocs(*a), 2u);

  ASSERT_EQ(a->device_backend().release_hold(hold), status::ok);
  void* r = nullptr;  // stream 1's work is done: its idle segment can move to stream 3
  ASSERT_EQ(a->malloc(1 << 20, 0, stream(3), &r), status::ok);
  EXPECT_TRUE(inside(r, p, 2 << 20));
  EXPECT_EQ(device_allocs(*a), 2u);
  ASSERT_EQ(a->free(q), status::ok);
  ASSERT_EQ(a->free(r), status::ok);
}

TEST(StreamReuse, IdleSegmentMovesToAnotherStreamWithoutNewMemory) {
  auto a = host_allocator();
  void *p = nullptr, *q = nullptr;
  ASSERT_EQ(a->malloc(30 << 20, 0, stream(1), &p), status::ok);
  ASSERT_EQ(a->free(p), status::ok);
  ASSERT_EQ(a->malloc(25 << 20, 0, stream(2), &q), status::ok);
  EXPECT_EQ(p, q);
  EXPECT_EQ(device_allocs(*a), 1u);
  ASSERT_EQ(a->free(q), status::ok);
}

TEST(StreamReuse, PartlyUsedSegmentStaysWithItsStream) {
  auto a = host_allocator();
  void *p = nullptr, *keep = nullptr, *q = nullptr;
  ASSERT_EQ(a->malloc(4096, 0, stream(1), &p), status::ok);
  ASSERT_EQ(a->malloc(4096, 0, stream(1), &keep), status::ok);
  ASSERT_EQ(a->free(p), status::ok);
  ASSERT_EQ(a->malloc(4096, 0, stream(2), &q), status::ok);
  EXPECT_FALSE(inside(q, p, 2 << 20));
  EXPECT_EQ(device_allocs(*a), 2u);
  ASSERT_EQ(a->free(keep), status::ok);
  ASSERT_EQ(a->free(q), status::ok);
}

TEST(StreamReuse, RecordStreamKeepsBlockActiveUntilThatStreamIsDone) {
  auto a = host_allocator();
  void* p = nullptr;
  ASSERT_EQ(a->malloc(4096, 0, stream(1), &p), status::ok);
  ASSERT_EQ(a->record_stream(p, stream(2)), status::ok);
  void* hold = nullptr;  // a copy on stream 2 still reads p
  ASSERT_EQ(a->device_backend().hold_stream(0, stream(2), &hold), status::ok);
  ASSERT_EQ(a->free(p), status::ok);
  auto s = stats_of(*a);
  EXPECT_EQ(current(s, stat_kind::allocation), 0);
  EXPECT_EQ(current(s, stat_kind::active), 1) << "freed but pending";

  void* q = nullptr;
  ASSERT_EQ(a->malloc(4096, 0, stream(1), &q), status::ok);
  EXPECT_NE(q, p) << "not even its own stream may reuse it yet";

  ASSERT_EQ(a->device_backend().release_hold(hold), status::ok);
  void* r = nullptr;
  ASSERT_EQ(a->malloc(4096, 0, stream(1), &r), status::ok);
  EXPECT_EQ(r, p) << "reusable once stream 2 passed the free";
  EXPECT_EQ(current(stats_of(*a), stat_kind::active), 2);
  ASSERT_EQ(a->free(q), status::ok);
  ASSERT_EQ(a->free(r), status::ok);
  EXPECT_EQ(a->validate(), status::ok) << last_error();
}

TEST(StreamReuse, RecordStreamOnAllocationStreamChangesNothing) {
  auto a = host_allocator();
  void *p = nullptr, *q = nullptr;
  ASSERT_EQ(a->malloc(4096, 0, stream(1), &p), status::ok);
  ASSERT_EQ(a->record_stream(p, stream(1)), status::ok);
  ASSERT_EQ(a->free(p), status::ok);
  EXPECT_EQ(current(stats_of(*a), stat_kind::active), 0);
  ASSERT_EQ(a->malloc(4096, 0, stream(1), &q), status::ok);
  EXPECT_EQ(p, q);
  ASSERT_EQ(a->free(q), status::ok);
}

TEST(StreamReuse, OutOfMemoryWaitsForPendingFreesBeforeFailing) {
  auto a = host_allocator("host_capacity:2MiB");
  void* p = nullptr;
  ASSERT_EQ(a->malloc(1 << 20, 0, stream(1), &p), status::ok);  // the device's only segment
  ASSERT_EQ(a->record_stream(p, stream(2)), status::ok);
  ASSERT_EQ(a->free(p), status::ok);  // pending until stream 2's event is seen complete
  void* q = nullptr;
  ASSERT_EQ(a->malloc(1 << 20, 0, stream(3), &q), status::ok) << last_error();
  EXPECT_EQ(stats_of(*a).counters.num_alloc_retries, 1u);
  ASSERT_EQ(a->free(q), status::ok);
}

// A program may destroy a stream once its blocks are freed (CuPy does): tracepool must never record
// an event on it afterwards, while its cached memory moves to other streams. The host backend aborts
// on an event recorded on a destroyed stream.
TEST(StreamReuse, DestroyedStreamIsNeverTouchedAgain) {
  auto a = host_allocator();
  backend::backend& be = a->device_backend();
  for (int round = 0; round < 3; ++round) {
    backend::stream_handle s = nullptr;
    ASSERT_EQ(be.create_stream(0, &s), status::ok);
    std::vector<void*> ptrs(100);
    for (auto& p : ptrs) ASSERT_EQ(a->malloc(64 << 10, 0, s, &p), status::ok);
    for (auto p : ptrs) ASSERT_EQ(a->free(p), status::ok);
    ASSERT_EQ(be.destroy_stream(0, s), status::ok);
  }
  void* p = nullptr;
  ASSERT_EQ(a->malloc(64 << 10, 0, stream(99), &p), status::ok);
  EXPECT_LE(device_allocs(*a), 12u) << "at most each round's 4 segments";
  ASSERT_EQ(a->free(p), status::ok);
  // Memory freed just before a stream died stays cached (never fenced) until given back here.
  ASSERT_EQ(a->empty_cache(0), status::ok);
  EXPECT_EQ(current(stats_of(*a), stat_kind::reserved_bytes), 0);
}

}  // namespace tracepool::core
