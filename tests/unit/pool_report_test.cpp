// Private pools in reports (Note [Private pools] in core/private_pool.h), through the C API on the
// host backend: a retained pool (a CUDA graph's memory) is a group of its own, named by its label and
// the line that created it; its live blocks are neither leaks nor retained, its free memory is not
// cache; once released, its live blocks are ordinary leaks again; a saved report with pools renders
// as the live one did.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "report_support.h"
#include "tracepool/tracepool.h"

namespace {

using tracepool::testing::json;
using tracepool::testing::mentions;
using tracepool::testing::render;
using tracepool::testing::report_of;
using tracepool::testing::report_string;

constexpr uint64_t graph_pool = 7;
void* const capture_stream = reinterpret_cast<void*>(0x1000);
constexpr size_t segment = size_t{2} << 20;  // a small segment: what 4000 or 8192 bytes grow
int open_line;

// A route as a capture opens one: the capturing stream's allocations go to the pool.
__attribute__((noinline)) void open_graph_pool(tracepool_t* tp, uint64_t pool) {
  open_line = __LINE__ + 1;
  const int rc = tracepool_pool_begin(tp, 0, pool, nullptr, capture_stream, nullptr);
  ASSERT_EQ(rc, TRACEPOOL_OK) << tracepool_last_error();
  KEEP_FRAME();
}

__attribute__((noinline)) void* graph_alloc(tracepool_t* tp, size_t bytes) {
  void* p = nullptr;
  EXPECT_EQ(tracepool_malloc(tp, bytes, 0, capture_stream, &p), TRACEPOOL_OK) << tracepool_last_error();
  KEEP_FRAME();
  return p;
}

__attribute__((noinline)) void* plain_alloc(tracepool_t* tp, size_t bytes) {
  void* p = nullptr;
  EXPECT_EQ(tracepool_malloc(tp, bytes, 0, nullptr, &p), TRACEPOOL_OK) << tracepool_last_error();
  KEEP_FRAME();
  return p;
}

// The part of a text report from the line that starts with `header` to the next blank line.
std::string section(const std::string& text, const std::string& header) {
  const size_t from = text.find("\n" + header);
  if (from == std::string::npos) return "";
  const size_t to = text.find("\n\n", from + 1);
  return text.substr(from + 1, to == std::string::npos ? std::string::npos : to - from);
}

// Three blocks of a graph (and one freed inside its capture), one ordinary block; a mark after both.
struct PoolReport : tracepool::testing::HostInstanceTest {
  std::vector<void*> in_graph;
  void* outside = nullptr;

