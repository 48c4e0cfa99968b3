// trace_bench.cpp: what call-site capture costs, through the C API of libtracepool.so on the host
// backend, in one run: (a) a cached alloc+free pair, untagged (capture:off) and traced with each
// unwinder at depths 16, 32 and 64, called from 80 frames deep, and with the allocation history on
// top (history:100000, the fastest unwinder at depth 32); (b) byte sampling at R = 1 MiB on a
// mix of sizes, taking turns with an untagged instance; (c) writing the report of 100,000 live blocks
// over 5,000 call sites; (d) the cheapest call that takes a handle (what the handle check costs).
// Prints the added cost against the targets; asserts nothing.
//
//   tracepool_trace_bench [--benchmark_filter=...] [--benchmark_repetitions=N] [--benchmark_out=FILE]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "tracepool/tracepool.h"

namespace {

// Every pool lives on the host backend with validation off: what is left is the allocator's own
// fast path plus what capture adds to it.
tracepool_t* open_pool(const std::string& conf, std::string* why) {
  tracepool_t* tp = nullptr;
  if (tracepool_create(("backend:host,validate:off," + conf).c_str(), &tp) == TRACEPOOL_OK) return tp;
  *why = conf + ": " + tracepool_last_error();
  return nullptr;
}

// Probed once: an instance asked for libunwind fails to open where libunwind.so.8 is missing.
bool libunwind_available() {
  static const bool available = [] {
    std::string why;
    tracepool_t* tp = open_pool("capture:native,unwinder:libunwind", &why);
    tracepool_destroy(tp);
    return tp != nullptr;
  }();
  return available;
}

// What unwinder:auto picks: libunwind where it loads (about 8 ns a frame), tracepool's cfi otherwise.
const char* fastest_unwinder() { return libunwind_available() ? "libunwind" : "cfi"; }

// ---- Deep stacks -------------------------------------------------------------------------------
// Real callers sit far deeper than the capture depth, so the unwinder always walks `depth` frames.
constexpr int caller_depth = 80;
using body_fn = void (*)(void* context);

// The empty asm after the call keeps each level's frame: no tail call, no loop.
__attribute__((noinline)) void call_at_depth(int levels, body_fn body, void* context) {
  levels > 0 ? call_at_depth(levels - 1, body, context) : body(context);
  asm volatile("" ::: "memory");
}

// ---- (a), (b): alloc+free pairs ----------------------------------------------------------------
constexpr size_t pair_size = 4096;
constexpr size_t mix_count = 4096;

// Sizes uniform in 512 B .. 64 KiB, the same in every run; all come from the small pool.
const std::vector<size_t>& size_mix() {
  static const std::vector<size_t> sizes = [] {
    std::mt19937_64 rng(42);
    std::uniform_int_distribution<size_t> pick(512, 64 << 10);
    std::vector<size_t> s(mix_count);
    for (size_t& v : s) v = pick(rng);
    return s;
  }();
  return sizes;
}

// One alloc+free from a cached segment: no device call, only the allocator and the capture.
inline int alloc_free(tracepool_t* tp, size_t size) {
  void* p = nullptr;
  const int rc = tracepool_malloc(tp, size, 0, nullptr, &p);
  benchmark::DoNotOptimize(p);
  tracepool_free(tp, p, nullptr);
  return rc;
}

struct pair_loop {
  benchmark::State* state;
  tracepool_t* tp[2];  // (a): tp[0] only; (b): tp[0] sampled, tp[1] untagged
  int failed;
};

// (a): one size, one instance per configuration; warm-up interns the site and libunwind's cache.
void run_pairs(void* context) {
  pair_loop& run = *static_cast<pair_loop*>(context);
  for (int warm = 0; warm < 2000; ++warm) run.failed |= alloc_free(run.tp[0], pair_size);
  for (auto _ : *run.state) run.failed |= alloc_free(run.tp[0], pair_size);
}

// (b): sampling adds tens of ns, less than this machine drifts between runs, so the sampled and the
// untagged instance take turns on the same sizes, 4,096 pairs each per iteration, timed apart.
double mix_turn_ns(pair_loop& run, int k) {
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t size : size_mix()) run.failed |= alloc_free(run.tp[k], size);
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
}

