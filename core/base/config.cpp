#include "base/config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>

#include "base/excerpt.h"

namespace tracepool::core {

namespace {

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t");
  const size_t b = s.find_last_not_of(" \t");
  return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}

bool parse_bool(const std::string& v, bool* out) {
  if (v == "1" || v == "on" || v == "true" || v == "yes") return *out = true, true;
  if (v == "0" || v == "off" || v == "false" || v == "no") return *out = false, true;
  return false;
}

bool parse_int(const std::string& v, long lo, long hi, int* out) {
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0 || n < lo || n > hi) return false;
  *out = static_cast<int>(n);
  return true;
}

constexpr const char* capture_mode_names[] = {
#define TRACEPOOL_CAPTURE_MODE_NAME_(name) #name,
    TRACEPOOL_CAPTURE_MODE_MAP(TRACEPOOL_CAPTURE_MODE_NAME_)
#undef TRACEPOOL_CAPTURE_MODE_NAME_
};

// The capture modes in a list for people: ("|", "|") gives off|native|..., (", ", " or ") off, native ... or all.
std::string capture_mode_list(const char* separator, const char* last_separator) {
  std::string list;
  const size_t n = std::size(capture_mode_names);
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) list += i + 1 == n ? last_separator : separator;
    list += capture_mode_names[i];
  }
  return list;
}

status bad_value(const std::string& key, const std::string& value, const char* wanted) {
  return fail(status::bad_config, "TRACEPOOL_CONF: bad value '%s' for '%s': expected %s", excerpt(value).c_str(),
              excerpt(key).c_str(), wanted);
}

status apply(const std::string& key, const std::string& value, config* c) {
  const char* bytes = "a byte size such as 4096, 512MiB or 2GiB, at most 9223372036854775807 (reports hold int64)";
  if (key == "backend") {
    if (value == "auto") c->backend = backend_choice::automatic;
    else if (value == "cuda") c->backend = backend_choice::cuda;
    else if (value == "host") c->backend = backend_choice::host;
    else return bad_value(key, value, "auto, cuda or host");
  } else if (key == "limit") {
    if (!parse_bytes(value, &c->limit)) return bad_value(key, value, bytes);
  } else if (key == "segments") {
    if (value == "auto") c->segments = segment_choice::automatic;
    else if (value == "classic") c->segments = segment_choice::classic;
    else if (value == "growable") c->segments = segment_choice::growable;
    else return bad_value(key, value, "auto, classic or growable");
  } else if (key == "validate") {
    if (!parse_bool(value, &c->validate)) return bad_value(key, value, "on or off");
  } else if (key == "host_devices") {
    if (!parse_int(value, 1, 64, &c->host.devices)) return bad_value(key, value, "an integer from 1 to 64");
  } else if (key == "host_capacity") {
    if (!parse_bytes(value, &c->host.capacity) || c->host.capacity == 0) return bad_value(key, value, bytes);
  } else if (key == "fail_alloc") {
    int k = 0;
    if (!parse_int(value, 0, 1 << 30, &k)) return bad_value(key, value, "a call number (1 = the first; 0 = never)");
    c->host.fail_alloc = static_cast<size_t>(k);
  } else if (key == "fail_call") {
    int k = 0;
    if (!parse_int(value, 0, 1 << 30, &k)) return bad_value(key, value, "a call number (1 = the first; 0 = never)");
    c->host.fail_call = static_cast<size_t>(k);
  } else if (key == "host_outside") {
    if (!parse_bytes(value, &c->host.outside)) return bad_value(key, value, bytes);
  } else if (key == "fail_above") {
    if (!parse_bytes(value, &c->host.fail_above)) return bad_value(key, value, bytes);
  } else if (key == "capture") {
    if (!parse_capture_mode(value, &c->capture)) return bad_value(key, value, capture_mode_list(", ", " or ").c_str());
  } else if (key == "python_depth") {
    if (!parse_int(value, 1, max_capture_depth, &c->python_depth)) return bad_value(key, value, "an integer from 1 to 256");
  } else if (key == "capture_depth") {
    if (!parse_int(value, 1, max_capture_depth, &c->capture_depth)) return bad_value(key, value, "an integer from 1 to 256");
  } else if (key == "unwinder") {
    if (value == "auto") c->unwinder = unwinder_choice::automatic;
    else if (value == "libunwind") c->unwinder = unwinder_choice::libunwind;
    else if (value == "cfi") c->unwinder = unwinder_choice::cfi;
    else if (value == "boost") c->unwinder = unwinder_choice::boost;
    else return bad_value(key, value, "auto, libunwind, cfi or boost");
  } else if (key == "sample_bytes") {
    if (!parse_bytes(value, &c->sample_bytes) || c->sample_bytes > (size_t{1} << 50))
      return bad_value(key, value, "0 (every allocation) or a byte size up to 1 PiB, such as 1MiB");
  } else if (key == "sample_seed") {
    char* end = nullptr;
    errno = 0;
    const unsigned long long seed = std::strtoull(value.c_str(), &end, 0);
    if (value.empty() || value[0] == '-' || *end != '\0' || errno != 0) return bad_value(key, value, "an unsigned integer");
    c->sample_seed = seed;
  } else if (key == "history") {
    int n = 0;
    if (!parse_int(value, 0, static_cast<long>(max_history_entries), &n))
      return bad_value(key, value, "0 (off) or the number of events kept, up to 67108864");
    c->history = static_cast<size_t>(n);
  } else if (key == "auto_mark_ms") {
    int n = 0;
    if (!parse_int(value, 0, 3600000, &n)) return bad_value(key, value, "0 (off) or milliseconds up to 3600000");
    c->auto_mark_ms = static_cast<uint64_t>(n);
  } else if (key == "capture_reuse") {
    if (!parse_bool(value, &c->capture_reuse)) return bad_value(key, value, "on or off");
  } else if (key == "oom_report") {
    if (value == "stderr") c->oom_report = true;
    else if (value == "off") c->oom_report = false;
    else return bad_value(key, value, "stderr or off");
  } else {
    return fail(status::bad_config, "TRACEPOOL_CONF: unknown key '%s'; known keys: %s", excerpt(key).c_str(),
                config_help());
  }
  return status::ok;
}

}  // namespace

