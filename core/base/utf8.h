// utf8.h: well-formed UTF-8, as JSON (RFC 8259) and Python's json module require of strings.
#pragma once

#include <cstddef>

namespace tracepool::core {

// The length (1 to 4) of the well-formed UTF-8 sequence at p (n bytes left), or 0 if the bytes there
// are not one: a stray continuation byte, an overlong form, a surrogate, beyond U+10FFFF, or cut short.
inline size_t utf8_sequence(const unsigned char* p, size_t n) {
  const unsigned char c = p[0];
  if (c < 0x80) return 1;
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte (Unicode 15, table 3-7)
  if (c >= 0xC2 && c <= 0xDF) len = 2;
  else if (c >= 0xE0 && c <= 0xEF) len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
  else if (c >= 0xF0 && c <= 0xF4) len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
  else return 0;
  if (n < len || p[1] < lo || p[1] > hi) return 0;
  for (size_t i = 2; i < len; ++i)
    if (p[i] < 0x80 || p[i] > 0xBF) return 0;
  return len;
}

inline bool is_utf8(const char* s, size_t n) {
  const auto* p = reinterpret_cast<const unsigned char*>(s);
  for (size_t i = 0; i < n;) {
    const size_t len = utf8_sequence(p + i, n - i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

}  // namespace tracepool::core
