#include <gtest/gtest.h>

#include <cstring>

#include "backend/backend.h"

namespace tracepool::backend {

TEST(HostBackend, MemoryIsUsableAndAligned) {
  auto be = make_host_backend(host_options{});
  void* p = nullptr;
  ASSERT_EQ(be->allocate(0, 2u << 20, &p), status::ok);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 512, 0u);
  std::memset(p, 0xab, 2u << 20);
  EXPECT_EQ(be->release(0, p, 2u << 20), status::ok);
}

TEST(HostBackend, CapacityIsEnforcedAndReportedFree) {
  host_options o;
  o.capacity = 4u << 20;
  auto be = make_host_backend(o);
  void *a = nullptr, *b = nullptr;
  ASSERT_EQ(be->allocate(0, 3u << 20, &a), status::ok);
  EXPECT_EQ(be->allocate(0, 2u << 20, &b), status::out_of_memory);
  size_t free_bytes = 0, total = 0;
  ASSERT_EQ(be->memory_info(0, &free_bytes, &total), status::ok);
  EXPECT_EQ(total, 4u << 20);
  EXPECT_EQ(free_bytes, 1u << 20);
  EXPECT_EQ(be->release(0, a, 3u << 20), status::ok);
}

TEST(HostBackend, FailsTheKthAllocationOnly) {
  host_options o;
  o.fail_alloc = 2;
  auto be = make_host_backend(o);
  void *a = nullptr, *b = nullptr, *c = nullptr;
  EXPECT_EQ(be->allocate(0, 512, &a), status::ok);
  EXPECT_EQ(be->allocate(0, 512, &b), status::out_of_memory);
  EXPECT_EQ(be->allocate(0, 512, &c), status::ok);
  be->release(0, a, 512);
  be->release(0, c, 512);
}

TEST(HostBackend, FailsTheKthCallOfAnyKindOnly) {
  host_options o;
  o.fail_call = 3;  // allocate, allocate, release: the release
  auto be = make_host_backend(o);
  void *a = nullptr, *b = nullptr;
  ASSERT_EQ(be->allocate(0, 512, &a), status::ok);
  ASSERT_EQ(be->allocate(0, 512, &b), status::ok);
  EXPECT_EQ(be->release(0, a, 512), status::backend_error);
  EXPECT_NE(std::string(last_error()).find("injected failure of release (call 3)"), std::string::npos) << last_error();
  host_ledger l;
  ASSERT_TRUE(read_host_ledger(*be, &l));
  EXPECT_EQ(l.faults, 1u);
  EXPECT_EQ(l.faults_by_kind[1], 1u);
  EXPECT_EQ(l.bytes_in_use, 1024u) << "a refused release keeps the memory";
  EXPECT_EQ(be->release(0, a, 512), status::ok);
  EXPECT_EQ(be->release(0, b, 512), status::ok);
  ASSERT_TRUE(read_host_ledger(*be, &l));
  EXPECT_EQ(l.bytes_in_use, 0u);
  EXPECT_EQ(l.calls, 5u);
}

TEST(HostBackend, FailsAboveThreshold) {
  host_options o;
  o.fail_above = 1u << 20;
  auto be = make_host_backend(o);
  void* p = nullptr;
  EXPECT_EQ(be->allocate(0, 2u << 20, &p), status::out_of_memory);
  EXPECT_EQ(be->allocate(0, 1u << 20, &p), status::ok);
  be->release(0, p, 1u << 20);
}

TEST(HostBackend, EventWaitsForHoldsPlacedBeforeIt) {
  auto be = make_host_backend(host_options{});
  stream_handle s = nullptr, other = nullptr;
  ASSERT_EQ(be->create_stream(0, &s), status::ok);
  ASSERT_EQ(be->create_stream(0, &other), status::ok);
  event_handle before = nullptr, after = nullptr, elsewhere = nullptr;
  ASSERT_EQ(be->record_event(0, s, &before), status::ok);
  void* hold = nullptr;
  ASSERT_EQ(be->hold_stream(0, s, &hold), status::ok);
  ASSERT_EQ(be->record_event(0, s, &after), status::ok);
  ASSERT_EQ(be->record_event(0, other, &elsewhere), status::ok);
  bool done = false;
  EXPECT_EQ(be->query_event(0, before, &done), status::ok);
  EXPECT_TRUE(done);
  EXPECT_EQ(be->query_event(0, after, &done), status::ok);
  EXPECT_FALSE(done);
  EXPECT_EQ(be->synchronize_event(0, after), status::backend_error) << "must refuse to hang";
  EXPECT_EQ(be->query_event(0, elsewhere, &done), status::ok);
  EXPECT_TRUE(done);
  ASSERT_EQ(be->release_hold(hold), status::ok);
  EXPECT_EQ(be->query_event(0, after, &done), status::ok);
  EXPECT_TRUE(done);
  EXPECT_EQ(be->release_hold(hold), status::invalid_argument);
  for (auto e : {before, after, elsewhere}) be->return_event(0, e);
}

TEST(HostBackend, RejectsBadDevice) {
  auto be = make_host_backend(host_options{});
  void* p = nullptr;
  EXPECT_EQ(be->allocate(1, 512, &p), status::invalid_device);
  EXPECT_EQ(be->allocate(-1, 512, &p), status::invalid_device);
}

}  // namespace tracepool::backend