const char* capture_mode_name(capture_mode m) { return capture_mode_names[static_cast<int>(m)]; }

bool parse_capture_mode(const std::string& name, capture_mode* out) {
  for (size_t i = 0; i < std::size(capture_mode_names); ++i)
    if (name == capture_mode_names[i]) return *out = static_cast<capture_mode>(i), true;
  return false;
}

// Digits alone are read exactly (a double would round 9007199254740993); a fraction or an exponent
// ("1.5GiB", "2e9") through a double, which must then come out whole.
bool parse_bytes(const std::string& text, size_t* out) {
  const std::string t = trim(text);
  if (t.empty() || !(std::isdigit(static_cast<unsigned char>(t[0])) || t[0] == '.')) return false;  // no sign, no inf
  char* end = nullptr;
  errno = 0;
  const double n = std::strtod(t.c_str(), &end);
  if (end == t.c_str() || errno != 0) return false;
  static const struct { const char* name; uint64_t scale; } units[] = {
      {"", 1},           {"B", 1},              {"K", 1ull << 10},  {"KiB", 1ull << 10}, {"KB", 1000},
      {"M", 1ull << 20}, {"MiB", 1ull << 20},   {"MB", 1000000},    {"G", 1ull << 30},   {"GiB", 1ull << 30},
      {"GB", 1000000000}, {"T", 1ull << 40},    {"TiB", 1ull << 40}, {"TB", 1000000000000}};
  const std::string unit = trim(end);
  uint64_t scale = 0;
  for (const auto& u : units)
    if (unit == u.name) scale = u.scale;
  if (scale == 0) return false;
  if (std::min(t.find_first_not_of("0123456789"), t.size()) == static_cast<size_t>(end - t.c_str())) {
    errno = 0;
    const unsigned long long k = std::strtoull(t.c_str(), nullptr, 10);
    if (errno != 0 || k > max_byte_size / scale) return false;
    *out = static_cast<size_t>(k * scale);
    return true;
  }
  const double bytes = n * static_cast<double>(scale);
  if (!(bytes < 9223372036854775808.0) || bytes != std::floor(bytes)) return false;  // 2^63: max_byte_size + 1
  *out = static_cast<size_t>(bytes);
  return true;
}

const char* config_help() {
  static const std::string help =
      "backend (auto|cuda|host), limit (bytes per device), segments (auto|classic|growable), validate (on|off), "
      "host_devices (1-64), host_capacity (bytes), host_outside (bytes used by others, host only), fail_alloc (k: fail the k-th device allocation, host only), "
      "fail_call (k: fail the k-th backend call of any kind, host only), "
      "fail_above (bytes: fail larger device allocations, host only), capture (" +
      capture_mode_list("|", "|") +
      "), python_depth (1-256), "
      "capture_depth (1-256), unwinder (auto|libunwind|cfi|boost), sample_bytes (0 or bytes), sample_seed (integer), "
      "history (0: off, or the number of allocator events kept), auto_mark_ms (0: off, or the least milliseconds "
      "between automatic marks), capture_reuse (on|off: reuse record_stream blocks inside a CUDA graph capture), "
      "oom_report (stderr|off)";
  return help.c_str();
}

status parse_config(const char* text, config* out) {
  config c = *out;
  const std::string all = text == nullptr ? std::string() : std::string(text);
  std::map<std::string, std::string> given;  // key -> value: a key given twice is an error, not last-wins
  size_t start = 0;
  while (start <= all.size()) {
    size_t comma = all.find(',', start);
    if (comma == std::string::npos) comma = all.size();
    const std::string item = trim(all.substr(start, comma - start));
    start = comma + 1;
    if (item.empty()) continue;
    const size_t colon = item.find(':');
    if (colon == std::string::npos)
      return fail(status::bad_config, "TRACEPOOL_CONF: '%s' is not key:value", excerpt(item).c_str());
    const std::string key = trim(item.substr(0, colon)), value = trim(item.substr(colon + 1));
    if (const auto [earlier, first] = given.emplace(key, value); !first)
      return fail(status::bad_config, "TRACEPOOL_CONF: '%s' is given twice ('%s', then '%s'); give each key once",
                  excerpt(key).c_str(), excerpt(earlier->second).c_str(), excerpt(value).c_str());
    if (status s = apply(key, value, &c); s != status::ok) return s;
  }
  const bool faults = c.host.fail_alloc != 0 || c.host.fail_call != 0 || c.host.fail_above != 0;
  if (faults && c.backend != backend_choice::host)
    return fail(status::bad_config, "TRACEPOOL_CONF: fail_alloc, fail_call and fail_above need backend:host");
  const host_options defaults;
  if (c.backend == backend_choice::cuda &&
      (c.host.devices != defaults.devices || c.host.capacity != defaults.capacity || c.host.outside != 0))
    return fail(status::bad_config,
                "TRACEPOOL_CONF: host_devices, host_capacity and host_outside do not apply to backend:cuda");
  if (c.host.outside >= c.host.capacity)
    return fail(status::bad_config, "TRACEPOOL_CONF: host_outside (%zu bytes) must be less than host_capacity (%zu)",
                c.host.outside, c.host.capacity);
  *out = c;
  return status::ok;
}

}  // namespace tracepool::core
