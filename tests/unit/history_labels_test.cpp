// history_labels_test.cpp: what the history's events are labelled with besides their call site
// (core/history_labels.h): PyTorch's user metadata and compile contexts, per device, and the call that
// released a segment where the history asks for freeing sites.
#include "history_labels.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "history.h"
#include "report_support.h"
#include "test_support.h"
#include "tracepool/tracepool.h"

namespace tracepool::core {
namespace {

using testing::host_allocator;
using tracepool::testing::json;

// The labels of a device's events as PyTorch's snapshot gives them, "action metadata context" each.
std::vector<std::string> labelled_trace(tracepool_t* tp, int device) {
  char* text = nullptr;
  EXPECT_EQ(tracepool_torch_snapshot_string(tp, &text), TRACEPOOL_OK) << tracepool_last_error();
  const json snap = json::parse(text);
  tracepool_string_free(text);
  std::vector<std::string> out;
  for (const json& e : snap["device_traces"][device])
    out.push_back(e["action"].get<std::string>() + " " + e["user_metadata"].get<std::string>() + " " +
                  e["compile_context"].get<std::string>());
  return out;
}

void alloc_and_free(tracepool_t* tp, int device) {
  void* p = nullptr;
  ASSERT_EQ(tracepool_malloc(tp, 4096, device, nullptr, &p), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_free(tp, p, nullptr), TRACEPOOL_OK);
}

// torch.cuda.memory._set_memory_metadata before _record_memory_history, then a compiled region: each
// event carries what its device had when it was recorded; the other device's events carry nothing.
TEST(HistoryLabels, EachEventCarriesItsDevicesMetadataAndInnermostContext) {
  tracepool_t* tp = nullptr;
  ASSERT_EQ(tracepool_create("backend:host,host_devices:2", &tp), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_history_set_metadata(tp, 0, "epoch 3"), TRACEPOOL_OK) << "kept while the history is off";
  ASSERT_EQ(tracepool_record_history(tp, 64, 0), TRACEPOOL_OK);
  alloc_and_free(tp, 0);
  ASSERT_EQ(tracepool_history_push_context(tp, 0, "Torch-Compiled Region: 0/0"), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_history_push_context(tp, 0, "Torch-Compiled Region: 1/0"), TRACEPOOL_OK);
  alloc_and_free(tp, 0);
  alloc_and_free(tp, 1);
  ASSERT_EQ(tracepool_history_pop_context(tp, 0), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_history_set_metadata(tp, 0, ""), TRACEPOOL_OK);
  alloc_and_free(tp, 0);
  ASSERT_EQ(tracepool_history_pop_context(tp, 0), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_history_pop_context(tp, 0), TRACEPOOL_OK) << "an empty stack stays empty";
  alloc_and_free(tp, 0);

  const std::vector<std::string> zero = labelled_trace(tp, 0);
  EXPECT_EQ(zero, (std::vector<std::string>{
                      "segment_alloc epoch 3 N/A", "alloc epoch 3 N/A", "free_requested epoch 3 N/A",
                      "free_completed epoch 3 N/A",
                      "alloc epoch 3 Torch-Compiled Region: 1/0", "free_requested epoch 3 Torch-Compiled Region: 1/0",
                      "free_completed epoch 3 Torch-Compiled Region: 1/0",
                      "alloc  Torch-Compiled Region: 0/0", "free_requested  Torch-Compiled Region: 0/0",
                      "free_completed  Torch-Compiled Region: 0/0",
                      "alloc  N/A", "free_requested  N/A", "free_completed  N/A"}));
  const std::vector<std::string> one = labelled_trace(tp, 1);
  ASSERT_FALSE(one.empty());
  for (const std::string& e : one) EXPECT_EQ(e.substr(e.find(' ')), "  N/A") << e;
  char* metadata = nullptr;
  ASSERT_EQ(tracepool_history_metadata(tp, 0, &metadata), TRACEPOOL_OK);
  EXPECT_STREQ(metadata, "");
  tracepool_string_free(metadata);
  tracepool_destroy(tp);
}

TEST(HistoryLabels, BadInputIsAnErrorAndChangesNothing) {
  tracepool_t* tp = nullptr;
  ASSERT_EQ(tracepool_create("backend:host,host_devices:2", &tp), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_history_set_metadata(tp, 1, "kept"), TRACEPOOL_OK);
  EXPECT_EQ(tracepool_history_set_metadata(tp, 1, nullptr), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tracepool_history_set_metadata(tp, 2, "x"), TRACEPOOL_ERR_INVALID_DEVICE);
  EXPECT_EQ(tracepool_history_set_metadata(tp, -1, "x"), TRACEPOOL_ERR_INVALID_DEVICE);
  EXPECT_EQ(tracepool_history_push_context(tp, 1, nullptr), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tracepool_history_push_context(tp, 7, "x"), TRACEPOOL_ERR_INVALID_DEVICE);
  EXPECT_EQ(tracepool_history_pop_context(tp, 7), TRACEPOOL_ERR_INVALID_DEVICE);
  EXPECT_EQ(tracepool_history_metadata(tp, 1, nullptr), TRACEPOOL_ERR_INVALID_ARGUMENT);
  char* metadata = nullptr;
  EXPECT_EQ(tracepool_history_metadata(tp, 9, &metadata), TRACEPOOL_ERR_INVALID_DEVICE);
  EXPECT_EQ(metadata, nullptr);
  ASSERT_EQ(tracepool_history_metadata(tp, 1, &metadata), TRACEPOOL_OK);
  EXPECT_STREQ(metadata, "kept");
  tracepool_string_free(metadata);
  EXPECT_EQ(tracepool_history_set_metadata(nullptr, 0, "x"), TRACEPOOL_ERR_INVALID_ARGUMENT);
  tracepool_destroy(tp);
}

// Each distinct (metadata, context) pair takes an id; once they run out, new pairs share one that
// reads as such, and pairs seen before keep theirs.
TEST(HistoryLabels, PastTheLastIdNewPairsReadAsOverflow) {
  history_labels labels(1);
  ASSERT_EQ(labels.set_metadata(0, "first"), status::ok);
  const history_labels::id first = labels.current(0);
  EXPECT_EQ(first, 1);
  for (int i = 2; i < history_labels::overflow; ++i)  // ("", "") and "first" hold ids 0 and 1
    ASSERT_EQ(labels.set_metadata(0, "m" + std::to_string(i)), status::ok);
  const std::vector<history_labels::label> table = labels.table();
  ASSERT_EQ(table.size(), size_t{history_labels::overflow});
  EXPECT_EQ(table[first].metadata, "first");
  EXPECT_EQ(table[0].metadata, "");
  ASSERT_EQ(labels.push_context(0, "never seen"), status::ok);
  EXPECT_EQ(labels.current(0), history_labels::overflow);
  ASSERT_EQ(labels.pop_context(0), status::ok);
  ASSERT_EQ(labels.set_metadata(0, "first"), status::ok);
  EXPECT_EQ(labels.current(0), first) << "a pair seen before keeps its id";
  EXPECT_EQ(labels.table().size(), table.size()) << "nothing grows past the last id";
  EXPECT_EQ(labels.current(5), history_labels::none) << "a device out of range reads as unlabelled";
}

namespace {
__attribute__((noinline)) void empty_cache_here(allocator& a) { EXPECT_EQ(a.empty_cache(-1), status::ok); }
}  // namespace

// PyTorch's context="all": a segment given back carries the call that released it (empty_cache),
// not the allocation that made it; by default it carries the allocation's, and with no free sites none.
TEST(HistoryLabels, ASegmentFreeCarriesTheCallThatReleasedItWhereFreeingSitesAreAsked) {
  using frees = history::free_sites;
  for (frees mode : {frees::freeing, frees::allocation, frees::none}) {
    auto a = host_allocator("capture:native");
    ASSERT_EQ(a->record_history(16, false, true, mode), status::ok);
    void* p = nullptr;
    ASSERT_EQ(a->malloc(4096, 0, nullptr, &p), status::ok);
    ASSERT_EQ(a->free(p), status::ok);
    empty_cache_here(*a);
    const std::vector<history_entry> e = a->allocation_history()->entries();
    ASSERT_EQ(e.size(), 4u);
    ASSERT_EQ(e[0].action, history_action::segment_alloc);
    ASSERT_EQ(e[3].action, history_action::segment_free);
    ASSERT_NE(e[0].site, 0u);
    switch (mode) {
      case frees::freeing:
        EXPECT_NE(e[3].site, 0u);
        EXPECT_NE(e[3].site, e[0].site) << "empty_cache's own call site";
        EXPECT_NE(e[3].site, e[2].site) << "not the block's free either";
        break;
      case frees::allocation: EXPECT_EQ(e[3].site, e[0].site); break;
      case frees::none: EXPECT_EQ(e[3].site, 0u); break;
    }
  }
}

}  // namespace
}  // namespace tracepool::core
