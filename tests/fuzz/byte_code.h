// byte_code.h: how the fuzzer reads an input as a sequence of C API operations.
//
// Input byte-code (little enough to write seeds by hand; make_seeds.py writes the committed ones):
//
//   byte 0, the mode:  bits 0-1  threads - 1: 0 runs the ops on the calling thread, 1-3 deal them
//                                round-robin (op i to thread i % n) to 2-4 threads that start together
//                      bit 2     capture:native,capture_depth:4 (else capture:off)
//                      bit 3     host_capacity:24MiB (else 64MiB)
//                      bit 4     limit:40MiB in the configuration
//   then ops: an opcode byte (its value % 18 is the op) and the op's argument bytes, a fixed number
//   per op; bytes missing at the end read as 0.
//
//   op  name        args       what it does
//    0  malloc      D S K V V  malloc(size(K, V), device(D), stream(S))
//    1  free_live   I          free own live block I % n (free(NULL) when the thread owns none)
//    2  free_stale  I          free a pointer this thread freed before (the last 16 are kept)
//    3  free_inner  I O O      free live block I's address + 1 + OO % (size - 1): DOUBLE_FREE
//    4  free_bogus  B          free B % 6: a stack address, 0x1000, a host heap block, a global, ~0xff, NULL
//    5  record      I W S      record_stream on stream(S) of W % 4: live block I, stale pointer I,
//                              interior pointer of block I, NULL
//    6  empty       D          empty_cache(device(D)), -1 included
//    7  limit       D K V V    set_limit(device(D), size(K, V))
//    8  stats       D Z        get_stats(device(D)) with Z % 4: full struct, older smaller struct,
//                              a size too small, out NULL
//    9  reset       D R        R odd: reset_peak_stats(device(D)), even: reset_accumulated_stats
//   10  mark        L          mark(label(L))
//   11  tag_push    L          tag_push(label(L))
//   12  tag_pop                tag_pop()
//   13  report      F          F % 8: report_string json, text; write_report json, text (into /dev/null
//                              when F / 8 is odd); snapshot_string; write_oom_report; report_string "xml";
//                              write_report to a missing directory (write_file when F / 8 is odd)
//   14  info        D N        mem_get_info(device(D)), both out-pointers NULL when N is odd
//   15  validate               validate()
//   16  misc        X          X % 8: device_count, backend_name, status_string, NULL handle, bad conf,
//                              NULL out, destroy(NULL), last_error
//   17  churn       N D        N % 8 + 1 small blocks allocated on device D % 2, then all freed
//
//   device(D): D % 8 picks 0 1 0 1 0 1 bad -1, the bad one being 2 7 64 INT_MAX INT_MIN -2 by D / 8 % 6.
//   stream(S): S % 4 picks NULL, 0x100, 0x200, UINTPTR_MAX.
//   size(K, V), V = 16-bit little endian: K % 8 picks V, V, V*16, V*256, V*1024, edge_sizes[V % n],
//   V*512, capacity + V - 32768.
//   label(L): L % 8 picks "epoch", "", 256 bytes, 257 bytes, a control byte, bytes that are not UTF-8
//   (refused, or accepted and then written to JSON as valid UTF-8), quotes and backslashes, NULL.
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fuzz {

enum opcode : int {
  op_malloc,
  op_free_live,
  op_free_stale,
  op_free_inner,
  op_free_bogus,
  op_record,
  op_empty,
  op_limit,
  op_stats,
  op_reset,
  op_mark,
  op_tag_push,
  op_tag_pop,
  op_report,
  op_info,
  op_validate,
  op_misc,
  op_churn,
  op_count
};
inline constexpr int arg_count[op_count] = {5, 1, 1, 3, 1, 3, 1, 4, 2, 2, 1, 1, 0, 1, 2, 0, 1, 2};
inline constexpr const char* op_names[op_count] = {
    "malloc", "free_live", "free_stale", "free_inner", "free_bogus", "record", "empty",    "limit", "stats",
    "reset",  "mark",      "tag_push",   "tag_pop",    "report",     "info",   "validate", "misc",  "churn"};
inline constexpr size_t MiB = size_t{1} << 20;

struct op {
  int code;
  uint8_t a[5];
  size_t index;  // position in the op stream, for messages
  uint16_t v(int at) const { return static_cast<uint16_t>(a[at] | a[at + 1] << 8); }
};

// Where the size classes, segment sizes, capacities, limits and request checks change.
// clang-format off
inline constexpr size_t edge_sizes[] = {
    0, 1, 255, 256, 257, 511, 512, 513,
    MiB - 1, MiB, MiB + 1, 2 * MiB - 512, 2 * MiB, 2 * MiB + 1,
    10 * MiB - 1, 10 * MiB, 10 * MiB + 1, 20 * MiB, 20 * MiB + 1, 24 * MiB, 40 * MiB, 64 * MiB,
    size_t{1} << 50, (size_t{1} << 50) + 1, SIZE_MAX / 2, SIZE_MAX - 511, SIZE_MAX};
// clang-format on

inline int device_of(uint8_t d) {
  static constexpr int bad[] = {2, 7, 64, INT_MAX, INT_MIN, -2};
  static constexpr int pick[] = {0, 1, 0, 1, 0, 1, 99, -1};
  const int v = pick[d % 8];
  return v == 99 ? bad[d / 8 % 6] : v;
}

inline void* stream_of(uint8_t s) {
  static void* const streams[] = {nullptr, reinterpret_cast<void*>(0x100), reinterpret_cast<void*>(0x200),
                                  reinterpret_cast<void*>(UINTPTR_MAX)};
  return streams[s % 4];
}

inline size_t size_of(uint8_t k, uint16_t v, size_t capacity) {
  switch (k % 8) {
    case 2:
      return size_t{v} * 16;
    case 3:
      return size_t{v} * 256;
    case 4:
      return size_t{v} * 1024;
    case 5:
      return edge_sizes[v % (sizeof edge_sizes / sizeof edge_sizes[0])];
    case 6:
      return size_t{v} * 512;
    case 7:
      return capacity + v - 32768;
    default:
      return v;
  }
}

inline const char* label_of(uint8_t l) {
  static const std::string max_label(256, 'm'), too_long(257, 'm');
  static const char* const labels[] = {
      "epoch", "", max_label.c_str(), too_long.c_str(), "ctl\x01", "bad \xff\xfe utf-8", "q\"uo\\te", nullptr};
  return labels[l % 8];
}
inline bool good_label(uint8_t l) { return l % 8 == 0 || l % 8 == 2 || l % 8 == 6; }
// Bytes that are not UTF-8: a label may be refused for them, or accepted and then written to JSON
// reports as valid UTF-8 all the same.
inline bool doubtful_label(uint8_t l) { return l % 8 == 5; }

inline std::vector<op> decode(const uint8_t* data, size_t size) {
  std::vector<op> ops;
  for (size_t pos = 1; pos < size;) {
    op o{};
    o.code = data[pos++] % op_count;
    o.index = ops.size();
    for (int k = 0; k < arg_count[o.code]; ++k) o.a[k] = pos < size ? data[pos++] : 0;
    ops.push_back(o);
  }
  return ops;
}

}  // namespace fuzz
