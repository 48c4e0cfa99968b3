// Reuse inside a capture (Note [Reuse inside a capture] in core/stream_reuse.h) on the host backend,
// whose emulated captures have nodes and dependencies: a record_stream block freed during a capture
// is handed out again inside it exactly when the graph orders all later work on its stream after its
// last uses, and never earlier. The first two tests are PyTorch's test_graph_capture_reclaim_2_streams
// and _4_streams, step by step.
#include <gtest/gtest.h>

#include <string>

#include "test_support.h"
#include "tracepool/tracepool.h"

namespace tracepool::core {
using tracepool::testing::current;
using tracepool::testing::host_allocator;
using tracepool::testing::stats_of;

namespace {

constexpr uint64_t graph_pool = 11;
backend::stream_handle stream(int i) { return reinterpret_cast<backend::stream_handle>(0x1000 * (i + 1)); }

// Every stream of a capture allocates from its graph's pool (PyTorch's filter asks whether the stream
// captures into the graph; here every stream does).
int every_stream(void*, void*) { return 1; }

// One capture, as PyTorch makes it: the route opens, stream 0 begins capturing; at the end the capture
// ends and the route closes. Work and joins shape the graph as CUDA would record them.
class capture {
 public:
  explicit capture(allocator& a) : a_(a), be_(a.device_backend()) {
    EXPECT_EQ(a_.begin_pool(0, graph_pool, &every_stream, nullptr, nullptr), status::ok) << last_error();
    EXPECT_EQ(be_.begin_capture(0, stream(0)), status::ok) << last_error();
  }
  ~capture() { end(); }
  void end() {
    if (ended_) return;
    ended_ = true;
    EXPECT_EQ(be_.end_capture(0, stream(0)), status::ok) << last_error();
    EXPECT_EQ(a_.end_pool(0, graph_pool), status::ok) << last_error();
  }
  void work(int s) { EXPECT_EQ(be_.capture_work(0, stream(s)), status::ok) << last_error(); }
  // Stream `waiter` waits for what `waited` has submitted (torch.cuda.Stream.wait_stream).
  void wait(int waiter, int waited) { EXPECT_EQ(be_.capture_join(0, stream(waiter), stream(waited)), status::ok); }
  void* malloc(int s, size_t size = 512) {
    void* p = nullptr;
    EXPECT_EQ(a_.malloc(size, 0, stream(s), &p), status::ok) << last_error();
    return p;
  }

