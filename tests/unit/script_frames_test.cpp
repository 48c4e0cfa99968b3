// Interpreter frames in call sites, through the C API (libtracepool.so, host backend), with a toy
// interpreter standing in for CPython: its frames live on a thread-local shadow stack and its
// "eval loop" is a native function in a section of its own, so the test knows that loop's range
// exactly. Covers capture modes, hybrid merging, describe-once, a failing provider, and the
// string and snapshot outputs the Python package reads.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "report_support.h"
#include "tracepool/tracepool.h"

namespace {

using tracepool::testing::json;

// ---- The toy interpreter -------------------------------------------------------------------------

struct toy_frame {
  const char* file;
  const char* function;
  int line;
};

struct toy_call {
  const toy_frame* frame;
  bool entry;
};

thread_local std::vector<toy_call> toy_stack;  // outermost first
std::atomic<int> describe_calls{0};
std::atomic<bool> describe_fails{false};
std::atomic<bool> capture_finds_none{false};  // as CPython's provider at exit, or switched off

size_t toy_capture(uintptr_t* words, size_t max_frames) {
  if (capture_finds_none.load()) return 0;
  size_t n = 0;
  for (auto it = toy_stack.rbegin(); it != toy_stack.rend() && n < max_frames; ++it, ++n) {
    words[2 * n] = reinterpret_cast<uintptr_t>(it->frame);
    words[2 * n + 1] = it->entry ? TRACEPOOL_FRAME_ENTRY : 0;
  }
  return n;
}

int toy_describe(const uintptr_t* words, size_t frames, tracepool_script_frame_t* out) {
  describe_calls.fetch_add(1);
  if (describe_fails.load()) return TRACEPOOL_ERR_INTERNAL;
  for (size_t i = 0; i < frames; ++i) {
    const auto* f = reinterpret_cast<const toy_frame*>(words[2 * i]);
    out[i] = tracepool_script_frame_t{f->file, std::strlen(f->file), f->function, std::strlen(f->function), f->line,
                                      static_cast<unsigned>(words[2 * i + 1])};
  }
  return 0;
}

// The toy's eval loop: runs `frames` (the first is the entry frame), then calls `next`. It lives in
// its own section, whose bounds the linker provides.
extern "C" const char __start_toy_eval_text[], __stop_toy_eval_text[];
using native_fn = void (*)(tracepool_t*);

__attribute__((noinline, section("toy_eval_text"))) void toy_eval(tracepool_t* tp, std::vector<const toy_frame*> frames,
                                                                  native_fn next) {
  for (size_t i = 0; i < frames.size(); ++i) toy_stack.push_back(toy_call{frames[i], i == 0});
  next(tp);
  KEEP_FRAME();
  toy_stack.resize(toy_stack.size() - frames.size());
}

const tracepool_frame_provider_t toy_provider = {
    sizeof(tracepool_frame_provider_t), "toy", toy_capture, toy_describe,
    reinterpret_cast<uintptr_t>(__start_toy_eval_text), reinterpret_cast<uintptr_t>(__stop_toy_eval_text)};

const toy_frame main_script{"outer.py", "<module>", 10}, run_fn{"outer.py", "run", 20};
const toy_frame step_fn{"inner.py", "step", 5}, alloc_fn{"inner.py", "alloc_tensor", 7};

std::vector<void*> held;

__attribute__((noinline)) void leaf_alloc(tracepool_t* tp) {
  void* p = nullptr;
  ASSERT_EQ(tracepool_malloc(tp, 4096, 0, nullptr, &p), TRACEPOOL_OK) << tracepool_last_error();
  held.push_back(p);
  KEEP_FRAME();
}

__attribute__((noinline)) void native_callback(tracepool_t* tp) {
  toy_eval(tp, {&step_fn, &alloc_fn}, leaf_alloc);
  KEEP_FRAME();
}

// outer.py <module> -> run -> (native) native_callback -> inner.py step -> alloc_tensor -> leaf_alloc
__attribute__((noinline)) void run_program(tracepool_t* tp) {
  toy_eval(tp, {&main_script, &run_fn}, native_callback);
  KEEP_FRAME();
}

// The same Python lines reached through another native path inside the interpreter's module (as
// CPython's call specialisation changes the C frames between two Python frames).
__attribute__((noinline)) void native_callback_specialised(tracepool_t* tp) {
  toy_eval(tp, {&step_fn, &alloc_fn}, leaf_alloc);
  KEEP_FRAME();
}

__attribute__((noinline)) void run_program_specialised(tracepool_t* tp) {
  toy_eval(tp, {&main_script, &run_fn}, native_callback_specialised);
  KEEP_FRAME();
}

class ScriptFrames : public ::testing::Test {
 protected:
  void SetUp() override {
    describe_calls = 0;
    describe_fails = false;
    capture_finds_none = false;
    ASSERT_EQ(tracepool_set_frame_provider(&toy_provider), TRACEPOOL_OK) << tracepool_last_error();
  }
  void TearDown() override {
    for (void* p : held) tracepool_free(tp_, p, nullptr);
    held.clear();
    tracepool_destroy(tp_);
    tracepool_set_frame_provider(nullptr);
  }
  tracepool_t* open(const std::string& extra) {
    const std::string conf = "backend:host,validate:on" + (extra.empty() ? "" : "," + extra);
    EXPECT_EQ(tracepool_create(conf.c_str(), &tp_), TRACEPOOL_OK) << tracepool_last_error();
    return tp_;
  }
  json leak_frames(tracepool_t* tp) {
    const json r = tracepool::testing::report_of(tp);
    EXPECT_EQ(r["leaks"].size(), 1u) << r.dump(1);
    return r["leaks"].empty() ? json::array() : r["leaks"][0]["frames"];
  }
  tracepool_t* tp_ = nullptr;
};

std::vector<std::string> names(const json& frames, size_t n) {
  std::vector<std::string> out;
  for (size_t i = 0; i < n && i < frames.size(); ++i) {
    std::string f = frames[i]["function"];
    if (frames[i]["kind"] == "python") {
      out.push_back("py:" + f);
      continue;
    }
    const std::string anonymous = "(anonymous namespace)::";  // demangled names carry their namespace
    if (f.rfind(anonymous, 0) == 0) f = f.substr(anonymous.size());
    out.push_back(f.substr(0, f.find('(')));
  }
  return out;
}

TEST_F(ScriptFrames, InterpreterFramesAreSplicedWhereTheLoopRanThem) {
  tracepool_t* tp = open("capture:hybrid");
  run_program(tp);
  const json frames = leak_frames(tp);
  // Each eval-loop frame is replaced by the interpreter frames it ran, innermost first.
  const std::vector<std::string> expected = {"leaf_alloc",       "py:alloc_tensor", "py:step",
                                             "native_callback",  "py:run",          "py:<module>",
                                             "run_program"};
  EXPECT_EQ(names(frames, expected.size()), expected) << frames.dump(1);
  ASSERT_GE(frames.size(), 3u);
  EXPECT_EQ(frames[1]["file"], "inner.py");
  EXPECT_EQ(frames[1]["line"], 7);
  EXPECT_EQ(frames[1]["borrowed"], false);
  EXPECT_FALSE(frames[1].contains("address")) << "interpreter frames have no native address";
  EXPECT_EQ(frames[2]["line"], 5);
}

TEST_F(ScriptFrames, InterpreterCFramesDoNotSplitAPythonSite) {
  tracepool_t* tp = open("capture:hybrid");
  run_program(tp);
  run_program_specialised(tp);
  const json r = tracepool::testing::report_of(tp);
  ASSERT_EQ(r["leaks"].size(), 1u) << "the interpreter module's own frames are not part of the site: " << r.dump(1);
  EXPECT_EQ(r["leaks"][0]["blocks"], 2);
  EXPECT_EQ(r["capture"]["sites"], 2) << "two raw stacks were interned";
}

// capture:all (the default): the native walk ends at the innermost interpreter-loop frame, so the native
// frames outside it (native_callback, run_program) are neither walked nor part of the site, and the
// two programs, which differ only there, make one raw stack.
void expect_walk_stopped_at_the_loop(tracepool_t* tp) {
  run_program(tp);
  run_program_specialised(tp);
  const json r = tracepool::testing::report_of(tp);
  ASSERT_EQ(r["leaks"].size(), 1u) << r.dump(1);
  EXPECT_EQ(r["capture"]["sites"], 1) << "the frames that tell the two programs apart lie beyond the loop";
  const json& frames = r["leaks"][0]["frames"];
  const std::vector<std::string> expected = {"leaf_alloc", "py:alloc_tensor", "py:step", "py:run", "py:<module>"};
  EXPECT_EQ(names(frames, 16), expected) << frames.dump(1);
}

TEST_F(ScriptFrames, AllStopsTheNativeWalkAtTheInterpreterLoop) { expect_walk_stopped_at_the_loop(open("capture:all")); }

TEST_F(ScriptFrames, AllStopsTheNativeWalkAtTheInterpreterLoopWithBoostToo) {  // cut after the walk
  expect_walk_stopped_at_the_loop(open("capture:all,unwinder:boost"));
}

// When the provider gives no frames (CPython's at exit, or switched off), nothing stands for the
// native frames beyond the loop: capture:all keeps the whole native stack.
TEST_F(ScriptFrames, AllKeepsTheWholeNativeStackWhenTheProviderGivesNoFrames) {
  capture_finds_none = true;
  tracepool_t* tp = open("capture:all");
  run_program(tp);
  const std::vector<std::string> got = names(leak_frames(tp), 16);
  EXPECT_NE(std::find(got.begin(), got.end(), "run_program"), got.end()) << ::testing::PrintToString(got);
  EXPECT_NE(std::find(got.begin(), got.end(), "native_callback"), got.end()) << ::testing::PrintToString(got);
}

TEST_F(ScriptFrames, WithoutPythonFramesNativeFramesStillSplitSites) {
  tracepool_t* tp = open("capture:native");
  run_program(tp);
  run_program_specialised(tp);
  EXPECT_EQ(tracepool::testing::report_of(tp)["leaks"].size(), 2u);
}

TEST_F(ScriptFrames, PythonModeKeepsOnlyInterpreterFrames) {
  tracepool_t* tp = open("capture:python");
  run_program(tp);
  const json frames = leak_frames(tp);
  EXPECT_EQ(names(frames, 8), (std::vector<std::string>{"py:alloc_tensor", "py:step", "py:run", "py:<module>"}));
  const json r = tracepool::testing::report_of(tp);
  EXPECT_EQ(r["capture"]["mode"], "python");
  EXPECT_EQ(r["capture"]["unwinder"], "");
}

TEST_F(ScriptFrames, NativeModeAsksTheProviderNothing) {
  tracepool_t* tp = open("capture:native");
  run_program(tp);
  for (const json& f : leak_frames(tp)) EXPECT_EQ(f["kind"], "native");
  EXPECT_EQ(describe_calls.load(), 0);
}

TEST_F(ScriptFrames, PythonDepthKeepsTheInnermostFrames) {
  tracepool_t* tp = open("capture:python,python_depth:2");
  run_program(tp);
  EXPECT_EQ(names(leak_frames(tp), 8), (std::vector<std::string>{"py:alloc_tensor", "py:step"}));
}

TEST_F(ScriptFrames, EachNewSiteIsDescribedOnce) {
  tracepool_t* tp = open("capture:python");
  for (int i = 0; i < 5; ++i) run_program(tp);
  EXPECT_EQ(describe_calls.load(), 1) << "a site seen again is found by its raw words";
  const json r = tracepool::testing::report_of(tp);
  ASSERT_EQ(r["leaks"].size(), 1u);
  EXPECT_EQ(r["leaks"][0]["blocks"], 5);
}

TEST_F(ScriptFrames, AFailedDescriptionLeavesUnknownFramesNotACrash) {
  describe_fails = true;
  tracepool_t* tp = open("capture:python");
  run_program(tp);
  const json frames = leak_frames(tp);
  ASSERT_EQ(frames.size(), 4u);
  for (const json& f : frames) {
    EXPECT_EQ(f["kind"], "python");
    EXPECT_EQ(f["function"], "??");
  }
}

TEST_F(ScriptFrames, WithoutAProviderThereAreNoInterpreterFrames) {
  ASSERT_EQ(tracepool_set_frame_provider(nullptr), TRACEPOOL_OK);
  tracepool_t* tp = open("capture:all");
  run_program(tp);
  const json frames = leak_frames(tp);
  ASSERT_FALSE(frames.empty());
  for (const json& f : frames) EXPECT_EQ(f["kind"], "native");
}

TEST(BindingsModules, AnAddressOutsideEveryModuleIsRefused) {
  EXPECT_EQ(tracepool_add_bindings_module(nullptr), TRACEPOOL_ERR_INVALID_ARGUMENT);
  int on_stack = 0;
  EXPECT_EQ(tracepool_add_bindings_module(&on_stack), TRACEPOOL_ERR_INVALID_ARGUMENT) << "not in a module";
  EXPECT_NE(std::string(tracepool_last_error()).find("no loaded module"), std::string::npos);
}

TEST_F(ScriptFrames, BindingsModuleFramesAtTheTopAreDropped) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // marking is for the life of the process: do it in a child
  EXPECT_EXIT(
      {
        // This test program plays the bindings.
        if (tracepool_add_bindings_module(reinterpret_cast<const void*>(&leaf_alloc)) != TRACEPOOL_OK) std::exit(10);
        tracepool_t* tp = open("capture:all");
        run_program(tp);
        const std::vector<std::string> got = names(leak_frames(tp), 4);
        // Its frames above the interpreter loop are dropped; the loop and what follows stay.
        std::exit(got == std::vector<std::string>{"py:alloc_tensor", "py:step", "py:run", "py:<module>"} ? 0 : 11);
      },
      ::testing::ExitedWithCode(0), "");
}

