// The report reader at scale (core/report/report_reader.cpp): 100,000 leaks, 100,000 retained entries
// and 100,000 marks are read, and each retained entry linked to its leak and its mark; an object of
// 200,000 keys is parsed (core/report/json_in.h). Its own test program, so that ctest can give it a
// timeout (tests/CMakeLists.txt): a reader that looks each entry up by scanning a list takes minutes
// here, and fails by that timeout; one that indexes them, seconds.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "big_report.h"
#include "report/json_in.h"
#include "report/report.h"

namespace {

namespace core = tracepool::core;
using tracepool::status;
using tracepool::testing::big_report_json;
using tracepool::testing::mark_label;
using tracepool::testing::retained_leak;
using tracepool::testing::retained_mark;

TEST(ReportReaderScale, AHundredThousandRetainedEntriesAreReadAndLinked) {
  constexpr size_t entries = 100000, marks = 100000;
  core::report r;
  ASSERT_EQ(core::read_report_json(big_report_json(entries, marks), &r), status::ok) << tracepool::last_error();
  ASSERT_EQ(r.leaks.size(), entries);
  ASSERT_EQ(r.retained.size(), entries);
  ASSERT_EQ(r.marks.size(), marks);
  size_t wrong = 0, first_wrong = 0;
  for (size_t i = 0; i < entries; ++i) {
    const core::site_summary& s = r.leaks[i];
    const core::retained_summary& t = r.retained[i];
    const bool right = s.tags == std::vector<std::string>{i % 2 ? "eval" : "train"} && s.frames.size() == 3 &&
                       s.frames[2].function == "step_" + std::to_string(i / 2) && t.leak == retained_leak(i, entries) &&
                       t.born_after == retained_mark(i, marks) && r.marks[i].label == mark_label(i, marks);
    if (!right && wrong++ == 0) first_wrong = i;
  }
  EXPECT_EQ(wrong, 0u) << "the first wrong entry: " << first_wrong << ", linked to leak "
                       << r.retained[first_wrong].leak << " (not " << retained_leak(first_wrong, entries)
                       << ") and mark " << r.retained[first_wrong].born_after << " (not "
                       << retained_mark(first_wrong, marks) << ")";
}

// An object's keys are found through an index while it is read: the JSON library's own ordered objects
// look each new key up by a scan of those before it, so that one object of 200,000 keys (a text of
// 3 MB) took minutes. Here the keys are a device's statistics, all unknown but the last.
TEST(ReportReaderScale, AnObjectOfTwoHundredThousandKeysIsRead) {
  constexpr size_t keys = 200000;
  std::string text = "{\"schema\":\"tracepool.report/1\",\"stats\":{\"0\":{";
  for (size_t i = 0; i < keys; ++i) text += "\"unknown." + std::to_string(i) + "\":" + std::to_string(i) + ",";
  text +=
      "\"allocated_bytes.all.current\":4096}},\"devices\":[{\"device\":0}],\"leaks\":[],\"cached\":[],\"marks\":[]}";
  core::report r;
  ASSERT_EQ(core::read_report_json(text, &r), status::ok) << tracepool::last_error();
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_EQ(r.devices[0].stats.table.at(core::stat_kind::allocated_bytes, core::all_pools).current, 4096);
}

// What makes that safe: the document is the one the library's own parser builds, and a text that is not
// JSON throws what it throws. Repeated keys keep their first place and their last value, in an object
// small enough to be scanned and in one large enough to be indexed (tracepool's own reports never
// repeat a key; a hand-made one may).
TEST(ReportReaderScale, TheLinearParserBuildsWhatTheLibrarysOwnParserBuilds) {
  std::string many = "{";
  for (int i = 0; i < 40; ++i) many += "\"k" + std::to_string(i % 25) + "\":" + std::to_string(i) + ",";
  many += "\"k3\":{\"k3\":[1,{\"a\":1,\"a\":2}]},\"last\":null}";
  for (const std::string& text :
       {std::string("{}"), std::string("[]"), std::string("7"), std::string("\"s\""), many,
        std::string("{\"b\":1,\"a\":[true,false,null,-1,18446744073709551615,1.5e300,\"\\u00e9\\n\\u0000\"],\"b\":2}"),
        std::string(" [ [ [ ] ] , { \"x\" : { } } ] ")}) {
    const auto ours = tracepool::core::saved_report::parse_json(text);
    const auto theirs = nlohmann::ordered_json::parse(text);
    EXPECT_EQ(ours, theirs) << text;
    EXPECT_EQ(ours.dump(), theirs.dump()) << text;  // the same order too
  }
  // The message of what parse() throws, or "" when it throws nothing.
  const auto thrown = [](auto parse) -> std::string {
    try {
      parse();
    } catch (const nlohmann::json::exception& e) {
      return e.what();
    }
    return "";
  };
  for (const std::string& text : {"", "{", "{\"a\":}", "[1,]", "{} x", "1e400", "\"\xff\"", "{\"a\" 1}", "nul"}) {
    const std::string theirs = thrown([&] { return nlohmann::ordered_json::parse(text).size(); });
    EXPECT_FALSE(theirs.empty()) << text;
    EXPECT_EQ(thrown([&] { return tracepool::core::saved_report::parse_json(text).size(); }), theirs) << text;
  }
}

}  // namespace
