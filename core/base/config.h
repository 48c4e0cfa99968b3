// config.h: TRACEPOOL_CONF ("key:value,key:value") parsed into an immutable struct, so that policy
// code never sees text. Unknown keys and bad values are errors that name the key and what was wanted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"

namespace tracepool::core {

// Options of the host backend (TRACEPOOL_CONF keys host_devices, host_capacity, fail_*).
struct host_options {
  int devices = 1;
  size_t capacity = size_t{16} << 30;  // emulated bytes per device
  size_t fail_alloc = 0;                // fail the k-th allocate() call with out_of_memory (1-based; 0 = never)
  size_t fail_call = 0;                 // fail the k-th fallible call of any kind with backend_error (host_ledger)
  size_t fail_above = 0;                // fail every allocate() larger than this many bytes (0 = never)
  size_t outside = 0;  // bytes each emulated device counts as used by others (a context, a library, a process)
};

enum class backend_choice { automatic, cuda, host };
// Segments (Note [Growable segments] in block.h): auto is growable on the CUDA backend where the device
// can map memory into reserved ranges (measured no slower and never larger than PyTorch's expandable
// segments, docs/design/growable-segments.md), classic elsewhere (the host backend, whose tests pin
// classic layouts; ctest runs them again with segments:growable).
enum class segment_choice { automatic, classic, growable };

#if defined(TRACEPOOL_VALIDATE_BY_DEFAULT)
inline constexpr bool validate_by_default = true;
#else
inline constexpr bool validate_by_default = false;
#endif

inline constexpr int max_capture_depth = 256;
// The largest byte size a key takes: reports carry byte counts as int64 (a larger one would read back
// negative, and the report reader refuses it).
inline constexpr size_t max_byte_size = size_t{INT64_MAX};
inline constexpr size_t max_history_entries = size_t{1} << 26;  // history:N, 48 bytes an entry

// What a call site records (TRACEPOOL_CONF capture:<name>, and the report's capture.mode), one row each:
// nothing, native frames, script frames (from the registered frame provider, script_frames.h), or
// both. "all" walks native frames only up to the first frame of an interpreter loop (the script frames
// stand for everything outside it; in a host without an interpreter that is every native frame);
// "hybrid" walks the whole native stack and splices the script frames in where the loop ran them.
#define TRACEPOOL_CAPTURE_MODE_MAP(XX) XX(off) XX(native) XX(python) XX(all) XX(hybrid)
enum class capture_mode {
#define TRACEPOOL_CAPTURE_MODE_(name) name,
  TRACEPOOL_CAPTURE_MODE_MAP(TRACEPOOL_CAPTURE_MODE_)
#undef TRACEPOOL_CAPTURE_MODE_
};
const char* capture_mode_name(capture_mode m);  // "off", "native", ...
// Sets *out to the mode called `name`; false, leaving *out alone, if none is.
bool parse_capture_mode(const std::string& name, capture_mode* out);
inline bool captures_native(capture_mode m) {
  return m == capture_mode::native || m == capture_mode::all || m == capture_mode::hybrid;
}
inline bool captures_script(capture_mode m) {
  return m == capture_mode::python || m == capture_mode::all || m == capture_mode::hybrid;
}
// Whether the native walk ends at the first frame of an interpreter loop (the outer frames are the script's).
inline bool native_stops_at_script(capture_mode m) { return m == capture_mode::all; }
enum class unwinder_choice { automatic, libunwind, cfi, boost };

struct config {
  backend_choice backend = backend_choice::automatic;  // backend: auto | cuda | host
  host_options host;                                  // host_devices, host_capacity, fail_alloc, fail_call, fail_above
  size_t limit = 0;                                    // limit: bytes each device may reserve, 0 = no limit
  bool validate = validate_by_default;                 // validate: check every invariant after each operation
  segment_choice segments = segment_choice::automatic;  // segments: auto | classic | growable

  capture_mode capture = capture_mode::all;            // capture: off | native | python | all | hybrid
  int capture_depth = 32;                              // capture_depth: native frames kept per call site, 1-256
  int python_depth = 64;                               // python_depth: script frames kept, 1-256
  unwinder_choice unwinder = unwinder_choice::automatic;  // unwinder: auto | libunwind | cfi | boost
  size_t sample_bytes = 0;                             // sample_bytes: mean bytes between samples, 0 = every block
  uint64_t sample_seed = 0x7261636570ULL;              // sample_seed: seed of the sampler (per thread)
  size_t history = 0;                                  // history: allocator events kept (history.h), 0 = off
  uint64_t auto_mark_ms = 20;  // auto_mark_ms: least spacing of automatic marks (Note [Growth without marks]), 0 = off
  bool oom_report = true;                              // oom_report: stderr | off
  // capture_reuse: on | off; record_stream blocks reused inside a capture (Note [Reuse inside a capture]).
  bool capture_reuse = false;

  // Not a key: set by the C API to an address inside libtracepool.so, so that capture drops the
  // frames of that module (tracepool's own). nullptr: drop nothing (core linked into a test).
  const void* own_code = nullptr;
};

// Parses `text` (nullptr or "" gives the defaults) over *out: a key of `text` replaces what *out had,
// but `text` itself may give each key once. On failure *out is unchanged.
status parse_config(const char* text, config* out);

// A byte size: "4096", "512KiB", "1.5GiB", "20MB" (KiB/MiB/GiB/K/M/G are powers of 1024; KB/MB/GB of 1000),
// at most max_byte_size.
bool parse_bytes(const std::string& text, size_t* out);

// The keys and what they take, for error messages and --help.
const char* config_help();

}  // namespace tracepool::core
