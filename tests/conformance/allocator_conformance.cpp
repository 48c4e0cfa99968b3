// The conformance suite: what every backend must do, run on the host backend in CI and on CUDA on the
// GPU machine (tests/gpu/run.sh). The CUDA cases skip, saying why, where no driver or device exists.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "allocator.h"
#include "base/config.h"
#include "report/report.h"

namespace tracepool::core {
namespace {

// A parameter names the backend and the segments: "_growable" for segments:growable (Note [Growable
// segments]), classic without it (the CUDA backend's default is growable).
class Conformance : public ::testing::TestWithParam<std::string> {
 protected:
  std::string backend_name() const { return GetParam().substr(0, GetParam().find('_')); }
  bool growable() const { return GetParam().find("_growable") != std::string::npos; }

  void SetUp() override {
    config cfg;
    const std::string text =
        "backend:" + backend_name() + ",validate:on" + (growable() ? ",segments:growable" : ",segments:classic");
    ASSERT_EQ(parse_config(text.c_str(), &cfg), status::ok) << last_error();
    const status s = allocator::create(cfg, &alloc_);
    if (s == status::unavailable) GTEST_SKIP() << "backend " << GetParam() << " unavailable here: " << last_error();
    ASSERT_EQ(s, status::ok) << last_error();
  }
  void TearDown() override {
    if (!alloc_) return;
    EXPECT_EQ(alloc_->validate(), status::ok) << last_error();
    for (auto s : streams_) backend().destroy_stream(0, s);
  }

  backend::backend& backend() { return alloc_->device_backend(); }
  backend::stream_handle new_stream() {
    backend::stream_handle s = nullptr;
    EXPECT_EQ(backend().create_stream(0, &s), status::ok) << last_error();
    streams_.push_back(s);
    return s;
  }
  device_stats stats() {
    device_stats s;
    EXPECT_EQ(alloc_->stats(0, &s), status::ok);
    return s;
  }
  int64_t current(stat_kind k) { return stats().table.at(k, all_pools).current; }

