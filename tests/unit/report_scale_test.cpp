// The report reader at scale (core/report/report_reader.cpp): 100,000 leaks, 100,000 retained entries
// and 100,000 marks are read, and each retained entry linked to its leak and its mark. Its own test
// program, so that ctest can give it a timeout (tests/CMakeLists.txt): a reader that looks each entry up
// by scanning a list takes minutes here, and fails by that timeout; one that indexes them, seconds.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "big_report.h"
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

}  // namespace
