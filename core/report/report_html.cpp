// report_html.cpp: the HTML rendering of one or more reports, or of a diff: one self-contained page (no
// network, no library) that holds them as JSON and draws them in the browser with the viewer in report/html.
// The page's three files are built into the library (core/CMakeLists.txt embeds them), so a C host,
// the TRACEPOOL_REPORT exit report and the Python package all write the same page.
#include <string>
#include <string_view>
#include <vector>

#include "base/printable.h"
#include "report/report.h"

namespace tracepool::core {

// report/html/report.{html,css,js}, as built (report_html_assets.cpp, generated).
extern const char* const report_html_page;
extern const char* const report_html_style;
extern const char* const report_html_script;

namespace {

// JSON inside <script type="application/json"> ends at the first "</script": every '<' becomes
// \u003c, which can only occur inside a JSON string (no structural character is '<'), where
// JSON.parse reads it back as '<'.
void append_embedded_json(std::string* out, const std::string& json) {
  for (char c : json) {
    if (c == '<')
      *out += "\\u003c";
    else if (c != '\n')
      *out += c;
  }
}

std::string html_escaped(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// The window's title: the host and the reason come from the report, shown as the text report shows them.
std::string title_of(const std::vector<const report*>& reports) {
  const report& first = *reports.front();
  std::string title = "tracepool report: ";
  if (reports.size() > 1)
    title += std::to_string(reports.size()) + " processes";
  else
    title += "pid " + std::to_string(first.process.pid) + " on " + printable(first.process.host);
  return title + " (" + printable(first.reason) + ")";
}

// The page around `data`, JSON already made safe to embed (append_embedded_json).
std::string page(const std::string& title, std::string data) {
  // The page's markers, in the order they appear; what replaces them is never searched again.
  const std::pair<std::string_view, std::string> fills[] = {
      {"@TITLE@", html_escaped(title)},
      {"@STYLE@", report_html_style},
      {"@DATA@", std::move(data)},
      {"@SCRIPT@", report_html_script},
  };
  const std::string_view skeleton = report_html_page;
  std::string out;
  out.reserve(skeleton.size() + fills[1].second.size() + fills[2].second.size() + fills[3].second.size());
  size_t from = 0;
  for (const auto& [marker, fill] : fills) {
    const size_t at = skeleton.find(marker, from);
    if (at == std::string_view::npos) continue;  // a page without it: tests of report.html say so
    out.append(skeleton.substr(from, at - from));
    out += fill;
    from = at + marker.size();
  }
  out.append(skeleton.substr(from));
  return out;
}

}  // namespace

std::string to_html(const std::vector<const report*>& reports) {
  if (reports.empty()) return {};
  std::string data = "[";
  for (size_t i = 0; i < reports.size(); ++i) {
    if (i != 0) data += ',';
    append_embedded_json(&data, to_json(*reports[i]));
  }
  data += ']';
  return page(title_of(reports), std::move(data));
}

std::string to_html(const std::string& title, const std::string& data_json) {
  std::string data;
  append_embedded_json(&data, data_json);
  return page(title, std::move(data));
}

std::string to_html(const report& r) { return to_html(std::vector<const report*>{&r}); }

}  // namespace tracepool::core
