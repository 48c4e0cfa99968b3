// reports.cpp: reports, strings and files at the C ABI (tracepool.h's report section): written to a
// path, made as a string, rendered from saved JSON (one report or several as HTML), the OOM report,
// PyTorch's memory snapshot, any file written as reports are, and where a report path leads. As
// tracepool.cpp: arguments checked, every failure a status code with a thread-local message, nothing
// thrown past here.
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/excerpt.h"
#include "base/status.h"
#include "base/utf8.h"
#include "base/printable.h"
#include "handle.h"
#include "report/compare.h"
#include "report/report.h"
#include "tracepool/tracepool.h"

using tracepool::status;
namespace core = tracepool::core;

namespace {

using tracepool::capi::check_handle;
using tracepool::capi::code;
using tracepool::capi::copy_out;
using tracepool::capi::guarded;

// tracepool_report_options_t, checked and with its defaults filled in.
struct report_request {
  const char* reason = "demand";
  const char* format = nullptr;  // "json", "text", "html" or nullptr (by path; strings: text)
  size_t top = 10;
  const char* name = nullptr;
  bool addresses = false;
  tracepool_holders_fn holders = nullptr;
  void* holders_context = nullptr;
  // A string's format (checked by read_options): text unless the format says otherwise.
  core::report_format string_format() const {
    core::report_format f = core::report_format::text;
    (void)core::report_format_of(format, nullptr, &f);
    return f;
  }
  std::string render(const core::report& r) const { return core::render(r, string_format(), top); }
};

// The struct as first published (through `top`): what the smallest caller passes.
constexpr size_t report_options_v1 = offsetof(tracepool_report_options_t, top) + sizeof(int);
constexpr size_t report_options_most = 4096;  // a larger size is not a struct size but a mistake
constexpr size_t reason_most = 64;

status read_options(const char* what, const tracepool_report_options_t* options, report_request* out) {
  if (options == nullptr) return status::ok;
  const size_t size = options->size;
  if (size < report_options_v1 || size > report_options_most)
    return tracepool::fail(status::invalid_argument,
                           "%s: the options struct says its size is %zu; zero it and set size = "
                           "sizeof(tracepool_report_options_t), %zu",
                           what, size, sizeof(tracepool_report_options_t));
  // Fields of a newer header that this library does not know must be left zero: they would be ignored.
  const auto* bytes = reinterpret_cast<const unsigned char*>(options);
  for (size_t i = sizeof(tracepool_report_options_t); i < size; ++i)
    if (bytes[i] != 0)
      return tracepool::fail(status::invalid_argument,
                             "%s: the options struct says its size is %zu, and its byte %zu is set: a field this "
                             "tracepool (struct of %zu bytes) does not know",
                             what, size, i, sizeof(tracepool_report_options_t));
  tracepool_report_options_t o{};
  std::memcpy(&o, options, size < sizeof o ? size : sizeof o);
  if (o.reason != nullptr) {
    const size_t n = strnlen(o.reason, reason_most + 1);
    if (n == 0 || n > reason_most)
      return tracepool::fail(status::invalid_argument, "%s: a report's reason must be 1 to %zu bytes, not %s", what,
                             reason_most, n == 0 ? "empty" : "longer");
    if (!core::is_utf8(o.reason, n))
      return tracepool::fail(status::invalid_argument, "%s: the report's reason is not UTF-8", what);
    for (size_t i = 0; i < n; ++i)
      if (static_cast<unsigned char>(o.reason[i]) < 0x20 || o.reason[i] == 0x7f)
        return tracepool::fail(status::invalid_argument,
                               "%s: the report's reason has a control character at byte %zu", what, i);
    if (std::strcmp(o.reason, "oom") == 0)
      return tracepool::fail(status::invalid_argument,
                             "%s: the report's reason 'oom' is the library's own, for the report of a failed "
                             "allocation (tracepool_write_oom_report)",
                             what);
    out->reason = o.reason;
  }
  if (o.format != nullptr) {
    if (std::strcmp(o.format, "json") != 0 && std::strcmp(o.format, "text") != 0 && std::strcmp(o.format, "html") != 0)
      return tracepool::fail(status::invalid_argument,
                             "%s: unknown report format '%s': expected one of json, text, html", what,
                             core::excerpt(o.format).c_str());
    out->format = o.format;
  }
  if (o.top < 0)
    return tracepool::fail(status::invalid_argument, "%s: top is %d: expected 0 (10 sites) or more", what, o.top);
  if (o.top > 0) out->top = static_cast<size_t>(o.top);
  if (size >= offsetof(tracepool_report_options_t, name) + sizeof o.name) out->name = o.name;
  if (size >= offsetof(tracepool_report_options_t, addresses) + sizeof o.addresses) out->addresses = o.addresses != 0;
  if (size >= offsetof(tracepool_report_options_t, holders_context) + sizeof o.holders_context) {
    out->holders = o.holders;
    out->holders_context = o.holders_context;
  }
  return status::ok;
}

// `count` saved reports as the calls that read several take them (tracepool_render_html's arguments),
// each named for messages: names[i], else "report i". Nothing is read yet.
status saved_texts(const char* what, size_t count, const char* const* reports, const size_t* sizes,
                   const char* const* names, std::vector<core::saved_text>* out) {
  if (count == 0) return tracepool::fail(status::invalid_argument, "%s: no report (count is 0)", what);
  if (reports == nullptr || sizes == nullptr)
    return tracepool::fail(status::invalid_argument, "%s: reports or sizes is NULL", what);
  constexpr size_t most = 4096;  // ranks of one job; more is a mistake in count
  if (count > most)
    return tracepool::fail(status::invalid_argument, "%s: count is %zu; at most %zu reports", what, count, most);
  for (size_t i = 0; i < count; ++i) {
    std::string name = names != nullptr && names[i] != nullptr ? names[i] : "report " + std::to_string(i);
    if (reports[i] == nullptr && sizes[i] != 0)
      return tracepool::fail(status::invalid_argument, "%s: %s is NULL and its size is %zu", what, name.c_str(),
                             sizes[i]);
    out->push_back({std::string_view(reports[i] != nullptr ? reports[i] : "", sizes[i]), std::move(name)});
  }
  return status::ok;
}

// The report of the memory held now, as `q` asks: with the holders its holder search names (Note [Who
// holds it]), asked once, after the collection, holding no lock.
status make_report(tracepool_t* tp, const report_request& q, core::report* r) {
  if (status s = core::build_report(*tp->impl, q.reason, r, q.addresses || q.holders != nullptr); s != status::ok)
    return s;
  if (q.holders == nullptr) return status::ok;
  std::vector<tracepool_leak_block_t> blocks;
  for (size_t i = 0; i < r->leaks.size(); ++i)
    for (const auto& [address, bytes] : r->leaks[i].addresses)
      blocks.push_back(tracepool_leak_block_t{address, static_cast<uint64_t>(bytes), i});
  if (!q.addresses)
    for (core::site_summary& leak : r->leaks) std::vector<std::pair<uint64_t, int64_t>>().swap(leak.addresses);
  std::unique_ptr<char, void (*)(void*)> found(q.holders(q.holders_context, blocks.data(), blocks.size()), std::free);
  if (found == nullptr) return status::ok;
  return core::read_holders_json(found.get(), r);
}

}  // namespace