 private:
  allocator& a_;
  backend::backend& be_;
  bool ended_ = false;
};

void expect_no_capture_violation(allocator& a) {
  backend::host_ledger l;
  ASSERT_TRUE(backend::read_host_ledger(a.device_backend(), &l));
  EXPECT_EQ(l.capture_violations, 0u) << l.last_violation;
}

// PyTorch's test_graph_capture_reclaim_2_streams; returns whether data3 took data1's block, after
// checking that data2 did not.
bool two_streams(allocator& a) {
  capture c(a);
  void* sink = c.malloc(0);
  void* data1 = c.malloc(0);
  c.wait(1, 0);
  void* buf2 = c.malloc(1);
  c.work(1);  // buf2 = data1 + 2 on stream 1
  EXPECT_EQ(a.record_stream(data1, stream(1)), status::ok);
  EXPECT_EQ(a.free(data1), status::ok);
  c.work(0);  // more work on stream 0 alone orders nothing after stream 1's
  void* data2 = c.malloc(0);
  EXPECT_NE(data2, data1) << "reused before stream 1 joined back";
  c.wait(0, 1);
  c.work(0);  // sink.fill_(1.0)
  void* data3 = c.malloc(0);
  c.end();
  expect_no_capture_violation(a);
  for (void* p : {sink, buf2, data2, data3}) EXPECT_EQ(a.free(p), status::ok);
  EXPECT_EQ(a.release_pool(0, graph_pool), status::ok);
  return data3 == data1;
}

}  // namespace

TEST(CaptureReuse, ABlockUsedOnASideStreamIsReusedOnceThatStreamJoinsBack) {
  auto a = host_allocator("capture_reuse:on");
  EXPECT_TRUE(two_streams(*a));
  EXPECT_EQ(current(stats_of(*a), stat_kind::active), 0);
}

// Off (the default, as in PyTorch) the block waits for the capture's end, then goes back to the pool.
TEST(CaptureReuse, OffTheBlockWaitsForTheCapturesEnd) {
  auto a = host_allocator();
  EXPECT_FALSE(two_streams(*a));
  EXPECT_EQ(current(stats_of(*a), stat_kind::active), 0) << "the pending free finished when the route closed";
}

// PyTorch's test_graph_capture_reclaim_4_streams: joins of parts of the graph are not enough.
TEST(CaptureReuse, FourStreamsMustAllJoinBackBeforeTheBlockIsReused) {
  auto a = host_allocator("capture_reuse:on");
  void *data1 = nullptr, *data2 = nullptr, *data3 = nullptr;
  {
    capture c(*a);
    data1 = c.malloc(0);
    c.work(0);  // torch.ones
    void* sink1 = c.malloc(0);
    void* sink3 = c.malloc(0);
    std::vector<void*> bufs;
    for (int s = 1; s <= 3; ++s) {
      c.wait(s, 0);
      bufs.push_back(c.malloc(s));
      c.work(s);
      ASSERT_EQ(a->record_stream(data1, stream(s)), status::ok);
    }
    ASSERT_EQ(a->free(data1), status::ok);
    c.wait(0, 1);  // stream 0 joins stream 1
    c.work(0);
    c.wait(2, 3);  // stream 2 joins stream 3
    c.work(2);
    data2 = c.malloc(0);
    c.wait(0, 2);  // the final join
    c.work(0);
    data3 = c.malloc(0);
    c.end();
    for (void* p : bufs) ASSERT_EQ(a->free(p), status::ok);
    for (void* p : {sink1, sink3, data2, data3}) ASSERT_EQ(a->free(p), status::ok);
  }
  EXPECT_NE(data2, data1) << "reused while streams 2 and 3 had not joined stream 0";
  EXPECT_EQ(data3, data1);
  expect_no_capture_violation(*a);
  EXPECT_EQ(a->release_pool(0, graph_pool), status::ok);
}

// A stream that used the block but is not in the capture has no place in the graph: the block waits
// for the capture's end and gets its events then.
TEST(CaptureReuse, AUseOnAStreamOutsideTheCaptureKeepsTheBlockUntilTheEnd) {
  auto a = host_allocator("capture_reuse:on");
  void *data1 = nullptr, *later = nullptr;
  {
    capture c(*a);
    data1 = c.malloc(0);
    c.work(0);
    ASSERT_EQ(a->record_stream(data1, stream(5)), status::ok);  // stream 5 never joins
    ASSERT_EQ(a->free(data1), status::ok);
    c.work(0);
    later = c.malloc(0);
    EXPECT_NE(later, data1);
    EXPECT_EQ(current(stats_of(*a), stat_kind::active), 2) << "still pending";
  }
  EXPECT_EQ(current(stats_of(*a), stat_kind::active), 1) << "its events were recorded as the route closed";
  expect_no_capture_violation(*a);
  ASSERT_EQ(a->free(later), status::ok);
  EXPECT_EQ(a->release_pool(0, graph_pool), status::ok);
}

// A block is reused on its own stream only, as outside captures: once stream 1 has joined stream 0,
// stream 0's allocations still do not take stream 1's block; stream 1's do.
TEST(CaptureReuse, TheBlockIsReusedOnItsOwnStreamOnly) {
  auto a = host_allocator("capture_reuse:on");
  capture c(*a);
  c.work(0);
  c.wait(1, 0);
  void* on_side = c.malloc(1);
  c.work(1);
  ASSERT_EQ(a->record_stream(on_side, stream(0)), status::ok);
  c.wait(0, 1);
  c.work(0);  // stream 0 reads it
  ASSERT_EQ(a->free(on_side), status::ok);
  c.wait(1, 0);  // stream 1 waits for that read
  void* on_main = c.malloc(0);
  void* again = c.malloc(1);
  EXPECT_NE(on_main, on_side);
  EXPECT_EQ(again, on_side);
  c.end();
  for (void* p : {on_main, again}) ASSERT_EQ(a->free(p), status::ok);
  EXPECT_EQ(a->release_pool(0, graph_pool), status::ok);
}

// The graph walked for one capture says nothing of the next: a block freed in the first, whose route
// stays open (a MemPool kept in use), is not reused in the second, although the second's nodes have the
// handles of the first's (the host backend numbers each capture's nodes from 1, as a driver may hand
// out a destroyed graph's handles again) and its stream joins back there.
TEST(CaptureReuse, ABlockFreedInOneCaptureIsNotReusedInTheNext) {
  auto a = host_allocator("capture_reuse:on");
  backend::backend& be = a->device_backend();
  ASSERT_EQ(a->begin_pool(0, graph_pool, &every_stream, nullptr, nullptr), status::ok);
  ASSERT_EQ(be.begin_capture(0, stream(0)), status::ok);
  void* data1 = nullptr;
  ASSERT_EQ(a->malloc(512, 0, stream(0), &data1), status::ok);
  ASSERT_EQ(be.capture_work(0, stream(0)), status::ok);  // node 1
  ASSERT_EQ(a->record_stream(data1, stream(1)), status::ok);
  ASSERT_EQ(be.capture_join(0, stream(1), stream(0)), status::ok);
  ASSERT_EQ(be.capture_work(0, stream(1)), status::ok);  // node 2
  ASSERT_EQ(a->free(data1), status::ok);                 // markers: nodes 1 and 2
  ASSERT_EQ(be.end_capture(0, stream(0)), status::ok);
  ASSERT_EQ(be.begin_capture(0, stream(0)), status::ok);  // the route is still open: the gate stays closed
  ASSERT_EQ(be.capture_work(0, stream(0)), status::ok);  // node 1 again
  ASSERT_EQ(be.capture_join(0, stream(1), stream(0)), status::ok);
  ASSERT_EQ(be.capture_work(0, stream(1)), status::ok);  // node 2 again
  ASSERT_EQ(be.capture_join(0, stream(0), stream(1)), status::ok);
  ASSERT_EQ(be.capture_work(0, stream(0)), status::ok);  // node 3, after 1 and 2
  void* data2 = nullptr;
  ASSERT_EQ(a->malloc(512, 0, stream(0), &data2), status::ok);
  EXPECT_NE(data2, data1);
  ASSERT_EQ(be.end_capture(0, stream(0)), status::ok);
  ASSERT_EQ(a->end_pool(0, graph_pool), status::ok);
  expect_no_capture_violation(*a);
  ASSERT_EQ(a->free(data2), status::ok);
  EXPECT_EQ(current(stats_of(*a), stat_kind::active), 0);
  EXPECT_EQ(a->release_pool(0, graph_pool), status::ok);
}

// The graph is read only where it may make a block reusable, and each node once per capture: off,
// a capture's allocations read nothing; on, a block that never becomes safe costs one frontier read
// per allocation and one read of each node, not a walk of the whole graph each time.
TEST(CaptureReuse, TheGraphIsReadOnlyWhereItCanHelpAndEachNodeOnce) {
  for (const bool on : {false, true}) {
    auto a = host_allocator(on ? "capture_reuse:on" : "");
    constexpr int steps = 50;
    {
      capture c(*a);
      void* held = c.malloc(0);
      c.work(0);
      ASSERT_EQ(a->record_stream(held, stream(1)), status::ok);
      c.wait(1, 0);
      c.work(1);
      ASSERT_EQ(a->free(held), status::ok);  // stream 1 never joins back: never safe in this capture
      for (int i = 0; i < steps; ++i) {
        c.work(0);
        ASSERT_EQ(a->free(c.malloc(0)), status::ok);
      }
    }
    backend::host_ledger l;
    ASSERT_TRUE(backend::read_host_ledger(a->device_backend(), &l));
    if (!on) {
      EXPECT_EQ(l.frontier_reads + l.node_reads, 0u);
    } else {
      EXPECT_EQ(l.frontier_reads, 2u + steps) << "two at the free (streams 0 and 1), one per allocation";
      EXPECT_EQ(l.node_reads, steps + 1u) << "stream 0's nodes, each read once";
    }
    EXPECT_EQ(current(stats_of(*a), stat_kind::active), 0);
    EXPECT_EQ(a->release_pool(0, graph_pool), status::ok);
  }
}

// Through the C API and TRACEPOOL_CONF: off by default, on by either, and a bad value is refused.
TEST(CaptureReuse, TheSettingIsReadAndSetThroughTheCApi) {
  tracepool_t* tp = nullptr;
  ASSERT_EQ(tracepool_create("backend:host", &tp), TRACEPOOL_OK);
  int on = -1;
  ASSERT_EQ(tracepool_capture_reuse(tp, &on), TRACEPOOL_OK);
  EXPECT_EQ(on, 0);
  ASSERT_EQ(tracepool_set_capture_reuse(tp, 7), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_capture_reuse(tp, &on), TRACEPOOL_OK);
  EXPECT_EQ(on, 1);
  EXPECT_EQ(tracepool_capture_reuse(tp, nullptr), TRACEPOOL_ERR_INVALID_ARGUMENT);
  tracepool_destroy(tp);
  ASSERT_EQ(tracepool_create("backend:host,capture_reuse:on", &tp), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_capture_reuse(tp, &on), TRACEPOOL_OK);
  EXPECT_EQ(on, 1);
  tracepool_destroy(tp);
  tracepool_t* bad = nullptr;
  EXPECT_EQ(tracepool_create("backend:host,capture_reuse:maybe", &bad), TRACEPOOL_ERR_BAD_CONFIG);
  EXPECT_NE(std::string(tracepool_last_error()).find("capture_reuse"), std::string::npos) << tracepool_last_error();
}

}  // namespace tracepool::core
