// The fault sweep (libuv's pattern, extended to every backend call): for k = 1, 2, ... the host
// backend fails its k-th fallible call (segment allocation and release, event creation, record,
// query and synchronize, reads of a capture's graph) while a fixed workload runs on two streams. Every failure must be a clear
// status, the pool must stay consistent, nothing may be lost or leaked, and later operations work.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "test_support.h"

namespace tracepool::core {
namespace {

using testing::current;
using testing::host_allocator;
using testing::stats_of;

backend::host_ledger ledger_of(allocator& a) {
  backend::host_ledger l;
  EXPECT_TRUE(backend::read_host_ledger(a.device_backend(), &l));
  return l;
}

// A fixed workload on two streams whose every round makes each kind of backend call: segments
// grow and go back (allocate, release), blocks used on the other stream too are freed (event
// creation and record) and finish pending (query, and synchronize when an out-of-memory retry waits
// for them); every fourth round captures a graph in which such a block is reused (graph reads).
class Workload {
 public:
  explicit Workload(allocator& a) : a_(a) {}

  // An operation that may meet the injected fault: it gives `expected`, or fails with a status the
  // caller can act on and a message naming the fault. Either way every invariant still holds.
  void expect_clean(status s, const char* op, status expected = status::ok) {
    if (s != expected) {
      ++failed_;
      EXPECT_TRUE(s == status::backend_error || s == status::out_of_memory)
          << op << " failed with status " << static_cast<int>(s) << ": " << last_error();
      EXPECT_NE(std::string(last_error()).find("injected"), std::string::npos) << op << ": " << last_error();
    }
    EXPECT_EQ(a_.validate(), status::ok) << "after " << op << ": " << last_error();
  }

  void run() {
    std::mt19937 rng(7);
    for (int round = 0; round < 12; ++round) {
      for (int i = 0; i < 6; ++i) {
        // Small blocks share 2 MiB segments; every third is large and gets a segment of its own.
        const size_t size = i % 3 == 2 ? (3u << 20) : 512 + rng() % (512u << 10);
        malloc_on(i % 2, size);
      }
      // Blocks of stream 0 used on stream 1 too: their frees record events on stream 1.
      for (size_t i = 0; i < live_.size(); ++i)
        if (live_[i].stream == 0 && rng() % 2)
          expect_clean(a_.record_stream(live_[i].ptr, stream(1)), "record_stream");
      for (size_t i = live_.size(); i-- > 0;)
        if (rng() % 2) free_one(i);
      // More than the device holds, on stream 1: the retry empties the cache, waiting for stream
      // 0's pending frees first.
      void* p = nullptr;
      expect_clean(a_.malloc(size_t{1} << 30, 0, stream(1), &p), "malloc beyond the device", status::out_of_memory);
      if (round % 3 == 2) expect_clean(a_.empty_cache(0), "empty_cache");
      if (round % 4 == 1) capture_round();
      expect_clean(a_.mark(("round " + std::to_string(round)).c_str()), "mark");
    }
  }

  // Frees what is left: a free that met the fault left its block live, so freeing again works.
  void finish() {
    for (int attempt = 0; attempt < 2 && !live_.empty(); ++attempt)
      for (size_t i = live_.size(); i-- > 0;) free_one(i);
    EXPECT_TRUE(live_.empty()) << live_.size() << " blocks could not be freed";
  }

  int failed() const { return failed_; }

  static int both_streams(void*, void*) { return 1; }

  // A capture on stream 0 (capture_reuse:on) in which stream 1 reads a block that is then freed and,
  // once stream 1 has joined back, reused: a failed graph read only leaves it pending until the end.
  void capture_round() {
    constexpr uint64_t graph = 99;
    backend::backend& be = a_.device_backend();
    ASSERT_EQ(a_.begin_pool(0, graph, &both_streams, nullptr, nullptr), status::ok) << last_error();
    ASSERT_EQ(be.begin_capture(0, stream(0)), status::ok);
    void* data = nullptr;
    const status got = a_.malloc(4096, 0, stream(0), &data);
    expect_clean(got, "malloc in a capture");
    if (got == status::ok) {
      ASSERT_EQ(be.capture_join(0, stream(1), stream(0)), status::ok);
      ASSERT_EQ(be.capture_work(0, stream(1)), status::ok);
      expect_clean(a_.record_stream(data, stream(1)), "record_stream in a capture");
      status freed = a_.free(data);
      expect_clean(freed, "free in a capture");
      if (freed != status::ok) expect_clean(freed = a_.free(data), "free in a capture, again");
      ASSERT_EQ(be.capture_join(0, stream(0), stream(1)), status::ok);
      ASSERT_EQ(be.capture_work(0, stream(0)), status::ok);
      void* again = nullptr;
      const status reused = a_.malloc(4096, 0, stream(0), &again);
      expect_clean(reused, "malloc in a capture, again");
      if (reused == status::ok) expect_clean(a_.free(again), "free in a capture, again");
    }
    ASSERT_EQ(be.end_capture(0, stream(0)), status::ok);
    expect_clean(a_.end_pool(0, graph), "end_pool");
    expect_clean(a_.release_pool(0, graph), "release_pool");
  }

