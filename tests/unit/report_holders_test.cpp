// A host's holder search inside the report call (tracepool_holders_fn): the library hands it every live
// block of every leak once, reads its answer into the report and renders every format from that one
// report, with no JSON round trip through the host. A bad answer fails the report with a message and
// writes nothing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "report_support.h"
#include "tracepool/tracepool.h"

namespace {

using tracepool::testing::json;

// What the search saw, and what it answers.
struct search {
  std::vector<tracepool_leak_block_t> seen;
  int calls = 0;
  const char* answer = nullptr;  // nullptr: no answer (NULL)

  static char* run(void* context, const tracepool_leak_block_t* blocks, size_t count) {
    auto* self = static_cast<search*>(context);
    ++self->calls;
    self->seen.assign(blocks, blocks + count);
    return self->answer != nullptr ? strdup(self->answer) : nullptr;
  }
};

class ReportHolders : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(tracepool_create("backend:host,validate:on", &tp), TRACEPOOL_OK);
    for (size_t bytes : {4096, 8192})
      for (int i = 0; i < 2; ++i) {
        void* p = nullptr;
        ASSERT_EQ(tracepool_malloc(tp, bytes, 0, nullptr, &p), TRACEPOOL_OK);
        blocks.push_back(p);
      }
  }
  void TearDown() override {
    for (void* p : blocks) tracepool_free(tp, p, nullptr);
    tracepool_destroy(tp);
  }
  tracepool_report_options_t options(const char* format, search* s) {
    tracepool_report_options_t o{};
    o.size = sizeof o;
    o.format = format;
    o.holders = &search::run;
    o.holders_context = s;
    return o;
  }
  std::string report(const tracepool_report_options_t& o, int expected = TRACEPOOL_OK) {
    char* out = nullptr;
    EXPECT_EQ(tracepool_report_string_with(tp, &o, &out), expected) << tracepool_last_error();
    std::string text = out != nullptr ? out : "";
    tracepool_string_free(out);
    return text;
  }

  tracepool_t* tp = nullptr;
  std::vector<void*> blocks;
};

}  // namespace

TEST_F(ReportHolders, TheSearchSeesEveryLeakedBlockOnceAndItsAnswerIsInTheReport) {
  search s;
  s.answer = R"x({"held_by": {"0": [{"holder": "list `kept` (global in train.py)", "bytes": 16384, "blocks": 2,
                                     "example": "kept[1]"}]},
                 "holder_search": {"complete": true, "objects": 1234, "exposing": 2, "seconds": 0.5, "note": ""}})x";
  const json r = json::parse(report(options("json", &s)));
  EXPECT_EQ(s.calls, 1);
  ASSERT_EQ(s.seen.size(), blocks.size());
  std::set<uint64_t> addresses;
  std::vector<uint64_t> bytes_of_leak(r["leaks"].size(), 0);
  for (const tracepool_leak_block_t& b : s.seen) {
    addresses.insert(b.address);
    ASSERT_LT(b.leak, r["leaks"].size());
    bytes_of_leak[b.leak] += b.bytes;
  }
  for (size_t i = 0; i < bytes_of_leak.size(); ++i)
    EXPECT_EQ(bytes_of_leak[i], r["leaks"][i]["bytes"].get<uint64_t>()) << "leak " << i << ": its blocks, each once";
  for (void* p : blocks) EXPECT_EQ(addresses.count(reinterpret_cast<uint64_t>(p)), 1u);
  ASSERT_EQ(r["leaks"][0]["held_by"].size(), 1u);
  EXPECT_EQ(r["leaks"][0]["held_by"][0]["holder"], "list `kept` (global in train.py)");
  EXPECT_EQ(r["leaks"][0]["held_by"][0]["example"], "kept[1]");
  EXPECT_EQ(r["holder_search"]["objects"], 1234);
  for (const json& leak : r["leaks"]) EXPECT_FALSE(leak.contains("addresses")) << "not asked for";
  // The text renders the same answer, from the one report.
  const std::string text = report(options("text", &s));
  EXPECT_NE(text.find("list `kept` (global in train.py)"), std::string::npos) << text;
}

TEST_F(ReportHolders, NoAnswerMakesTheReportWithoutHolders) {
  search s;
  const json r = json::parse(report(options("json", &s)));
  EXPECT_EQ(s.calls, 1);
  EXPECT_TRUE(!r.contains("holder_search") || r["holder_search"].is_null());
  for (const json& leak : r["leaks"]) EXPECT_TRUE(!leak.contains("held_by") || leak["held_by"].empty());
}

TEST_F(ReportHolders, ABadAnswerFailsTheReportWithAReasonAndWritesNothing) {
  const struct {
    const char* answer;
    const char* message;
  } cases[] = {
      {"not json", "is not JSON"},
      {"[]", "held_by"},
      {R"({"held_by": {"7": []}})", "held_by.7: the key must be the index of a leak"},
      {R"({"held_by": {"x": []}})", "held_by.x: the key must be the index of a leak"},
      {R"({"held_by": {"0": [{"bytes": 1}]}})", "holder"},
      {R"({"held_by": {"0": "kept"}})", "held_by.0 must be a list"},
  };
  const std::string path = tracepool::testing::scratch_dir() + "/never.json";
  for (const auto& c : cases) {
    search s;
    s.answer = c.answer;
    report(options("json", &s), TRACEPOOL_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(tracepool_last_error()).find(c.message), std::string::npos)
        << c.answer << ": " << tracepool_last_error();
    const tracepool_report_options_t o = options(nullptr, &s);
    EXPECT_EQ(tracepool_write_report_with(tp, path.c_str(), &o), TRACEPOOL_ERR_INVALID_ARGUMENT) << c.answer;
    EXPECT_EQ(std::fopen(path.c_str(), "r"), nullptr) << c.answer << ": written anyway";
  }
}