// A site seen again is found in the thread's recent sites (Note [Recent sites] in recent_sites.h),
// but only if its frames are the same, word for word. Here ten programs share their native path and
// innermost script frames and differ only in the outer one, more than a key keeps; and each runs
// under two tag sets. Every block must still be counted at its own site.
void run_ten_programs_twice_tagged(tracepool_t* tp) {
  static const toy_frame outers[10] = {{"outer.py", "run", 30}, {"outer.py", "run", 31}, {"outer.py", "run", 32},
                                       {"outer.py", "run", 33}, {"outer.py", "run", 34}, {"outer.py", "run", 35},
                                       {"outer.py", "run", 36}, {"outer.py", "run", 37}, {"outer.py", "run", 38},
                                       {"outer.py", "run", 39}};
  for (int round = 0; round < 3; ++round)
    for (const char* tag : {"even", "odd"}) {
      ASSERT_EQ(tracepool_tag_push(tag), TRACEPOOL_OK);
      for (const toy_frame& outer : outers) toy_eval(tp, {&main_script, &outer}, native_callback);
      ASSERT_EQ(tracepool_tag_pop(), TRACEPOOL_OK);
    }
}

void expect_twenty_sites_of_three_blocks(tracepool_t* tp) {
  run_ten_programs_twice_tagged(tp);
  const json r = tracepool::testing::report_of(tp);
  ASSERT_EQ(r["leaks"].size(), 20u) << r.dump(1);
  std::set<std::pair<std::string, int>> seen;
  for (const json& site : r["leaks"]) {
    EXPECT_EQ(site["blocks"], 3) << site.dump(1);
    int outer_line = 0;
    for (const json& f : site["frames"])
      if (f["function"] == "run") outer_line = f["line"];
    ASSERT_EQ(site["tags"].size(), 1u);
    seen.emplace(site["tags"][0], outer_line);
  }
  EXPECT_EQ(seen.size(), 20u) << "each (tag, outer line) once";
  EXPECT_EQ(r["capture"]["sites"], 20);
}

