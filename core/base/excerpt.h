// excerpt.h: what a caller wrote (a configuration key or value, a report format), made fit to quote in
// an error message. The message reaches logs and terminals, and what it quotes may be hostile: a
// 100 KB value would flood the log, an ESC [ 2 J would clear the screen, a newline would forge a
// second log line. So at most `most` bytes are kept (then "... (N bytes)", N the whole length), never
// cutting a character in two, and shown by the rule every text of tracepool's follows (printable(),
// Note [Printable text]).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "base/printable.h"
#include "base/utf8.h"

namespace tracepool::core {

inline constexpr size_t excerpt_most = 64;

inline std::string excerpt(std::string_view text, size_t most = excerpt_most) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  size_t kept = 0;  // the longest run of whole characters (or single bytes that are not UTF-8) within `most`
  while (kept < text.size()) {
    const size_t len = utf8_sequence(p + kept, text.size() - kept);
    const size_t bytes = len == 0 ? 1 : len;
    if (kept + bytes > most) break;
    kept += bytes;
  }
  std::string out = printable(text.substr(0, kept));
  if (kept < text.size()) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

}  // namespace tracepool::core