 private:
  struct live_block {
    void* ptr;
    int stream;
  };
  static backend::stream_handle stream(int i) { return reinterpret_cast<backend::stream_handle>(4096 * (1 + i)); }

  void malloc_on(int s, size_t size) {
    void* p = nullptr;
    const status st = a_.malloc(size, 0, stream(s), &p);
    expect_clean(st, "malloc");
    if (st == status::ok) live_.push_back({p, s});
    else EXPECT_EQ(p, nullptr);
  }

  void free_one(size_t i) {
    const status s = a_.free(live_[i].ptr);
    expect_clean(s, "free");
    if (s != status::ok) return;  // still live: nothing lost, freed again later
    live_[i] = live_.back();
    live_.pop_back();
  }

  allocator& a_;
  std::vector<live_block> live_;
  int failed_ = 0;
};

TEST(FaultSweep, EveryFailedBackendCallIsCleanAndLosesNothing) {
  size_t faults = 0, failed_ops = 0, k = 1;
  size_t by_kind[backend::host_ledger::kinds] = {};
  for (;; ++k) {
    auto a = host_allocator("fail_call:" + std::to_string(k) + ",host_capacity:256MiB,oom_report:off,capture_reuse:on");
    Workload w(*a);
    w.run();
    w.finish();
    if (ledger_of(*a).faults == 0) break;  // the workload makes fewer than k calls: each was failed once
    // Later operations work: the fault was one call.
    void* p = nullptr;
    ASSERT_EQ(a->malloc(4096, 0, nullptr, &p), status::ok) << "k=" << k << ": " << last_error();
    ASSERT_EQ(a->free(p), status::ok) << "k=" << k;
    status emptied = a->empty_cache(-1);
    if (emptied != status::ok) emptied = a->empty_cache(-1);  // a refused release stayed cached: once more
    ASSERT_EQ(emptied, status::ok) << "k=" << k << ": " << last_error();
    const device_stats st = stats_of(*a);
    EXPECT_EQ(current(st, stat_kind::allocation), 0) << "k=" << k;
    EXPECT_EQ(current(st, stat_kind::active), 0) << "k=" << k << ": a block stayed pending";
    EXPECT_EQ(current(st, stat_kind::reserved_bytes), 0) << "k=" << k;
    const backend::host_ledger l = ledger_of(*a);
    EXPECT_EQ(l.bytes_in_use, 0u) << "k=" << k << ": device memory leaked";
    // Streams 0 and 1, and the null stream of the check above.
    EXPECT_LE(l.events_out, 3u) << "k=" << k << ": events leaked (at most one fence per stream may be in flight)";
    faults += l.faults;
    for (int i = 0; i < backend::host_ledger::kinds; ++i) by_kind[i] += l.faults_by_kind[i];
    failed_ops += static_cast<size_t>(w.failed());
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_GT(k, 100u) << "the workload should make a few hundred backend calls";
  EXPECT_GT(failed_ops, 0u) << "some faults must reach the caller as a status";
  std::printf("fault sweep: %zu backend calls failed one at a time, %zu faults injected, %zu operations reported one;",
              k - 1, faults, failed_ops);
  for (int i = 0; i < backend::host_ledger::kinds; ++i) {
    std::printf(" %s %zu", backend::host_ledger::kind_names[i], by_kind[i]);
    EXPECT_GT(by_kind[i], 0u) << "no " << backend::host_ledger::kind_names[i] << " call was failed";
  }
  std::printf("\n");
  RecordProperty("faults_injected", static_cast<int>(faults));
}

}  // namespace
}  // namespace tracepool::core
