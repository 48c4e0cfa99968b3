// The HTML report (core/report/report_html.cpp): one page that holds the report it draws, written by
// every way out of the library. What the page draws is tested in a browser (tests/python/test_html_report.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "report/timeline.h"
#include "report_support.h"
#include "tracepool/tracepool.h"

using tracepool::testing::HostInstanceTest;
using tracepool::testing::json;
using tracepool::testing::read_file;
using tracepool::testing::render;
using tracepool::testing::report_of;
using tracepool::testing::report_string;

namespace {

constexpr const char* data_open = "<script type=\"application/json\" id=\"tracepool-data\">";

// The JSON the page holds, as the browser's JSON.parse reads it (the page writes '<' as \u003c).
json data_of(const std::string& page) {
  const size_t from = page.find(data_open);
  if (from == std::string::npos) {
    ADD_FAILURE() << "no data in the page";
    return json();
  }
  const size_t begin = from + std::string(data_open).size();
  const size_t end = page.find("</script>", begin);
  return json::parse(page.substr(begin, end - begin), nullptr, /*allow_exceptions=*/false);
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

__attribute__((noinline)) void* allocate_here(tracepool_t* tp, size_t size, int device = 0) {
  void* p = nullptr;
  EXPECT_EQ(tracepool_malloc(tp, size, device, nullptr, &p), TRACEPOOL_OK) << tracepool_last_error();
  KEEP_FRAME();
  return p;
}

using HtmlReport = HostInstanceTest;

TEST_F(HtmlReport, ThePageHoldsTheReportItDraws) {
  void* p = allocate_here(tp, 3 << 20);
  ASSERT_EQ(tracepool_mark(tp, "epoch 1"), TRACEPOOL_OK);
  const std::string saved = report_of(tp).dump();
  int rc = 0;
  const std::string page = render(saved, "html", 0, &rc);
  ASSERT_EQ(rc, TRACEPOOL_OK) << page;
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  for (const char* marker : {"@TITLE@", "@STYLE@", "@DATA@", "@SCRIPT@"})
    EXPECT_EQ(page.find(marker), std::string::npos) << marker << " left in the page";
  EXPECT_EQ(occurrences(page, "</script>"), 2u) << "the data and the viewer, nothing else";
  EXPECT_NE(page.find("function drawFlame"), std::string::npos) << "the viewer is built in";
  EXPECT_EQ(page.find("http://"), page.find("http://www.w3.org/2000/svg")) << "nothing is loaded from anywhere";
  EXPECT_EQ(page.find("https://"), std::string::npos);
  const json data = data_of(page);
  ASSERT_TRUE(data.is_array()) << page.substr(0, 400);
  ASSERT_EQ(data.size(), 1u);
  EXPECT_EQ(data[0], json::parse(render(saved, "json")));
  EXPECT_EQ(data[0]["leaks"][0]["bytes"], 3 << 20);
  ASSERT_EQ(tracepool_free(tp, p, nullptr), TRACEPOOL_OK);
}

TEST_F(HtmlReport, TextFromTheProgramCannotEndTheScriptThatHoldsIt) {
  const std::string hostile = "</script><script>window.pwned = 1</script><!--";
  ASSERT_EQ(tracepool_tag_push(hostile.c_str()), TRACEPOOL_OK);
  void* p = allocate_here(tp, 4096);
  ASSERT_EQ(tracepool_tag_pop(), TRACEPOOL_OK);
  const std::string page = report_string(tp, "html");
  EXPECT_EQ(occurrences(page, "</script>"), 2u);
  EXPECT_EQ(page.find("<script>window.pwned"), std::string::npos);
  const json data = data_of(page);
  ASSERT_TRUE(data.is_array());
  EXPECT_EQ(data[0]["leaks"][0]["tags"][0], hostile) << "read back as it was";
  ASSERT_EQ(tracepool_free(tp, p, nullptr), TRACEPOOL_OK);
}

TEST_F(HtmlReport, WrittenWhereverReportsGoByExtensionOrByName) {
  void* p = allocate_here(tp, 4096);
  for (const char* name : {"/r.html", "/r.htm"}) {
    ASSERT_EQ(tracepool_write_report(tp, (dir + name).c_str(), nullptr), TRACEPOOL_OK) << tracepool_last_error();
    EXPECT_EQ(read_file(dir + name).rfind("<!DOCTYPE html>", 0), 0u) << name;
  }
  ASSERT_EQ(tracepool_write_report(tp, (dir + "/r.txt").c_str(), "html"), TRACEPOOL_OK);
  EXPECT_EQ(read_file(dir + "/r.txt").rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(tracepool_write_report(tp, (dir + "/r.txt").c_str(), "svg"), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tracepool_last_error()).find("json, text, html"), std::string::npos) << tracepool_last_error();
  ASSERT_EQ(tracepool_free(tp, p, nullptr), TRACEPOOL_OK);
}

TEST_F(HtmlReport, SeveralReportsMakeOnePageAndABadOneIsNamed) {
  void* p = allocate_here(tp, 4096);
  const std::string first = report_of(tp).dump();
  void* q = allocate_here(tp, 8192);
  const std::string second = report_of(tp).dump();
  const char* texts[] = {first.c_str(), second.c_str()};
  const size_t sizes[] = {first.size(), second.size()};
  const char* names[] = {"rank0.json", "rank1.json"};
  char* out = nullptr;
  ASSERT_EQ(tracepool_render_html(2, texts, sizes, names, &out), TRACEPOOL_OK) << tracepool_last_error();
  const json data = data_of(out);
  tracepool_string_free(out);
  ASSERT_EQ(data.size(), 2u);
  EXPECT_EQ(data[0]["leaks"].size(), 1u);
  EXPECT_EQ(data[1]["leaks"].size(), 2u);

  const std::string bad = "{\"schema\": \"tracepool.report/1\"}";
  texts[1] = bad.c_str();
  const size_t bad_sizes[] = {first.size(), bad.size()};
  EXPECT_EQ(tracepool_render_html(2, texts, bad_sizes, names, &out), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(out, nullptr);
  EXPECT_EQ(std::string(tracepool_last_error()).rfind("rank1.json", 0), 0u) << tracepool_last_error();
  EXPECT_EQ(tracepool_render_html(0, texts, sizes, names, &out), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tracepool_render_html(2, nullptr, sizes, names, &out), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tracepool_render_html(1, texts, sizes, nullptr, nullptr), TRACEPOOL_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(tracepool_render_html(1, texts, sizes, nullptr, &out), TRACEPOOL_OK) << "names may be left out";
  tracepool_string_free(out);
  ASSERT_EQ(tracepool_free(tp, p, nullptr), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_free(tp, q, nullptr), TRACEPOOL_OK);
}

TEST(ReportFigures, SitesAndCacheSayWhichDeviceHoldsThem) {
  tracepool_t* tp = nullptr;
  ASSERT_EQ(tracepool_create("backend:host,host_devices:2,validate:on", &tp), TRACEPOOL_OK);
  std::vector<void*> blocks;
  for (int device : {0, 1, 1}) blocks.push_back(allocate_here(tp, 1 << 20, device));
  ASSERT_EQ(tracepool_free(tp, blocks.back(), nullptr), TRACEPOOL_OK);
  blocks.pop_back();
  const json r = report_of(tp);
  ASSERT_EQ(r["leaks"].size(), 1u) << r["leaks"].dump(1);
  const json& shares = r["leaks"][0]["by_device"];
  ASSERT_EQ(shares.size(), 2u) << shares.dump();
  EXPECT_EQ(shares[0], (json{{"device", 0}, {"bytes", 1 << 20}, {"blocks", 1}}));
  EXPECT_EQ(shares[1], (json{{"device", 1}, {"bytes", 1 << 20}, {"blocks", 1}}));
  int64_t cached_on[2] = {0, 0};
  for (const json& c : r["cached"])
    for (const json& d : c["by_device"]) cached_on[d["device"].get<int>()] += d["bytes"].get<int64_t>();
  EXPECT_EQ(cached_on[0], r["devices"][0]["cached_bytes"].get<int64_t>());
  EXPECT_EQ(cached_on[1], r["devices"][1]["cached_bytes"].get<int64_t>());
  EXPECT_GE(cached_on[1], 1 << 20) << "the freed block is device 1's cache";

  json twice = r;
  twice["leaks"][0]["by_device"][1]["device"] = 0;
  int rc = 0;
  const std::string message = render(twice.dump(), "text", 0, &rc, "r.json");
  EXPECT_EQ(rc, TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(message.find("r.json: leaks[0].by_device[1].device 0 is listed twice"), std::string::npos) << message;
  for (void* p : blocks) ASSERT_EQ(tracepool_free(tp, p, nullptr), TRACEPOOL_OK);
  tracepool_destroy(tp);
}

TEST(ReportFigures, MarksRecordReservedBytesAndOldReportsHaveNone) {
  tracepool_t* tp = nullptr;
  ASSERT_EQ(tracepool_create("backend:host,validate:on", &tp), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_mark(tp, "empty"), TRACEPOOL_OK);
  void* p = allocate_here(tp, 5 << 20);
  ASSERT_EQ(tracepool_mark(tp, "one block"), TRACEPOOL_OK);
  tracepool_stats_t stats{};
  stats.size = sizeof stats;
  ASSERT_EQ(tracepool_get_stats(tp, 0, &stats), TRACEPOOL_OK);
  const json r = report_of(tp);
  ASSERT_EQ(r["marks"].size(), 2u);
  EXPECT_EQ(r["marks"][0]["reserved_bytes"], 0);
  EXPECT_EQ(r["marks"][1]["reserved_bytes"].get<int64_t>(), static_cast<int64_t>(stats.reserved_bytes.current));
  EXPECT_GE(r["marks"][1]["reserved_bytes"].get<int64_t>(), r["marks"][1]["live_bytes"].get<int64_t>());

  json old = r;
  for (json& m : old["marks"]) m.erase("reserved_bytes");
  const json read_back = json::parse(render(old.dump(), "json"));
  for (const json& m : read_back["marks"]) EXPECT_FALSE(m.contains("reserved_bytes")) << "not made up: " << m.dump();
  json late = r;
  late["marks"][0]["time_ns"] = uint64_t{1} << 63;  // more than the int64 it is written back as
  int rc = 0;
  const std::string message = render(late.dump(), "json", 0, &rc, "r.json");
  EXPECT_EQ(rc, TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(message.find("r.json: marks[0].time_ns must be at most 9223372036854775807"), std::string::npos) << message;
  ASSERT_EQ(tracepool_free(tp, p, nullptr), TRACEPOOL_OK);
  tracepool_destroy(tp);
}

}  // namespace

namespace {

// Note [Timeline from the history]: the figures after each event, walked back from the statistics.
TEST(ReportFigures, TheHistoryGivesAllocatedAndReservedAfterEachEvent) {
  tracepool_t* tp = nullptr;
  ASSERT_EQ(tracepool_create("backend:host,history:64,validate:on", &tp), TRACEPOOL_OK);
  void* a = allocate_here(tp, 1 << 20);   // a small segment (2 MiB) and a block
  void* b = allocate_here(tp, 3 << 20);   // a large segment (20 MiB) and a block
  ASSERT_EQ(tracepool_free(tp, a, nullptr), TRACEPOOL_OK);
  tracepool_stats_t stats{};
  stats.size = sizeof stats;
  ASSERT_EQ(tracepool_get_stats(tp, 0, &stats), TRACEPOOL_OK);
  const json r = report_of(tp);
  ASSERT_EQ(r["timeline"].size(), 1u) << r["timeline"].dump();
  const json& points = r["timeline"][0]["points"];
  EXPECT_EQ(r["history_events"], 5) << "two segments, two allocations, one free";
  ASSERT_EQ(points.size(), 5u) << points.dump();
  for (size_t i = 1; i < points.size(); ++i) EXPECT_GE(points[i][0], points[i - 1][0]) << "oldest first";
  // After the first segment: reserved, nothing allocated; after the last event: the statistics now.
  EXPECT_EQ(points[0][1], 0);
  EXPECT_GT(points[0][2].get<int64_t>(), 0);
  EXPECT_EQ(points[4][1].get<int64_t>(), static_cast<int64_t>(stats.allocated_bytes.current));
  EXPECT_EQ(points[4][2].get<int64_t>(), static_cast<int64_t>(stats.reserved_bytes.current));
  int64_t most = 0;
  for (const json& p : points) most = std::max(most, p[1].get<int64_t>());
  EXPECT_EQ(most, static_cast<int64_t>(stats.allocated_bytes.peak));

  json bad = r;
  bad["timeline"][0]["points"][3][0] = 0;
  int rc = 0;
  const std::string message = render(bad.dump(), "text", 0, &rc, "r.json");
  EXPECT_EQ(rc, TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(message.find("r.json: timeline[0].points[3] is earlier than the point before it"), std::string::npos)
      << message;
  EXPECT_EQ(json::parse(render(r.dump(), "json"))["timeline"], r["timeline"]) << "read back as written";
  ASSERT_EQ(tracepool_free(tp, b, nullptr), TRACEPOOL_OK);
  tracepool_destroy(tp);
}

// 5000 events, one block each, and a spike of 1 MiB at event 2501, which falls inside a run of the
// thinned series (runs of about 5 events), not at its end: a thinning that kept each run's last point
// would lose it.
TEST(ReportFigures, ALongHistoryIsThinnedKeepingItsPeakAndEndingOnTheFiguresNow) {
  using namespace tracepool::core;
  std::vector<history_entry> entries;
  int64_t allocated = 0, peak = 0;
  for (int i = 0; i < 5000; ++i) {
    const bool spike = i == 2501, after_spike = i == 2502;
    history_entry e{};
    e.time_ns = 1000 + static_cast<uint64_t>(i);
    e.device = 0;
    e.size = spike || after_spike ? size_t{1} << 20 : 4096;
    e.action = after_spike || (i % 3 == 2 && !spike) ? history_action::free : history_action::alloc;
    allocated += e.action == history_action::alloc ? static_cast<int64_t>(e.size) : -static_cast<int64_t>(e.size);
    peak = std::max(peak, allocated);
    entries.push_back(e);
  }
  const std::vector<device_timeline> t = timelines_from(entries, {device_figures{0, allocated, 20 << 20}});
  ASSERT_EQ(t.size(), 1u);
  const std::vector<timeline_point>& points = t[0].points;
  ASSERT_EQ(points.size(), timeline_points_kept);
  int64_t most = 0;
  for (const timeline_point& p : points) most = std::max(most, p.allocated_bytes);
  EXPECT_EQ(most, peak) << "the spike is kept";
  EXPECT_GE(peak, int64_t{1} << 20);
  EXPECT_EQ(points.back().allocated_bytes, allocated) << "the last point is the figures now";
  EXPECT_EQ(points.back().time_ns, entries.back().time_ns);
  for (size_t i = 1; i < points.size(); ++i) EXPECT_GT(points[i].time_ns, points[i - 1].time_ns);
}

TEST(ReportFigures, WithoutAHistoryThereIsNoTimeline) {
  tracepool_t* tp = nullptr;
  ASSERT_EQ(tracepool_create("backend:host", &tp), TRACEPOOL_OK);
  void* p = allocate_here(tp, 4096);
  const json r = report_of(tp);
  EXPECT_EQ(r["timeline"], json::array());
  EXPECT_EQ(r["history_events"], 0);
  ASSERT_EQ(tracepool_free(tp, p, nullptr), TRACEPOOL_OK);
  tracepool_destroy(tp);
}

}  // namespace
