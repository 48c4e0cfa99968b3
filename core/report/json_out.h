// json_out.h: the one JSON writer of reports and exports (objects, arrays, strings, integers), and the
// one writer of a frame list, in either schema that tracepool writes.
#pragma once

#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "base/utf8.h"
#include "report/wording.h"
#include "trace/symbolizer.h"

namespace tracepool::core {

class json_out {
 public:
  std::string text;

  // Bytes that are not well-formed UTF-8 (a label, a file name) become U+FFFD: the document stays JSON.
  void string(const std::string& s) {
    text += '"';
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    for (size_t i = 0; i < s.size();) {
      const size_t len = utf8_sequence(p + i, s.size() - i);
      if (len != 1) {
        if (len == 0)
          text += "\\ufffd";
        else
          text.append(s, i, len);
        i += len == 0 ? 1 : len;
        continue;
      }
      const unsigned char c = p[i++];
      switch (c) {
        case '"':
          text += "\\\"";
          break;
        case '\\':
          text += "\\\\";
          break;
        case '\n':
          text += "\\n";
          break;
        case '\r':
          text += "\\r";
          break;
        case '\t':
          text += "\\t";
          break;
        default:
          if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            text += buf;
          } else {
            text += static_cast<char>(c);
          }
      }
    }
    text += '"';
  }
  void number(int64_t n) { text += std::to_string(n); }
  void unsigned_number(uint64_t n) { text += std::to_string(n); }
  void key(const char* k) {
    comma();
    string(k);
    text += ':';
    first_ = true;  // the value that follows needs no comma
  }
  void open(char c) {
    comma();
    text += c;
    first_ = true;
  }
  void close(char c) {
    text += c;
    first_ = false;
  }
  void comma() {
    if (!first_) text += ',';
    first_ = false;
  }
  void value(const std::string& s) { comma(), string(s); }
  void value(int64_t n) { comma(), number(n); }
  void value(uint64_t n) { comma(), unsigned_number(n); }
  void value(bool b) { comma(), text += b ? "true" : "false"; }
  void value(double d) {  // six decimals (seconds to the microsecond); not finite gives 0
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.6f", std::isfinite(d) ? d : 0.0);
    comma(), text += buf;
  }
  void null() { comma(), text += "null"; }
  void value_or_null(const std::string& s) { s.empty() ? null() : value(s); }
  // A value written as JSON already (a whole report, inside a diff page's data).
  void json(const std::string& written) { comma(), text += written; }

 private:
  bool first_ = true;
};

inline std::string hex(uintptr_t address) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%" PRIxPTR, address);
  return text;
}

// tracepool: the report's FRAME (docs/report-schema.md). pytorch: PyTorch's memory-snapshot frame
// ({filename, line, name}, notes/pytorch.md §3.3), what memory_viz reads.
enum class frame_schema { tracepool, pytorch };

// A frame list, innermost first.
inline void write_frame_list(json_out& j, const std::vector<frame_info>& frames, frame_schema schema) {
  j.open('[');
  for (const frame_info& f : frames) {
    j.open('{');
    if (schema == frame_schema::pytorch) {
      j.key("filename"), j.value(!f.file.empty() ? f.file : f.module);
      j.key("line"), j.value(static_cast<int64_t>(f.line));
      j.key("name"), j.value(!f.function.empty() ? f.function : hex(f.address));
      j.close('}');
      continue;
    }
    j.key("kind"), j.value(std::string(f.script ? "python" : "native"));
    j.key("function"), j.value(f.function.empty() ? std::string("??") : f.function);
    j.key("file"), j.value_or_null(f.file);
    j.key("line");
    if (f.line <= 0)
      j.null();
    else
      j.value(static_cast<int64_t>(f.line));
    if (f.script) {
      j.key("borrowed"), j.value(f.borrowed);
      // Note [Site titles]: what the page needs to tell the user's lines from the rest.
      j.key("library"), j.value(is_library(f));
      j.key("launcher"), j.value(is_launcher(f));
    } else {
      j.key("module"), j.value_or_null(f.module);
      j.key("address"), j.value(hex(f.address));
      j.key("interpreter"), j.value(f.interpreter);
    }
    j.close('}');
  }
  j.close(']');
}

// `"frames": [...]`.
inline void write_frames(json_out& j, const std::vector<frame_info>& frames, frame_schema schema) {
  j.key("frames");
  write_frame_list(j, frames, schema);
}

}  // namespace tracepool::core
