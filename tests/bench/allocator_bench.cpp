// allocator_bench.cpp: the cost of a cached alloc+free pair, on one thread and on 8 threads with a
// stream each, against the device's own allocate+release measured in the same run. Prints ratios;
// asserts nothing (a benchmark measures, tests decide).
//
//   tracepool_bench [--benchmark_filter=...] [--benchmark_format=json --benchmark_out=FILE]
#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "allocator.h"
#include "base/config.h"

namespace tracepool::core {
namespace {

// One allocator per backend for the whole run, shared by the benchmark threads. nullptr where the
// backend cannot run here, with the reason in *why (kept here: last_error() is per thread).
allocator* shared_allocator(const std::string& backend_name, std::string* why) {
  static std::mutex mutex;
  static std::map<std::string, std::pair<std::unique_ptr<allocator>, std::string>> made;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = made.find(backend_name);
  if (it == made.end()) {
    config cfg;
    // The allocator alone: call-site capture is measured by trace_bench.
    const std::string text = "backend:" + backend_name + ",validate:off,capture:off";
    std::unique_ptr<allocator> a;
    if (parse_config(text.c_str(), &cfg) != status::ok || allocator::create(cfg, &a) != status::ok) a.reset();
    it = made.emplace(backend_name, std::make_pair(std::move(a), std::string(last_error()))).first;
  }
  *why = "backend unavailable: " + it->second.second;
  return it->second.first.get();
}

// Google Benchmark 1.7 says error_occurred, 1.8 says skipped.
template <typename Run>
auto run_failed(const Run& r, int) -> decltype(r.error_occurred, bool()) { return r.error_occurred; }
template <typename Run>
auto run_failed(const Run& r, long) -> decltype(r.skipped, bool()) { return static_cast<bool>(r.skipped); }

constexpr size_t pair_size = 64 << 10;  // a typical small activation; the small pool's fast path

void cached_pair(benchmark::State& state, const std::string& backend_name) {
  std::string why;
  allocator* a = shared_allocator(backend_name, &why);
  if (a == nullptr) return state.SkipWithError(why.c_str());
  backend::stream_handle stream = nullptr;
  if (a->device_backend().create_stream(0, &stream) != status::ok) return state.SkipWithError(last_error());
  void* warm = nullptr;  // keeps the stream's segment alive between pairs, as a busy program would
  a->malloc(pair_size, 0, stream, &warm);
  for (auto _ : state) {
    void* p = nullptr;
    a->malloc(pair_size, 0, stream, &p);
    benchmark::DoNotOptimize(p);
    a->free(p);
  }
  a->free(warm);
  state.SetItemsProcessed(state.iterations());
  a->device_backend().destroy_stream(0, stream);
}

// The baseline: what every pair costs without a cache (cuMemAlloc + cuMemFree, or mmap + munmap).
void device_pair(benchmark::State& state, const std::string& backend_name) {
  std::string why;
  allocator* a = shared_allocator(backend_name, &why);
  if (a == nullptr) return state.SkipWithError(why.c_str());
  for (auto _ : state) {
    void* p = nullptr;
    a->device_backend().allocate(0, 2 << 20, &p);
    benchmark::DoNotOptimize(p);
    a->device_backend().release(0, p, 2 << 20);
  }
  state.SetItemsProcessed(state.iterations());
}

void register_all() {
  for (const char* name : {"host", "cuda"}) {
    const std::string b = name;
    benchmark::RegisterBenchmark(("BM_CachedPair/" + b).c_str(), cached_pair, b);
    benchmark::RegisterBenchmark(("BM_CachedPairThreads/" + b).c_str(), cached_pair, b)
        ->Threads(1)
        ->Threads(8)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("BM_DevicePair/" + b).c_str(), device_pair, b);
  }
}

// Collects results so that ratios can be printed after the run.
class ratio_reporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs)
      if (!run_failed(r, 0) && r.run_type == Run::RT_Iteration) {
        ns_per_item[r.benchmark_name()] = r.GetAdjustedRealTime();
        auto it = r.counters.find("items_per_second");
        if (it != r.counters.end()) items_per_second[r.benchmark_name()] = it->second;
      }
    ConsoleReporter::ReportRuns(runs);
  }
  std::map<std::string, double> ns_per_item, items_per_second;
};

void print_ratios(const ratio_reporter& r) {
  std::printf("\nratios (same run):\n");
  for (const char* b : {"host", "cuda"}) {
    const std::string single = std::string("BM_CachedPair/") + b;
    const std::string device = std::string("BM_DevicePair/") + b;
    const std::string t1 = std::string("BM_CachedPairThreads/") + b + "/real_time/threads:1";
    const std::string t8 = std::string("BM_CachedPairThreads/") + b + "/real_time/threads:8";
    if (r.ns_per_item.count(single))
      std::printf("  %-5s cached pair: %.1f ns (target < 100 ns)\n", b, r.ns_per_item.at(single));
    if (r.ns_per_item.count(single) && r.ns_per_item.count(device))
      std::printf("  %-5s cached pair is %.1fx faster than a device allocate+release pair\n", b,
                  r.ns_per_item.at(device) / r.ns_per_item.at(single));
    if (r.items_per_second.count(t1) && r.items_per_second.count(t8))
      std::printf("  %-5s 8 threads / 1 thread throughput: %.2fx (target >= 4x)\n", b,
                  r.items_per_second.at(t8) / r.items_per_second.at(t1));
  }
}

}  // namespace
}  // namespace tracepool::core

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  tracepool::core::register_all();
  tracepool::core::ratio_reporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  tracepool::core::print_ratios(reporter);
  benchmark::Shutdown();
  return 0;
}