void run_turns(void* context) {
  pair_loop& run = *static_cast<pair_loop*>(context);
  double ns[2] = {0, 0};
  mix_turn_ns(run, 0), mix_turn_ns(run, 1);  // warm-up
  for (auto _ : *run.state)
    for (int k : {0, 1}) ns[k] += mix_turn_ns(run, k);
  const double count = static_cast<double>(run.state->iterations()) * mix_count;
  run.state->counters["sampled_ns"] = ns[0] / count;
  run.state->counters["untagged_ns"] = ns[1] / count;
  run.state->counters["added_ns"] = (ns[0] - ns[1]) / count;
}

void pairs(benchmark::State& state, const std::string& conf, body_fn body) {
  std::string why;
  pair_loop run{&state, {open_pool(conf, &why), body == run_turns ? open_pool("capture:off", &why) : nullptr}, 0};
  void* warm[2] = {nullptr, nullptr};  // keep each segment alive between pairs, as a busy program would
  for (int k : {0, 1})
    if (run.tp[k] != nullptr) tracepool_malloc(run.tp[k], pair_size, 0, nullptr, &warm[k]);
  if (why.empty()) call_at_depth(caller_depth, body, &run);
  if (!why.empty() || run.failed != 0) state.SkipWithError(why.empty() ? tracepool_last_error() : why.c_str());
  for (int k : {0, 1})
    if (run.tp[k] != nullptr) tracepool_free(run.tp[k], warm[k], nullptr), tracepool_destroy(run.tp[k]);
}

// ---- (c): the report of 100,000 blocks over 5,000 call sites -----------------------------------
// A site number's 13 bits choose go_left or go_right at each level: 8,192 distinct paths, so
// 8,192 distinct stacks (about 28 frames, inside the depth of 32).
constexpr unsigned report_sites = 5000, blocks_per_site = 20, site_levels = 13;

struct site_walk {
  tracepool_t* tp;
  unsigned site;
  unsigned level;
  unsigned path;  // what go_left/go_right add; their bodies differ so the linker cannot fold them
  std::vector<void*>* blocks;
  int failed;
};

void descend(site_walk* w);

__attribute__((noinline)) void go_left(site_walk* w) {
  w->path = w->path * 2;
  descend(w);
  asm volatile("" ::: "memory");
}
__attribute__((noinline)) void go_right(site_walk* w) {
  w->path = w->path * 2 + 1;
  descend(w);
  asm volatile("" ::: "memory");
}

__attribute__((noinline)) void descend(site_walk* w) {
  if (w->level == site_levels) {
    for (unsigned b = 0; b < blocks_per_site; ++b) {  // 512 B .. 2 KiB: small blocks, one site
      void* p = nullptr;
      w->failed |= tracepool_malloc(w->tp, 512u << (b % 3), 0, nullptr, &p);
      w->blocks->push_back(p);
    }
  } else if ((w->site >> w->level++) & 1u) {
    go_right(w);
  } else {
    go_left(w);
  }
  asm volatile("" ::: "memory");
}

// Built on first use and shared by both report formats; closed at the end of main.
struct report_fixture {
  tracepool_t* tp = nullptr;
  std::string dir, why;  // why: set if the fixture could not be built
  std::vector<void*> blocks;
} the_fixture;

report_fixture& fixture() {
  report_fixture& f = the_fixture;
  if (f.tp != nullptr || !f.why.empty()) return f;
  char dir[] = "/tmp/tracepool_trace_bench.XXXXXX";  // a report replaces its path by rename: a real file
  if (mkdtemp(dir) == nullptr) return f.why = "mkdtemp failed", f;
  f.dir = dir;
  f.tp = open_pool(std::string("capture:native,capture_depth:32,unwinder:") + fastest_unwinder(), &f.why);
  for (unsigned site = 0; site < report_sites && f.tp != nullptr && f.why.empty(); ++site) {
    site_walk w{f.tp, site, 0, 0, &f.blocks, 0};
    descend(&w);
    if (w.failed != 0) f.why = tracepool_last_error();
  }
  return f;
}

