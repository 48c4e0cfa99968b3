// Private pools and captures on the host backend (Note [Private pools], Note [Capture] in
// core/private_pool.h): a capturing stream's allocations come from its pool and nowhere else, frees
// inside the capture return to it, nothing of it is reused early, it goes back to the device only
// once released and free, and no call a real capture would refuse is made while one is on (the host
// backend counts them).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "test_support.h"

namespace tracepool::core {
using tracepool::testing::current;
using tracepool::testing::host_allocator;
using tracepool::testing::pool_blocks;
using tracepool::testing::stats_of;

namespace {

constexpr uint64_t graph_pool = 7;
void* const capture_stream = reinterpret_cast<void*>(0x1000);
void* const other_stream = reinterpret_cast<void*>(0x2000);

backend::host_ledger ledger_of(allocator& a) {
  backend::host_ledger l;
  EXPECT_TRUE(backend::read_host_ledger(a.device_backend(), &l));
  return l;
}

// A capture as PyTorch makes one: the route opens, then the stream captures; the capture ends, then
// the route closes.
struct capture {
  allocator& a;
  uint64_t pool;
  void* stream;
  capture(allocator& alloc, uint64_t p, void* s) : a(alloc), pool(p), stream(s) {
    EXPECT_EQ(a.begin_pool(0, pool, nullptr, stream, nullptr), status::ok) << last_error();
    EXPECT_EQ(a.device_backend().begin_capture(0, stream), status::ok) << last_error();
  }
  ~capture() {
    EXPECT_EQ(a.device_backend().end_capture(0, stream), status::ok) << last_error();
    EXPECT_EQ(a.end_pool(0, pool), status::ok) << last_error();
  }
};

}  // namespace

TEST(PrivatePools, ACapturingStreamAllocatesFromItsPoolAndNothingElseDoes) {
  auto a = host_allocator();
  void *in_graph = nullptr, *outside = nullptr;
  {
    capture c(*a, graph_pool, capture_stream);
    ASSERT_EQ(a->malloc(4096, 0, capture_stream, &in_graph), status::ok) << last_error();
    ASSERT_EQ(a->malloc(4096, 0, other_stream, &outside), status::ok) << last_error();
  }
  EXPECT_EQ(pool_blocks(*a, graph_pool), std::vector<void*>{in_graph});
  // Each got a segment of its own: the two do not share memory.
  int uses = 0;
  ASSERT_EQ(a->pool_use_count(0, graph_pool, &uses), status::ok);
  EXPECT_EQ(uses, 1) << "begin_pool adds a use; end_pool does not drop it";
  EXPECT_EQ(current(stats_of(*a), stat_kind::segment), 2);
  EXPECT_EQ(ledger_of(*a).capture_violations, 0u) << ledger_of(*a).last_violation;
  EXPECT_EQ(a->free(in_graph), status::ok);
  EXPECT_EQ(a->free(outside), status::ok);
  EXPECT_EQ(a->release_pool(0, graph_pool), status::ok);
}

TEST(PrivatePools, AFreeInsideTheCaptureReturnsToThePoolAndOnlyThePoolReusesIt) {
  auto a = host_allocator();
  void *first = nullptr, *again = nullptr;
  {
    capture c(*a, graph_pool, capture_stream);
    ASSERT_EQ(a->malloc(1 << 20, 0, capture_stream, &first), status::ok);
    ASSERT_EQ(a->free(first), status::ok);  // inside the capture: the graph still uses it at replay
    ASSERT_EQ(a->malloc(1 << 20, 0, capture_stream, &again), status::ok);
    EXPECT_EQ(again, first) << "the capture reuses its own freed block, in stream order";
    ASSERT_EQ(a->free(again), status::ok);
  }
  // The capture is over, its pool keeps the memory: neither another stream nor the capture stream
  // outside a route may be handed it, not even once the pool's segments are entirely free.
  for (void* stream : {other_stream, capture_stream}) {
    void* p = nullptr;
    ASSERT_EQ(a->malloc(1 << 20, 0, stream, &p), status::ok);
    EXPECT_NE(p, first);
    ASSERT_EQ(a->free(p), status::ok);
  }
  EXPECT_EQ(a->empty_cache(-1), status::ok);
  EXPECT_EQ(current(stats_of(*a), stat_kind::reserved_bytes), 2 << 20)
      << "empty_cache keeps a retained pool's segment (a graph replays into it)";
  // A second capture into the same pool (PyTorch's shared pools) gets it back.
  void* shared = nullptr;
  {
    capture c(*a, graph_pool, capture_stream);
    ASSERT_EQ(a->malloc(1 << 20, 0, capture_stream, &shared), status::ok);
  }
  EXPECT_EQ(shared, first);
  EXPECT_EQ(a->free(shared), status::ok);
  EXPECT_EQ(a->release_pool(0, graph_pool), status::ok);  // the second begin's use
  EXPECT_EQ(a->release_pool(0, graph_pool), status::ok);
  EXPECT_EQ(current(stats_of(*a), stat_kind::reserved_bytes), 0) << "released and free: back to the device";
  EXPECT_EQ(ledger_of(*a).capture_violations, 0u) << ledger_of(*a).last_violation;
}

TEST(PrivatePools, ARetiredPoolGivesItsMemoryBackAsItsLastBlocksAreFreed) {
  auto a = host_allocator();
  void *kept = nullptr, *dropped = nullptr;
  {
    capture c(*a, graph_pool, capture_stream);
    ASSERT_EQ(a->malloc(3 << 20, 0, capture_stream, &kept), status::ok);     // a static output
    ASSERT_EQ(a->malloc(30 << 20, 0, capture_stream, &dropped), status::ok);  // freed in the capture
    ASSERT_EQ(a->free(dropped), status::ok);
  }
  const auto reserved = current(stats_of(*a), stat_kind::reserved_bytes);
  ASSERT_EQ(a->release_pool(0, graph_pool), status::ok);  // the graph is gone; its output lives on
  int uses = -1;
  ASSERT_EQ(a->pool_use_count(0, graph_pool, &uses), status::ok);
  EXPECT_EQ(uses, 0);
  EXPECT_LT(current(stats_of(*a), stat_kind::reserved_bytes), reserved) << "the free segment went back";
  EXPECT_GT(current(stats_of(*a), stat_kind::reserved_bytes), 0) << "the live block's segment stays";
  EXPECT_EQ(pool_blocks(*a, graph_pool), std::vector<void*>{kept});
  ASSERT_EQ(a->free(kept), status::ok);
  EXPECT_EQ(current(stats_of(*a), stat_kind::reserved_bytes), 0);
  EXPECT_EQ(a->release_pool(0, graph_pool), status::invalid_argument) << "released twice";
  EXPECT_NE(std::string(last_error()).find("no private pool"), std::string::npos) << last_error();
}

TEST(PrivatePools, NothingACaptureWouldRefuseIsCalledWhileOneIsOn) {
  auto a = host_allocator("host_capacity:64MiB");
  // Before the capture: cached memory on another stream, frees that fence, a record_stream block.
  void *cached = nullptr, *shared = nullptr, *late = nullptr;
  ASSERT_EQ(a->malloc(24 << 20, 0, other_stream, &cached), status::ok);
  ASSERT_EQ(a->free(cached), status::ok);
  ASSERT_EQ(a->malloc(4096, 0, other_stream, &shared), status::ok);
  ASSERT_EQ(a->malloc(4096, 0, other_stream, &late), status::ok);
  ASSERT_EQ(a->record_stream(late, capture_stream), status::ok);
  {
    capture c(*a, graph_pool, capture_stream);
    void* p = nullptr;
    ASSERT_EQ(a->malloc(8 << 20, 0, capture_stream, &p), status::ok) << last_error();
    ASSERT_EQ(a->record_stream(shared, capture_stream), status::ok);
    ASSERT_EQ(a->free(shared), status::ok);  // would record events: deferred, block pending
    for (int i = 0; i < 200; ++i) {          // frees that would fence and poll on another thread's stream
      void* q = nullptr;
      ASSERT_EQ(a->malloc(512, 0, other_stream, &q), status::ok);
      ASSERT_EQ(a->free(q), status::ok);
    }
    const int64_t reserved = current(stats_of(*a), stat_kind::reserved_bytes);
    EXPECT_GE(reserved, (24 << 20) + (2 << 20) + (8 << 20));
    EXPECT_EQ(a->empty_cache(-1), status::ok);  // keeps everything during the capture
    EXPECT_EQ(current(stats_of(*a), stat_kind::reserved_bytes), reserved);
    // Beyond the device: fails without giving the cache back (cuMemFree would break the capture).
    void* big = nullptr;
    EXPECT_EQ(a->malloc(40 << 20, 0, capture_stream, &big), status::out_of_memory);
    EXPECT_EQ(big, nullptr);
    EXPECT_EQ(ledger_of(*a).capture_violations, 0u) << ledger_of(*a).last_violation;
    EXPECT_GT(ledger_of(*a).allocations_during_capture, 0u);
    ASSERT_EQ(a->free(p), status::ok);
  }
  // After it, the deferred work is done: the pending block's event is recorded and completes, the
  // cache goes back, and the request that failed fits.
  ASSERT_EQ(a->free(late), status::ok);
  void* big = nullptr;
  ASSERT_EQ(a->malloc(40 << 20, 0, capture_stream, &big), status::ok) << last_error();
  ASSERT_EQ(a->free(big), status::ok);
  const auto s = stats_of(*a);
  EXPECT_EQ(current(s, stat_kind::active), 0) << "no block stayed pending";
  EXPECT_EQ(a->release_pool(0, graph_pool), status::ok);
  EXPECT_EQ(a->validate(), status::ok) << last_error();
}

TEST(PrivatePools, AReleaseDuringAnotherCaptureWaitsForTheNextEmptyCache) {
  auto a = host_allocator();
  void* p = nullptr;
  {
    capture c(*a, graph_pool, capture_stream);
    ASSERT_EQ(a->malloc(4096, 0, capture_stream, &p), status::ok);
    ASSERT_EQ(a->free(p), status::ok);
  }
  {
    capture c(*a, graph_pool + 1, other_stream);
    ASSERT_EQ(a->release_pool(0, graph_pool), status::ok);
    EXPECT_EQ(current(stats_of(*a), stat_kind::reserved_bytes), 2 << 20) << "nothing given back during a capture";
    EXPECT_EQ(ledger_of(*a).capture_violations, 0u) << ledger_of(*a).last_violation;
  }
  ASSERT_EQ(a->empty_cache(-1), status::ok);
  EXPECT_EQ(current(stats_of(*a), stat_kind::reserved_bytes), 0);
  EXPECT_EQ(a->release_pool(0, graph_pool + 1), status::ok);
}

namespace {
struct thread_filter {
  std::thread::id owner;
  std::atomic<int>* released;
};
int same_thread(void* context, void*) { return static_cast<thread_filter*>(context)->owner == std::this_thread::get_id(); }
void release_filter(void* context) {
  auto* f = static_cast<thread_filter*>(context);
  f->released->fetch_add(1);
  delete f;
}
}  // namespace

// PyTorch's use_mem_pool routes by thread: the filter decides, whatever the stream; threads outside
// it allocate as before, concurrently, and never get the pool's memory.
TEST(PrivatePools, AFilterRoutesOneThreadWhileOthersAllocateBesideIt) {
  auto a = host_allocator();
  std::atomic<int> released{0};
  const uint64_t scoped = 42;
  ASSERT_EQ(a->retain_pool(0, scoped), status::ok);  // the MemPool object's own use
  ASSERT_EQ(a->begin_pool(0, scoped, same_thread, new thread_filter{std::this_thread::get_id(), &released},
                          release_filter),
            status::ok);
  std::atomic<bool> stop{false};
  std::vector<std::thread> others;
  std::vector<std::vector<void*>> seen(2);
  for (int t = 0; t < 2; ++t)
    others.emplace_back([&, t] {
      void* stream = reinterpret_cast<void*>(0x3000 + 0x1000 * t);
      while (!stop.load()) {
        void* q = nullptr;
        if (a->malloc(4096, 0, stream, &q) != status::ok) return;
        seen[static_cast<size_t>(t)].push_back(q);
        if (seen[static_cast<size_t>(t)].size() > 64) {
          for (void* x : seen[static_cast<size_t>(t)]) (void)a->free(x);
          seen[static_cast<size_t>(t)].clear();
        }
      }
    });
  std::vector<void*> mine;
  for (int i = 0; i < 200; ++i) {
    void* q = nullptr;
    ASSERT_EQ(a->malloc(4096, 0, other_stream, &q), status::ok);
    mine.push_back(q);
  }
  stop.store(true);
  for (auto& t : others) t.join();
  ASSERT_EQ(a->end_pool(0, scoped), status::ok);
  EXPECT_EQ(released.load(), 1) << "the route's context is released when it closes";
  std::sort(mine.begin(), mine.end());
  EXPECT_EQ(pool_blocks(*a, scoped), mine);
  std::set<void*> private_addresses(mine.begin(), mine.end());
  for (auto& s : seen)
    for (void* x : s) {
      EXPECT_EQ(private_addresses.count(x), 0u);
      EXPECT_EQ(a->free(x), status::ok);
    }
  for (void* x : mine) EXPECT_EQ(a->free(x), status::ok);
  int uses = 0;
  ASSERT_EQ(a->pool_use_count(0, scoped, &uses), status::ok);
  EXPECT_EQ(uses, 2);
  EXPECT_EQ(a->release_pool(0, scoped), status::ok);  // use_mem_pool's exit
  ASSERT_EQ(a->empty_cache(-1), status::ok);           // the other threads' cache goes, the pool's stays
  EXPECT_EQ(current(stats_of(*a), stat_kind::reserved_bytes), 2 << 20);
  EXPECT_EQ(a->empty_pool(0, scoped), status::ok);  // emptyCache(id) of a retained pool keeps it
  EXPECT_EQ(current(stats_of(*a), stat_kind::reserved_bytes), 2 << 20);
  EXPECT_EQ(a->release_pool(0, scoped), status::ok);  // the MemPool object dies: retired, free, back
  EXPECT_EQ(current(stats_of(*a), stat_kind::reserved_bytes), 0);
  EXPECT_EQ(a->validate(), status::ok) << last_error();
}

// ~MemPool runs releasePool, then emptyCache(id); a graph captured into the MemPool's pool still
// holds a use and replays into the memory its capture freed: that memory must stay.
TEST(PrivatePools, EmptyingARetainedPoolKeepsTheMemoryAGraphStillReplaysInto) {
  auto a = host_allocator();
  ASSERT_EQ(a->retain_pool(0, graph_pool), status::ok);  // MemPool()
  void *scratch = nullptr, *out = nullptr;
  {
    capture c(*a, graph_pool, capture_stream);  // torch.cuda.graph(g, pool=mempool.id)
    ASSERT_EQ(a->malloc(64 << 20, 0, capture_stream, &scratch), status::ok);
    ASSERT_EQ(a->malloc(4096, 0, capture_stream, &out), status::ok);
    ASSERT_EQ(a->free(scratch), status::ok);
  }
  const auto reserved = current(stats_of(*a), stat_kind::reserved_bytes);
  ASSERT_EQ(a->release_pool(0, graph_pool), status::ok);  // ~MemPool: releasePool
  ASSERT_EQ(a->empty_pool(0, graph_pool), status::ok);    // ~MemPool: emptyCache(id)
  EXPECT_EQ(current(stats_of(*a), stat_kind::reserved_bytes), reserved);
  ASSERT_EQ(a->free(out), status::ok);
  ASSERT_EQ(a->release_pool(0, graph_pool), status::ok);  // the graph is destroyed
  EXPECT_EQ(current(stats_of(*a), stat_kind::reserved_bytes), 0);
}

// One route per pool: a second begin is refused (PyTorch's allocator refuses it too), so that an
// inner end cannot silently close an outer scope's route.
TEST(PrivatePools, ASecondRouteToAPoolIsRefusedAndCostsNoUse) {
  auto a = host_allocator();
  ASSERT_EQ(a->begin_pool(0, graph_pool, nullptr, capture_stream, nullptr), status::ok);
  EXPECT_EQ(a->begin_pool(0, graph_pool, nullptr, capture_stream, nullptr), status::invalid_argument);
  EXPECT_NE(std::string(last_error()).find("route open already"), std::string::npos) << last_error();
  int uses = 0;
  ASSERT_EQ(a->pool_use_count(0, graph_pool, &uses), status::ok);
  EXPECT_EQ(uses, 1);
  ASSERT_EQ(a->end_pool(0, graph_pool), status::ok);
  ASSERT_EQ(a->begin_pool(0, graph_pool + 1, nullptr, capture_stream, nullptr), status::ok) << "another pool may";
  ASSERT_EQ(a->end_pool(0, graph_pool + 1), status::ok);
  EXPECT_EQ(a->release_pool(0, graph_pool), status::ok);
  EXPECT_EQ(a->release_pool(0, graph_pool + 1), status::ok);
}

// A record_stream block freed inside a capture (a collective on a side stream) gets its events once
// the capture's route closes, and goes back to the graph's pool: the next capture into the shared
// pool reuses it instead of growing.
TEST(PrivatePools, ARecordStreamFreeInsideACaptureReturnsToThePoolAfterIt) {
  auto a = host_allocator();
  void *first = nullptr, *again = nullptr;
  {
    capture c(*a, graph_pool, capture_stream);
    ASSERT_EQ(a->malloc(1 << 20, 0, capture_stream, &first), status::ok);
    ASSERT_EQ(a->record_stream(first, other_stream), status::ok);
    ASSERT_EQ(a->free(first), status::ok);  // pending, no event: the gate is closed
  }
  EXPECT_EQ(current(stats_of(*a), stat_kind::active), 0) << "the pending free finished when the route closed";
  {
    capture c(*a, graph_pool, capture_stream);
    ASSERT_EQ(a->malloc(1 << 20, 0, capture_stream, &again), status::ok);
  }
  EXPECT_EQ(again, first);
  EXPECT_EQ(ledger_of(*a).capture_violations, 0u) << ledger_of(*a).last_violation;
  ASSERT_EQ(a->free(again), status::ok);
  EXPECT_EQ(a->release_pool(0, graph_pool), status::ok);
  EXPECT_EQ(a->release_pool(0, graph_pool), status::ok);
}

namespace {
// Stands for another thread that opens a route and begins a capture while this one empties the
// cache: it is started at the first segment the cache gives back.
struct capture_during_release final : observer {
  allocator* a = nullptr;
  std::thread other;
  std::atomic<bool> began{false};
  unsigned events() const override { return segment_events; }
  void on_segment_free(const segment_event&) override {
    if (other.joinable()) return;
    other = std::thread([this] {
      EXPECT_EQ(a->begin_pool(0, graph_pool, nullptr, capture_stream, nullptr), status::ok);
      EXPECT_EQ(a->device_backend().begin_capture(0, capture_stream), status::ok);
      began.store(true);
    });
    // Give it time to begin; it must not, until this empty_cache has finished its device work.
    for (int i = 0; i < 50 && !began.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
};
}  // namespace

// The gate is checked and acted on as one: a capture that begins while empty_cache gives segments
// back waits until it is done, so no cuMemFree lands inside the capture.
TEST(PrivatePools, ACaptureBegunDuringEmptyCacheWaitsForItsReleases) {
  auto a = host_allocator();
  std::vector<void*> blocks(4);
  for (void*& p : blocks) ASSERT_EQ(a->malloc(30 << 20, 0, other_stream, &p), status::ok);
  for (void* p : blocks) ASSERT_EQ(a->free(p), status::ok);
  static capture_during_release watcher;  // observers must outlive the allocator
  watcher.a = a.get();
  ASSERT_EQ(a->subscribe(&watcher), status::ok);
  ASSERT_EQ(a->empty_cache(-1), status::ok);
  watcher.other.join();
  EXPECT_EQ(current(stats_of(*a), stat_kind::reserved_bytes), 0) << "every segment went back";
  EXPECT_EQ(ledger_of(*a).capture_violations, 0u) << ledger_of(*a).last_violation;
  EXPECT_EQ(a->device_backend().end_capture(0, capture_stream), status::ok);
  EXPECT_EQ(a->end_pool(0, graph_pool), status::ok);
  EXPECT_EQ(a->release_pool(0, graph_pool), status::ok);
  watcher.a = nullptr;
}

namespace {
// Each segment of `pool` (by address) with its blocks that have memory behind them.
std::map<uintptr_t, int> blocks_by_segment(allocator& a, uint64_t pool) {
  std::vector<block_record> records;
  EXPECT_EQ(a.collect_blocks(0, &records), status::ok);
  std::map<uintptr_t, int> out;
  for (const block_record& r : records)
    if (r.pool == pool) ++out[r.segment];
  return out;
}

void* routed_alloc(allocator& a, uint64_t pool, size_t size) {
  void* p = nullptr;
  EXPECT_EQ(a.begin_pool(0, pool, nullptr, capture_stream, nullptr), status::ok) << last_error();
  EXPECT_EQ(a.malloc(size, 0, capture_stream, &p), status::ok) << last_error();
  EXPECT_EQ(a.end_pool(0, pool), status::ok);
  EXPECT_EQ(a.release_pool(0, pool), status::ok);  // begin_pool's use
  return p;
}
}  // namespace

// MemPool(no_split=True): each allocation a segment of its own; the pool beside it splits as usual.
TEST(PrivatePools, ANoSplitPoolGivesEachAllocationASegmentOfItsOwn) {
  auto a = host_allocator();
  constexpr uint64_t split = 21, no_split = 22;
  ASSERT_EQ(a->retain_pool(0, split), status::ok);
  ASSERT_EQ(a->retain_pool(0, no_split), status::ok);
  ASSERT_EQ(a->set_pool_options(0, no_split, true, false), status::ok) << last_error();
  std::vector<void*> blocks;
  for (uint64_t pool : {split, no_split, split, no_split}) blocks.push_back(routed_alloc(*a, pool, 4 << 20));
  const auto split_segments = blocks_by_segment(*a, split), no_split_segments = blocks_by_segment(*a, no_split);
  EXPECT_EQ(split_segments.size(), 1u) << "the second 4 MiB fits beside the first";
  EXPECT_EQ(no_split_segments.size(), 2u);
  for (const auto& [segment, count] : no_split_segments) EXPECT_EQ(count, 1) << "one block per segment";
  std::vector<block_record> records;
  ASSERT_EQ(a->collect_blocks(0, &records), status::ok);
  for (const block_record& r : records)
    if (r.pool == no_split) EXPECT_EQ(r.segment_size, size_t{4} << 20) << "sized to the request, not 20 MiB";
  for (void* p : blocks) ASSERT_EQ(a->free(p), status::ok);
  bool ns = false, oom = true;
  ASSERT_EQ(a->pool_options(0, no_split, &ns, &oom), status::ok);
  EXPECT_TRUE(ns);
  EXPECT_FALSE(oom);
  EXPECT_EQ(a->validate(), status::ok) << last_error();
  EXPECT_EQ(a->release_pool(0, split), status::ok);
  EXPECT_EQ(a->release_pool(0, no_split), status::ok);
  EXPECT_EQ(a->set_pool_options(0, no_split, true, false), status::invalid_argument) << "released";
}

// MemPool(use_on_oom=True): what the default pool cannot get, even after emptying the cache, it may
// take from the pool's free blocks on its stream; the block goes back to the pool.
TEST(PrivatePools, AUseOnOomPoolLendsItsFreeMemoryWhenTheDeviceIsFull) {
  auto a = host_allocator();
  ASSERT_EQ(a->set_limit(0, 64 << 20), status::ok);
  constexpr uint64_t lender = 23;
  ASSERT_EQ(a->retain_pool(0, lender), status::ok);
  void* in_pool = routed_alloc(*a, lender, 40 << 20);
  ASSERT_EQ(a->free(in_pool), status::ok);  // free, but the pool's: 40 of the 64 MiB stay reserved
  void* outside = nullptr;
  EXPECT_EQ(a->malloc(30 << 20, 0, capture_stream, &outside), status::out_of_memory) << "not lent yet";
  ASSERT_EQ(a->set_pool_options(0, lender, false, true), status::ok);
  ASSERT_EQ(a->malloc(30 << 20, 0, capture_stream, &outside), status::ok) << last_error();
  EXPECT_EQ(outside, in_pool) << "the pool's free block";
  void* another = nullptr;
  EXPECT_EQ(a->malloc(30 << 20, 0, capture_stream, &another), status::out_of_memory) << "nothing left to lend";
  EXPECT_EQ(a->malloc(30 << 20, 0, other_stream, &another), status::out_of_memory) << "other streams are not lent to";
  ASSERT_EQ(a->free(outside), status::ok);
  void* again = routed_alloc(*a, lender, 20 << 20);
  EXPECT_EQ(again, in_pool) << "the lent block came back to the pool";
  ASSERT_EQ(a->free(again), status::ok);
  EXPECT_EQ(a->validate(), status::ok) << last_error();
  EXPECT_EQ(a->release_pool(0, lender), status::ok);
}

namespace {
// An allocator of the caller's, for MemPool(allocator=...): host memory, counted.
struct counting_source {
  int allocs = 0, frees = 0, releases = 0;
  size_t last_size = 0;
  bool refuse = false;
  std::vector<std::pair<char*, size_t>> held;
  static void* alloc(void* c, size_t size, int, void*) {
    auto* self = static_cast<counting_source*>(c);
    if (self->refuse) return nullptr;
    ++self->allocs;
    self->last_size = size;
    char* p = static_cast<char*>(std::aligned_alloc(4096, size));
    self->held.emplace_back(p, size);
    return p;
  }
  static void free(void* c, void* ptr, size_t size, int, void*) {
    auto* self = static_cast<counting_source*>(c);
    ++self->frees;
    EXPECT_NE(std::find(self->held.begin(), self->held.end(), std::make_pair(static_cast<char*>(ptr), size)),
              self->held.end()) << "given back with the size it was asked for";
    std::free(ptr);
  }
  static void release(void* c) { ++static_cast<counting_source*>(c)->releases; }
  bool holds(const void* p) const {
    for (const auto& [start, size] : held)
      if (p >= start && p < start + size) return true;
    return false;
  }
};
}  // namespace

// MemPool(allocator=...): the pool's segments come from the caller's allocator; tracepool still splits,
// caches and counts the blocks, and gives each segment back to it.
TEST(PrivatePools, APoolsSegmentsComeFromItsOwnAllocator) {
  auto a = host_allocator();
  constexpr uint64_t pool = 24;
  counting_source source;
  ASSERT_EQ(a->retain_pool(0, pool), status::ok);
  ASSERT_EQ(a->set_pool_source(0, pool, std::make_shared<const segment_source>(&counting_source::alloc,
                                                                               &counting_source::free, &source,
                                                                               &counting_source::release)),
            status::ok) << last_error();
  const int64_t reserved_before = current(stats_of(*a), stat_kind::reserved_bytes);
  void* first = routed_alloc(*a, pool, 4 << 20);
  void* second = routed_alloc(*a, pool, 4 << 20);
  EXPECT_EQ(source.allocs, 1) << "one 20 MiB segment serves both";
  EXPECT_EQ(source.last_size, size_t{20} << 20);
  EXPECT_TRUE(source.holds(first) && source.holds(second));
  EXPECT_EQ(current(stats_of(*a), stat_kind::reserved_bytes) - reserved_before, 20 << 20) << "counted as reserved";
  void* outside = nullptr;
  ASSERT_EQ(a->malloc(4 << 20, 0, other_stream, &outside), status::ok);
  EXPECT_FALSE(source.holds(outside)) << "only the pool's memory comes from it";
  ASSERT_EQ(a->free(outside), status::ok);
  ASSERT_EQ(a->free(first), status::ok);
  ASSERT_EQ(a->free(second), status::ok);
  EXPECT_EQ(source.frees, 0) << "cached while the pool lives";
  ASSERT_EQ(a->release_pool(0, pool), status::ok);
  EXPECT_EQ(source.frees, 1) << "a retired pool's free segment goes back to its allocator";
  EXPECT_EQ(source.releases, 1);
  EXPECT_EQ(a->validate(), status::ok) << last_error();

  // Set too late: the allocator's context is released at once. A source that says no is out of memory.
  counting_source late, refusing;
  refusing.refuse = true;
  ASSERT_EQ(a->retain_pool(0, pool), status::ok);
  void* held = routed_alloc(*a, pool, 1000);
  EXPECT_EQ(a->set_pool_source(0, pool, std::make_shared<const segment_source>(&counting_source::alloc,
                                                                               &counting_source::free, &late,
                                                                               &counting_source::release)),
            status::invalid_argument);
  EXPECT_EQ(late.releases, 1);
  ASSERT_EQ(a->free(held), status::ok);
  ASSERT_EQ(a->release_pool(0, pool), status::ok);
  ASSERT_EQ(a->retain_pool(0, pool), status::ok);
  ASSERT_EQ(a->set_pool_source(0, pool, std::make_shared<const segment_source>(&counting_source::alloc,
                                                                               &counting_source::free, &refusing,
                                                                               &counting_source::release)),
            status::ok);
  void* none = nullptr;
  ASSERT_EQ(a->begin_pool(0, pool, nullptr, capture_stream, nullptr), status::ok);
  EXPECT_EQ(a->malloc(1000, 0, capture_stream, &none), status::out_of_memory);
  EXPECT_NE(std::string(last_error()).find("the pool's own allocator"), std::string::npos) << last_error();
  ASSERT_EQ(a->end_pool(0, pool), status::ok);
  ASSERT_EQ(a->release_pool(0, pool), status::ok);
  ASSERT_EQ(a->release_pool(0, pool), status::ok);
  EXPECT_EQ(refusing.releases, 1);
}

TEST(PrivatePools, BadCallsAreErrors) {
  auto a = host_allocator();
  EXPECT_EQ(a->retain_pool(0, 0), status::invalid_argument);
  EXPECT_EQ(a->begin_pool(3, graph_pool, nullptr, nullptr, nullptr), status::invalid_device);
  EXPECT_EQ(a->release_pool(0, 99), status::invalid_argument);
  EXPECT_EQ(a->end_pool(0, 99), status::ok) << "ending a route that is not open (a failed capture) is harmless";
  int uses = -1;
  EXPECT_EQ(a->pool_use_count(0, 99, &uses), status::ok);
  EXPECT_EQ(uses, 0);
  EXPECT_EQ(a->pool_use_count(0, 99, nullptr), status::invalid_argument);
}

}  // namespace tracepool::core