  void capture_a_graph(const char* label) {
    open_graph_pool(tp, graph_pool);
    if (label != nullptr) ASSERT_EQ(tracepool_pool_label(tp, 0, graph_pool, label), TRACEPOOL_OK);
    for (int i = 0; i < 3; ++i) in_graph.push_back(graph_alloc(tp, 4000));
    ASSERT_EQ(tracepool_free(tp, graph_alloc(tp, 4000), nullptr), TRACEPOOL_OK);  // freed inside the capture
    ASSERT_EQ(tracepool_pool_end(tp, 0, graph_pool), TRACEPOOL_OK);
    outside = plain_alloc(tp, 8192);
    ASSERT_EQ(tracepool_mark(tp, "after capture"), TRACEPOOL_OK);
  }
  void TearDown() override {
    for (void* p : in_graph) EXPECT_EQ(tracepool_free(tp, p, nullptr), TRACEPOOL_OK);
    EXPECT_EQ(tracepool_free(tp, outside, nullptr), TRACEPOOL_OK);
    HostInstanceTest::TearDown();
  }
};

TEST_F(PoolReport, ARetainedPoolIsAGroupOfItsOwnNeitherLeakedNorCached) {
  capture_a_graph("CUDA graph");
  const json r = report_of(tp);
  ASSERT_EQ(r["pools"].size(), 1u) << r.dump(1);
  const json& p = r["pools"][0];
  EXPECT_EQ(p["device"], 0);
  EXPECT_EQ(p["pool"], graph_pool);
  EXPECT_EQ(p["label"], "CUDA graph");
  EXPECT_NE(p["site"], 0);
  ASSERT_FALSE(p["frames"].empty());
  EXPECT_NE(p["frames"][0]["function"].get<std::string>().find("open_graph_pool"), std::string::npos) << p.dump(1);
  EXPECT_EQ(p["frames"][0]["line"], open_line);
  EXPECT_EQ(p["bytes"], 3 * 4000);
  EXPECT_EQ(p["blocks"], 3);
  EXPECT_EQ(p["block_bytes"], 3 * 4096);
  EXPECT_EQ(p["reserved_bytes"], segment);
  EXPECT_EQ(p["cached_bytes"], segment - 3 * 4096);
  ASSERT_EQ(p["sites"].size(), 1u) << p.dump(1);
  EXPECT_EQ(p["sites"][0]["bytes"], 3 * 4000);
  EXPECT_EQ(p["sites"][0]["blocks"], 3);
  EXPECT_NE(p["sites"][0]["frames"][0]["function"].get<std::string>().find("graph_alloc"), std::string::npos);

  EXPECT_TRUE(mentions(r["leaks"], "plain_alloc")) << r["leaks"].dump(1);
  EXPECT_FALSE(mentions(r["leaks"], "graph_alloc")) << "a graph's blocks are not leaks: " << r["leaks"].dump(1);
  EXPECT_TRUE(mentions(r["retained"], "plain_alloc")) << r["retained"].dump(1);
  EXPECT_FALSE(mentions(r["retained"], "graph_alloc")) << r["retained"].dump(1);
  EXPECT_FALSE(mentions(r["cached"], "graph_alloc")) << "free memory inside the pool is not cache";
  EXPECT_EQ(r["devices"][0]["cached_bytes"], segment - 8192);
}

TEST_F(PoolReport, TheTextShowsThePoolByItsLabelAndCreatorNotAsLeaked) {
  capture_a_graph("CUDA graph");
  const std::string text = report_string(tp, "text", "exit");
  const std::string pools = section(text, "Private pools:");
  EXPECT_NE(pools.find("  held by CUDA graph created at "), std::string::npos) << text;
  EXPECT_NE(pools.find("open_graph_pool"), std::string::npos) << text;
  EXPECT_NE(pools.find(": 2.00 MiB (11.72 KiB live in 3 blocks, 1.99 MiB of its 2.00 MiB free inside the pool)"),
            std::string::npos)
      << text;
  EXPECT_NE(pools.find("       11.72 KiB in 3 blocks at "), std::string::npos) << text;
  EXPECT_NE(pools.find("graph_alloc"), std::string::npos) << text;
  const std::string leaked = section(text, "Leaked: memory still allocated at exit");
  EXPECT_NE(leaked.find("plain_alloc"), std::string::npos) << text;
  EXPECT_EQ(leaked.find("graph_alloc"), std::string::npos) << text;
  EXPECT_NE(text.find("; 2.00 MiB reserved by private pools\n"), std::string::npos) << text;
}

TEST_F(PoolReport, AnUnlabelledPoolIsAPrivatePool) {
  capture_a_graph(nullptr);
  EXPECT_EQ(report_of(tp)["pools"][0]["label"], "private pool");
  EXPECT_NE(report_string(tp, "text").find("  held by private pool created at "), std::string::npos);
}

TEST_F(PoolReport, OnceReleasedItsLiveBlocksAreLeaksAgain) {
  capture_a_graph("CUDA graph");
  ASSERT_EQ(tracepool_pool_release(tp, 0, graph_pool), TRACEPOOL_OK);  // the graph is gone; its outputs live on
  const json r = report_of(tp);
  EXPECT_TRUE(r["pools"].empty()) << r["pools"].dump(1);
  json graph_leak;
  for (const json& s : r["leaks"])
    if (mentions(json::array({s}), "graph_alloc")) graph_leak = s;
  ASSERT_FALSE(graph_leak.is_null()) << r["leaks"].dump(1);
  EXPECT_EQ(graph_leak["bytes"], 3 * 4000);
  EXPECT_EQ(graph_leak["blocks"], 3);
  EXPECT_TRUE(mentions(r["retained"], "graph_alloc")) << r["retained"].dump(1);
  EXPECT_EQ(r["devices"][0]["cached_bytes"], (segment - 8192) + (segment - 3 * 4096));
  EXPECT_EQ(section(report_string(tp, "text"), "Private pools:"), "");
}

TEST_F(PoolReport, ASavedReportWithPoolsRendersAsTheLiveOneDid) {
  capture_a_graph("torch.cuda.MemPool ✓");
  const uint64_t huge = UINT64_MAX - 1;  // PyTorch's ids fill 64 bits (Note [Pool ids] in the torch plugin)
  ASSERT_EQ(tracepool_pool_retain(tp, 0, huge), TRACEPOOL_OK);  // empty, unlabelled
  const std::string saved = report_string(tp, "json");
  ASSERT_EQ(json::parse(saved)["pools"].size(), 2u) << saved;
  EXPECT_EQ(json::parse(saved)["pools"][1]["pool"].get<uint64_t>(), huge);
  int rc = 0;
  EXPECT_EQ(render(saved, "text", 0, &rc), report_string(tp, "text"));
  EXPECT_EQ(rc, TRACEPOOL_OK);
  EXPECT_EQ(render(saved, "json", 0, &rc), saved) << "the live report's JSON again would have another time_ns";
  EXPECT_EQ(rc, TRACEPOOL_OK);
  EXPECT_EQ(tracepool_pool_release(tp, 0, huge), TRACEPOOL_OK);
}

TEST_F(PoolReport, ALabelNeedsARetainedPoolAndIsCheckedAsTagLabelsAre) {
  EXPECT_EQ(tracepool_pool_label(tp, 0, graph_pool, "CUDA graph"), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tracepool_last_error()).find("no private pool 7"), std::string::npos) << tracepool_last_error();
  ASSERT_EQ(tracepool_pool_retain(tp, 0, graph_pool), TRACEPOOL_OK);
  for (const char* bad : {static_cast<const char*>(nullptr), "", "\xff\xfe", "line\nbreak"})
    EXPECT_EQ(tracepool_pool_label(tp, 0, graph_pool, bad), TRACEPOOL_ERR_INVALID_ARGUMENT) << (bad ? bad : "NULL");
  EXPECT_EQ(tracepool_pool_label(tp, 0, graph_pool, std::string(300, 'x').c_str()), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tracepool_pool_label(tp, 0, 0, "CUDA graph"), TRACEPOOL_ERR_INVALID_ARGUMENT) << "0 is the default pool";
  EXPECT_EQ(tracepool_pool_label(tp, 9, graph_pool, "CUDA graph"), TRACEPOOL_ERR_INVALID_DEVICE);
  EXPECT_EQ(tracepool_pool_label(nullptr, 0, graph_pool, "CUDA graph"), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(report_of(tp)["pools"][0]["label"], "private pool") << "a refused label changes nothing";
  EXPECT_EQ(tracepool_pool_label(tp, 0, graph_pool, "first"), TRACEPOOL_OK);
  EXPECT_EQ(tracepool_pool_label(tp, 0, graph_pool, "CUDA graph"), TRACEPOOL_OK);
  EXPECT_EQ(report_of(tp)["pools"][0]["label"], "CUDA graph") << "the latest label names it";
  ASSERT_EQ(tracepool_pool_release(tp, 0, graph_pool), TRACEPOOL_OK);
  EXPECT_EQ(tracepool_pool_label(tp, 0, graph_pool, "CUDA graph"), TRACEPOOL_ERR_INVALID_ARGUMENT) << "retired";
}

}  // namespace
