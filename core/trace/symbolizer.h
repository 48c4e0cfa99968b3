// symbolizer.h: return addresses to function, file, line and module, at report time only
// (notes/stacks.md §7.3): Boost.Stacktrace's libbacktrace backend, dladdr as the fallback.
//
// Boost 1.74 keeps one libbacktrace state per thread, and a state never sees libraries loaded after
// its first query (nor can it be freed). So resolution runs on one worker thread per set of loaded
// libraries: a report made after a dlopen gets a fresh worker, and so a fresh state (~20 MB of
// debug tables once per change; reports between changes share it). Safe during exit: nothing here
// depends on static destructors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tracepool::core {

struct frame_info {
  uintptr_t address = 0;
  std::string function;  // demangled; "" if unknown
  std::string file;      // "" if unknown
  int line = 0;          // 0 if unknown
  std::string module;    // path of the executable or library; "" if unknown
  bool script = false;   // an interpreter (Python) frame: function, file and line, no address or module
  bool borrowed = false; // (script) a frame of the thread that started this work, e.g. backward's caller
  bool interpreter = false; // (native) code of the interpreter itself, in a stack that has its frames
};

// One entry per address, in order.
std::vector<frame_info> symbolize(const std::vector<uintptr_t>& addresses);

}  // namespace tracepool::core
