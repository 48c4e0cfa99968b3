// printable.cpp: Note [Printable text] in printable.h.
#include "base/printable.h"

#include <cstdint>

#include "base/utf8.h"

namespace tracepool::core {

namespace {

constexpr char hex_digits[] = "0123456789abcdef";

void append_hex(std::string* out, const char* prefix, uint32_t value, int digits) {
  *out += prefix;
  for (int shift = 4 * (digits - 1); shift >= 0; shift -= 4) *out += hex_digits[(value >> shift) & 0xf];
}

// The code point of the well-formed sequence of `len` bytes at p.
uint32_t code_point(const unsigned char* p, size_t len) {
  if (len == 1) return p[0];
  uint32_t c = p[0] & (0x7f >> len);
  for (size_t i = 1; i < len; ++i) c = (c << 6) | (p[i] & 0x3f);
  return c;
}

bool is_control(uint32_t c) { return c < 0x20 || (c >= 0x7f && c <= 0x9f); }

// Invisible characters that change how the text around them is laid out or ordered.
bool is_layout_control(uint32_t c) {
  return c == 0x200e || c == 0x200f || (c >= 0x2028 && c <= 0x202e) || (c >= 0x2066 && c <= 0x2069);
}

}  // namespace

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t i = 0; i < text.size();) {
    const size_t len = utf8_sequence(p + i, text.size() - i);
    if (len == 0) {
      append_hex(&out, "\\x", p[i++], 2);
      continue;
    }
    const uint32_t c = code_point(p + i, len);
    if (is_control(c))
      append_hex(&out, "\\x", c, 2);
    else if (is_layout_control(c))
      append_hex(&out, "\\u", c, 4);
    else
      out.append(text.data() + i, len);
    i += len;
  }
  return out;
}

}  // namespace tracepool::core
