// compare.h: reports side by side. merge: the reports of several processes (the ranks of one job) as
// one view, each call site's live and cached bytes in each, the imbalance between them and where it
// grows (schema tracepool.merge/1). diff: each call site's change from one report to another (schema
// tracepool.diff/1). Both read saved reports with the library's reader and name sites as every report
// does (Note [Site titles] in wording.h).
//
// Across processes (ranks, runs, commits) a call site is known by what it is: its tags and its frames'
// kind, function, file and line. Its id is its own process's, and native addresses move with each
// process's address-space layout; both are left out.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "report/report.h"

namespace tracepool::core {

inline constexpr const char* merge_schema = "tracepool.merge/1";
inline constexpr const char* diff_schema = "tracepool.diff/1";

// A saved report's text, and what messages and the view call it (its file's name).
struct saved_text {
  std::string_view text;
  std::string name;
};

// `format` json or text (html: to_html of the reports, a view of each and of them all). A text that is
// not a report is invalid_argument naming it and its first problem, as read_report_json says.
status merge_reports(const std::vector<saved_text>& reports, report_format format, size_t top, std::string* out);
// `format` json or text (html: a page listing the change, with a view of each report: its data is the
// JSON's, with the two reports in its "reports").
status diff_reports(const saved_text& before, const saved_text& after, report_format format, size_t top,
                    std::string* out);

}  // namespace tracepool::core
