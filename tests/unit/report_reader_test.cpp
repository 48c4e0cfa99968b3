// Reading a saved report back (core/report/report_reader.cpp) and rendering it through the C API
// (tracepool_render_report): a saved report renders as the live one did, and a text that is not a
// report is refused with a message naming its first problem, never a crash.
#include <dirent.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "report/report.h"
#include "report_support.h"
#include "tracepool/tracepool.h"

namespace {

namespace core = tracepool::core;
using tracepool::status;
using tracepool::testing::json;
using tracepool::testing::read_file;
using tracepool::testing::render;
using tracepool::testing::report_string;
using tracepool::testing::scratch_dir;

core::frame_info python_frame(const char* function, const char* file, int line, bool borrowed = false) {
  core::frame_info f;
  f.script = true;
  f.function = function;
  f.file = file;
  f.line = line;
  f.borrowed = borrowed;
  return f;
}

core::frame_info native_frame(const char* function, const char* file, int line, const char* module, uintptr_t address,
                              bool interpreter = false) {
  core::frame_info f;
  f.function = function;
  f.file = file;
  f.line = line;
  f.module = module;
  f.address = address;
  f.interpreter = interpreter;
  return f;
}

// A report with every section and every kind of frame the renderer treats apart: Python frames after
// native ones, library frames, borrowed frames, the interpreter's own frames, an unnamed native frame,
// native-only stacks ending at main, a site with no frames, tags, UTF-8, marks and an OOM.
core::report every_section(const char* reason) {
  core::report r;
  r.reason = reason;
  r.time_ns = 1700000000123456789ULL;
  r.backend = "host";
  r.capture = "all";
  r.unwinder = "cfi";
  r.capture_depth = 32;
  r.python_depth = 64;
  r.sites = 7;
  r.sites_dropped = 2;
  r.cfi_slow_stacks = 3;
  r.cfi_walks_replayed = 1234;
  r.cfi_walks_taken = 56;
  r.cfi_last_slow_reason = 257;
  r.cfi_last_slow_frame = native_frame("slow_fn", "", 0, "/lib/libslow.so", 0xdead);
  for (int d : {0, 1}) {
    core::device_summary s;
    s.device = d;
    s.stats.table.increase(core::stat_kind::allocated_bytes, core::pool_kind::large, (40 + d) << 20);
    s.stats.table.increase(core::stat_kind::allocation, core::pool_kind::small, 9);
    s.stats.table.increase(core::stat_kind::reserved_bytes, core::pool_kind::large, 80 << 20);
    s.stats.table.decrease(core::stat_kind::allocated_bytes, core::pool_kind::large, 1 << 20);
    s.stats.counters.num_ooms = 1;
    s.stats.limit_bytes = 1 << 30;
    s.cached_bytes = 24 << 20;
    s.largest_free_block = 20 << 20;
    s.segments = d == 0 ? core::segments_growable : core::segments_classic;
    s.growable_available = true;
    s.free_page_bytes = (d == 0 ? 4 : 16) << 20;
    r.devices.push_back(s);
  }
  core::site_summary python_site;
  python_site.site = 3;
  python_site.tags = {"validation", "épreuve ✓"};
  python_site.frames = {native_frame("at::empty_cuda", "", 0, "/usr/lib/libtorch_cuda.so", 0x1000),
                        native_frame("", "", 0, "", 0x2000),
                        python_frame("forward", "/site-packages/torch/nn/module.py", 1500),
                        native_frame("_PyEval_EvalFrameDefault", "", 0, "/usr/bin/python3", 0x3000, true),
                        python_frame("validate", "train_é.py", 129),
                        python_frame("main", "train_é.py", 139, true),
                        python_frame("<module>", "train_é.py", 154, true),
                        python_frame("_run_code", "/usr/lib/python3.11/runpy.py", 88)};
  python_site.bytes = 18 << 20;
  python_site.blocks = 9;
  python_site.block_bytes = 18 << 20;
  python_site.peak_bytes = 18 << 20;
  python_site.total_bytes = 30 << 20;
  python_site.total_blocks = 15;
  python_site.live_at_marks = {6 << 20, 12 << 20, 18 << 20};
  python_site.growing = true;
  core::site_summary native_site;
  native_site.site = 5;
  for (int i = 0; i < 7; ++i) {
    const char* function = i == 1 ? "" : i == 3 ? "main" : "fn";
    native_site.frames.push_back(native_frame(function, i == 1 ? "" : "a.c", i + 1, "/bin/a", 0x10u + i));
  }
  native_site.bytes = 1000;
  native_site.blocks = 1;
  core::site_summary no_site;
  no_site.bytes = 512;
  no_site.blocks = 2;
  r.leaks = {python_site, native_site, no_site};
  r.marks = {{"epoch 0", 0, 10, 6 << 20}, {"époque 1", 1, 20, 12 << 20}, {"epoch 2", 2, 30, 18 << 20}};
  r.marks_made = 3;
  r.retained = {{0, -1, 3, 6 << 20, 3}, {0, 1, 1, 6 << 20, 3}, {1, 0, 2, 1000, 1}};
  core::cached_summary c;
  c.site = 3;
  c.tags = {"validation"};
  c.frames = {python_frame("relu", "train.py", 48)};
  c.bytes = 24 << 20;
  c.blocks = 1;
  c.largest_free_block = 20 << 20;
  c.inactive_split_bytes = 4 << 20;
  r.cached = {c, core::cached_summary{}};
  core::pool_summary graph;
  graph.device = 1;
  graph.pool = UINT64_MAX;
  graph.label = "CUDA graph";
  graph.site = 6;
  graph.frames = {python_frame("capture", "/site-packages/torch/cuda/graphs.py", 180),
                  python_frame("train_step", "train.py", 88)};
  graph.bytes = graph.block_bytes = 12 << 20;
  graph.blocks = 12;
  graph.reserved_bytes = 48 << 20;
  graph.cached_bytes = 36 << 20;
  graph.sites = {{3, {python_frame("forward", "model.py", 10)}, 8 << 20, 8}, {0, {}, 4 << 20, 4}};
  core::pool_summary unlabelled;  // as a hand-written report may have it: no label, no frames
  unlabelled.pool = 2;
  r.pools = {graph, unlabelled};
  if (r.reason == "oom") {
    r.oom_device = 1;
    r.oom_requested = 50 << 20;
    r.oom_message = "device 1: 50.00 MiB requested, 40.00 MiB allocated";
  }
  return r;
}

core::report read_back(const std::string& text) {
  core::report r;
  EXPECT_EQ(core::read_report_json(text, &r), status::ok) << tracepool::last_error();
  return r;
}

TEST(ReportReader, ASavedReportRendersAsTheLiveOneDid) {
  for (const char* reason : {"demand", "exit", "oom"}) {
    const core::report r = every_section(reason);
    const core::report back = read_back(core::to_json(r));
    for (size_t top : {size_t{1}, size_t{2}, size_t{10}})
      EXPECT_EQ(core::to_text(back, top), core::to_text(r, top)) << reason;
    EXPECT_EQ(core::to_json(back), core::to_json(r)) << reason;
    EXPECT_EQ(core::oom_summary(back, 1), core::oom_summary(r, 1)) << reason;
  }
}

TEST(HumanBytes, BinaryUnitsWithTwoDecimals) {
  const std::vector<std::string> expected = {"0 B",      "1023 B",   "1.00 KiB", "1.50 KiB",
                                             "5.00 MiB", "3.00 GiB", "-2.00 KiB"};
  const int64_t sizes[] = {0, 1023, 1024, 1536, int64_t{5} << 20, int64_t{3} << 30, -2048};
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(core::human_bytes(sizes[i]), expected[i]);
}

TEST(ReportReader, TheRenderingShowsWhatTheReportHolds) {
  const std::string text = core::to_text(read_back(core::to_json(every_section("exit"))));
  for (const char* expected :
       {"== tracepool report (exit): host backend, cfi stacks of up to 32 frames, every allocation",
        "device 1: 40.00 MiB allocated in 9 blocks (peak 41.00 MiB)", "[validation > épreuve ✓]",
        "GROWING across marks: 6.00 MiB 12.00 MiB 18.00 MiB", "in forward (module.py:1500)",
        "at validate (train_é.py:129)", "at main (train_é.py:139), on the thread that started this work",
        "at 0x11 (in a)\n       at fn (a.c:3)\n       at main (a.c:4)\n",
        "(no call site: capture was off or the site table was full)", "born after 'époque 1'",
        "born before the first mark", "Marks:\n  epoch 0 ", "; 48.00 MiB reserved by private pools\n",
        "\n  held by CUDA graph on device 1 created at train_step (train.py:88) \u00b7 via capture (graphs.py:180): 48.00 MiB (12.00 MiB live in 12 "
        "blocks, 36.00 MiB of its 48.00 MiB free inside the pool)\n"
        "       8.00 MiB in 8 blocks at forward (model.py:10)\n"
        "       4.00 MiB in 4 blocks (no call site recorded)\n",
        "\n  held by private pool on device 0 (no call site recorded): 0 B (0 B live in 0 blocks"}) {
    EXPECT_NE(text.find(expected), std::string::npos) << expected << "\n" << text;
  }
  EXPECT_EQ(text.find("runpy"), std::string::npos) << "nothing beyond <module>";
  const std::string oom = core::oom_summary(every_section("oom"), 1);
  EXPECT_NE(oom.find("\n  48.00 MiB held by CUDA graph on device 1 created at train_step (train.py:88) \u00b7 via capture (graphs.py:180), 36.00 MiB of "
                     "it free inside the pool"),
            std::string::npos)
      << oom;
  EXPECT_EQ(oom.find("private pool"), std::string::npos) << "device 0's pool is not device 1's: " << oom;
  EXPECT_NE(oom.find("Fragmentation: 4.00 MiB of the 24.00 MiB cached lies outside the largest free block (20.00 MiB). "
                     "Growable segments would not have fit it either: free cache in whole pages (16.00 MiB) and the "
                     "device's free memory (0 B) come to less than the request."),
            std::string::npos)
      << oom;
  EXPECT_NE(text.find("\n  fragmentation 4.00 MiB (cached outside the largest free block); 16.00 MiB of the cache in "
                      "whole 2 MiB pages; segments: classic\n"),
            std::string::npos)
      << text;
}

// Segments and the free cache in whole pages (Note [Fragmentation in reports]) came after schema 1's
// first reports: without them a report reads as not knowing, and says nothing of growable segments.
TEST(ReportReader, RetainedMemoryIsOneEntryASiteWithItsPartsInMarkOrder) {
  // Site 0 has two retained parts (born before the first mark, and after the second), site 1 one.
  const std::string text = core::to_text(read_back(core::to_json(every_section("exit"))));
  const size_t from = text.find("\nRetained:"), to = text.find("\nMarks:");
  ASSERT_NE(from, std::string::npos) << text;
  const std::string retained = text.substr(from, to - from);
  EXPECT_NE(retained.find("  12.00 MiB in 6 blocks [validation > \xc3\xa9preuve \xe2\x9c\x93]: 6.00 MiB born before the first mark "
                          "(alive through 3), 6.00 MiB born after '\xc3\xa9poque 1' (alive through 1)\n       at "),
            std::string::npos)
      << retained;
  size_t entries = 0;
  for (size_t at = retained.find("\n  "); at != std::string::npos; at = retained.find("\n  ", at + 1))
    entries += retained[at + 3] != ' ';  // an entry's first line, not its "       at" line
  EXPECT_EQ(entries, 2u) << retained;
}

TEST(ReportReader, AReportWithoutSegmentsLeavesThemUnknown) {
  json j = json::parse(core::to_json(every_section("oom")));
  for (json& d : j["devices"])
    for (const char* key : {"segments", "growable_available", "free_page_bytes"}) d.erase(key);
  const core::report back = read_back(j.dump());
  ASSERT_EQ(back.devices.size(), 2u);
  EXPECT_EQ(back.devices[1].segments, "");
  EXPECT_EQ(back.devices[1].free_page_bytes, -1);
  EXPECT_EQ(core::to_text(back).find("  fragmentation"), std::string::npos);
  const std::string oom = core::oom_summary(back, 1);
  EXPECT_NE(oom.find("Fragmentation: 4.00 MiB of the 24.00 MiB cached"), std::string::npos) << oom;
  EXPECT_EQ(oom.find("rowable"), std::string::npos) << oom;
  EXPECT_EQ(json::parse(core::to_json(back))["devices"][1].contains("segments"), false) << "unknown stays unwritten";
}

// A PyTorch site is named by the operator that asked, not by the allocator's plumbing: the outermost
// at::_ops::NAME::call, with the autograd node that ran it in backward, then the library line that
// called it; the same after a save and a read.
TEST(ReportReader, APyTorchSiteIsNamedByItsOperator) {
  auto site = [](uint32_t id, std::vector<core::frame_info> frames) {
    core::site_summary s;
    s.site = id;
    s.frames = std::move(frames);
    s.bytes = s.block_bytes = s.peak_bytes = s.total_bytes = (10 - id) << 20;
    s.blocks = s.total_blocks = 1;
    return s;
  };
  const char* cpu = "/site-packages/torch/lib/libtorch_cpu.so";
  core::report r;
  r.reason = "exit";
  r.backend = "host";
  r.capture = "all";
  r.unwinder = "cfi";
  r.leaks = {
      site(1, {native_frame("at::detail::empty_strided_generic(c10::ArrayRef<long>)", "", 0, cpu, 0x10),
               native_frame("at::_ops::empty_strided::call(c10::ArrayRef<c10::SymInt>)", "", 0, cpu, 0x11),
               native_frame("at::native::zeros_like(at::Tensor const&)", "", 0, cpu, 0x12),
               native_frame("at::_ops::zeros_like::call(at::Tensor const&)", "", 0, cpu, 0x13),
               native_frame("torch::autograd::THPVariable_zeros_like(_object*, _object*, _object*)", "", 0,
                            "/site-packages/torch/lib/libtorch_python.so", 0x14),
               native_frame("_PyEval_EvalFrameDefault", "", 0, "/usr/bin/python3", 0x15, true),
               python_frame("Adam._init_group", "/site-packages/torch/optim/adam.py", 178),
               python_frame("train", "train.py", 40)}),
      site(2, {native_frame("at::detail::empty_generic(c10::ArrayRef<long>)", "", 0, cpu, 0x20),
               native_frame("at::_ops::threshold_backward::call(at::Tensor const&, at::Tensor const&)", "", 0, cpu, 0x21),
               native_frame("torch::autograd::generated::ReluBackward0::apply(std::vector<at::Tensor>&&)", "", 0, cpu,
                            0x22),
               native_frame("torch::autograd::Node::operator()(std::vector<at::Tensor>&&)", "", 0, cpu, 0x23),
               native_frame("torch::autograd::Engine::thread_main(std::shared_ptr<GraphTask> const&)", "", 0, cpu, 0x24),
               python_frame("backward", "/site-packages/torch/_tensor.py", 581, true),
               python_frame("train", "train.py", 50, true)}),
      site(3, {native_frame("at::_ops::add_Tensor::call(at::Tensor const&, at::Tensor const&)", "", 0, cpu, 0x30),
               python_frame("step", "train.py", 12)}),
      site(4, {native_frame("at::_ops::empty_memory_format::call(c10::ArrayRef<c10::SymInt>)", "", 0, cpu, 0x40),
               native_frame("main", "app.cpp", 7, "/bin/app", 0x41)}),
      site(5, {native_frame("cudaMalloc", "", 0, "/lib/libcudart.so", 0x50), python_frame("run", "cupy_app.py", 3)})};
  for (const std::string& text : {core::to_text(r), core::to_text(read_back(core::to_json(r)))}) {
    for (const char* expected : {"       in aten::zeros_like, from Adam._init_group (adam.py:178)\n       at train (train.py:40)",
                                 "       in aten::threshold_backward in ReluBackward0, from backward (_tensor.py:581)\n",
                                 "       in aten::add_Tensor\n       at step (train.py:12)",
                                 "       in aten::empty_memory_format\n       at at::_ops::empty_memory_format::call(",
                                 "       in cudaMalloc (libcudart.so)\n       at run (cupy_app.py:3)"})
      EXPECT_NE(text.find(expected), std::string::npos) << expected << "\n" << text;
    EXPECT_EQ(text.find("empty_strided"), std::string::npos) << "the operator, not how it allocates:\n" << text;
  }
}

// A host instance's own reports (native frames, tags, marks, retained and cached memory, an OOM): the
// C API renders their JSON into the text the instance itself wrote.
__attribute__((noinline)) void* hold(tracepool_t* tp, size_t n) {
  void* p = nullptr;
  EXPECT_EQ(tracepool_malloc(tp, n, 0, nullptr, &p), TRACEPOOL_OK);
  asm volatile("" ::: "memory");
  return p;
}

TEST(RenderReport, TheLibrarysOwnReportsRenderAsItWroteThem) {
  tracepool_t* tp = nullptr;
  ASSERT_EQ(tracepool_create("backend:host,validate:on,host_capacity:64MiB,oom_report:off", &tp), TRACEPOOL_OK);
  std::vector<void*> kept;
  ASSERT_EQ(tracepool_tag_push("ünïcode tag"), TRACEPOOL_OK);
  for (int epoch = 0; epoch < 3; ++epoch) {
    kept.push_back(hold(tp, 1 << 20));
    EXPECT_EQ(tracepool_free(tp, hold(tp, 3 << 20), nullptr), TRACEPOOL_OK);
    EXPECT_EQ(tracepool_mark(tp, ("epoch ✓ " + std::to_string(epoch)).c_str()), TRACEPOOL_OK);
  }
  ASSERT_EQ(tracepool_tag_pop(), TRACEPOOL_OK);
  for (const char* reason : {"demand", "exit", "validation ✓"})
    for (int top : {0, 1}) {
      const std::string saved = report_string(tp, "json", reason);
      EXPECT_EQ(render(saved, nullptr, top), report_string(tp, "text", reason, top)) << reason;
      EXPECT_EQ(render(saved, "json"), saved);
    }
  void* p = nullptr;
  ASSERT_EQ(tracepool_malloc(tp, size_t{63} << 20, 0, nullptr, &p), TRACEPOOL_ERR_OOM);
  const std::string dir = scratch_dir();
  ASSERT_EQ(tracepool_write_oom_report(tp, (dir + "/oom.json").c_str(), nullptr), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_write_oom_report(tp, (dir + "/oom.txt").c_str(), nullptr), TRACEPOOL_OK);
  const std::string oom_text = render(read_file(dir + "/oom.json"));
  EXPECT_EQ(oom_text, read_file(dir + "/oom.txt"));
  EXPECT_NE(oom_text.find("Out of memory: "), std::string::npos) << oom_text;
  for (void* k : kept) EXPECT_EQ(tracepool_free(tp, k, nullptr), TRACEPOOL_OK);
  tracepool_destroy(tp);
}

TEST(RenderReport, ReasonAndTopAreTheCallersAndWriteTakesThemToo) {
  tracepool_t* tp = nullptr;
  ASSERT_EQ(tracepool_create("backend:host,validate:on", &tp), TRACEPOOL_OK);
  std::vector<void*> kept;
  kept.push_back(hold(tp, 4096));  // four sites
  kept.push_back(hold(tp, 8192));
  kept.push_back(hold(tp, 12288));
  kept.push_back(hold(tp, 16384));
  const std::string text = report_string(tp, nullptr, "exit", 2);  // format NULL: text
  EXPECT_EQ(text.rfind("== tracepool report (exit)", 0), 0u) << text;
  EXPECT_NE(text.find("Leaked: memory still allocated at exit"), std::string::npos);
  EXPECT_NE(text.find("  ... 2 more sites holding"), std::string::npos) << text;
  EXPECT_EQ(json::parse(report_string(tp, "json"))["reason"], "demand");

  const std::string path = scratch_dir() + "/r.json";
  tracepool_report_options_t o{};
  o.size = sizeof o;
  o.reason = "exit";
  o.top = 1;
  ASSERT_EQ(tracepool_write_report_with(tp, path.c_str(), &o), TRACEPOOL_OK) << tracepool_last_error();
  EXPECT_EQ(json::parse(read_file(path))["reason"], "exit");
  o.format = "text";
  ASSERT_EQ(tracepool_write_report_with(tp, path.c_str(), &o), TRACEPOOL_OK);
  EXPECT_NE(read_file(path).find("  ... 3 more sites holding"), std::string::npos);
  ASSERT_EQ(tracepool_write_report_with(tp, path.c_str(), nullptr), TRACEPOOL_OK);  // every default: by path
  EXPECT_EQ(json::parse(read_file(path))["reason"], "demand");
  for (void* k : kept) EXPECT_EQ(tracepool_free(tp, k, nullptr), TRACEPOOL_OK);
  tracepool_destroy(tp);
}

TEST(RenderReport, BadOptionsAreRefusedSayingWhatWasWrong) {
  tracepool_t* tp = nullptr;
  ASSERT_EQ(tracepool_create("backend:host", &tp), TRACEPOOL_OK);
  const std::string long_reason(65, 'r');
  struct bad {
    size_t size;
    const char* reason;
    const char* format;
    int top;
    const char* message;
  };
  const bad cases[] = {
      {0, nullptr, nullptr, 0, "its size is 0"},
      {sizeof(size_t), nullptr, nullptr, 0, "its size is 8"},
      {1 << 20, nullptr, nullptr, 0, "its size is 1048576"},
      {sizeof(tracepool_report_options_t), nullptr, "xml", 0, "unknown report format 'xml'"},
      {sizeof(tracepool_report_options_t), nullptr, "", 0, "unknown report format ''"},
      {sizeof(tracepool_report_options_t), nullptr, nullptr, -1, "top is -1"},
      {sizeof(tracepool_report_options_t), "", nullptr, 0, "reason must be 1 to 64 bytes"},
      {sizeof(tracepool_report_options_t), long_reason.c_str(), nullptr, 0, "reason must be 1 to 64 bytes"},
      {sizeof(tracepool_report_options_t), "bad \xff utf-8", nullptr, 0, "reason is not UTF-8"},
      {sizeof(tracepool_report_options_t), "two\nlines", nullptr, 0, "reason has a control character"},
      {sizeof(tracepool_report_options_t), "oom", nullptr, 0, "reason 'oom' is the library's own"},
  };
  const std::string valid = core::to_json(every_section("demand"));
  for (const bad& b : cases) {
    tracepool_report_options_t o{};
    o.size = b.size;
    o.reason = b.reason;
    o.format = b.format;
    o.top = b.top;
    char* out = reinterpret_cast<char*>(&o);  // must be set to NULL
    EXPECT_EQ(tracepool_report_string_with(tp, &o, &out), TRACEPOOL_ERR_INVALID_ARGUMENT) << b.message;
    EXPECT_EQ(out, nullptr);
    EXPECT_NE(std::string(tracepool_last_error()).find(b.message), std::string::npos) << tracepool_last_error();
    EXPECT_EQ(tracepool_write_report_with(tp, "/dev/null", &o), TRACEPOOL_ERR_INVALID_ARGUMENT) << b.message;
    if (b.reason == nullptr) {  // render ignores the reason
      EXPECT_EQ(tracepool_render_report(valid.data(), valid.size(), &o, &out), TRACEPOOL_ERR_INVALID_ARGUMENT);
      EXPECT_NE(std::string(tracepool_last_error()).find(b.message), std::string::npos) << tracepool_last_error();
    }
  }
  // A newer, larger struct: accepted while the fields this library does not know are zero.
  struct newer {
    tracepool_report_options_t known;
    void* unknown;
  } n{};
  n.known.size = sizeof n;
  char* out = nullptr;
  EXPECT_EQ(tracepool_report_string_with(tp, &n.known, &out), TRACEPOOL_OK) << tracepool_last_error();
  tracepool_string_free(out);
  n.unknown = &n;
  EXPECT_EQ(tracepool_report_string_with(tp, &n.known, &out), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tracepool_last_error()).find("does not know"), std::string::npos) << tracepool_last_error();
  // An older struct, without name: its messages say "the text".
  tracepool_report_options_t old{};
  old.size = offsetof(tracepool_report_options_t, top) + sizeof(int);
  old.name = "must not be read";
  EXPECT_EQ(tracepool_render_report("[]", 2, &old, &out), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(tracepool_last_error()).rfind("the text is not a tracepool report", 0), 0u)
      << tracepool_last_error();
  EXPECT_EQ(tracepool_render_report("{}", 2, nullptr, nullptr), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tracepool_render_report(nullptr, 1, nullptr, &out), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tracepool_report_string(tp, nullptr, &out), TRACEPOOL_ERR_INVALID_ARGUMENT);
  tracepool_destroy(tp);
}

