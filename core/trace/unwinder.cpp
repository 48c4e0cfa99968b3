#include "unwinder.h"

#include <dlfcn.h>
#include <link.h>

#include <boost/stacktrace/safe_dump_to.hpp>
#include <iterator>

#include "trace/cfi_unwinder.h"

namespace tracepool::core {

namespace {

// Resolved once; the handle is never closed (frames may be captured until the process ends).
void* libunwind_symbol() {
  static void* const fn = [] {
    void* lib = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
    return lib == nullptr ? nullptr : dlsym(lib, "unw_backtrace");
  }();
  return fn;
}

struct range_search {
  uintptr_t address;
  code_range found;
};

int find_module(dl_phdr_info* info, size_t, void* data) {
  auto* search = static_cast<range_search*>(data);
  code_range r{UINTPTR_MAX, 0};
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    const uintptr_t start = info->dlpi_addr + ph.p_vaddr;
    if (start < r.begin) r.begin = start;
    if (start + ph.p_memsz > r.end) r.end = start + ph.p_memsz;
  }
  if (!r.contains(search->address)) return 0;
  search->found = r;
  return 1;
}

}  // namespace

code_range module_range_of(const void* address) {
  range_search search{reinterpret_cast<uintptr_t>(address), {}};
  dl_iterate_phdr(find_module, &search);
  return search.found;
}

bool unwinder::libunwind_available() { return libunwind_symbol() != nullptr; }

#if defined(__SANITIZE_THREAD__)
// Under TSan, libunwind's per-thread cache destructor locks a mutex after TSan has retired the
// exiting thread, which crashes TSan's runtime: auto picks boost there (libunwind stays selectable).
constexpr bool auto_prefers_libunwind = false;
#else
constexpr bool auto_prefers_libunwind = true;
#endif

// auto: tracepool's cfi unwinder (fastest measured, and the same frames as boost: tests check it),
// then libunwind, then boost.
status unwinder::make(unwinder_choice choice, unwinder* out) {
  unwinder u;
  const bool automatic = choice == unwinder_choice::automatic;
  if ((automatic || choice == unwinder_choice::cfi) && cfi_unwinder_supported()) {
    u.kind_ = kind::cfi;
  } else if (choice == unwinder_choice::cfi) {
    return fail(status::unavailable, "TRACEPOOL_CONF: unwinder:cfi needs x86-64 Linux (use unwinder:auto or boost)");
  } else if ((choice == unwinder_choice::libunwind || (automatic && auto_prefers_libunwind)) && libunwind_available()) {
    u.kind_ = kind::libunwind;
    u.unw_backtrace_ = reinterpret_cast<unw_backtrace_fn>(libunwind_symbol());
  } else if (choice == unwinder_choice::libunwind) {
    return fail(status::unavailable,
                "TRACEPOOL_CONF: unwinder:libunwind, but libunwind.so.8 cannot be loaded here "
                "(install libunwind8, or use unwinder:auto, cfi or boost)");
  }
  *out = u;
  return status::ok;
}

// noinline: the frames it leaves behind are tracepool's own, dropped by the caller's range check.
__attribute__((noinline)) size_t unwinder::capture(uintptr_t* out, size_t max, stop_fn stop, uint64_t key,
                                                   uint64_t* walk) const {
  if (walk != nullptr) *walk = 0;
  if (max == 0) return 0;
  // The unwinders that cannot stop early are cut here.
  auto cut = [&](size_t n) {
    if (stop != nullptr)
      for (size_t i = 0; i < n; ++i)
        if (stop(out[i])) return i + 1;
    return n;
  };
  if (kind_ == kind::libunwind) {
    const int n = unw_backtrace_(reinterpret_cast<void**>(out), static_cast<int>(max));
    return n < 0 ? 0 : cut(static_cast<size_t>(n));
  }
  if (kind_ == kind::cfi) {
    const size_t n = cfi_backtrace(out, max, stop, key, walk);
    if (n != 0 || (walk != nullptr && *walk != 0)) return n;  // frames, or a recalled walk
  }
  // safe_dump_to writes a terminating 0 and counts it; give it room for one more.
  uintptr_t buf[max_capture_depth + 32];
  const size_t room = max + 1 <= std::size(buf) ? max + 1 : std::size(buf);
  size_t n = boost::stacktrace::safe_dump_to(0, buf, room * sizeof(uintptr_t));
  while (n > 0 && buf[n - 1] == 0) --n;
  for (size_t i = 0; i < n; ++i) out[i] = buf[i];
  return cut(n);
}

}  // namespace tracepool::core