void close_fixture() {
  for (void* p : the_fixture.blocks) tracepool_free(the_fixture.tp, p, nullptr);
  tracepool_destroy(the_fixture.tp);
  for (const char* name : {"/report.json", "/report.txt", ""})
    if (!the_fixture.dir.empty()) std::remove((the_fixture.dir + name).c_str());  // "" last: the directory
}

void write_report(benchmark::State& state, const std::string& format) {
  report_fixture& f = fixture();
  if (!f.why.empty()) return state.SkipWithError(f.why.c_str());
  const std::string path = f.dir + (format == "json" ? "/report.json" : "/report.txt");
  const auto t0 = std::chrono::steady_clock::now();  // the first report also loads the symbol tables
  if (tracepool_write_report(f.tp, path.c_str(), format.c_str()) != TRACEPOOL_OK)
    return state.SkipWithError(tracepool_last_error());
  state.counters["first_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto _ : state) tracepool_write_report(f.tp, path.c_str(), format.c_str());
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  state.counters["bytes"] = static_cast<double>(text.size());
  state.counters["blocks"] = static_cast<double>(f.blocks.size());
  const size_t sites = text.find("\"sites\":");  // sites interned: shows the 5,000 stacks were distinct
  if (format == "json" && sites != std::string::npos) state.counters["sites"] = std::strtod(&text[sites + 8], nullptr);
}

// ---- (d): the cheapest call that takes a handle ------------------------------------------------
// tracepool_device_count does nothing but check its handle and read a count: what every call pays
// for the handle check shows here, apart from the allocator's work.
void handle_call(benchmark::State& state) {
  std::string why;
  tracepool_t* tp = open_pool("capture:off", &why);
  if (tp == nullptr) return state.SkipWithError(why.c_str());
  int devices = 0, failed = 0;
  for (auto _ : state) {
    failed |= tracepool_device_count(tp, &devices);
    benchmark::DoNotOptimize(devices);
  }
  if (failed != 0) state.SkipWithError(tracepool_last_error());
  tracepool_destroy(tp);
}

// ---- Registration and summary ------------------------------------------------------------------
std::vector<std::string> unwinders() {
  if (libunwind_available()) return {"libunwind", "cfi", "boost"};
  return {"cfi", "boost"};
}

std::string pair_name(const std::string& unwinder, int depth) {
  return "BM_Pair/" + unwinder + "/depth:" + std::to_string(depth);
}

void register_all() {
  benchmark::RegisterBenchmark("BM_Pair/untagged", pairs, std::string("capture:off"), run_pairs);
  benchmark::RegisterBenchmark("BM_Call/device_count", handle_call);
  for (const std::string& u : unwinders())
    for (int depth : {16, 32, 64})
      benchmark::RegisterBenchmark(pair_name(u, depth).c_str(), pairs,
                                   "capture:native,unwinder:" + u + ",capture_depth:" + std::to_string(depth),
                                   run_pairs);
  // The allocation history on top of call sites (its cost is this minus depth:32 of the same unwinder).
  benchmark::RegisterBenchmark("BM_Pair/history", pairs,
                               std::string("capture:native,capture_depth:32,history:100000,unwinder:") +
                                   fastest_unwinder(),
                               run_pairs);
  const std::string sampled =
      std::string("capture:native,capture_depth:32,sample_bytes:1MiB,unwinder:") + fastest_unwinder();
  benchmark::RegisterBenchmark("BM_SampledMix/1MiB", pairs, sampled, run_turns);
  for (const char* format : {"json", "text"})
    benchmark::RegisterBenchmark((std::string("BM_Report/") + format).c_str(), write_report, std::string(format))
        ->Iterations(3)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
}

// Google Benchmark 1.7 says error_occurred, 1.8 says skipped.
template <typename Run>
auto run_failed(const Run& r, int) -> decltype(r.error_occurred, bool()) {
  return r.error_occurred;
}
template <typename Run>
auto run_failed(const Run& r, long) -> decltype(r.skipped, bool()) {
  return static_cast<bool>(r.skipped);
}

// Keeps every repetition's real time and counters, for medians after the run.
class summary_reporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs)
      if (!run_failed(r, 0) && r.run_type == Run::RT_Iteration) {
        const std::string& name = r.run_name.function_name;
        values[name].push_back(r.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(r.time_unit));
        for (const auto& [counter, value] : r.counters) values[name + ":" + counter].push_back(value);
      }
    ConsoleReporter::ReportRuns(runs);
  }
  // Median over repetitions of "name" (seconds per iteration) or "name:counter"; -1 if it did not run.
  double median(const std::string& key) const {
    auto it = values.find(key);
    if (it == values.end()) return -1;
    std::vector<double> v = it->second;
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  }
  std::map<std::string, std::vector<double>> values;
};

