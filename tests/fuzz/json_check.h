// json_check.h: whether a text is one JSON value as RFC 8259 defines it, UTF-8 included, so that the
// fuzzer can hold reports and snapshots to what any strict reader (nlohmann::json, Python's json on
// bytes) accepts. A recursive descent; `error` says where the first fault is.
#pragma once

#include <cctype>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>

namespace fuzz {

class json_check {
 public:
  explicit json_check(const char* text) : s_(text), n_(std::strlen(text)) {}

  bool valid() {
    space();
    if (!value(0)) return false;
    space();
    return at_end() || fail("text after the value");
  }
  const std::string& error() const { return error_; }

 private:
  // The fault, where it is, and the text around it with bytes outside ASCII shown as \xNN.
  bool fail(const char* what) {
    char where[64];
    std::snprintf(where, sizeof where, " at byte %zu of %zu: ", i_, n_);
    error_ = what + std::string(where);
    for (size_t k = i_ > 24 ? i_ - 24 : 0; k < n_ && k < i_ + 24; ++k) {
      const auto c = static_cast<unsigned char>(s_[k]);
      char esc[8];
      std::snprintf(esc, sizeof esc, c < 0x20 || c >= 0x7f ? "\\x%02x" : "%c", c);
      error_ += esc;
    }
    return false;
  }
  bool at_end() const { return i_ >= n_; }
  unsigned char peek() const { return at_end() ? 0 : static_cast<unsigned char>(s_[i_]); }
  void space() {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r')) ++i_;
  }
  bool literal(const char* word) {
    const size_t k = std::strlen(word);
    if (n_ - i_ < k || std::memcmp(s_ + i_, word, k) != 0) return fail("bad literal");
    i_ += k;
    return true;
  }

  bool value(int depth) {
    if (depth > 256) return fail("nesting deeper than 256");
    switch (peek()) {
      case '{':
        return container(depth, '}', true);
      case '[':
        return container(depth, ']', false);
      case '"':
        return string();
      case 't':
        return literal("true");
      case 'f':
        return literal("false");
      case 'n':
        return literal("null");
      default:
        return number();
    }
  }

  bool container(int depth, char close, bool object) {
    ++i_;
    space();
    if (peek() == close) return ++i_, true;
    for (;;) {
      if (object) {
        if (peek() != '"' || !string()) return fail("object key is not a string");
        space();
        if (peek() != ':') return fail("':' expected");
        ++i_;
        space();
      }
      if (!value(depth + 1)) return false;
      space();
      if (peek() == close) return ++i_, true;
      if (peek() != ',') return fail("',' or a closing bracket expected");
      ++i_;
      space();
    }
  }

  bool number() {
    const size_t start = i_;
    if (peek() == '-') ++i_;
    if (peek() == '0') {
      ++i_;
    } else if (peek() >= '1' && peek() <= '9') {
      while (peek() >= '0' && peek() <= '9') ++i_;
    } else {
      return fail("value expected");
    }
    if (peek() == '.') {
      ++i_;
      if (!(peek() >= '0' && peek() <= '9')) return fail("digit expected after '.'");
      while (peek() >= '0' && peek() <= '9') ++i_;
    }
    if (peek() == 'e' || peek() == 'E') {
      ++i_;
      if (peek() == '+' || peek() == '-') ++i_;
      if (!(peek() >= '0' && peek() <= '9')) return fail("digit expected in exponent");
      while (peek() >= '0' && peek() <= '9') ++i_;
    }
    return i_ > start;
  }

  bool string() {
    ++i_;  // the opening quote
    for (;;) {
      if (at_end()) return fail("unterminated string");
      const unsigned char c = peek();
      if (c == '"') return ++i_, true;
      if (c < 0x20) return fail("unescaped control byte in a string");
      if (c == '\\') {
        ++i_;
        const unsigned char e = peek();
        if (e == 'u') {
          for (int k = 1; k <= 4; ++k)
            if (i_ + k >= n_ || !std::isxdigit(static_cast<unsigned char>(s_[i_ + k]))) return fail("bad \\u escape");
          i_ += 5;
        } else if (e != '"' && e != '\\' && e != '/' && e != 'b' && e != 'f' && e != 'n' && e != 'r' && e != 't') {
          return fail("bad escape");
        } else {
          ++i_;
        }
        continue;
      }
      if (c < 0x80) {
        ++i_;
        continue;
      }
      if (!utf8()) return false;
    }
  }

  // One well-formed UTF-8 sequence (Unicode's table 3-7: no overlongs, no surrogates, <= U+10FFFF).
  bool utf8() {
    const unsigned char c = peek();
    int more = 0;
    unsigned char lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf)
      more = 1;
    else if (c == 0xe0)
      more = 2, lo = 0xa0;
    else if (c == 0xed)
      more = 2, hi = 0x9f;
    else if (c >= 0xe1 && c <= 0xef)
      more = 2;
    else if (c == 0xf0)
      more = 3, lo = 0x90;
    else if (c == 0xf4)
      more = 3, hi = 0x8f;
    else if (c >= 0xf1 && c <= 0xf3)
      more = 3;
    else
      return fail("ill-formed UTF-8 in a string");
    ++i_;
    for (int k = 0; k < more; ++k, lo = 0x80, hi = 0xbf) {
      if (at_end() || peek() < lo || peek() > hi) return fail("ill-formed UTF-8 in a string");
      ++i_;
    }
    return true;
  }

  const char* s_;
  size_t n_;
  size_t i_ = 0;
  std::string error_;
};

}  // namespace fuzz
