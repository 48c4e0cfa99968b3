// script_frames.h: frames of an interpreter's stack (CPython's) in call sites, from a provider the
// host runtime registers (tracepool_set_frame_provider). The core knows no interpreter: a frame is
// two opaque words in the call-site key, and the provider describes them once per new site, while
// the objects they point to are certainly alive (on the capturing thread, during its allocation).
// Descriptions are copied into strings interned forever, so reports need no interpreter, even at
// exit after it has finalised.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/status.h"

namespace tracepool::core {

inline constexpr size_t words_per_script_frame = 2;
inline constexpr unsigned script_frame_entry = 1;     // outermost frame of one interpreter-loop call
inline constexpr unsigned script_frame_borrowed = 2;  // from the thread that started this work

// A frame as the provider describes it: views valid only during the describe call.
struct described_frame {
  std::string_view file;
  std::string_view function;
  int line = 0;
  unsigned flags = 0;
};

// A frame as call sites keep it: strings interned for the life of the process.
struct script_frame {
  const char* file = "";
  const char* function = "";
  int line = 0;
  unsigned flags = 0;
};

class script_provider {
 public:
  virtual ~script_provider() = default;
  // The calling thread's frames, innermost first, two words each; runs before any tracepool lock
  // and must not block, lock, or allocate through tracepool.
  virtual size_t capture(uintptr_t* words, size_t max_frames) = 0;
  // Frames capture() returned moments ago on this thread; false if they cannot be described.
  virtual bool describe(const uintptr_t* words, size_t frames, described_frame* out) = 0;
  // Native code of the interpreter loop, [begin, end); 0, 0 if unknown.
  virtual uintptr_t eval_begin() const = 0;
  virtual uintptr_t eval_end() const = 0;
};

// Installs `p` for every instance (nullptr removes). Providers are never destroyed: a capture on
// another thread may still be inside one when it is replaced.
void set_script_provider(script_provider* p);

// 0 without a provider.
size_t capture_script_frames(uintptr_t* words, size_t max_frames);

// Describes frames just captured on this thread; nullptr if there is no provider or it failed. The
// array (of `frames` entries) is the caller's to delete[].
script_frame* describe_script_frames(const uintptr_t* words, size_t frames);

// Whether `return_address` lies in the interpreter loop of a provider registered at any time.
bool in_interpreter_loop(uintptr_t return_address);

// Whether `return_address` lies in the module (executable or libpython) that holds such a loop.
bool in_interpreter_module(uintptr_t return_address);

// Changes whenever a range is added to those the three functions above and below test, so that what a
// capture derived from them can be cached under it (tracer.cpp, Note [Recent sites]).
uint32_t code_ranges_generation();

// Modules of bindings that call tracepool (its Python extension, its PyTorch shim): their frames at
// the top of a native stack are dropped like libtracepool.so's. At most max_bindings_modules.
inline constexpr size_t max_bindings_modules = 8;
status add_bindings_module(const void* address_in_module);
bool in_bindings_module(uintptr_t return_address);

}  // namespace tracepool::core