TEST_F(ScriptFrames, RepeatedSitesAreToldApartByEveryFrameAndTag) { expect_twenty_sites_of_three_blocks(open("capture:all")); }

TEST_F(ScriptFrames, RepeatedPythonSitesAreToldApartByEveryFrameAndTag) {
  expect_twenty_sites_of_three_blocks(open("capture:python"));
}

TEST_F(ScriptFrames, RepeatedNativeSitesAreFoundAgain) {
  tracepool_t* tp = open("capture:native");
  const auto before = tracepool::testing::report_of(tp)["capture"];
  for (int i = 0; i < 50; ++i) run_program(tp);
  const json r = tracepool::testing::report_of(tp);
  ASSERT_EQ(r["leaks"].size(), 1u);
  EXPECT_EQ(r["leaks"][0]["blocks"], 50);
  EXPECT_GE(r["capture"]["cfi_walks_replayed"].get<int64_t>() - before["cfi_walks_replayed"].get<int64_t>(), 49)
      << "each capture after the first re-read its walk";
}

// Marking a bindings module changes which native frames a site keeps: what a thread remembered of
// its sites before must not answer after (the third capture interns a site of its own).
TEST_F(ScriptFrames, MarkingABindingsModuleTakesEffectOnSitesSeenBefore) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // marking is for the life of the process: do it in a child
  EXPECT_EXIT(
      {
        tracepool_t* tp = open("capture:all");
        run_program(tp);
        run_program(tp);
        if (tracepool::testing::report_of(tp)["capture"]["sites"] != 1) std::exit(10);
        if (tracepool_add_bindings_module(reinterpret_cast<const void*>(&leaf_alloc)) != TRACEPOOL_OK) std::exit(11);
        run_program(tp);
        std::exit(tracepool::testing::report_of(tp)["capture"]["sites"] == 2 ? 0 : 12);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(ScriptFrameProvider, MalformedProvidersAreRefused) {
  tracepool_frame_provider_t p = toy_provider;
  p.size = sizeof(size_t);
  EXPECT_EQ(tracepool_set_frame_provider(&p), TRACEPOOL_ERR_INVALID_ARGUMENT);
  p = toy_provider;
  p.describe = nullptr;
  EXPECT_EQ(tracepool_set_frame_provider(&p), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tracepool_last_error()).find("capture and describe"), std::string::npos);
  p = toy_provider;
  std::swap(p.eval_begin, p.eval_end);
  EXPECT_EQ(tracepool_set_frame_provider(&p), TRACEPOOL_ERR_INVALID_ARGUMENT);
}

TEST_F(ScriptFrames, ReportStringIsTheReport) {
  tracepool_t* tp = open("capture:python");
  run_program(tp);
  char* text = nullptr;
  ASSERT_EQ(tracepool_report_string(tp, "json", &text), TRACEPOOL_OK) << tracepool_last_error();
  const json r = json::parse(text);
  tracepool_string_free(text);
  EXPECT_EQ(r["schema"], "tracepool.report/1");
  EXPECT_EQ(r["leaks"][0]["frames"][0]["function"], "alloc_tensor");
  ASSERT_EQ(tracepool_report_string(tp, "text", &text), TRACEPOOL_OK);
  EXPECT_NE(std::string(text).find("alloc_tensor (inner.py:7)"), std::string::npos) << text;
  tracepool_string_free(text);
  EXPECT_EQ(tracepool_report_string(tp, "xml", &text), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(text, nullptr);
  EXPECT_EQ(tracepool_report_string(tp, "json", nullptr), TRACEPOOL_ERR_INVALID_ARGUMENT);
}

TEST_F(ScriptFrames, SnapshotHasSegmentsBlocksAndAllocTraces) {
  tracepool_t* tp = open("capture:python");
  run_program(tp);
  void* transient = nullptr;
  ASSERT_EQ(tracepool_malloc(tp, 8192, 0, nullptr, &transient), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_free(tp, transient, nullptr), TRACEPOOL_OK);
  char* text = nullptr;
  ASSERT_EQ(tracepool_torch_snapshot_string(tp, &text), TRACEPOOL_OK) << tracepool_last_error();
  const json s = json::parse(text);
  tracepool_string_free(text);
  int live = 0, inactive = 0;
  int64_t reserved = 0;
  for (const json& seg : s["segments"]) {
    reserved += seg["total_size"].get<int64_t>();
    int64_t sum = 0, address = seg["address"];
    for (const json& b : seg["blocks"]) {
      EXPECT_EQ(b["address"].get<int64_t>(), address + sum) << "blocks tile their segment in address order";
      sum += b["size"].get<int64_t>();
      if (b["state"] == "active_allocated") {
        ++live;
        EXPECT_EQ(b["requested_size"], 4096);
        ASSERT_FALSE(b["frames"].empty());
        EXPECT_EQ(b["frames"][0], (json{{"filename", "inner.py"}, {"line", 7}, {"name", "alloc_tensor"}}));
      } else {
        EXPECT_EQ(b["state"], "inactive");
        ++inactive;
      }
    }
    EXPECT_EQ(sum, seg["total_size"].get<int64_t>());
  }
  EXPECT_EQ(live, 1);
  EXPECT_GE(inactive, 1);
  tracepool_stats_t st{};
  st.size = sizeof st;
  ASSERT_EQ(tracepool_get_stats(tp, 0, &st), TRACEPOOL_OK);
  EXPECT_EQ(static_cast<uint64_t>(reserved), st.reserved_bytes.current);
  ASSERT_EQ(s["device_traces"].size(), 1u);
  ASSERT_EQ(s["device_traces"][0].size(), 1u) << "one alloc entry per live block";
  EXPECT_EQ(s["device_traces"][0][0]["action"], "alloc");
  EXPECT_EQ(s["device_traces"][0][0]["size"], 4096);
}

// ---- Thread origins (Note [Thread origins] in core/trace/tracer.h) --------------------------------

uint64_t origin_here(tracepool_t* tp) {
  uint64_t origin = 7;
  EXPECT_EQ(tracepool_thread_origin(tp, &origin), TRACEPOOL_OK) << tracepool_last_error();
  return origin;
}

// A thread with no interpreter frames of its own, started from outer.py's run, allocates.
__attribute__((noinline)) void start_a_frameless_thread(tracepool_t* tp) {
  const uint64_t origin = origin_here(tp);
  ASSERT_NE(origin, 0u);
  std::thread([tp, origin] {
    tracepool_adopt_thread_origin(origin);
    leaf_alloc(tp);
  }).join();
  KEEP_FRAME();
}

// That thread starts another, which allocates.
__attribute__((noinline)) void start_a_thread_that_starts_one(tracepool_t* tp) {
  const uint64_t origin = origin_here(tp);
  std::thread([tp, origin] {
    tracepool_adopt_thread_origin(origin);
    const uint64_t passed_on = origin_here(tp);
    EXPECT_NE(passed_on, 0u) << "a thread that borrows frames lends them on";
    std::thread([tp, passed_on] {
      tracepool_adopt_thread_origin(passed_on);
      leaf_alloc(tp);
    }).join();
  }).join();
  KEEP_FRAME();
}

// A thread that runs interpreter frames of its own.
__attribute__((noinline)) void start_an_interpreter_thread(tracepool_t* tp) {
  const uint64_t origin = origin_here(tp);
  std::thread([tp, origin] {
    tracepool_adopt_thread_origin(origin);
    toy_eval(tp, {&step_fn, &alloc_fn}, leaf_alloc);
  }).join();
  KEEP_FRAME();
}

// outer.py's run starts a frameless thread, which starts another; both wait. run then calls step,
// whose alloc_tensor reaches the driver (memory seen outside the pool), and allocates from the pool at
// grow; only then do the threads allocate: XLA's threads compiling the call that waits for them.
__attribute__((noinline)) void observe_outside(tracepool_t* tp) {
  static char outside[1 << 16];
  ASSERT_EQ(tracepool_observe_alloc(tp, outside, sizeof outside, 0, TRACEPOOL_OBSERVED_DEVICE, "cuMemAlloc"), TRACEPOOL_OK)
      << tracepool_last_error();
  KEEP_FRAME();
}

const toy_frame grow_fn{"inner.py", "grow", 30};

__attribute__((noinline)) void start_threads_then_reach_the_driver(tracepool_t* tp) {
  const uint64_t origin = origin_here(tp);
  std::atomic<bool> go{false};
  std::atomic<int> started{0};
  auto wait_then_alloc = [tp, &go] {
    while (!go.load()) std::this_thread::yield();
    leaf_alloc(tp);
  };
  std::thread child([&, origin] {
    tracepool_adopt_thread_origin(origin);
    const uint64_t passed_on = origin_here(tp);
    std::thread grandchild([&, passed_on] {
      tracepool_adopt_thread_origin(passed_on);
      started.fetch_add(1);
      wait_then_alloc();
    });
    started.fetch_add(1);
    grandchild.join();  // before this thread allocates: leaf_alloc keeps what it got in an unguarded list
    wait_then_alloc();
  });
  while (started.load() < 2) std::this_thread::yield();
  toy_eval(tp, {&step_fn, &alloc_fn}, observe_outside);
  toy_eval(tp, {&grow_fn}, leaf_alloc);  // the pool's own allocations move nothing
  go.store(true);
  child.join();
  KEEP_FRAME();
}

std::vector<std::string> python_frames(const json& frames, bool* all_borrowed) {
  std::vector<std::string> out;
  *all_borrowed = true;
  for (const json& f : frames) {
    if (f["kind"] != "python") continue;
    out.push_back(f["function"].get<std::string>() + ":" + std::to_string(f["line"].get<int>()));
    *all_borrowed = *all_borrowed && f["borrowed"].get<bool>();
  }
  return out;
}

TEST_F(ScriptFrames, AFramelessThreadEndsWithTheFramesOfTheLineThatStartedIt) {
  tracepool_t* tp = open("capture:all");
  toy_eval(tp, {&main_script, &run_fn}, start_a_frameless_thread);
  const json frames = leak_frames(tp);
  bool borrowed = false;
  EXPECT_EQ(python_frames(frames, &borrowed), (std::vector<std::string>{"run:20", "<module>:10"})) << frames.dump(1);
  EXPECT_TRUE(borrowed) << frames.dump(1);
  ASSERT_FALSE(frames.empty());
  EXPECT_EQ(names(frames, 1), std::vector<std::string>{"leaf_alloc"}) << "the thread's own native frames come first";
  EXPECT_EQ(frames.back()["kind"], "python") << "the borrowed frames are the outermost";
  EXPECT_EQ(describe_calls.load(), 1) << "the starting site is described on its thread; the borrowed copy is not";
}

TEST_F(ScriptFrames, AThreadStartedByAFramelessThreadInheritsItsOrigin) {
  tracepool_t* tp = open("capture:all");
  toy_eval(tp, {&main_script, &run_fn}, start_a_thread_that_starts_one);
  bool borrowed = false;
  EXPECT_EQ(python_frames(leak_frames(tp), &borrowed), (std::vector<std::string>{"run:20", "<module>:10"}));
  EXPECT_TRUE(borrowed);
}

TEST_F(ScriptFrames, AFramelessThreadFollowsItsStarterToTheDriver) {
  tracepool_t* tp = open("capture:all");
  toy_eval(tp, {&main_script, &run_fn}, start_threads_then_reach_the_driver);
  const json r = tracepool::testing::report_of(tp);
  int threads = 0;
  for (const json& leak : r["leaks"]) {
    bool borrowed = false;
    const std::vector<std::string> lines = python_frames(leak["frames"], &borrowed);
    if (!lines.empty() && lines[0] == "grow:30") continue;  // the pool allocation's own site
    if (!borrowed) {
      EXPECT_EQ(lines, (std::vector<std::string>{"alloc_tensor:7", "step:5", "run:20", "<module>:10"})) << "the outside memory";
      continue;
    }
    EXPECT_EQ(lines, (std::vector<std::string>{"alloc_tensor:7", "step:5", "run:20", "<module>:10"}))
        << "the line where the starting thread last reached the driver, not where it started the threads: " << leak.dump(1);
    threads += leak["blocks"].get<int>();
  }
  EXPECT_EQ(threads, 2) << "the thread and the one it started: " << r["leaks"].dump(1);
}

TEST_F(ScriptFrames, AThreadWithFramesOfItsOwnKeepsThem) {
  tracepool_t* tp = open("capture:all");
  toy_eval(tp, {&main_script, &run_fn}, start_an_interpreter_thread);
  bool borrowed = true;
  EXPECT_EQ(python_frames(leak_frames(tp), &borrowed), (std::vector<std::string>{"alloc_tensor:7", "step:5"}));
  EXPECT_FALSE(borrowed);
}

TEST_F(ScriptFrames, ThereIsNoOriginWithoutInterpreterFrames) {
  tracepool_t* tp = open("capture:all");
  EXPECT_EQ(origin_here(tp), 0u) << "no interpreter frames here";
  tracepool_t* native = nullptr;
  ASSERT_EQ(tracepool_create("backend:host,capture:native", &native), TRACEPOOL_OK);
  toy_eval(native, {&main_script, &run_fn}, [](tracepool_t* t) { EXPECT_EQ(origin_here(t), 0u) << "native capture"; });
  tracepool_destroy(native);
  uint64_t out = 7;
  EXPECT_EQ(tracepool_thread_origin(nullptr, &out), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(out, 0u);
  EXPECT_EQ(tracepool_thread_origin(tp, nullptr), TRACEPOOL_ERR_INVALID_ARGUMENT);
}

TEST_F(ScriptFrames, AnotherInstancesOriginIsIgnored) {
  tracepool_t* tp = open("capture:all");
  tracepool_t* other = nullptr;
  ASSERT_EQ(tracepool_create("backend:host,capture:all", &other), TRACEPOOL_OK);
  toy_stack = {toy_call{&main_script, true}, toy_call{&run_fn, false}};
  const uint64_t origin = origin_here(other);
  toy_stack.clear();
  ASSERT_NE(origin, 0u);
  std::thread([tp, origin] {
    tracepool_adopt_thread_origin(origin);
    leaf_alloc(tp);
  }).join();
  bool borrowed = false;
  EXPECT_TRUE(python_frames(leak_frames(tp), &borrowed).empty());
  tracepool_destroy(other);
}

TEST(ConfigureDefault, AppliesBeforeFirstUseAndIsFinalAfter) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: the default instance is per process
  EXPECT_EXIT(
      {
        if (tracepool_configure_default("backend:host,bogus:1") != TRACEPOOL_ERR_BAD_CONFIG) std::exit(10);
        if (tracepool_configure_default("backend:host,capture:off") != TRACEPOOL_OK) std::exit(11);
        tracepool_t* tp = tracepool_default();
        if (tp == nullptr || std::string(tracepool_backend_name(tp)) != "host") std::exit(12);
        if (tracepool_configure_default("backend:host,capture:off") != TRACEPOOL_OK) std::exit(13);
        if (tracepool_configure_default("backend:host") != TRACEPOOL_ERR_INVALID_ARGUMENT) std::exit(14);
        if (std::string(tracepool_last_error()).find("already exists") == std::string::npos) std::exit(15);
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
