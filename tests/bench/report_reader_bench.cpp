// report_reader_bench.cpp: how reading a saved report back (read_report_json, what `python -m
// tracepool report`, `merge` and `diff` do first) grows with its size: 10,000, 40,000 and 100,000
// leaks, as many retained entries and as many marks (tests/support/big_report.h). Prints the read time
// of each and the ratio of 100,000 to 10,000: about 10 for a reader linear in the entries, about 100
// for one that scans a list per entry. Asserts nothing.
//
//   tracepool_report_reader_bench [--benchmark_filter=...] [--benchmark_repetitions=N]
#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "big_report.h"
#include "report/report.h"

namespace {

namespace core = tracepool::core;

constexpr size_t sizes[] = {10000, 40000, 100000};

// Made once per size, outside the timing.
const std::string& saved_report(size_t entries) {
  static std::map<size_t, std::string> made;
  auto it = made.find(entries);
  if (it == made.end()) it = made.emplace(entries, tracepool::testing::big_report_json(entries, entries)).first;
  return it->second;
}

void read_report(benchmark::State& state) {
  const auto entries = static_cast<size_t>(state.range(0));
  const std::string& text = saved_report(entries);
  for (auto _ : state) {
    core::report r;
    if (core::read_report_json(text, &r) != tracepool::status::ok) return state.SkipWithError(tracepool::last_error());
    benchmark::DoNotOptimize(r.retained.data());
  }
  state.counters["MiB"] = static_cast<double>(text.size()) / (1 << 20);
  state.counters["entries"] = static_cast<double>(entries);
}

// Keeps each size's seconds per read, wall-clock and CPU (the last repetition's), for the summary. A
// size that failed set no counters.
class summary_reporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs)
      if (r.run_type == Run::RT_Iteration && r.counters.count("entries")) {
        const double unit = benchmark::GetTimeUnitMultiplier(r.time_unit);
        seconds[static_cast<size_t>(r.counters.at("entries").value)] = {r.GetAdjustedRealTime() / unit,
                                                                        r.GetAdjustedCPUTime() / unit};
      }
    ConsoleReporter::ReportRuns(runs);
  }
  std::map<size_t, std::pair<double, double>> seconds;  // entries -> (wall, cpu)
};

void print_summary(const summary_reporter& r) {
  std::printf("\nsummary (leaks = retained entries = marks):\n");
  for (const auto& [entries, s] : r.seconds)
    std::printf("  %7zu entries: %8.3f s (cpu %.3f s)\n", entries, s.first, s.second);
  const auto small = r.seconds.find(sizes[0]), large = r.seconds.find(sizes[2]);
  if (small != r.seconds.end() && large != r.seconds.end() && small->second.first > 0 && small->second.second > 0)
    std::printf("  ratio %zu / %zu entries: %.1fx (cpu %.1fx; linear: about %.0fx)\n", sizes[2], sizes[0],
                large->second.first / small->second.first, large->second.second / small->second.second,
                static_cast<double>(sizes[2]) / static_cast<double>(sizes[0]));
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  auto* bench = benchmark::RegisterBenchmark("BM_ReadReport", read_report);
  for (size_t n : sizes) bench->Arg(static_cast<int64_t>(n));
  bench->ArgName("entries")->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
  summary_reporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  print_summary(reporter);
  benchmark::Shutdown();
  return 0;
}
