// big_report.h: a saved report of many entries, for the reader's scale test (report_scale_test.cpp) and
// its benchmark (report_reader_bench.cpp): `entries` leaks, as many retained entries, and `marks` marks.
//
// The leaks carry no site ids (as a hand-made report may: every site is then 0), so that only tags and
// frames tell them apart, and every stack starts with the same native frames, as the allocator's own
// path starts every PyTorch stack: leak i's last frame is step_<i / 2>, and its tag "train" or "eval"
// by parity. Retained entry i is leak retained_leak(i) (a permutation, so that an entry is never simply
// its own index); an even one was born after mark retained_mark(i), an odd one before the first. Mark
// labels repeat once (mark k and k + marks / 2 share a label): an entry is born after the latest mark
// of its label.
#pragma once

#include <cstddef>
#include <string>

namespace tracepool::testing {

inline size_t retained_leak(size_t i, size_t entries) { return (i * 7919) % entries; }  // 7919: prime
inline int retained_mark(size_t i, size_t marks) {
  if (i % 2 == 1) return -1;
  const size_t half = marks / 2;
  return static_cast<int>(half + (i / 2) % half);  // the later mark of its label
}
inline std::string mark_label(size_t k, size_t marks) { return "epoch " + std::to_string(k % (marks / 2)); }

namespace big_report_detail {

inline std::string native_frame(const char* function) {
  return "{\"kind\":\"native\",\"function\":\"" + std::string(function) +
         "\",\"module\":\"/lib/libtorch_cuda.so\",\"address\":\"0x1000\"}";
}

inline std::string site_fields(size_t leak, size_t entries) {
  const std::string step = std::to_string(leak / 2);
  return "\"bytes\":" + std::to_string((entries - leak) * 512) + ",\"blocks\":1,\"tags\":[\"" +
         (leak % 2 ? "eval" : "train") + "\"],\"frames\":[" +
         native_frame("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc") + "," +
         native_frame("at::_ops::empty_memory_format::call(c10::ArrayRef<c10::SymInt>)") +
         ",{\"kind\":\"python\",\"function\":\"step_" + step + "\",\"file\":\"train.py\",\"line\":" + step + "}]";
}

}  // namespace big_report_detail

// `marks` must be even and at least 2.
inline std::string big_report_json(size_t entries, size_t marks) {
  using big_report_detail::site_fields;
  std::string text =
      "{\"schema\":\"tracepool.report/1\",\"reason\":\"exit\",\"backend\":\"host\",\"stats\":{},\"leaks\":[";
  for (size_t i = 0; i < entries; ++i) text += (i ? ",{" : "{") + site_fields(i, entries) + "}";
  text += "],\"retained\":[";
  for (size_t i = 0; i < entries; ++i) {
    const int mark = retained_mark(i, marks);
    const std::string born = mark < 0 ? "null" : "\"" + mark_label(static_cast<size_t>(mark), marks) + "\"";
    text += (i ? ",{" : "{") + site_fields(retained_leak(i, entries), entries) + ",\"born_after_mark\":" + born +
            ",\"marks_survived\":1}";
  }
  text += "],\"cached\":[],\"marks\":[";
  for (size_t k = 0; k < marks; ++k)
    text += (k ? ",{\"label\":\"" : "{\"label\":\"") + mark_label(k, marks) + "\",\"index\":" + std::to_string(k) +
            ",\"time_ns\":" + std::to_string(k) + ",\"live_bytes\":0}";
  return text + "]}";
}

}  // namespace tracepool::testing
