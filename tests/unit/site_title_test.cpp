// Site titles (Note [Site titles] in core/report/wording.h): the rule, and one report rendered through
// the text, merge, diff and the HTML page, which must all name each site the same way.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "report/report.h"
#include "report/wording.h"
#include "report_support.h"
#include "tracepool/tracepool.h"

namespace {

namespace core = tracepool::core;
using tracepool::testing::json;

core::frame_info py(const char* function, const char* file, int line) {
  core::frame_info f;
  f.script = true;
  f.function = function;
  f.file = file;
  f.line = line;
  return f;
}

core::frame_info native(const char* function, const char* module, uintptr_t address, bool interpreter = false) {
  core::frame_info f;
  f.function = function;
  f.module = module;
  f.address = address;
  f.interpreter = interpreter;
  return f;
}

const char* const arrow = " \xe2\x86\x90 ";  // " ← "

TEST(SiteTitle, TheUsersLinesFirstThenTheLibraryLineThatAsked) {
  const std::vector<core::frame_info> frames = {
      native("at::empty_cuda", "/usr/lib/libtorch_cuda.so", 0x10),
      py("forward", "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", 125),
      native("_PyEval_EvalFrameDefault", "/usr/bin/python3", 0x20, true),
      py("__call__", "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", 1500),
      py("step", "/home/me/train.py", 42),
      py("main", "/home/me/train.py", 80),
      py("<module>", "/home/me/train.py", 90),
      py("_run_code", "/usr/lib/python3.11/runpy.py", 88)};
  EXPECT_EQ(core::site_title(frames), std::string("step (train.py:42)") + arrow + "main (:80)" + arrow +
                                          "<module> (:90) \xc2\xb7 via forward (linear.py:125)");
}

TEST(SiteTitle, AtMostFourFramesAndNothingBeyondAModulesTopLevel) {
  std::vector<core::frame_info> frames;
  for (int i = 1; i <= 6; ++i) frames.push_back(py("f", i % 2 ? "a.py" : "b.py", i));
  EXPECT_EQ(core::site_title(frames),
            std::string("f (a.py:1)") + arrow + "f (b.py:2)" + arrow + "f (a.py:3)" + arrow + "f (b.py:4)");
  frames = {py("load", "/home/me/data.py", 3), py("<module>", "/home/me/data.py", 9), py("<module>", "/home/me/train.py", 1),
            py("_call_with_frames_removed", "<frozen importlib._bootstrap>", 241)};
  EXPECT_EQ(core::site_title(frames), std::string("load (data.py:3)") + arrow + "<module> (:9)");
  // A library's module imported by the user's code: its top level is the line that asked.
  frames = {py("<module>", "/venv/lib/python3.11/site-packages/mylib/buffers.py", 5),
            py("_call_with_frames_removed", "<frozen importlib._bootstrap>", 241), py("setup", "/home/me/train.py", 12),
            py("<module>", "/home/me/train.py", 30)};
  EXPECT_EQ(core::site_title(frames),
            std::string("setup (train.py:12)") + arrow + "<module> (:30) \xc2\xb7 via <module> (buffers.py:5)");
  // The library alone: its innermost lines, no "via".
  frames = {py("empty", "/usr/lib/python3/dist-packages/numpy/core.py", 7)};
  EXPECT_EQ(core::site_title(frames), "empty (core.py:7)");
}

TEST(SiteTitle, NativeStacksAreNamedByTheirInnermostFrames) {
  std::vector<core::frame_info> frames = {native("alloc", "/lib/liba.so", 0x1), native("", "/lib/libb.so", 0x2b),
                                          native("??", "", 0x3c)};
  EXPECT_EQ(core::site_title(frames), std::string("alloc (in liba.so)") + arrow + "0x2b (in libb.so)" + arrow + "0x3c");
  EXPECT_EQ(core::site_title({}), "(no call site recorded)");
  EXPECT_EQ(core::tag_list({"train", "step"}), " [train > step]");
}

// Two sites whose innermost line is one (a constructor called from two lines of the user's), and a site
// that a library line asked for; each alive across a mark, so that the text names it in one line too.
core::report two_callers() {
  core::report r;
  r.reason = "exit";
  r.backend = "host";
  r.capture = "python";
  core::device_summary d;
  d.stats.table.increase(core::stat_kind::allocated_bytes, core::pool_kind::large, 7 << 20);
  r.devices = {d};
  const auto site = [](uint32_t id, int64_t mib, std::vector<core::frame_info> frames) {
    core::site_summary s;
    s.site = id;
    s.bytes = s.block_bytes = s.peak_bytes = s.total_bytes = mib << 20;
    s.blocks = s.total_blocks = 1;
    s.frames = std::move(frames);
    return s;
  };
  r.leaks = {site(1, 4, {py("__init__", "/home/me/leaky.py", 7), py("make_a", "/home/me/leaky.py", 20)}),
             site(2, 2, {py("__init__", "/home/me/leaky.py", 7), py("make_b", "/home/me/leaky.py", 30)}),
             site(3, 1, {py("zeros", "/venv/lib/python3.12/site-packages/lib/ops.py", 5),
                         py("make_c", "/home/me/leaky.py", 40)})};
  r.marks = {{"epoch", 0, 10, 7 << 20}};
  r.marks_made = 1;
  for (size_t i = 0; i < r.leaks.size(); ++i) r.retained.push_back({i, -1, 1, r.leaks[i].bytes, 1});
  return r;
}

// The string a C call makes (`call(&out)`), released.
template <typename Call>
std::string c_call(Call&& call) {
  char* out = nullptr;
  EXPECT_EQ(call(&out), TRACEPOOL_OK) << tracepool_last_error();
  std::string s = out != nullptr ? out : "";
  tracepool_string_free(out);
  return s;
}

TEST(SiteTitle, TextMergeDiffAndThePageNameEachSiteTheSameWay) {
  const core::report r = two_callers();
  const std::vector<std::string> titles = {
      std::string("__init__ (leaky.py:7)") + arrow + "make_a (:20)",
      std::string("__init__ (leaky.py:7)") + arrow + "make_b (:30)",
      "make_c (leaky.py:40) \xc2\xb7 via zeros (ops.py:5)"};
  const std::string saved = core::to_json(r);

  // The report's own JSON, and the text: each site's retained line names it.
  const json report = json::parse(saved);
  const std::string text = core::to_text(r);
  for (size_t i = 0; i < titles.size(); ++i) {
    EXPECT_EQ(report["leaks"][i]["title"], titles[i]);
    EXPECT_NE(text.find("(alive through 1)\n       at " + titles[i] + "\n"), std::string::npos) << text;
  }

  // merge and diff, through the C API.
  tracepool_report_options_t as_json{};
  as_json.size = sizeof as_json;
  as_json.format = "json";
  const char* texts[2] = {saved.data(), saved.data()};
  const size_t sizes[2] = {saved.size(), saved.size()};
  const char* names[2] = {"a.json", "b.json"};
  const auto merge = [&](const tracepool_report_options_t* options) {
    return c_call([&](char** out) { return tracepool_merge_reports(2, texts, sizes, names, options, out); });
  };
  const auto diff_of = [&](const tracepool_report_options_t* options) {
    return c_call([&](char** out) { return tracepool_diff_reports(texts, sizes, names, options, out); });
  };
  const json merged = json::parse(merge(&as_json));
  const json diff = json::parse(diff_of(&as_json));
  ASSERT_EQ(merged["sites"].size(), titles.size());
  ASSERT_EQ(diff["sites"].size(), titles.size());
  for (size_t i = 0; i < titles.size(); ++i) {  // both list the sites largest first, as the report does
    EXPECT_EQ(merged["sites"][i]["where"], titles[i]);
    EXPECT_EQ(merged["sites"][i]["title"], titles[i]);
    EXPECT_EQ(diff["sites"][i]["where"], titles[i]);
  }
  const std::string merged_text = merge(nullptr), diff_text = diff_of(nullptr);
  for (const std::string& title : titles) {
    EXPECT_NE(merged_text.find("  " + title + "\n"), std::string::npos) << merged_text;
    EXPECT_EQ(diff_text.find(title), std::string::npos) << "nothing changed: no site is listed\n" << diff_text;
  }

  // The page: the data it draws from names each site by the same title, and it keeps no rule of its own.
  const std::string page = core::to_html(r);
  const std::string open = "id=\"tracepool-data\">";
  const size_t begin = page.find(open) + open.size();
  json data = json::parse(page.substr(begin, page.find("</script>", begin) - begin));
  if (data.is_array()) data = data[0];
  for (size_t i = 0; i < titles.size(); ++i) EXPECT_EQ(data["leaks"][i]["title"], titles[i]);
  EXPECT_EQ(data["leaks"][2]["frames"][0]["library"], true);
  EXPECT_EQ(data["leaks"][2]["frames"][1]["library"], false);
  const std::string viewer = page.substr(page.find("</script>", begin));
  EXPECT_EQ(viewer.find("site-packages"), std::string::npos) << "a library rule of the page's own";
}

// merge and diff refuse what they cannot read with one line naming it, and make nothing.
TEST(SiteTitle, MergeAndDiffRefuseWhatIsNotAReport) {
  const std::string saved = core::to_json(two_callers()), junk = "{\"schema\": \"tracepool.report/1\", \"leaks\": 3}";
  const char* texts[2] = {saved.data(), junk.data()};
  size_t sizes[2] = {saved.size(), junk.size()};
  const char* names[2] = {"good.json", "bad.json"};
  char* out = reinterpret_cast<char*>(1);
  EXPECT_EQ(tracepool_merge_reports(2, texts, sizes, names, nullptr, &out), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(out, nullptr);
  EXPECT_EQ(std::string(tracepool_last_error()).rfind("bad.json: ", 0), 0u) << tracepool_last_error();
  EXPECT_EQ(tracepool_diff_reports(texts, sizes, nullptr, nullptr, &out), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(tracepool_last_error()).rfind("report 1: ", 0), 0u) << tracepool_last_error();
  EXPECT_EQ(tracepool_merge_reports(0, texts, sizes, names, nullptr, &out), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tracepool_merge_reports(1, texts, sizes, names, nullptr, nullptr), TRACEPOOL_ERR_INVALID_ARGUMENT);
  tracepool_report_options_t as_html{};
  as_html.size = sizeof as_html;
  as_html.format = "html";
  texts[1] = saved.data(), sizes[1] = saved.size();
  ASSERT_EQ(tracepool_merge_reports(2, texts, sizes, names, &as_html, &out), TRACEPOOL_OK) << tracepool_last_error();
  EXPECT_EQ(std::string(out).rfind("<!DOCTYPE html>", 0), 0u);
  tracepool_string_free(out);
}

// diff's page is the report page, its data the diff's JSON with the two reports it compares.
TEST(SiteTitle, DiffAsHtmlIsThePageOfTheChangeAndBothReports) {
  const std::string saved = core::to_json(two_callers());
  const char* texts[2] = {saved.data(), saved.data()};
  size_t sizes[2] = {saved.size(), saved.size()};
  const char* names[2] = {"dir/before.json", "after.json"};
  tracepool_report_options_t as_html{};
  as_html.size = sizeof as_html;
  as_html.format = "html";
  const std::string page = c_call([&](char** out) { return tracepool_diff_reports(texts, sizes, names, &as_html, out); });
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(page.find("<title>tracepool diff: before.json -&gt; after.json</title>"), std::string::npos);
  EXPECT_NE(page.find("function drawChanges"), std::string::npos) << "the viewer draws the change";
  const size_t begin = page.find('>', page.find("id=\"tracepool-data\"")) + 1;
  const json data = json::parse(page.substr(begin, page.find("</script>", begin) - begin));
  EXPECT_EQ(data["schema"], "tracepool.diff/1");
  ASSERT_EQ(data["reports"].size(), 2u);
  EXPECT_EQ(data["reports"][0]["schema"], "tracepool.report/1");
  as_html.format = "json";
  const json change = json::parse(c_call([&](char** out) { return tracepool_diff_reports(texts, sizes, names, &as_html, out); }));
  EXPECT_EQ(data["sites"], change["sites"]);
  EXPECT_EQ(data["totals"], change["totals"]);
}

// Saved reports are anyone's: merge and diff give one answer whatever order the files come in, keep sites
// whose names only look alike apart, and stop sums at the largest size instead of overflowing.
TEST(SiteTitle, MergeIsTheSameInAnyOrderAndSafeWithAnyFigures) {
  const auto one = [](int64_t rank, uintptr_t address, std::vector<std::string> tags, int64_t bytes) {
    core::report r;
    r.reason = "exit";
    r.backend = "host";
    r.process.rank = rank;
    r.process.world_size = 2;
    core::site_summary s;
    s.site = 1;
    s.bytes = s.block_bytes = s.peak_bytes = s.total_bytes = bytes;
    s.blocks = s.total_blocks = 1;
    s.tags = std::move(tags);
    s.frames = {native("", "/lib/libfoo.so", address), py("step", "/home/me/train.py", 3)};
    r.leaks = {s};
    return core::to_json(r);
  };
  const std::string a = one(0, 0x1000, {"a\x1f" "b"}, INT64_MAX), b = one(1, 0x2000, {"a", "b"}, INT64_MAX);
  const std::string c = one(1, 0x2000, {"a\x1f" "b"}, INT64_MAX);
  const auto merge = [](const std::string& x, const std::string& y, const char* format) {
    const char* texts[2] = {x.data(), y.data()};
    const size_t sizes[2] = {x.size(), y.size()};
    const char* names[2] = {"x.json", "y.json"};
    tracepool_report_options_t o{};
    o.size = sizeof o;
    o.format = format;
    return c_call([&](char** out) { return tracepool_merge_reports(2, texts, sizes, names, &o, out); });
  };
  const json ab = json::parse(merge(a, b, "json"));
  EXPECT_EQ(ab["sites"].size(), 2u) << "tags [\"a\\x1fb\"] and [\"a\", \"b\"] are two sites";
  const json ac = json::parse(merge(a, c, "json")), ca = json::parse(merge(c, a, "json"));
  ASSERT_EQ(ac["sites"].size(), 1u);
  EXPECT_EQ(ac["sites"][0]["total_live_bytes"], INT64_MAX) << "a sum stops at the largest size";
  EXPECT_EQ(ac["sites"], ca["sites"]) << "the site is named by the first rank's report, whatever the order";
  EXPECT_EQ(ca["sites"][0]["frames"][0]["address"], "0x1000") << "rank 0's report names it";
  EXPECT_NE(merge(c, a, "text").find("8589934592.00 GiB  step (train.py:3)"), std::string::npos)
      << merge(c, a, "text");
}

}  // namespace
