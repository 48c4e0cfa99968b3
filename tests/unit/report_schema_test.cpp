// The report's one list of fields (Note [One schema] in core/report/report_schema.h): the document
// names every field in its place, and what the writer writes the reader reads back.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "report/report.h"
#include "report/report_schema.h"
#include "report_support.h"

namespace {

namespace core = tracepool::core;
using tracepool::testing::json;

// Every key schema::fields names for one struct, the derived ones included.
struct keys_of {
  std::vector<std::string> keys;
  template <typename T>
  void operator()(const char* key, const T&, bool = false) {
    keys.push_back(key);
  }
  template <typename T>
  void unless(const char* key, const T&, const T&) {
    keys.push_back(key);
  }
  template <typename T>
  void nullable(const char* key, const T&, const T&, bool = false) {
    keys.push_back(key);
  }
  template <typename T>
  void derived(const char* key, const T&) {
    keys.push_back(key);
  }
  void processes(const core::device_summary&) { keys.push_back("processes"); }
  void own(const char* key, const core::report&, bool = false) { keys.push_back(key); }
};

template <typename T>
std::vector<std::string> keys(T item = T{}) {
  keys_of k;
  core::schema::fields(k, item);
  return k.keys;
}

std::string schema_document() {
  std::ifstream in(TRACEPOOL_SCHEMA_DOC);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The document's text from `from` to `to`.
std::string between(const std::string& doc, const char* from, const char* to) {
  const size_t begin = doc.find(from);
  EXPECT_NE(begin, std::string::npos) << from;
  const size_t end = doc.find(to, begin + 1);
  EXPECT_NE(end, std::string::npos) << to;
  return doc.substr(begin, end - begin);
}

void expect_documented(const std::string& block, const std::vector<std::string>& fields, const char* what) {
  for (const std::string& key : fields)
    EXPECT_NE(block.find("\"" + key + "\""), std::string::npos) << what << "." << key << " is not in its place in "
                                                                << "docs/report-schema.md";
}

TEST(ReportSchema, TheDocumentNamesEveryFieldInItsPlace) {
  const std::string doc = schema_document();
  ASSERT_FALSE(doc.empty()) << TRACEPOOL_SCHEMA_DOC;
  expect_documented(between(doc, "\n{\n  \"schema\"", "SITE = {"), keys<core::report>(), "the report");
  const std::string site = between(doc, "SITE = {", "RETAINED = {");
  expect_documented(site, keys<core::site_summary>(), "SITE");
  expect_documented(site, keys<core::holder_summary>(), "SITE.held_by");
  expect_documented(site, keys<core::device_share>(), "SITE.by_device");
  expect_documented(between(doc, "CACHED = {", "POOL = {"), keys<core::cached_summary>(), "CACHED");
  const std::string pool = between(doc, "POOL = {", "FRAME = {");
  expect_documented(pool, keys<core::pool_summary>(), "POOL");
  expect_documented(pool, keys<core::pool_site_summary>(), "POOL.sites");
  const std::string devices = between(doc, "\"devices\": [", "\"leaks\":");
  expect_documented(devices, keys<core::device_summary>(), "devices");
  expect_documented(devices, keys<tracepool::backend::process_usage>(), "devices.processes");
  expect_documented(between(doc, "\"process\":", "\"capture\":"), keys<core::process_summary>(), "process");
  expect_documented(between(doc, "\"marks\":", "\"marks_made\""), keys<core::mark_summary>(), "marks");
  expect_documented(between(doc, "\"holder_search\":", "\"oom\":"), keys<core::holder_search>(), "holder_search");
}

// A field the writer writes is one the reader reads: a report with every field set reads back equal,
// field by field, as the writer sees it.
TEST(ReportSchema, WhatTheWriterWritesTheReaderReadsBack) {
  core::report r;
  r.reason = "demand";
  r.backend = "host";
  r.process = {42, "node7", 3, 1, 8};
  core::device_summary d;
  d.device = 1;
  d.cached_bytes = 6 << 20;
  d.largest_free_block = 2 << 20;
  d.total_bytes = 80 << 20;
  d.used_bytes = 40 << 20;
  d.processes = {{42, 30 << 20}, {43, -1}, {44, -7}};  // any negative figure: not known
  d.processes_listed = true;
  d.segments = core::segments_growable;
  d.growable_available = true;
  d.free_page_bytes = 4 << 20;
  r.devices = {d};
  core::site_summary s;
  s.site = 9, s.bytes = 100, s.blocks = 2, s.block_bytes = 1024, s.peak_bytes = 200, s.total_bytes = 300;
  s.total_blocks = 5, s.tags = {"a", "b"}, s.live_at_marks = {1, 2}, s.growing = true, s.growth_floors = {3};
  s.live_at_auto_marks = {4, 5}, s.by_device = {{1, 100, 2}}, s.held_by = {{"list `kept`", 100, 2, "kept[0]"}};
  r.leaks = {s};
  core::cached_summary c;
  c.site = 9, c.bytes = 512, c.blocks = 1, c.largest_free_block = 512, c.inactive_split_bytes = 512;
  c.by_device = {{1, 512, 1}}, c.tags = {"a"};
  r.cached = {c};
  core::pool_summary p;
  p.device = 1, p.pool = 77, p.label = "CUDA graph", p.site = 4, p.bytes = 10, p.blocks = 1, p.block_bytes = 512;
  p.reserved_bytes = 2 << 20, p.cached_bytes = 1 << 20, p.sites = {{4, {}, 10, 1}};
  r.pools = {p};
  r.marks = {{"epoch", 0, 5, 100, 4 << 20}};
  r.marks_made = 1;
  r.holders = {true, false, 10, 2, 0.5, "cut short"};
  const std::string saved = core::to_json(r);
  core::report back;
  ASSERT_EQ(core::read_report_json(saved, &back), tracepool::status::ok) << tracepool::last_error();
  EXPECT_EQ(core::to_json(back), saved);
  const json doc = json::parse(saved);
  for (const std::string& key : keys<core::site_summary>()) EXPECT_TRUE(doc["leaks"][0].contains(key)) << key;
  for (const std::string& key : keys<core::device_summary>()) EXPECT_TRUE(doc["devices"][0].contains(key)) << key;
  for (const std::string& key : keys<core::pool_summary>()) EXPECT_TRUE(doc["pools"][0].contains(key)) << key;
  for (const std::string& key : keys<core::report>())
    EXPECT_TRUE(doc.contains(key) || key == "oom") << key;  // "oom" only when the reason is
  EXPECT_EQ(doc["process"]["rank"], 3);
  EXPECT_EQ(doc["devices"][0]["processes"][1]["used_bytes"], nullptr);
  EXPECT_EQ(doc["devices"][0]["processes"][2]["used_bytes"], nullptr);
}

}  // namespace
