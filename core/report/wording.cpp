// wording.cpp: the names a report gives (wording.h, Note [Site titles]).
#include "report/wording.h"

#include <cctype>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>

namespace tracepool::core {

namespace {

bool ends_with(const std::string& s, const char* tail) {
  const std::string t(tail);
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

// "/lib/python3.11/" and the like: a folder of Python's own library.
bool in_python_lib(const std::string& path) {
  for (size_t at = path.find("/lib/python"); at != std::string::npos; at = path.find("/lib/python", at + 1)) {
    size_t i = at + 11;
    if (i >= path.size() || !std::isdigit(static_cast<unsigned char>(path[i]))) continue;
    while (i < path.size() && (std::isdigit(static_cast<unsigned char>(path[i])) || path[i] == '.')) ++i;
    if (i < path.size() && path[i] == '/') return true;
  }
  return false;
}

// A long name cut to `most` bytes with "..." (`most` > 6), not inside a UTF-8 sequence (at most three
// continuation bytes follow its first).
std::string cut(const std::string& name, size_t most) {
  if (name.size() <= most) return name;
  size_t end = most - 3;
  for (int back = 0; back < 3 && (static_cast<unsigned char>(name[end]) & 0xc0) == 0x80; ++back) --end;
  return name.substr(0, end) + "...";
}

std::string line_of(const frame_info& f) { return f.line > 0 ? std::to_string(f.line) : "?"; }

// The frames a title is made of, innermost first (Note [Site titles]): the interpreter's frames never,
// nor the launcher's outside the program; the Python ones alone where there are any, of them the user's
// and the innermost, and none beyond a module's top level.
std::vector<const frame_info*> readable(const std::vector<frame_info>& frames) {
  std::vector<const frame_info*> kept;
  for (const frame_info& f : frames)
    if (!f.interpreter) kept.push_back(&f);
  while (kept.size() > 1 && kept.back()->script && is_launcher(*kept.back())) kept.pop_back();
  std::vector<const frame_info*> python;
  for (const frame_info* f : kept) {
    if (!f->script || (!python.empty() && is_library(*f))) continue;
    python.push_back(f);
    // What ran the user's module's top level is not the program (a library's module may be imported
    // by the user's code: its top level is the line that asked, and the user's lines follow).
    if (f->function == "<module>" && !is_library(*f)) break;
  }
  return python.empty() ? kept : python;
}

}  // namespace

std::string base_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string frame_function(const frame_info& f) {
  if (!f.function.empty() && f.function != "??") return cut(f.function, 100);
  if (f.script) return "??";
  char text[24];
  std::snprintf(text, sizeof text, "0x%" PRIxPTR, f.address);
  return text;
}

bool is_library(const frame_info& f) {
  const std::string& p = f.file;
  return f.script && (p.find("/site-packages/") != std::string::npos || p.find("/dist-packages/") != std::string::npos ||
                      in_python_lib(p) || p.rfind("<frozen ", 0) == 0);
}

bool is_launcher(const frame_info& f) {
  const std::string& p = f.file;
  return f.script && (p.rfind("<frozen ", 0) == 0 || ends_with(p, "/runpy.py") || ends_with(p, "/tracepool/_cli.py") ||
                      ends_with(p, "/tracepool/_run.py") ||
                      ends_with(p, "/tracepool/__main__.py"));
}

std::string frame_text(const frame_info& f) {
  if (f.script) return frame_function(f) + " (" + (f.file.empty() ? "?" : base_name(f.file)) + ":" + line_of(f) + ")";
  if (!f.file.empty()) return frame_function(f) + " (" + base_name(f.file) + (f.line > 0 ? ":" + line_of(f) : "") + ")";
  return frame_function(f) + (f.module.empty() ? "" : " (in " + base_name(f.module) + ")");
}

std::string site_title(const std::vector<frame_info>& frames) {
  constexpr size_t most = 4;
  std::vector<const frame_info*> kept = readable(frames);
  if (kept.empty()) return "(no call site recorded)";
  const frame_info* via = nullptr;
  size_t own = 0;
  while (own < kept.size() && is_library(*kept[own])) ++own;
  if (own > 0 && own < kept.size()) {  // the user's lines first, then the library line that asked
    via = kept[0];
    kept.erase(kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(own));
  }
  if (kept.size() > most - (via != nullptr)) kept.resize(most - (via != nullptr));
  std::string title;
  const std::string* file = nullptr;
  for (const frame_info* f : kept) {
    if (!title.empty()) title += " \xe2\x86\x90 ";  // ←
    const bool same = !f->file.empty() && file != nullptr && f->file == *file;
    file = &f->file;
    title += same ? frame_function(*f) + " (:" + line_of(*f) + ")" : frame_text(*f);
  }
  return via != nullptr ? title + " \xc2\xb7 via " + frame_text(*via) : title;  // ·
}

std::string printf_string(const char* fmt, ...) {
  char buf[1024];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  return buf;
}

std::string tag_list(const std::vector<std::string>& tags) {
  if (tags.empty()) return "";
  std::string s = " [";
  for (size_t i = 0; i < tags.size(); ++i) s += (i ? " > " : "") + tags[i];
  return s + "]";
}

std::string human_bytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  const uint64_t m = bytes < 0 ? 0 - static_cast<uint64_t>(bytes) : static_cast<uint64_t>(bytes);
  char text[48];
  if (m >= (uint64_t{1} << 30))
    std::snprintf(text, sizeof text, "%.2f GiB", b / (1 << 30));
  else if (m >= (uint64_t{1} << 20))
    std::snprintf(text, sizeof text, "%.2f MiB", b / (1 << 20));
  else if (m >= (uint64_t{1} << 10))
    std::snprintf(text, sizeof text, "%.2f KiB", b / (1 << 10));
  else
    std::snprintf(text, sizeof text, "%" PRId64 " B", bytes);
  return text;
}

}  // namespace tracepool::core
