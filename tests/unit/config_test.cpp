#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "base/config.h"

namespace tracepool::core {

TEST(Config, DefaultsWhenEmpty) {
  config c;
  ASSERT_EQ(parse_config(nullptr, &c), status::ok);
  ASSERT_EQ(parse_config("", &c), status::ok);
  EXPECT_EQ(c.backend, backend_choice::automatic);
  EXPECT_EQ(c.limit, 0u);
}

TEST(Config, ParsesEveryKey) {
  config c;
  ASSERT_EQ(parse_config(" backend:host , limit:1.5GiB,validate:off,host_devices:3,host_capacity:8GB,"
                         "fail_alloc:4,fail_above:20MiB",
                         &c),
            status::ok)
      << last_error();
  EXPECT_EQ(c.backend, backend_choice::host);
  EXPECT_EQ(c.limit, size_t{3} << 29);
  EXPECT_FALSE(c.validate);
  EXPECT_EQ(c.host.devices, 3);
  EXPECT_EQ(c.host.capacity, size_t{8000000000});
  EXPECT_EQ(c.host.fail_alloc, 4u);
  EXPECT_EQ(c.host.fail_above, size_t{20} << 20);
}

TEST(Config, ParsesTheCaptureKeys) {
  config c;
  EXPECT_EQ(c.capture, capture_mode::all) << "call sites (native and interpreter frames) are captured unless turned off";
  EXPECT_EQ(c.python_depth, 64);
  EXPECT_EQ(c.capture_depth, 32);
  ASSERT_EQ(parse_config("capture:off,capture_depth:64,unwinder:boost,sample_bytes:1MiB,sample_seed:0x10,oom_report:off", &c),
            status::ok)
      << last_error();
  EXPECT_EQ(c.capture, capture_mode::off);
  EXPECT_EQ(c.capture_depth, 64);
  EXPECT_EQ(c.unwinder, unwinder_choice::boost);
  EXPECT_EQ(c.sample_bytes, size_t{1} << 20);
  EXPECT_EQ(c.sample_seed, 16u);
  EXPECT_FALSE(c.oom_report);
  ASSERT_EQ(parse_config("capture:python,python_depth:8", &c), status::ok) << last_error();
  EXPECT_EQ(c.capture, capture_mode::python);
  EXPECT_EQ(c.python_depth, 8);
  const char* bad[] = {"capture:ruby",  "python_depth:0", "capture_depth:0", "capture_depth:257", "unwinder:gdb",
                       "sample_bytes:x",  "sample_bytes:2000TiB", "sample_seed:-1",  "oom_report:on"};
  for (const char* text : bad) {
    config d;
    EXPECT_EQ(parse_config(text, &d), status::bad_config) << text;
    EXPECT_NE(std::string(last_error()).find("expected"), std::string::npos) << last_error();
  }
}

TEST(Config, UnknownKeyIsAnErrorThatNamesIt) {
  config c;
  c.limit = 7;
  EXPECT_EQ(parse_config("backend:host,lmit:1GiB", &c), status::bad_config);
  EXPECT_NE(std::string(last_error()).find("unknown key 'lmit'"), std::string::npos) << last_error();
  EXPECT_EQ(c.limit, 7u) << "a failed parse must leave the config unchanged";
}

TEST(Config, BadValuesSayWhatWasExpected) {
  const char* bad[] = {"backend:gpu", "limit:lots", "limit:-1", "limit:1.5", "validate:maybe",
                       "host_devices:0", "host_devices:99", "host_capacity:0", "backend", "fail_alloc:x",
                       "host_outside:lots", "host_capacity:1GiB,host_outside:1GiB", "backend:cuda,host_outside:1MiB"};
  for (const char* text : bad) {
    config c;
    EXPECT_EQ(parse_config(text, &c), status::bad_config) << text;
    EXPECT_NE(std::string(last_error()).find("TRACEPOOL_CONF"), std::string::npos) << last_error();
  }
}

TEST(Config, FaultInjectionNeedsTheHostBackend) {
  config c;
  EXPECT_EQ(parse_config("fail_alloc:1", &c), status::bad_config);
  EXPECT_EQ(parse_config("backend:cuda,fail_above:1MiB", &c), status::bad_config);
  EXPECT_EQ(parse_config("backend:host,fail_alloc:1", &c), status::ok);
}

TEST(Config, HostKeysDoNotApplyToCuda) {
  config c;
  EXPECT_EQ(parse_config("backend:cuda,host_devices:2", &c), status::bad_config);
  EXPECT_NE(std::string(last_error()).find("do not apply"), std::string::npos) << last_error();
  EXPECT_EQ(parse_config("host_devices:2", &c), status::ok) << "auto may fall back to the host backend";
}

TEST(Config, ByteSizes) {
  size_t n = 0;
  EXPECT_TRUE(parse_bytes("4096", &n));
  EXPECT_EQ(n, 4096u);
  EXPECT_TRUE(parse_bytes("2K", &n));
  EXPECT_EQ(n, 2048u);
  EXPECT_TRUE(parse_bytes("3MB", &n));
  EXPECT_EQ(n, 3000000u);
  EXPECT_TRUE(parse_bytes("1TiB", &n));
  EXPECT_EQ(n, size_t{1} << 40);
  EXPECT_FALSE(parse_bytes("12 parsecs", &n));
  EXPECT_FALSE(parse_bytes("", &n));
  EXPECT_FALSE(parse_bytes("1e30", &n));
}

// Reports carry byte counts as int64: a size beyond INT64_MAX would come back negative, and the reader
// refuses it. Every byte-size key stops there, and takes a decimal integer exactly (not through a double).
TEST(Config, ByteSizesStopWhereAReportCanHoldThem) {
  const char* keys[] = {"limit", "host_capacity", "host_outside", "fail_above"};
  for (const char* key : keys) {
    for (const char* value : {"9223372036854775808", "18446744073709551615", "8388608TiB", "9.3e18"}) {
      config c;
      const std::string text = std::string("backend:host,") + key + ":" + value;
      EXPECT_EQ(parse_config(text.c_str(), &c), status::bad_config) << text;
      EXPECT_NE(std::string(last_error()).find(std::string("for '") + key + "'"), std::string::npos) << last_error();
      EXPECT_NE(std::string(last_error()).find("at most 9223372036854775807"), std::string::npos) << last_error();
    }
  }
  config c;
  ASSERT_EQ(parse_config("backend:host,limit:9223372036854775807,host_capacity:9223372036854775807,"
                         "host_outside:9007199254740993,fail_above:8388607TiB",
                         &c),
            status::ok)
      << last_error();
  EXPECT_EQ(c.limit, size_t{INT64_MAX});
  EXPECT_EQ(c.host.capacity, size_t{INT64_MAX});
  EXPECT_EQ(c.host.outside, size_t{9007199254740993u}) << "2^53 + 1: exact, where a double would round it";
  EXPECT_EQ(c.host.fail_above, size_t{8388607} << 40);
}

TEST(Config, ARepeatedKeyIsAnErrorThatNamesIt) {
  config c;
  c.limit = 7;
  EXPECT_EQ(parse_config("limit:1GiB,backend:host, limit :2GiB", &c), status::bad_config);
  EXPECT_NE(std::string(last_error()).find("'limit' is given twice"), std::string::npos) << last_error();
  EXPECT_EQ(c.limit, 7u) << "a failed parse must leave the config unchanged";
  EXPECT_EQ(parse_config("capture:off,capture:off", &c), status::bad_config) << "even with the same value";
}

// An error quotes what it refuses, but no more than 64 bytes of it, and with its control characters
// and invalid UTF-8 spelled out: a hostile TRACEPOOL_CONF cannot flood the log or drive the terminal.
TEST(Config, ErrorsQuoteAShortAndHarmlessExcerpt) {
  config c;
  const std::string long_key(100 * 1024, 'k');
  EXPECT_EQ(parse_config((long_key + ":1").c_str(), &c), status::bad_config);
  std::string e = last_error();
  EXPECT_NE(e.find("unknown key '" + std::string(64, 'k') + "... (102400 bytes)'"), std::string::npos)
      << e.substr(0, 200);
  EXPECT_LT(e.size(), 2048u);
  const std::string long_value(100 * 1024, '9');
  EXPECT_EQ(parse_config(("limit:" + long_value).c_str(), &c), status::bad_config);
  e = last_error();
  EXPECT_NE(e.find("'" + std::string(64, '9') + "... (102400 bytes)'"), std::string::npos) << e.substr(0, 200);
  EXPECT_LT(e.size(), 512u);
  EXPECT_EQ(parse_config(long_key.c_str(), &c), status::bad_config) << "not key:value";
  EXPECT_LT(std::string(last_error()).size(), 512u);

  // Values and keys as a hostile environment might set them; valid UTF-8 that prints stays as it is.
  const struct {
    const char* text;
    const char* shown;
  } hostile[] = {
      {"limit:\x1b[2J", "'\\x1b[2J'"},                 // ESC: a terminal would clear the screen
      {"limit:1\n2", "'1\\x0a2'"},                      // a newline would forge a second log line
      {"limit:a\x7f", "'a\\x7f'"},                      // DEL
      {"limit:\xc2\x9b" "31m", "'\\x9b31m'"},            // U+009B, the C1 form of ESC [ (Note [Printable text])
      {"limit:\xff\xfe", "'\\xff\\xfe'"},              // not UTF-8
      {"limit:\xe2\x80\xae" "x", "'\\u202ex'"},         // U+202E, which would show the line backwards
      {"limit:caf\xc3\xa9", "'caf\xc3\xa9'"},           // printable UTF-8 is kept
      {"\x1b]0;owned\x07:1", "unknown key '\\x1b]0;owned\\x07'"},
      {"backend:host\r", "bad value 'host\\x0d'"},
      {"\x1b[2J", "'\\x1b[2J' is not key:value"},
  };
  for (const auto& h : hostile) {
    EXPECT_EQ(parse_config(h.text, &c), status::bad_config) << h.shown;
    e = last_error();
    EXPECT_NE(e.find(h.shown), std::string::npos) << e;
    for (size_t i = 0; i < e.size(); ++i) {
      const auto byte = static_cast<unsigned char>(e[i]);
      EXPECT_FALSE(byte < 0x20 || byte == 0x7f) << "raw control byte " << int{byte} << " in: " << e;
      EXPECT_FALSE(byte == 0xc2 && i + 1 < e.size() && static_cast<unsigned char>(e[i + 1]) < 0xa0) << e;
    }
  }
}

}  // namespace tracepool::core