// The first problem of a report changed by `change`, as the message says it.
std::string problem_after(void (*change)(json&)) {
  json r = json::parse(core::to_json(every_section("exit")));
  change(r);
  int rc = 0;
  const std::string message = render(r.dump(), nullptr, 0, &rc, "r.json");
  EXPECT_EQ(rc, TRACEPOOL_ERR_INVALID_ARGUMENT) << message;
  return message;
}

TEST(RenderReport, ABadBodyIsNamedByTheJsonPathOfItsFirstProblem) {
  EXPECT_EQ(problem_after([](json& r) { r["leaks"] = "x"; }), "r.json: leaks must be a list, not \"x\"");
  EXPECT_EQ(problem_after([](json& r) { r["stats"] = nullptr; }), "r.json: stats must be an object, not null");
  EXPECT_EQ(problem_after([](json& r) { r["leaks"][0]["bytes"] = -1; }),
            "r.json: leaks[0].bytes must be a non-negative integer, not -1");
  EXPECT_EQ(problem_after([](json& r) { r["leaks"][0]["bytes"] = true; }),
            "r.json: leaks[0].bytes must be a non-negative integer, not true");
  EXPECT_EQ(problem_after([](json& r) { r["leaks"][0]["frames"][0]["line"] = "x"; }),
            "r.json: leaks[0].frames[0].line must be a non-negative integer or null, not \"x\"");
  EXPECT_EQ(problem_after([](json& r) { r["leaks"][1]["frames"][0]["line"] = int64_t{1} << 40; }),
            "r.json: leaks[1].frames[0].line must be at most 2147483647, not 1099511627776");
  EXPECT_EQ(problem_after([](json& r) { r["stats"]["1"]["num_ooms"] = "1"; }),
            "r.json: stats[\"1\"][\"num_ooms\"] must be a non-negative integer, not \"1\"");
  EXPECT_EQ(problem_after([](json& r) { r["pools"][0]["pool"] = -1; }),
            "r.json: pools[0].pool must be a non-negative integer, not -1");
  EXPECT_EQ(problem_after([](json& r) { r["pools"][1].erase("reserved_bytes"); }),
            "r.json: pools[1] has no \"reserved_bytes\" field");
  EXPECT_EQ(problem_after([](json& r) { r["pools"][0]["label"] = 1; }),
            "r.json: pools[0].label must be a string, not 1");
  EXPECT_EQ(problem_after([](json& r) { r["pools"][0]["sites"][1]["blocks"] = 1.5; }),
            "r.json: pools[0].sites[1].blocks must be a non-negative integer, not 1.5");
  EXPECT_EQ(problem_after([](json& r) { r["pools"][0]["sites"][0]["frames"][0]["kind"] = nullptr; }),
            "r.json: pools[0].sites[0].frames[0].kind must be a string, not null");
  EXPECT_EQ(problem_after([](json& r) { r["pools"] = json::object(); }), "r.json: pools must be a list, not an object");
  EXPECT_EQ(problem_after([](json& r) { r["capture"]["cfi_last_slow"] = 1; }),
            "r.json: capture.cfi_last_slow must be an object or null, not 1");
  EXPECT_EQ(problem_after([](json& r) { r["devices"] = json::array({json::object()}); }),
            "r.json: devices[0] has no \"device\" field");
  EXPECT_EQ(problem_after([](json& r) { r.erase("leaks"); }), "r.json: the report has no \"leaks\" field");
  EXPECT_EQ(problem_after([](json& r) { r["devices"][1]["segments"] = "expandable"; }),
            "r.json: devices[1].segments must be \"classic\" or \"growable\", not \"expandable\"");
  EXPECT_EQ(problem_after([](json& r) { r["devices"][0]["segments"] = 3; }),
            "r.json: devices[0].segments must be a string, not 3");
  EXPECT_EQ(problem_after([](json& r) { r["devices"][0]["growable_available"] = 1; }),
            "r.json: devices[0].growable_available must be true or false, not 1");
  EXPECT_EQ(problem_after([](json& r) { r["devices"][0]["free_page_bytes"] = -1; }),
            "r.json: devices[0].free_page_bytes must be a non-negative integer, not -1");
  EXPECT_EQ(problem_after([](json& r) { r["devices"][1]["free_page_bytes"] = uint64_t{1} << 63; }),
            "r.json: devices[1].free_page_bytes must be at most 9223372036854775807, not 9223372036854775808");
  EXPECT_EQ(problem_after([](json& r) { r["devices"][0]["free_page_bytes"] = 25 << 20; }),
            "r.json: devices[0].free_page_bytes (26214400) is more than its cached_bytes (25165824)");
  EXPECT_EQ(problem_after([](json& r) { r["leaks"][0]["tags"] = json::array({std::string(60, 'x')}); }),
            "r.json: retained[0] is none of the leaks: no entry of \"leaks\" has its site, tags and frames");
  EXPECT_EQ(problem_after([](json& r) { r["retained"][1]["born_after_mark"] = "epoch 9"; }),
            "r.json: retained[1].born_after_mark \"epoch 9\" is the label of no entry of \"marks\"");
  EXPECT_EQ(problem_after([](json& r) { r["leaks"][0]["tags"][0] = std::string(60, 'x') + "\xc3\xa9"; }),
            "r.json: retained[0] is none of the leaks: no entry of \"leaks\" has its site, tags and frames");
  EXPECT_EQ(problem_after([](json& r) {
              r["oom"] = {{"message", std::string(50, 'm')}, {"device", -2}};
            }),
            "r.json: oom.device must be a non-negative integer, not -2");
  EXPECT_EQ(problem_after([](json& r) { r["marks"][0]["label"] = std::string(50, 'm'); }),
            "r.json: retained[2].born_after_mark \"epoch 0\" is the label of no entry of \"marks\"");
  EXPECT_EQ(problem_after([](json& r) {
              r["reason"] = std::string(50, 'r');
              r["backend"] = 3;
            }),
            "r.json: backend must be a string, not 3");
  EXPECT_EQ(problem_after([](json& r) { r["leaks"][0]["frames"][0]["function"] = std::string(50, 'f') + "\"x"; }),
            "r.json: retained[0] is none of the leaks: no entry of \"leaks\" has its site, tags and frames");
  EXPECT_EQ(problem_after([](json& r) {
              r["reason"] = std::string(50, 'r') + "\xc3\xa9";
              r["time_ns"] = std::string(50, 't');
            }),
            "r.json: time_ns must be a non-negative integer, not \"" + std::string(35, 't') + "...\"");
}

