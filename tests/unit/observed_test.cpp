// Memory observed outside the pool (tracepool_observe_alloc, Note [Observed memory] in core/observed.h):
// recorded at its call site with its source, listed and grown as pool blocks are, never counted in the
// pool's statistics; every bad call refused with nothing changed.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "report_support.h"
#include "tracepool/tracepool.h"

namespace {

using tracepool::testing::json;
using tracepool::testing::report_of;
using tracepool::testing::report_string;

constexpr size_t MiB = size_t{1} << 20;

// Addresses no one allocated: the table only records them.
const void* fake(uintptr_t n) { return reinterpret_cast<const void*>(0x7e0000000000u + n * 0x100000u); }

// Each a frame of its own in the stack (not inlined, no tail call), as a runtime's allocating function is.
__attribute__((noinline)) int nccl_buffers(tracepool_t* tp, uintptr_t n, size_t size) {
  const int rc = tracepool_observe_alloc(tp, fake(n), size, 0, TRACEPOOL_OBSERVED_DEVICE, "nccl");
  asm volatile("" ::: "memory");
  return rc;
}

__attribute__((noinline)) int pinned_staging(tracepool_t* tp, uintptr_t n, size_t size) {
  const int rc = tracepool_observe_alloc(tp, fake(n), size, 0, TRACEPOOL_OBSERVED_HOST, "cudart");
  asm volatile("" ::: "memory");
  return rc;
}

class Observed : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(tracepool_create("backend:host", &tp_), TRACEPOOL_OK) << tracepool_last_error(); }
  void TearDown() override { tracepool_destroy(tp_); }
  tracepool_t* tp_ = nullptr;
};

json site_tagged(const json& report, const std::string& tag) {
  for (const json& s : report["leaks"])
    if (!s["tags"].empty() && s["tags"].back() == tag) return s;
  return json();
}

TEST_F(Observed, ABlockIsListedAtItsLineWithItsSourceAndLeavesThePoolsFiguresAlone) {
  ASSERT_EQ(nccl_buffers(tp_, 1, 3 * MiB), TRACEPOOL_OK) << tracepool_last_error();
  ASSERT_EQ(pinned_staging(tp_, 2, MiB), TRACEPOOL_OK) << tracepool_last_error();
  ASSERT_EQ(tracepool_observe_alloc(tp_, fake(3), 2 * MiB, 0, TRACEPOOL_OBSERVED_MANAGED, "cudaMallocManaged"), TRACEPOOL_OK)
      << tracepool_last_error();
  const json r = report_of(tp_);
  const json nccl = site_tagged(r, "outside the pool: nccl");
  ASSERT_FALSE(nccl.is_null()) << r["leaks"].dump();
  EXPECT_EQ(nccl["bytes"], 3 * MiB);
  EXPECT_EQ(nccl["blocks"], 1);
  EXPECT_NE(nccl["frames"][0]["function"].get<std::string>().find("nccl_buffers"), std::string::npos)
      << nccl["frames"].dump();
  EXPECT_NE(nccl["title"].get<std::string>().find("nccl_buffers"), std::string::npos);
  EXPECT_EQ(site_tagged(r, "pinned host: cudart")["bytes"], MiB);
  EXPECT_EQ(r["devices"][0]["observed_bytes"], 3 * MiB);
  EXPECT_EQ(r["devices"][0]["observed_host_bytes"], MiB);
  EXPECT_EQ(r["devices"][0]["observed_managed_bytes"], 2 * MiB) << "managed memory is not the device's until touched";
  EXPECT_EQ(r["stats"]["0"]["allocated_bytes.all.current"], 0) << "the pool's statistics are the pool's";
  EXPECT_EQ(r["stats"]["0"]["reserved_bytes.all.current"], 0);
  const std::string text = report_string(tp_, "text");
  EXPECT_NE(text.find("seen outside the pool (by the interposer, or told through tracepool_observe_alloc): 3.00 MiB on the "
                      "device, 2.00 MiB managed (on the device where touched), 1.00 MiB pinned host"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("[outside the pool: nccl]"), std::string::npos) << text;

  // Its free: gone from the report, and the figures with it.
  ASSERT_EQ(tracepool_observe_free(tp_, fake(1)), TRACEPOOL_OK) << tracepool_last_error();
  const json after = report_of(tp_);
  EXPECT_TRUE(site_tagged(after, "outside the pool: nccl").is_null());
  EXPECT_EQ(after["devices"][0]["observed_bytes"], 0);
  EXPECT_EQ(tracepool_observe_free(tp_, nullptr), TRACEPOOL_OK) << "NULL is a no-op, as free's";
}

TEST_F(Observed, ASiteThatKeepsMoreEveryEpochGrows) {
  for (uintptr_t epoch = 0; epoch < 4; ++epoch) {
    ASSERT_EQ(nccl_buffers(tp_, 10 + epoch, MiB), TRACEPOOL_OK) << tracepool_last_error();
    ASSERT_EQ(tracepool_mark(tp_, ("epoch " + std::to_string(epoch)).c_str()), TRACEPOOL_OK);
  }
  const json r = report_of(tp_);
  const json nccl = site_tagged(r, "outside the pool: nccl");
  EXPECT_EQ(nccl["live_at_marks"], json::array({MiB, 2 * MiB, 3 * MiB, 4 * MiB}));
  EXPECT_TRUE(nccl["growing"].get<bool>());
  EXPECT_FALSE(r["retained"].empty()) << "blocks that outlived marks are retained, as pool blocks are";
}

TEST_F(Observed, EveryBadCallIsRefusedAndChangesNothing) {
  void* own = nullptr;
  ASSERT_EQ(tracepool_malloc(tp_, 4096, 0, nullptr, &own), TRACEPOOL_OK);
  ASSERT_EQ(nccl_buffers(tp_, 1, MiB), TRACEPOOL_OK);
  const std::string long_source(33, 'x');
  const struct {
    const void* ptr;
    size_t size;
    int device, kind;
    const char* source;
    const char* message;
    int status = TRACEPOOL_ERR_INVALID_ARGUMENT;
  } refused[] = {
      {nullptr, MiB, 0, 0, "nccl", "ptr is NULL"},
      {fake(2), 0, 0, 0, "nccl", "0 bytes"},
      {fake(2), size_t{1} << 51, 0, 0, "nccl", "expected 1 to"},
      {fake(2), MiB, 7, 0, "nccl", "device", TRACEPOOL_ERR_INVALID_DEVICE},
      {fake(2), MiB, 0, 3, "nccl", "kind 3"},
      {fake(2), MiB, 0, 0, "", "source is empty"},
      {fake(2), MiB, 0, 0, nullptr, "source is NULL"},
      {fake(2), MiB, 0, 0, long_source.c_str(), "longer than 32 bytes"},
      {fake(2), MiB, 0, 0, "a\nb", "control character"},
      {fake(2), MiB, 0, 0, "\xff", "not valid UTF-8"},
      {fake(1), MiB, 0, 0, "nccl", "observed already"},
      {own, 4096, 0, 0, "cupy", "tracepool's own pool"},
  };
  for (const auto& c : refused) {
    EXPECT_EQ(tracepool_observe_alloc(tp_, c.ptr, c.size, c.device, c.kind, c.source), c.status) << c.message;
    EXPECT_NE(std::string(tracepool_last_error()).find(c.message), std::string::npos)
        << c.message << " / " << tracepool_last_error();
  }
  EXPECT_EQ(tracepool_observe_free(tp_, fake(2)), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tracepool_last_error()).find("never observed"), std::string::npos);
  EXPECT_EQ(tracepool_observe_free(tp_, own), TRACEPOOL_ERR_INVALID_ARGUMENT) << "the pool's blocks are freed by free";
  const json r = report_of(tp_);
  EXPECT_EQ(r["devices"][0]["observed_bytes"], MiB) << "one block observed, nothing else";
  EXPECT_EQ(tracepool_free(tp_, own, nullptr), TRACEPOOL_OK);
  EXPECT_EQ(tracepool_observe_free(tp_, fake(1)), TRACEPOOL_OK);
  EXPECT_EQ(tracepool_observe_free(tp_, fake(1)), TRACEPOOL_ERR_INVALID_ARGUMENT) << "a second free";
  EXPECT_EQ(tracepool_observe_alloc(nullptr, fake(3), MiB, 0, 0, "nccl"), TRACEPOOL_ERR_INVALID_ARGUMENT);
}