// One line of the targets list: "meets " or "misses", the target, the figure measured.
std::string target_line(bool meets, const char* target, const char* figure_format, double figure) {
  char figure_text[64];
  std::snprintf(figure_text, sizeof figure_text, figure_format, figure);
  return std::string(meets ? "meets " : "misses") + "  " + target + " (" + figure_text + ")";
}

void print_summary(const summary_reporter& r) {
  const double base = r.median("BM_Pair/untagged") * 1e9;
  std::vector<std::string> targets;
  std::printf("\nsummary (same run, medians; added = traced - untagged, per %zu B alloc+free, %d frames deep):\n",
              pair_size, caller_depth);
  if (base > 0) std::printf("  untagged            %9.1f ns\n", base);
  if (const double call = r.median("BM_Call/device_count") * 1e9; call > 0)
    std::printf("  device_count call   %9.1f ns (a handle check and a read)\n", call);
  for (const std::string& u : unwinders())
    for (int depth : {16, 32, 64}) {
      const double ns = r.median(pair_name(u, depth)) * 1e9;
      if (ns < 0 || base < 0) continue;  // filtered out, or skipped with its reason printed above
      std::printf("  %-9s depth %-3d %9.1f ns, added %+8.1f ns, %5.1fx untagged\n", u.c_str(), depth, ns, ns - base,
                  ns / base);
      if (depth == 32)
        targets.push_back(target_line(ns - base <= 1000,
                                      "full native capture at depth 32 adds at most 1 us per allocation",
                                      (u + ": %+.0f ns").c_str(), ns - base));
    }
  const double sampled = r.median("BM_SampledMix/1MiB:sampled_ns"), mix = r.median("BM_SampledMix/1MiB:untagged_ns");
  const double added = r.median("BM_SampledMix/1MiB:added_ns");
  if (mix > 0 && sampled > 0) {
    std::printf(
        "  sampled R = 1 MiB (%s, depth 32), sizes 512 B..64 KiB, taking turns with untagged: %.1f ns vs %.1f ns,"
        " added %+.1f ns per allocation on average\n",
        fastest_unwinder(), sampled, mix, added);
    targets.push_back(
        target_line(added <= 50, "sampled mode at R = 1 MiB adds at most 50 ns on average", "%+.1f ns", added));
  }
  const double json = r.median("BM_Report/json"), text = r.median("BM_Report/text");
  if (json > 0 && text > 0) {
    std::printf(
        "  report of %.0f live blocks over %.0f sites (%s, depth 32): json %.3f s (%.1f MiB; the process's first"
        " %.3f s), text %.3f s\n",
        r.median("BM_Report/json:blocks"), r.median("BM_Report/json:sites"), fastest_unwinder(), json,
        r.median("BM_Report/json:bytes") / (1 << 20), r.median("BM_Report/json:first_s"), text);
    targets.push_back(
        target_line(std::max(json, text) < 1, "a 100k-block report in under 1 s", "%.3f s", std::max(json, text)));
  }
  std::printf("targets:\n");
  for (const std::string& line : targets) std::printf("  %s\n", line.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  register_all();
  summary_reporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  print_summary(reporter);
  close_fixture();
  benchmark::Shutdown();
  return 0;
}
