// reports.cpp: tracepool._tracepool's marks, reports and files (glue.h): the report as a string or a
// file, saved reports rendered, merged and compared, where a report goes.
#include "glue.h"

#include <memory>
#include <optional>
#include <string>

namespace tracepool_py {

// Marks, tags and reports.
void def_marks_and_reports(py::module_& m) {
  m.def(
      "mark",
      [](const std::string& label) {
        const char* text = c_text(label, "mark label");
        call_default([&](tracepool_t* tp) { return tracepool_mark(tp, text); });
      },
      py::arg("label"), "Records a named point in time; reports give each site's live bytes at every mark.");
  m.def(
      "auto_mark",
      [](const std::string& label) {
        const char* text = c_text(label, "mark label");
        int taken = 0;
        call_default([&](tracepool_t* tp) { return tracepool_auto_mark(tp, text, &taken); });
        return taken != 0;
      },
      py::arg("label"),
      "A boundary a framework saw, kept as an automatic mark when the spacing allows; True if it was.");
  m.def(
      "tag_push", [](const std::string& label) { check(tracepool_tag_push(c_text(label, "tag label"))); },
      py::arg("label"), "Pushes a tag on the calling thread: sites captured until the matching pop carry it.");
  m.def(
      "tag_pop", [] { check(tracepool_tag_pop()); }, "Pops the calling thread's innermost tag.");
  m.def(
      "report",
      [](const std::string& format, const std::optional<std::string>& reason, int top, bool addresses,
         const py::object& holders) {
        holder_call search{holders, std::nullopt};
        report_options options(&format, reason, top, addresses, &search);
        char* text = nullptr;
        search.call([&] {
          call_default([&](tracepool_t* tp) { return tracepool_report_string_with(tp, &options.c, &text); });
        });
        return take_string(text);
      },
      py::arg("format") = "json", py::arg("reason") = py::none(), py::arg("top") = 0, py::arg("addresses") = false,
      py::arg("holders") = py::none(),
      "The report of the memory held now, as 'json', 'text' or 'html'; reason None: 'demand'; top: sites the text lists "
      "per section (0: 10); addresses: JSON leaks list their live blocks' [address, bytes]; holders: a holder search "
      "(tracepool_holders_fn's, in Python: a list of (address, bytes, leak index) -> JSON str or None).");
  m.def(
      "write_report",
      [](const std::string& path, const std::optional<std::string>& format, const std::optional<std::string>& reason,
         int top, const py::object& holders) {
        const char* where = c_text(path, "path");
        holder_call search{holders, std::nullopt};
        report_options options(format ? &*format : nullptr, reason, top, false, &search);
        search.call([&] {
          call_default([&](tracepool_t* tp) { return tracepool_write_report_with(tp, where, &options.c); });
        });
      },
      py::arg("path"), py::arg("format") = py::none(), py::arg("reason") = py::none(), py::arg("top") = 0,
      py::arg("holders") = py::none(),
      "Writes the report to a file (replaced atomically), 'stderr', a descriptor, a device or a FIFO; format "
      "None: JSON for *.json, HTML for *.html or *.htm, else text.");
  m.def(
      "render_report",
      [](const py::bytes& saved, const std::string& format, int top, const std::optional<std::string>& name) {
        report_options options(&format, std::nullopt, top);
        if (name) options.c.name = c_text(*name, "name");
        const std::string_view json = bytes_of(saved);
        char* text = nullptr;
        call_without_gil([&] { return tracepool_render_report(json.data(), json.size(), &options.c, &text); });
        return take_string(text);
      },
      py::arg("json"), py::arg("format") = "text", py::arg("top") = 0, py::arg("name") = py::none(),
      "Renders a report saved as JSON (bytes) as 'text', 'json' or 'html', with the library's renderer; a text that is "
      "not a report raises InvalidArgumentError naming its first problem (`name` is what the message calls it).");
  m.def(
      "render_html",
      [](const std::vector<py::bytes>& saved, const std::vector<std::string>& names) {
        const saved_reports in(saved, names, "render_html");
        char* page = nullptr;
        // `saved` holds the bytes objects until this returns: read without the GIL.
        call_without_gil([&] {
          return tracepool_render_html(in.texts.size(), in.texts.data(), in.sizes.data(), in.names.data(), &page);
        });
        return take_string(page);
      },
      py::arg("reports"), py::arg("names"),
      "One HTML page of several reports saved as JSON (bytes each; the ranks of one job): a view of each and "
      "of them all merged; `names` are what messages call them.");
  m.def(
      "merge_reports",
      [](const std::vector<py::bytes>& saved, const std::vector<std::string>& names, const std::string& format,
         int top) {
        const saved_reports in(saved, names, "merge_reports");
        report_options options(&format, std::nullopt, top);
        char* view = nullptr;
        call_without_gil([&] {
          return tracepool_merge_reports(in.texts.size(), in.texts.data(), in.sizes.data(), in.names.data(),
                                         &options.c, &view);
        });
        return take_string(view);
      },
      py::arg("reports"), py::arg("names"), py::arg("format") = "text", py::arg("top") = 0,
      "Several reports saved as JSON (bytes each) as one view, as 'text', 'json' (tracepool.merge/1) or 'html'; "
      "`names` are what the view and messages call them.");
  m.def(
      "diff_reports",
      [](const py::bytes& before, const py::bytes& after, const std::vector<std::string>& names,
         const std::string& format, int top) {
        const saved_reports in({before, after}, names, "diff_reports");
        report_options options(&format, std::nullopt, top);
        char* change = nullptr;
        call_without_gil(
            [&] { return tracepool_diff_reports(in.texts.data(), in.sizes.data(), in.names.data(), &options.c, &change); });
        return take_string(change);
      },
      py::arg("before"), py::arg("after"), py::arg("names"), py::arg("format") = "text", py::arg("top") = 0,
      "What changed from one saved report to another (bytes each), as 'text' or 'json' (tracepool.diff/1); "
      "`names` (two) are what the view and messages call them.");
}

// Files: written whole or in place, their paths, names made printable.
void def_files(py::module_& m) {
  m.def(
      "write_file",
      [](const std::string& path, const py::bytes& data) {
        const char* where = c_text(path, "path");
        const std::string_view bytes = bytes_of(data);
        call_without_gil([&] { return tracepool_write_file(where, bytes.data(), bytes.size()); });
      },
      py::arg("path"), py::arg("data"),
      "Writes bytes where a report may go: a new or regular file replaced atomically, a character "
      "device, a FIFO, /dev/stdout, /dev/stderr or /dev/fd/N written straight; anything else refused.");
  m.def(
      "printable",
      [](const py::bytes& text) {
        const std::string_view bytes = bytes_of(text);
        char* shown = nullptr;
        check(tracepool_printable(bytes.data(), bytes.size(), &shown));
        return take_string(shown);  // UTF-8 by construction
      },
      py::arg("text"), "Bytes as the text report shows them (Note [Printable text]): control characters escaped.");
  m.def(
      "write_exit_report", [] { call_without_gil([] { return tracepool_write_exit_report(); }); },
      "Writes the TRACEPOOL_REPORT report now, if due (at most once per process).");
  m.def(
      "check_report_path", [](const std::string& path) { check(tracepool_check_report_path(c_text(path, "path"))); },
      py::arg("path"), "Raises tracepool.Error saying why a report could not be written at `path` now.");
  m.def(
      "write_file_or_fallback",
      [](const std::string& path, const py::bytes& data) {
        const char* where = c_text(path, "path");
        const std::string_view bytes = bytes_of(data);
        char* written = nullptr;
        std::string why;
        call_without_gil([&] {
          const int rc = tracepool_write_file_or_fallback(where, bytes.data(), bytes.size(), &written);
          if (rc == TRACEPOOL_OK && written != nullptr && std::strcmp(written, where) != 0) why = tracepool_last_error();
          return rc;
        });
        std::unique_ptr<char, void (*)(char*)> owned(written, tracepool_string_free);
        return py::make_tuple(py::bytes(owned.get()), py::bytes(why));  // bytes: any file name the OS allows
      },
      py::arg("path"), py::arg("data"),
      "write_file, and where that fails, a new file in the temporary folder: (where it went, why not at `path` "
      "or ''). Raises tracepool.Error when neither could be written.");
  m.def(
      "report_path",
      [](const std::string& path) {
        char* where = nullptr;
        check(tracepool_report_path(c_text(path, "path"), &where));
        std::unique_ptr<char, void (*)(char*)> owned(where, tracepool_string_free);
        return py::bytes(owned.get());  // bytes: any file name the OS allows
      },
      py::arg("path"),
      "Where a report written to `path` now goes: {rank}, {pid} and {host} replaced, and under a launcher of "
      "several ranks '-rank<N>' added before the extension of a path that names neither {rank} nor {pid}.");
  m.def(
      "report_format",
      [](const std::string& path, const std::optional<std::string>& format) {
        const char* chosen = nullptr;
        check(tracepool_report_format(c_text(path, "path"), format ? c_text(*format, "format") : nullptr, &chosen));
        return std::string(chosen);
      },
      py::arg("path"), py::arg("format") = py::none(),
      "The format of a report written to `path`: `format` where given, else by the path's extension, as "
      "write_report picks it.");
}

}  // namespace tracepool_py
