// Names from outside, made printable (Note [Printable text] in core/base/printable.h): control
// characters, layout and bidi controls and bytes that are not UTF-8 are shown escaped; nothing else
// changes. A saved report whose names hold terminal escapes, CR, NL, NUL, bidi controls renders as text
// that holds none of them raw and shows each escaped; ordinary names render as they are.
#include "base/printable.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <iterator>
#include <string>
#include <vector>

#include "base/utf8.h"
#include "report/report.h"
#include "report_support.h"

namespace {

namespace core = tracepool::core;
using tracepool::status;
using tracepool::testing::json;

// Everything a terminal might act on, in one name: set the window title (OSC ... BEL), clear the
// screen (CSI), CR and NL (a faked line), tab, DEL, NEL (a C1 control), the right-to-left override,
// the line separator, a left-to-right isolate, the right-to-left mark, and a NUL with text after it.
const std::string hostile = std::string("\x1b]0;owned\x07\x1b[2J\r\nFAKE 1.00 GiB\t\x7f\xc2\x85\xe2\x80\xae") +
                            "gnp\xe2\x80\xa8\xe2\x81\xa6\xe2\x80\x8f" + std::string(1, '\0') + "end";
// ... as the text shows it.
const std::string hostile_shown =
    "\\x1b]0;owned\\x07\\x1b[2J\\x0d\\x0aFAKE 1.00 GiB\\x09\\x7f\\x85\\u202egnp\\u2028\\u2066\\u200f\\x00end";

// A frame of either kind; `name` is put into its function, file and module, each with its own prefix.
json frame(const char* kind, const std::string& name, int line) {
  json f = {{"kind", kind}, {"function", "fn_" + name}, {"file", "dir/file_" + name}, {"line", line}};
  if (std::string(kind) == "native") f["module"] = "/lib/module_" + name, f["file"] = nullptr, f["line"] = nullptr;
  return f;
}

// The rule itself, one class of character at a time.
TEST(Printable, EachControlCharacterIsShownAsItsCodeInHex) {
  EXPECT_EQ(core::printable(std::string("\0\x01\t\n\r\x1b\x1f\x7f", 8)), "\\x00\\x01\\x09\\x0a\\x0d\\x1b\\x1f\\x7f");
  EXPECT_EQ(core::printable("\xc2\x80 \xc2\x85 \xc2\x9b \xc2\x9f"), "\\x80 \\x85 \\x9b \\x9f");  // C1: U+0080..U+009F
  EXPECT_EQ(core::printable("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\"),
            "\\x1b]8;;http://x\\x1b\\link\\x1b]8;;\\x1b\\");
}

TEST(Printable, LayoutAndBidiControlsAreShownAsTheirCodePoint) {
  const char* controls[] = {"\u200e", "\u200f", "\u2028", "\u2029", "\u202a", "\u202b", "\u202c",
                            "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069"};
  const char* shown[] = {"\\u200e", "\\u200f", "\\u2028", "\\u2029", "\\u202a", "\\u202b", "\\u202c",
                         "\\u202d", "\\u202e", "\\u2066", "\\u2067", "\\u2068", "\\u2069"};
  for (size_t i = 0; i < std::size(controls); ++i)
    EXPECT_EQ(core::printable(std::string("a") + controls[i] + "b"), std::string("a") + shown[i] + "b") << shown[i];
  // Their neighbours are ordinary: zero-width space and joiner, the narrow no-break space, word joiner.
  for (const char* ordinary : {"\u200b", "\u200d", "\u202f", "\u2060", "\u2065", "\u206a", "\u00a0", "\u00a1"})
    EXPECT_EQ(core::printable(ordinary), ordinary);
}

TEST(Printable, EachByteOutsideUtf8IsShownAsTheByteInHex) {
  EXPECT_EQ(core::printable("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(core::printable("a\xc3"), "a\\xc3");                           // cut short at the end
  EXPECT_EQ(core::printable("\xe2\x80("), "\\xe2\\x80(");                  // cut short before an ASCII byte
  EXPECT_EQ(core::printable("\xc0\xaf"), "\\xc0\\xaf");                    // an overlong '/'
  EXPECT_EQ(core::printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");           // a surrogate
  EXPECT_EQ(core::printable("\x85"), "\\x85");                             // a lone continuation byte
  EXPECT_EQ(core::printable("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // beyond U+10FFFF
}

TEST(Printable, EverythingElseIsLeftAsItIs) {
  for (const char* ordinary :
       {"", "plain ascii ~!@#$%^&*()_+{}|:<>?", "back\\slash \\x1b \\n \\u202e",
        "ünïcödé 中文 日本語 العربية עברית 🙂 e\xcc\x81", "operator<<(std::ostream&, T const&)",
        "C:\\Users\\me\\train.py", "\u00a0\u00ff\u0100\U0010ffff"})
    EXPECT_EQ(core::printable(ordinary), ordinary);
}

// A saved report with `name` in every string the text renderer prints from a report.
json report_named(const std::string& name) {
  // A library frame first: the "in ..." line names it by its file's base name.
  const json python_stack = {frame("python", "lib_" + name, 7), frame("python", "user_" + name, 12)};
  json leak = {
      {"site", 1},
      {"bytes", 4096},
      {"blocks", 1},
      {"tags", {"tag_" + name, "tag2_" + name}},
      {"frames", python_stack},
      {"growing", true},
      {"held_by", {{{"holder", "holder_" + name}, {"bytes", 4096}, {"blocks", 1}, {"example", "ex_" + name}}}}};
  leak["frames"][0]["file"] = "/site-packages/lib/libfile_" + name;
  // A PyTorch operator, named from its function's name, then a native frame named by its module.
  json native_leak = {{"site", 2},
                      {"bytes", 512},
                      {"blocks", 1},
                      {"tags", json::array()},
                      {"frames", {frame("native", "op", 0), frame("native", name, 0)}}};
  native_leak["frames"][0]["function"] = "at::_ops::op_" + name + "::call(int)";
  json retained = leak;
  retained.erase("growing"), retained.erase("held_by");
  retained["born_after_mark"] = "mark_" + name;
  retained["marks_survived"] = 1;
  const json mark = {{"label", "mark_" + name}, {"index", 0}, {"time_ns", 1}, {"live_bytes", 4096}};
  return {
      {"schema", "tracepool.report/1"},
      {"reason", "oom"},
      {"backend", "backend_" + name},
      {"process", {{"pid", 42}, {"host", "host_" + name}, {"rank", 0}, {"world_size", 2}}},
      {"capture", {{"mode", "all"}, {"unwinder", "unwinder_" + name}, {"depth", 8}}},
      {"stats", json::object()},
      {"devices",
       {{{"device", 0},
         {"cached_bytes", 0},
         {"total_bytes", 1 << 30},
         {"used_bytes", 0},
         {"processes", nullptr},
         {"processes_note", "note_" + name}}}},
      {"leaks", {leak, native_leak}},
      {"retained", {retained}},
      {"cached",
       {{{"bytes", 1024}, {"blocks", 1}, {"tags", {"ctag_" + name}}, {"frames", {frame("python", "c_" + name, 3)}}}}},
      {"pools",
       {{{"device", 0},
         {"pool", 1},
         {"label", "pool_" + name},
         {"frames", {frame("python", "p_" + name, 5)}},
         {"bytes", 0},
         {"blocks", 0},
         {"reserved_bytes", 2048},
         {"cached_bytes", 2048}}}},
      {"marks", {mark}},
      {"auto_marks", {{{"label", "auto_" + name}, {"index", 0}, {"time_ns", 1}, {"live_bytes", 0}}}},
      {"growth_basis", "automatic marks"},
      {"holder_search",
       {{"complete", true}, {"objects", 1}, {"exposing", 1}, {"seconds", 0.5}, {"note", "hnote_" + name}}},
      {"oom", {{"device", 0}, {"requested_bytes", 1 << 20}, {"message", "oom_" + name}}}};
}

// What the text says of every string report_named put `name` into.
std::vector<std::string> shown_names(const std::string& shown) {
  std::vector<std::string> out;
  for (const char* prefix :
       {"backend_", "host_",       "unwinder_", "note_",          "tag_",      "tag2_",  "holder_", "ex_",
        "fn_lib_",  "libfile_",    "fn_user_",  "dir/file_user_", "aten::op_", "at fn_", "module_", "mark_",
        "fn_c_",    "dir/file_c_", "ctag_",     "pool_",          "fn_p_",     "auto_",  "hnote_",  "oom_"})
    out.push_back(prefix + shown);
  return out;
}

core::report read_back(const json& saved) {
  core::report r;
  EXPECT_EQ(core::read_report_json(saved.dump(), &r), status::ok) << tracepool::last_error();
  return r;
}

// The bytes a terminal acts on: C0 controls but the renderer's own line ends, DEL, C1 controls (UTF-8
// C2 80..C2 9F), the line and paragraph separators and the bidi controls (UTF-8 E2 80 8E/8F, E2 80
// A8..AE, E2 81 A6..A9). The first found, as "byte N: 0x..", or "".
std::string raw_control(const std::string& text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t i = 0; i < text.size(); ++i) {
    const bool c0 = (p[i] < 0x20 && p[i] != '\n') || p[i] == 0x7f;
    const bool c1 = p[i] == 0xc2 && i + 1 < text.size() && p[i + 1] >= 0x80 && p[i + 1] <= 0x9f;
    const bool layout =
        p[i] == 0xe2 && i + 2 < text.size() &&
        ((p[i + 1] == 0x80 && (p[i + 2] == 0x8e || p[i + 2] == 0x8f || (p[i + 2] >= 0xa8 && p[i + 2] <= 0xae))) ||
         (p[i + 1] == 0x81 && p[i + 2] >= 0xa6 && p[i + 2] <= 0xa9));
    if (c0 || c1 || layout) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", p[i]);
      return "byte " + std::to_string(i) + ": " + hex;
    }
  }
  return "";
}

TEST(PrintableReport, ControlCharactersInASavedReportAreShownEscaped) {
  const core::report r = read_back(report_named(hostile));
  for (const std::string& text : {core::to_text(r), core::oom_summary(r, 0)}) {
    EXPECT_EQ(raw_control(text), "") << text;
    EXPECT_TRUE(core::is_utf8(text.data(), text.size())) << text;
  }
  const std::string text = core::to_text(r) + core::oom_summary(r, 0);
  for (const std::string& expected : shown_names(hostile_shown))
    EXPECT_NE(text.find(expected), std::string::npos) << expected << "\n" << text;
  EXPECT_EQ(text.find("\nFAKE"), std::string::npos) << text;
  json other = report_named("x");
  other["reason"] = "reason_" + hostile;  // not "oom": the header's own words
  const std::string header = core::to_text(read_back(other));
  EXPECT_NE(header.find("== tracepool report (reason_" + hostile_shown + ")"), std::string::npos) << header;
  EXPECT_EQ(raw_control(header), "") << header;
}

// A NUL is one more control character: the name is shown whole, the NUL as \x00, and the JSON keeps it.
TEST(PrintableReport, ANameWithANulIsShownWholeNotCutThere) {
  const std::string name = std::string("before") + '\0' + "after";
  const core::report r = read_back(report_named(name));
  ASSERT_FALSE(r.leaks.empty());
  EXPECT_EQ(r.leaks[0].frames[1].function, "fn_user_" + name) << "the reader keeps the NUL";
  const std::string text = core::to_text(r);
  EXPECT_NE(text.find("at fn_user_before\\x00after (dir/file_user_before\\x00after:12)\n"), std::string::npos) << text;
  EXPECT_EQ(json::parse(core::to_json(r))["leaks"][0]["frames"][1]["function"], "fn_user_" + name);
}

// Names of any script, backslashes (C++ operators, Windows paths) and spaces read as they are.
TEST(PrintableReport, OrdinaryNamesAreShownUnchanged) {
  const std::string ordinary = "ünï 中文 🙂 e\xcc\x81 C:\\dir\\x00 operator<< \"q\" 'a' ~!@#$%^&*()";
  const core::report r = read_back(report_named(ordinary));
  const std::string text = core::to_text(r) + core::oom_summary(r, 0);
  for (const std::string& expected : shown_names(ordinary))
    EXPECT_NE(text.find(expected), std::string::npos) << expected << "\n" << text;
}

// A live report names what its symbol tables and the host said, which need not be UTF-8 (a JSON text
// must be, so a saved report cannot hold such bytes): each byte that is not part of UTF-8 is \xNN.
TEST(PrintableReport, BytesThatAreNotUtf8AreShownEscaped) {
  core::report r;
  r.reason = "demand";
  core::site_summary s;
  core::frame_info f;
  f.function = "fn\xff\xfe";
  f.file = "file\xc3(\xe2\x80";  // a sequence cut short, twice
  f.line = 3;
  s.frames = {f};
  s.tags = {"tag\xc0\xaf"};  // an overlong '/'
  s.bytes = s.blocks = 1;
  r.leaks = {s};
  const std::string text = core::to_text(r);
  EXPECT_NE(text.find("[tag\\xc0\\xaf]"), std::string::npos) << text;
  EXPECT_NE(text.find("at fn\\xff\\xfe (file\\xc3(\\xe2\\x80:3)\n"), std::string::npos) << text;
  EXPECT_TRUE(core::is_utf8(text.data(), text.size())) << text;
}

// A function's name is cut to 100 bytes; a name of two-byte characters is cut between two of them,
// never into a byte that is not UTF-8.
TEST(PrintableReport, ALongNameIsCutBetweenCharacters) {
  std::string name, kept;
  for (int i = 0; i < 60; ++i) name += "\u00e9";  // "fn_user_" and 120 bytes: 128
  for (int i = 0; i < 44; ++i) kept += "\u00e9";  // 97 bytes end inside the 45th: 96 are kept
  const std::string text = core::to_text(read_back(report_named(name)));
  EXPECT_NE(text.find("at fn_user_" + kept + "... (dir/file_user_" + name + ":12)\n"), std::string::npos) << text;
  EXPECT_TRUE(core::is_utf8(text.data(), text.size())) << text;
}

// The HTML page's title (the window's, the tab's) names the host and the reason as the text does. The
// page's own drawing of names is the viewer's (textContent); this is the one name the library writes.
TEST(PrintableReport, TheHtmlTitleShowsTheHostEscaped) {
  json saved = report_named("x");
  saved["process"]["host"] = "host_" + hostile;
  saved["reason"] = "reason_" + hostile;
  const std::string page = core::to_html(read_back(saved));
  const size_t begin = page.find("<title>"), end = page.find("</title>");
  ASSERT_LT(begin, end) << page.substr(0, 400);
  const std::string title = page.substr(begin, end - begin);
  EXPECT_EQ(raw_control(title), "") << title;
  EXPECT_NE(title.find("host_" + hostile_shown), std::string::npos) << title;
  EXPECT_NE(title.find("(reason_" + hostile_shown + ")"), std::string::npos) << title;
}

}  // namespace
