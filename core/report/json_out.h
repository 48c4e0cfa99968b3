// json_out.h: a minimal JSON writer (objects, arrays, strings, integers) for reports and snapshots.
#pragma once

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <string>

#include "base/utf8.h"

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
        if (len == 0) text += "\\ufffd";
        else text.append(s, i, len);
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
  void value(bool b) { comma(), text += b ? "true" : "false"; }
  void null() { comma(), text += "null"; }

 private:
  bool first_ = true;
};

inline std::string hex(uintptr_t address) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%" PRIxPTR, address);
  return text;
}

}  // namespace tracepool::core