extern "C" {

int tracepool_write_report(tracepool_t* tp, const char* path, const char* format) {
  tracepool_report_options_t options{};
  options.size = sizeof options;
  options.format = format;
  return tracepool_write_report_with(tp, path, &options);
}

int tracepool_write_report_with(tracepool_t* tp, const char* path, const tracepool_report_options_t* options) {
  return guarded("tracepool_write_report", [&] {
    if (status s = check_handle(tp, "tracepool_write_report"); s != status::ok) return s;
    report_request q;
    if (status s = read_options("tracepool_write_report", options, &q); s != status::ok) return s;
    core::report r;
    if (status s = make_report(tp, q, &r); s != status::ok) return s;
    return core::write_report_to(r, path, q.format, q.top);
  });
}

int tracepool_report_string(tracepool_t* tp, const char* format, char** out) {
  if (format == nullptr) {  // this function always asked for a format
    if (out != nullptr) *out = nullptr;
    return code(tracepool::fail(status::invalid_argument,
                                "tracepool_report_string: no report format (NULL): expected one of json, text, html"));
  }
  tracepool_report_options_t options{};
  options.size = sizeof options;
  options.format = format;
  return tracepool_report_string_with(tp, &options, out);
}

int tracepool_report_string_with(tracepool_t* tp, const tracepool_report_options_t* options, char** out) {
  return guarded("tracepool_report_string", [&] {
    if (status s = check_handle(tp, "tracepool_report_string"); s != status::ok) return s;
    if (out == nullptr) return tracepool::fail(status::invalid_argument, "tracepool_report_string: out is NULL");
    *out = nullptr;
    report_request q;
    if (status s = read_options("tracepool_report_string", options, &q); s != status::ok) return s;
    core::report r;
    if (status s = make_report(tp, q, &r); s != status::ok) return s;
    return copy_out(q.render(r), out);
  });
}

int tracepool_torch_snapshot_string(tracepool_t* tp, char** out) {
  return guarded("tracepool_torch_snapshot_string", [&] {
    if (status s = check_handle(tp, "tracepool_torch_snapshot_string"); s != status::ok) return s;
    if (out == nullptr) return tracepool::fail(status::invalid_argument, "tracepool_torch_snapshot_string: out is NULL");
    *out = nullptr;
    std::string text;
    if (status s = core::build_torch_snapshot(*tp->impl, &text); s != status::ok) return s;
    return copy_out(text, out);
  });
}

int tracepool_snapshot_string(tracepool_t* tp, char** out) { return tracepool_torch_snapshot_string(tp, out); }

int tracepool_render_report(const char* json, size_t size, const tracepool_report_options_t* options, char** out) {
  return guarded("tracepool_render_report", [&] {
    if (out == nullptr) return tracepool::fail(status::invalid_argument, "tracepool_render_report: out is NULL");
    *out = nullptr;
    if (json == nullptr && size != 0)
      return tracepool::fail(status::invalid_argument, "tracepool_render_report: json is NULL and size is %zu", size);
    report_request q;
    if (status s = read_options("tracepool_render_report", options, &q); s != status::ok) return s;
    core::report r;
    const std::string subject = q.name != nullptr ? q.name : "the text";
    if (status s = core::read_report_json(std::string_view(json != nullptr ? json : "", size), &r, subject.c_str());
        s != status::ok)
      return s;
    return copy_out(q.render(r), out);
  });
}

int tracepool_render_html(size_t count, const char* const* reports, const size_t* sizes, const char* const* names,
                          char** out) {
  return guarded("tracepool_render_html", [&] {
    if (out == nullptr) return tracepool::fail(status::invalid_argument, "tracepool_render_html: out is NULL");
    *out = nullptr;
    std::vector<core::saved_text> texts;
    if (status s = saved_texts("tracepool_render_html", count, reports, sizes, names, &texts); s != status::ok)
      return s;
    std::string page;
    if (status s = core::merge_reports(texts, core::report_format::html, 0, &page); s != status::ok) return s;
    return copy_out(page, out);
  });
}

int tracepool_merge_reports(size_t count, const char* const* reports, const size_t* sizes, const char* const* names,
                            const tracepool_report_options_t* options, char** out) {
  return guarded("tracepool_merge_reports", [&] {
    if (out == nullptr) return tracepool::fail(status::invalid_argument, "tracepool_merge_reports: out is NULL");
    *out = nullptr;
    report_request q;
    if (status s = read_options("tracepool_merge_reports", options, &q); s != status::ok) return s;
    std::vector<core::saved_text> texts;
    if (status s = saved_texts("tracepool_merge_reports", count, reports, sizes, names, &texts); s != status::ok)
      return s;
    std::string view;
    if (status s = core::merge_reports(texts, q.string_format(), q.top, &view); s != status::ok) return s;
    return copy_out(view, out);
  });
}

int tracepool_diff_reports(const char* const reports[2], const size_t sizes[2], const char* const names[2],
                           const tracepool_report_options_t* options, char** out) {
  return guarded("tracepool_diff_reports", [&] {
    if (out == nullptr) return tracepool::fail(status::invalid_argument, "tracepool_diff_reports: out is NULL");
    *out = nullptr;
    report_request q;
    if (status s = read_options("tracepool_diff_reports", options, &q); s != status::ok) return s;
    std::vector<core::saved_text> texts;
    if (status s = saved_texts("tracepool_diff_reports", 2, reports, sizes, names, &texts); s != status::ok) return s;
    std::string change;
    if (status s = core::diff_reports(texts[0], texts[1], q.string_format(), q.top, &change); s != status::ok)
      return s;
    return copy_out(change, out);
  });
}

void tracepool_string_free(char* s) { std::free(s); }

int tracepool_write_oom_report(tracepool_t* tp, const char* path, const char* format) {
  return guarded("tracepool_write_oom_report", [&] {
    if (status s = check_handle(tp, "tracepool_write_oom_report"); s != status::ok) return s;
    return tp->oom->write_last(path, format);
  });
}

int tracepool_write_file(const char* path, const void* data, size_t size) {
  return guarded("tracepool_write_file", [&] { return core::write_file_to(path, data, size); });
}

int tracepool_printable(const char* text, size_t size, char** out) {
  return guarded("tracepool_printable", [&] {
    if (out == nullptr) return tracepool::fail(status::invalid_argument, "tracepool_printable: out is NULL");
    *out = nullptr;
    if (text == nullptr && size != 0)
      return tracepool::fail(status::invalid_argument, "tracepool_printable: text is NULL and size is %zu", size);
    return copy_out(core::printable(std::string_view(text != nullptr ? text : "", size)), out);
  });
}

int tracepool_check_report_path(const char* path) {
  return guarded("tracepool_check_report_path", [&] { return core::check_report_path(path); });
}

int tracepool_write_file_or_fallback(const char* path, const void* data, size_t size, char** written_to) {
  return guarded("tracepool_write_file_or_fallback", [&] {
    if (written_to == nullptr)
      return tracepool::fail(status::invalid_argument, "tracepool_write_file_or_fallback: written_to is NULL");
    *written_to = nullptr;
    std::string where, why;
    if (status s = core::write_file_or_fallback(path, data, size, &where, &why); s != status::ok) return s;
    if (status s = copy_out(where, written_to); s != status::ok) return s;
    if (!why.empty()) tracepool::fail(status::invalid_argument, "%s", why.c_str());  // why not `path`: the contract
    return status::ok;
  });
}

int tracepool_report_path(const char* path, char** out) {
  return guarded("tracepool_report_path", [&] {
    if (out == nullptr) return tracepool::fail(status::invalid_argument, "tracepool_report_path: out is NULL");
    *out = nullptr;
    if (path == nullptr) return tracepool::fail(status::invalid_argument, "tracepool_report_path: path is NULL");
    return copy_out(core::expand_report_path(path, core::this_process()), out);
  });
}

int tracepool_report_format(const char* path, const char* format, const char** out) {
  return guarded("tracepool_report_format", [&] {
    if (out == nullptr) return tracepool::fail(status::invalid_argument, "tracepool_report_format: out is NULL");
    *out = nullptr;
    core::report_format f = core::report_format::text;
    if (status s = core::report_format_of(format, path, &f); s != status::ok) return s;
    *out = f == core::report_format::json ? "json" : f == core::report_format::html ? "html" : "text";
    return status::ok;
  });
}

}  // extern "C"
