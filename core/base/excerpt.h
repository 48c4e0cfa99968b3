// excerpt.h: what a caller wrote (a configuration key or value, a report format), made fit to quote in
// an error message. The message reaches logs and terminals, and what it quotes may be hostile: a
// 100 KB value would flood the log, an ESC [ 2 J would clear the screen, a newline would forge a
// second log line. So at most `most` bytes are kept (then "... (N bytes)", N the whole length), never
// cutting a character in two; C0 controls, DEL, C1 controls (U+0080-U+009F) and bytes that are not
// UTF-8 are shown as \xNN, a byte each, and a backslash as \\ so that no \xNN is the caller's own.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>

#include "base/utf8.h"

namespace tracepool::core {

inline constexpr size_t excerpt_most = 64;

inline std::string excerpt(std::string_view text, size_t most = excerpt_most) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  std::string out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t len = utf8_sequence(p + at, text.size() - at);
    const bool control = len == 1 ? p[at] < 0x20 || p[at] == 0x7f : len == 2 && p[at] == 0xc2 && p[at + 1] < 0xa0;
    const size_t bytes = len == 0 ? 1 : len;
    if (at + bytes > most) break;
    if (len == 0 || control) {
      for (size_t i = at; i < at + bytes; ++i) {
        char hex[5];
        std::snprintf(hex, sizeof hex, "\\x%02x", p[i]);
        out += hex;
      }
    } else if (p[at] == '\\') {
      out += "\\\\";
    } else {
      out.append(text.data() + at, bytes);
    }
    at += bytes;
  }
  if (at < text.size()) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

}  // namespace tracepool::core
