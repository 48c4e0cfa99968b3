// unwinder.h: raw return addresses of the calling thread (notes/stacks.md §0.1). unwinder:auto
// takes cfi where it is supported, then libunwind, then boost; per allocation at depth 32 on the CI
// machine, cfi added ~0.3 us, libunwind ~0.4 us and boost ~5 us (tests/bench/trace_bench.cpp).
//
//   libunwind  unw_backtrace from libunwind.so.8, loaded with dlopen(RTLD_LOCAL) so its _Unwind_*
//              symbols never replace libgcc's in the process: about 8 ns a frame once warm; the first
//              capture on a thread costs ~76 us (its per-thread cache).
//   cfi        tracepool's own caching DWARF unwinder (cfi_unwinder.h), x86-64 Linux: each return
//              address's rule is interpreted once per thread, and repeated walks are recalled; its
//              per-thread cache is ~600 KB; stacks it cannot follow go to boost.
//   boost      boost::stacktrace::safe_dump_to, i.e. libgcc's _Unwind_Backtrace: about 100-165 ns a
//              frame, everywhere, no heap use. The portable path.
//
// None allocates through tracepool or takes an allocator lock: capture runs before any lock.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/config.h"
#include "base/status.h"

namespace tracepool::core {

// Address ranges holding tracepool's own code: frames inside them are dropped from call sites.
struct code_range {
  uintptr_t begin = 0, end = 0;
  bool contains(uintptr_t pc) const { return pc >= begin && pc < end; }
};
// The mapped extent of the loaded object (executable or shared library) that contains `address`.
code_range module_range_of(const void* address);

class unwinder {
 public:
  enum class kind { libunwind, cfi, boost };
  // Chooses per `choice`; `libunwind` fails with status::unavailable where libunwind.so.8 is missing.
  static status make(unwinder_choice choice, unwinder* out);
  static bool libunwind_available();

  const char* name() const { return kind_ == kind::libunwind ? "libunwind" : kind_ == kind::cfi ? "cfi" : "boost"; }
  // Up to `max` return addresses, innermost first, starting inside the caller of capture(); with
  // `stop`, the last is the first address for which stop() is true. With `walk`, *walk names the
  // sequence of frames for the life of the process where the unwinder can tell (cfi's remembered
  // walks, cfi_unwinder.h; `key` as there), else 0; a capture that recalls a remembered walk returns
  // 0 with *walk set, and writes no frames (call again without `walk` for them).
  using stop_fn = bool (*)(uintptr_t return_address);
  size_t capture(uintptr_t* out, size_t max, stop_fn stop = nullptr, uint64_t key = 0, uint64_t* walk = nullptr) const;

 private:
  using unw_backtrace_fn = int (*)(void**, int);
  kind kind_ = kind::boost;
  unw_backtrace_fn unw_backtrace_ = nullptr;
};

}  // namespace tracepool::core
