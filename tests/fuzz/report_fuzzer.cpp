// report_fuzzer.cpp: libFuzzer target for tracepool_render_report, the one C function that reads
// untrusted text (a saved report a user names). Any input is rendered as text and as JSON; the
// contract: both succeed or both are refused with TRACEPOOL_ERR_INVALID_ARGUMENT and a message, nothing
// crashes or leaks (ASan), and what renders is stable: the library's JSON of a report renders to the
// same text as the input did, and to itself again. Seeds: tests/fuzz/report_corpus (replayed in every
// build by ctest fuzz.report_seeds; tests/fuzz/run.sh fuzzes it).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tracepool/tracepool.h"

namespace {

[[noreturn]] void broken(const char* what, const std::string& detail) {
  std::fprintf(stderr, "report_fuzzer: %s\n%s\n", what, detail.substr(0, 2000).c_str());
  std::abort();
}

// The rendering of `json` in `format`, with its status in *rc (the message when refused).
std::string render(const char* json, size_t size, const char* format, int top, int* rc) {
  tracepool_report_options_t o{};
  o.size = sizeof o;
  o.format = format;
  o.top = top;
  o.name = "input";
  char* out = nullptr;
  *rc = tracepool_render_report(json, size, &o, &out);
  if ((*rc == TRACEPOOL_OK) != (out != nullptr)) broken("status and output disagree", tracepool_last_error());
  std::string text = out != nullptr ? out : tracepool_last_error();
  tracepool_string_free(out);
  return text;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const char* json = reinterpret_cast<const char*>(data);
  const int top = size > 0 ? data[size - 1] % 4 : 0;  // 0 (10 sites) to 3
  int text_rc = 0, json_rc = 0;
  const std::string text = render(json, size, "text", top, &text_rc);
  const std::string saved = render(json, size, "json", 0, &json_rc);
  if (text_rc != json_rc) broken("text and JSON renderings disagree on the input", text + "\n" + saved);
  if (text_rc != TRACEPOOL_OK) {
    if (text_rc != TRACEPOOL_ERR_INVALID_ARGUMENT) broken("refused with a status other than invalid argument", text);
    if (text.rfind("input", 0) != 0) broken("the message does not begin with the text's name", text);
    return 0;
  }
  int rc = 0;
  if (render(saved.data(), saved.size(), "text", top, &rc) != text || rc != TRACEPOOL_OK)
    broken("the library's JSON of the input renders to another text", saved);
  if (render(saved.data(), saved.size(), "json", 0, &rc) != saved) broken("the library's JSON is not stable", saved);
  // The HTML page holds the report in a script element: nothing in it may open a tag (end the script).
  const std::string page = render(json, size, "html", 0, &rc);
  if (rc != TRACEPOOL_OK) broken("a report rendered as text is refused as HTML", page);
  const std::string opening = "id=\"tracepool-data\">";
  const size_t at = page.find(opening);
  if (at == std::string::npos || page.find('<', at) != page.find("</script>", at))
    broken("the HTML page's data can end its script", page);
  return 0;
}