// merge and diff know an observed site by its stack and its source, as any site by its tags.
TEST_F(Observed, DiffTellsTheObservedSiteApartBySource) {
  const std::string before = report_string(tp_, "json");
  ASSERT_EQ(nccl_buffers(tp_, 1, 2 * MiB), TRACEPOOL_OK);
  const std::string after = report_string(tp_, "json");
  const char* texts[2] = {before.data(), after.data()};
  const size_t sizes[2] = {before.size(), after.size()};
  tracepool_report_options_t as_json{};
  as_json.size = sizeof as_json;
  as_json.format = "json";
  char* out = nullptr;
  ASSERT_EQ(tracepool_diff_reports(texts, sizes, nullptr, &as_json, &out), TRACEPOOL_OK) << tracepool_last_error();
  const json d = json::parse(out);
  tracepool_string_free(out);
  ASSERT_EQ(d["sites"].size(), 1u);
  EXPECT_EQ(d["sites"][0]["status"], "new");
  EXPECT_EQ(d["sites"][0]["live_change"], 2 * MiB);
  const std::string where = d["sites"][0]["where"];
  EXPECT_NE(where.find("nccl_buffers"), std::string::npos) << where;
  EXPECT_NE(where.find("[outside the pool: nccl]"), std::string::npos) << where;
}

// Threads observing and freeing their own blocks at once leave exactly what is still observed.
TEST_F(Observed, ThreadsObservingAtOnceLoseNothing) {
  constexpr int threads = 8, rounds = 500;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([this, t] {
      for (int i = 0; i < rounds; ++i) {
        const uintptr_t n = 1000 + static_cast<uintptr_t>(t) * rounds + static_cast<uintptr_t>(i);
        ASSERT_EQ(nccl_buffers(tp_, n, 4096), TRACEPOOL_OK) << tracepool_last_error();
        if (i % 2 == 0) ASSERT_EQ(tracepool_observe_free(tp_, fake(n)), TRACEPOOL_OK) << tracepool_last_error();
      }
    });
  for (std::thread& w : workers) w.join();
  const json r = report_of(tp_);
  EXPECT_EQ(r["devices"][0]["observed_bytes"], size_t{threads} * rounds / 2 * 4096);
  EXPECT_EQ(site_tagged(r, "outside the pool: nccl")["blocks"], threads * rounds / 2);
}

}  // namespace