  std::unique_ptr<allocator> alloc_;
  std::vector<backend::stream_handle> streams_;
};

TEST_P(Conformance, BlocksAreAlignedAndDisjoint) {
  std::mt19937 rng(1);
  std::vector<std::pair<char*, size_t>> live;
  for (int i = 0; i < 400; ++i) {
    const size_t size = 1 + rng() % (3u << 20);
    void* p = nullptr;
    ASSERT_EQ(alloc_->malloc(size, 0, nullptr, &p), status::ok) << last_error();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
    live.emplace_back(static_cast<char*>(p), size);
  }
  std::sort(live.begin(), live.end());
  for (size_t i = 1; i < live.size(); ++i) EXPECT_LE(live[i - 1].first + live[i - 1].second, live[i].first);
  for (auto& [p, size] : live) ASSERT_EQ(alloc_->free(p), status::ok);
  EXPECT_EQ(current(stat_kind::allocated_bytes), 0);
}

TEST_P(Conformance, SameStreamReusesCachedBlock) {
  backend::stream_handle s = new_stream();
  void *p = nullptr, *q = nullptr;
  ASSERT_EQ(alloc_->malloc(3000, 0, s, &p), status::ok);
  ASSERT_EQ(alloc_->free(p), status::ok);
  ASSERT_EQ(alloc_->malloc(3000, 0, s, &q), status::ok);
  EXPECT_EQ(p, q);
  EXPECT_EQ(stats().counters.num_device_alloc, 1u);
  ASSERT_EQ(alloc_->free(q), status::ok);
}

TEST_P(Conformance, OtherStreamWaitsForEvent) {
  backend::stream_handle a = new_stream(), b = new_stream(), c = new_stream();
  void* p = nullptr;
  ASSERT_EQ(alloc_->malloc(1 << 20, 0, a, &p), status::ok);
  void* hold = nullptr;
  ASSERT_EQ(backend().hold_stream(0, a, &hold), status::ok) << last_error();
  ASSERT_EQ(alloc_->free(p), status::ok);
  void* q = nullptr;
  ASSERT_EQ(alloc_->malloc(1 << 20, 0, b, &q), status::ok);
  EXPECT_TRUE(static_cast<char*>(q) < static_cast<char*>(p) || static_cast<char*>(q) >= static_cast<char*>(p) + (2 << 20))
      << "memory still in use on stream a went to stream b";
  ASSERT_EQ(backend().release_hold(hold), status::ok);
  ASSERT_EQ(backend().synchronize_stream(0, a), status::ok) << last_error();
  void* r = nullptr;
  ASSERT_EQ(alloc_->malloc(1 << 20, 0, c, &r), status::ok);  // a finished: its idle segment may move
  ASSERT_EQ(alloc_->free(q), status::ok);
  ASSERT_EQ(alloc_->free(r), status::ok);
  if (growable()) {
    // A growable segment stays with its stream: c maps pieces of its own.
    EXPECT_EQ(stats().counters.num_device_alloc, 3u);
    return;
  }
  EXPECT_TRUE(static_cast<char*>(r) >= static_cast<char*>(p) && static_cast<char*>(r) < static_cast<char*>(p) + (2 << 20));
  EXPECT_EQ(stats().counters.num_device_alloc, 2u) << "the third block came from the fenced segment";
}

TEST_P(Conformance, RecordStreamDelaysReuseUntilThatStreamPassesTheFree) {
  backend::stream_handle a = new_stream(), b = new_stream();
  void* p = nullptr;
  ASSERT_EQ(alloc_->malloc(8192, 0, a, &p), status::ok);
  ASSERT_EQ(alloc_->record_stream(p, b), status::ok);
  void* hold = nullptr;
  ASSERT_EQ(backend().hold_stream(0, b, &hold), status::ok);
  ASSERT_EQ(alloc_->free(p), status::ok);
  void* q = nullptr;
  ASSERT_EQ(alloc_->malloc(8192, 0, a, &q), status::ok);
  EXPECT_NE(p, q);
  EXPECT_EQ(current(stat_kind::active), 2);
  ASSERT_EQ(backend().release_hold(hold), status::ok);
  ASSERT_EQ(backend().synchronize_stream(0, b), status::ok);
  void* r = nullptr;
  ASSERT_EQ(alloc_->malloc(8192, 0, a, &r), status::ok);
  EXPECT_EQ(r, p);
  ASSERT_EQ(alloc_->free(q), status::ok);
  ASSERT_EQ(alloc_->free(r), status::ok);
}

TEST_P(Conformance, EmptyCacheGivesSegmentsBack) {
  size_t free_before = 0, free_after = 0, total = 0;
  ASSERT_EQ(alloc_->memory_info(0, &free_before, &total), status::ok);
  std::vector<void*> ptrs(16);
  for (auto& p : ptrs) ASSERT_EQ(alloc_->malloc(32 << 20, 0, nullptr, &p), status::ok);
  for (auto p : ptrs) ASSERT_EQ(alloc_->free(p), status::ok);
  // Classic: one 32 MiB segment each. Growable: 20 MiB pieces back to back, the last one partly used.
  const int64_t reserved = current(stat_kind::reserved_bytes), want = int64_t{16} * (32 << 20);
  if (growable()) {
    EXPECT_GE(reserved, want) << "freed memory stays cached";
    EXPECT_LT(reserved, want + (20 << 20)) << "pieces follow one another in one range";
    EXPECT_EQ(static_cast<int64_t>(stats().counters.num_device_alloc), reserved / (20 << 20)) << "one map per piece";
  } else {
    EXPECT_EQ(reserved, want) << "freed memory stays cached";
    EXPECT_EQ(stats().counters.num_device_alloc, 16u);
  }
  ASSERT_EQ(alloc_->empty_cache(0), status::ok);
  EXPECT_EQ(current(stat_kind::reserved_bytes), 0);
  EXPECT_EQ(current(stat_kind::segment), 0) << "nothing mapped: the growable range is given back too";
  ASSERT_EQ(alloc_->memory_info(0, &free_after, &total), status::ok);
  EXPECT_GE(free_after + (8 << 20), free_before) << "the device got its memory back";
  EXPECT_EQ(stats().counters.num_device_free, stats().counters.num_device_alloc);
}

TEST_P(Conformance, RequestBeyondTheDeviceFailsCleanly) {
  size_t free_bytes = 0, total = 0;
  ASSERT_EQ(alloc_->memory_info(0, &free_bytes, &total), status::ok);
  void* keep = nullptr;
  ASSERT_EQ(alloc_->malloc(1 << 20, 0, nullptr, &keep), status::ok);
  void* p = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(alloc_->malloc(total + (1u << 30), 0, nullptr, &p), status::out_of_memory);
  EXPECT_EQ(p, nullptr);
  EXPECT_NE(std::string(last_error()).find("out of memory on device 0"), std::string::npos) << last_error();
  const auto s = stats();
  EXPECT_EQ(s.counters.num_ooms, 1u);
  EXPECT_EQ(s.counters.num_alloc_retries, 1u);
  EXPECT_EQ(s.table.at(stat_kind::allocation, all_pools).current, 1) << "the live block is untouched";
  ASSERT_EQ(alloc_->free(keep), status::ok);
}

TEST_P(Conformance, BadInputIsRejectedAndNothingIsLost) {
  void* p = nullptr;
  ASSERT_EQ(alloc_->malloc(4096, 0, nullptr, &p), status::ok);
  int not_ours = 0;
  EXPECT_EQ(alloc_->free(&not_ours), status::unknown_pointer);
  EXPECT_EQ(alloc_->free(static_cast<char*>(p) + 512), status::double_free);
  void* q = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(alloc_->malloc(0, 0, nullptr, &q), status::ok);
  EXPECT_EQ(q, nullptr);
  EXPECT_EQ(alloc_->malloc(SIZE_MAX, 0, nullptr, &q), status::invalid_argument);
  EXPECT_EQ(alloc_->malloc(64, alloc_->device_count(), nullptr, &q), status::invalid_device);
  ASSERT_EQ(alloc_->free(p), status::ok);
  EXPECT_EQ(alloc_->free(p), status::double_free);
  const auto s = stats();
  EXPECT_EQ(s.counters.num_invalid_frees, 3u);
  EXPECT_EQ(s.table.at(stat_kind::allocation, all_pools).current, 0);
}

// Many threads, each allocating on its own stream and freeing blocks that other threads allocated
// (as PyTorch's autograd thread does), with every invariant checked after each operation.
TEST_P(Conformance, MultiThreadMultiStreamStress) {
  constexpr int threads = 8, ops = 3000;
  std::vector<backend::stream_handle> streams;
  for (int t = 0; t < threads; ++t) streams.push_back(new_stream());
  std::mutex handoff_mutex;
  std::vector<void*> handoff;  // blocks left for another thread to free
  std::atomic<int> errors{0};
  auto work = [&](int t) {
    std::mt19937 rng(static_cast<unsigned>(t));
    std::vector<void*> mine;
    for (int i = 0; i < ops; ++i) {
      const unsigned r = rng() % 10;
      if (r < 5 || mine.empty()) {
        void* p = nullptr;
        const size_t size = rng() % 4 == 0 ? (1u << 20) + rng() % (24u << 20) : 1 + rng() % (256u << 10);
        if (alloc_->malloc(size, 0, streams[static_cast<size_t>(t)], &p) != status::ok) ++errors;
        else mine.push_back(p);
      } else if (r < 8) {
        if (alloc_->free(mine.back()) != status::ok) ++errors;
        mine.pop_back();
      } else {
        std::lock_guard<std::mutex> lock(handoff_mutex);
        handoff.push_back(mine.back());
        mine.pop_back();
        if (handoff.size() > 1 && alloc_->free(handoff.front()) != status::ok) ++errors;
        if (handoff.size() > 1) handoff.erase(handoff.begin());
      }
    }
    for (void* p : mine)
      if (alloc_->free(p) != status::ok) ++errors;
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(work, t);
  for (auto& th : pool) th.join();
  for (void* p : handoff) ASSERT_EQ(alloc_->free(p), status::ok);
  EXPECT_EQ(errors.load(), 0) << last_error();
  EXPECT_EQ(alloc_->validate(), status::ok) << last_error();
  EXPECT_EQ(current(stat_kind::allocation), 0);
  EXPECT_EQ(current(stat_kind::active_bytes), 0);
  EXPECT_EQ(alloc_->live_blocks(), 0u);
  ASSERT_EQ(alloc_->empty_cache(-1), status::ok);
  EXPECT_EQ(current(stat_kind::reserved_bytes), 0);
}

// A forked child inherits the parent's pool (Note [Fork]). On the host backend it goes on working;
// on CUDA the device state is the parent's, so every call that needs the device says so and changes
// nothing, while frees of inherited blocks and reports still work (DataLoader workers free tensors
// they inherited when they exit).
TEST_P(Conformance, AForkedChildSaysWhatItCannotUseAndFreesWhatItInherited) {
  backend::stream_handle s = new_stream();
  void *kept = nullptr, *used_elsewhere = nullptr;
  ASSERT_EQ(alloc_->malloc(3 << 20, 0, nullptr, &kept), status::ok);
  ASSERT_EQ(alloc_->malloc(4096, 0, nullptr, &used_elsewhere), status::ok);
  ASSERT_EQ(alloc_->record_stream(used_elsewhere, s), status::ok);
  const bool cuda = backend_name() == "cuda";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Exit codes name the first thing that went wrong; gtest assertions do not cross fork().
    void* p = nullptr;
    const status m = alloc_->malloc(4096, 0, nullptr, &p);
    if (cuda && (m != status::unavailable || std::string(last_error()).find("forked") == std::string::npos)) _exit(10);
    if (!cuda && (m != status::ok || alloc_->free(p) != status::ok)) _exit(11);
    if (alloc_->free(kept) != status::ok || alloc_->free(used_elsewhere) != status::ok) _exit(12);
    if (alloc_->validate() != status::ok) _exit(13);
    device_stats st;
    if (alloc_->stats(0, &st) != status::ok || st.table.at(stat_kind::allocation, all_pools).current != 0) _exit(14);
    if (alloc_->empty_cache(0) != (cuda ? status::unavailable : status::ok)) _exit(15);
    if (alloc_->validate() != status::ok) _exit(16);
    _exit(0);
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFEXITED(wstatus)) << "the child died of signal " << WTERMSIG(wstatus);
  EXPECT_EQ(WEXITSTATUS(wstatus), 0) << "see the exit codes in the child's branch";
  // The parent is untouched by what the child did.
  EXPECT_EQ(current(stat_kind::allocation), 2);
  ASSERT_EQ(alloc_->free(kept), status::ok);
  ASSERT_EQ(alloc_->free(used_elsewhere), status::ok);
  void* again = nullptr;
  ASSERT_EQ(alloc_->malloc(4096, 0, nullptr, &again), status::ok);
  ASSERT_EQ(alloc_->free(again), status::ok);
}

// The backend's virtual memory (growable segments): a reserved range backed piece by piece, each piece
// taken back whole, a full device refused cleanly.
TEST_P(Conformance, ReservedRangesAreBackedPieceByPieceAndGivenBackWhole) {
  backend::backend& be = backend();
  const size_t page = be.page_size(0);
  if (page == 0) GTEST_SKIP() << "backend " << GetParam() << ": no virtual memory management on device 0";
  EXPECT_EQ(page & (page - 1), 0u) << "a power of two";
  void* base = nullptr;
  ASSERT_EQ(be.reserve_range(0, 64 * page, &base), status::ok) << last_error();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(base) % page, 0u);
  char* p = static_cast<char*>(base);
  backend::host_ledger before{};
  const bool host = backend::read_host_ledger(be, &before);
  ASSERT_EQ(be.map(0, p, 2 * page), status::ok) << last_error();
  ASSERT_EQ(be.map(0, p + 2 * page, page), status::ok) << last_error();
  if (host) {
    backend::host_ledger after{};
    ASSERT_TRUE(backend::read_host_ledger(be, &after));
    EXPECT_EQ(after.bytes_in_use, before.bytes_in_use + 3 * page);
    p[0] = 1;
    p[3 * page - 1] = 2;  // both pieces are memory
  }
  EXPECT_EQ(be.unmap(0, p, page), status::invalid_argument) << "half a piece";
  EXPECT_EQ(be.unmap(0, p + 4 * page, page), status::invalid_argument) << "nothing mapped there";
  ASSERT_EQ(be.unmap(0, p, 3 * page), status::ok) << "two pieces at once: " << last_error();
  ASSERT_EQ(be.map(0, p, page), status::ok) << "the same address again: " << last_error();
  ASSERT_EQ(be.unmap(0, p, page), status::ok) << last_error();
  if (host) {
    backend::host_ledger after{};
    ASSERT_TRUE(backend::read_host_ledger(be, &after));
    EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  }
  EXPECT_EQ(be.free_range(0, base, 64 * page), status::ok) << last_error();
}

// The driver's own refusals (left out of the GPU check's memcheck run, which counts every failed driver
// call as an error): a piece mapped twice, and more than the device holds, after which nothing of the
// request is mapped and the range frees cleanly.
TEST_P(Conformance, ReservedRangesRefuseADoubleMapAndAFullDeviceCleanly) {
  backend::backend& be = backend();
  const size_t page = be.page_size(0);
  if (page == 0) GTEST_SKIP() << "backend " << GetParam() << ": no virtual memory management on device 0";
  void* base = nullptr;
  ASSERT_EQ(be.reserve_range(0, 4 * page, &base), status::ok) << last_error();
  char* p = static_cast<char*>(base);
  ASSERT_EQ(be.map(0, p, 2 * page), status::ok) << last_error();
  EXPECT_NE(be.map(0, p + page, page), status::ok) << "mapped already";
  EXPECT_NE(be.map(0, p, 2 * page), status::ok) << "mapped already";
  ASSERT_EQ(be.unmap(0, p, 2 * page), status::ok) << "the first mapping is whole: " << last_error();
  size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(be.memory_info(0, &free_bytes, &total_bytes), status::ok);
  const size_t beyond = (total_bytes / page + 1) * page;
  void* big = nullptr;
  ASSERT_EQ(be.reserve_range(0, beyond, &big), status::ok) << last_error();
  EXPECT_EQ(be.map(0, big, beyond), status::out_of_memory) << last_error();
  EXPECT_EQ(be.free_range(0, big, beyond), status::ok) << "nothing of it mapped: " << last_error();
  EXPECT_EQ(be.free_range(0, base, 4 * page), status::ok) << last_error();
}

// Under a limit any request up to it fits on an empty device: growable segments map a short last piece
// (whole 2 MiB pages) where whole pieces would pass the limit, classic ones a segment of the request's
// size; each is written, read back, freed and given back whole.
TEST_P(Conformance, ARequestUpToTheLimitFitsOnAnEmptyDevice) {
  constexpr size_t MiB = size_t{1} << 20;
  config cfg;
  const std::string text = "backend:" + backend_name() + ",validate:on,limit:64MiB" +
                           (growable() ? ",segments:growable" : ",segments:classic");
  ASSERT_EQ(parse_config(text.c_str(), &cfg), status::ok) << last_error();
  std::unique_ptr<allocator> limited;
  ASSERT_EQ(allocator::create(cfg, &limited), status::ok) << last_error();
  for (const size_t request : {61 * MiB, 64 * MiB, 5 * MiB}) {
    void* p = nullptr;
    ASSERT_EQ(limited->malloc(request, 0, nullptr, &p), status::ok) << request << ": " << last_error();
    device_stats st;
    ASSERT_EQ(limited->stats(0, &st), status::ok);
    EXPECT_LE(st.table.at(stat_kind::reserved_bytes, all_pools).current, int64_t{64 << 20});
    if (backend_name() == "host") std::memset(p, 0x5a, request);  // on CUDA the stress suite's kernels write
    ASSERT_EQ(limited->free(p), status::ok);
    ASSERT_EQ(limited->empty_cache(0), status::ok) << last_error();
    ASSERT_EQ(limited->stats(0, &st), status::ok);
    EXPECT_EQ(st.table.at(stat_kind::reserved_bytes, all_pools).current, 0) << request;
  }
  EXPECT_EQ(limited->validate(), status::ok) << last_error();
}

// Note [No context as a side effect] (core/backend/backend.h): a device is asked about (its memory, its
// processes, its pages, a report of it all) without a context being made there; only using it makes one.
// Each ctest case is a process of its own, so on CUDA no device has a context when it starts.
TEST_P(Conformance, QuestionsAboutADeviceMakeNoContext) {
  const int count = backend().device_count();
  std::vector<bool> had(static_cast<size_t>(count));
  for (int d = 0; d < count; ++d) had[static_cast<size_t>(d)] = backend().has_context(d);
  for (int d = 0; d < count; ++d) {
    size_t free_bytes = 0, total = 0;
    const status s = alloc_->memory_info(d, &free_bytes, &total);
    if (s == status::ok) EXPECT_LE(free_bytes, total);
    std::vector<backend::process_usage> listed;
    std::string why;
    (void)alloc_->processes(d, &listed, &why);
    (void)backend().page_size(d);
  }
  ASSERT_EQ(alloc_->empty_cache(-1), status::ok) << last_error();
  report r;
  ASSERT_EQ(build_report(*alloc_, "now", &r), status::ok) << last_error();
  for (int d = 0; d < count; ++d) {
    EXPECT_EQ(backend().has_context(d), had[static_cast<size_t>(d)]) << "device " << d;
    if (had[static_cast<size_t>(d)]) continue;
    EXPECT_GT(r.devices[static_cast<size_t>(d)].total_bytes, 0) << "device " << d;
    std::printf("device %d: asked about and reported without a context\n", d);  // the GPU check counts these
  }
  void* p = nullptr;  // using a device is what makes its context
  ASSERT_EQ(alloc_->malloc(4096, 0, nullptr, &p), status::ok) << last_error();
  EXPECT_TRUE(backend().has_context(0));
  ASSERT_EQ(alloc_->free(p), status::ok);
}

INSTANTIATE_TEST_SUITE_P(Backends, Conformance, ::testing::Values("host", "cuda", "host_growable", "cuda_growable"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace tracepool::core