TEST(RenderReport, WhatIsNotAReportIsRefusedAsSuch) {
  int rc = 0;
  EXPECT_EQ(render("not json", nullptr, 0, &rc).rfind("the text is not a tracepool report (not JSON: ", 0), 0u);
  EXPECT_EQ(render("{\"leaks\": []}", nullptr, 0, &rc),
            "the text is not a tracepool report (no \"schema\": \"tracepool.report/1\")");
  EXPECT_EQ(render("{\"schema\": \"tracepool.report/2\"}", nullptr, 0, &rc, "r.json"),
            "r.json has schema tracepool.report/2; this tracepool reads tracepool.report/1");
  const std::string deep =
      "{\"schema\": \"tracepool.report/1\", \"leaks\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_NE(render(deep, nullptr, 0, &rc).find("(JSON nested too deeply"), std::string::npos);
  json r = json::parse(core::to_json(every_section("exit")));
  r["x"] = json::parse(std::string(200, '[') + std::string(200, ']'));
  const std::string message = render(r.dump(), nullptr, 0, &rc);
  EXPECT_EQ(
      message, "the text: x" + [] {
        std::string s;
        for (int i = 0; i < 64; ++i) s += "[0]";
        return s;
      }() + " is nested more than 64 levels deep");
  EXPECT_EQ(rc, TRACEPOOL_ERR_INVALID_ARGUMENT);
}

// Every file of tests/fuzz/report_corpus: good-* render (as text and as JSON, and the JSON renders
// to the same text), bad-* are refused with a message; none crashes (the sanitizer builds run this).
TEST(RenderReport, TheCorpusOfSavedReportsRendersOrIsRefused) {
  const std::string dir = TRACEPOOL_REPORT_CORPUS;
  DIR* d = opendir(dir.c_str());
  ASSERT_NE(d, nullptr) << dir;
  std::vector<std::string> names;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') names.push_back(e->d_name);
  closedir(d);
  std::sort(names.begin(), names.end());
  ASSERT_GE(names.size(), 20u);
  for (const std::string& name : names) {
    const std::string text = read_file(dir + "/" + name);
    int rc = 0;
    const std::string out = render(text, nullptr, 0, &rc, name.c_str());
    if (name.rfind("good-", 0) == 0) {
      ASSERT_EQ(rc, TRACEPOOL_OK) << name << ": " << out;
      EXPECT_EQ(out.rfind("== tracepool report (", 0), 0u) << name;
      const std::string as_json = render(text, "json", 0, &rc);
      ASSERT_EQ(rc, TRACEPOOL_OK) << name << ": " << as_json;
      EXPECT_EQ(render(as_json), out) << name;
    } else {
      EXPECT_EQ(rc, name.rfind("bad-", 0) == 0 ? TRACEPOOL_ERR_INVALID_ARGUMENT : rc) << name << ": " << out;
      if (rc != TRACEPOOL_OK) EXPECT_EQ(out.rfind(name, 0), 0u) << name << ": " << out;  // names the file first
    }
  }
}

}  // namespace
