#include "script_frames.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>

#include "unwinder.h"

namespace tracepool::core {

namespace {

std::atomic<script_provider*> current{nullptr};

// Interpreter-loop ranges of every provider ever registered, so that sites captured under an
// earlier provider still merge. Append-only; readers see a prefix.
constexpr size_t max_loops = 8;
std::atomic<uintptr_t> loop_begin[max_loops], loop_end[max_loops];
std::atomic<uintptr_t> interpreter_begin[max_loops], interpreter_end[max_loops];  // the loop's module
std::atomic<size_t> loops{0};
std::mutex loops_mutex;

// Bindings modules: append-only like the loops, read on every capture.
std::atomic<uintptr_t> bindings_begin[max_bindings_modules], bindings_end[max_bindings_modules];
std::atomic<size_t> bindings{0};

// File and function names, each stored once for the life of the process (never destroyed, so
// that reports made from atexit handlers find them).
const char* intern(std::string_view text) {
  static std::mutex* mutex = new std::mutex;
  static auto* strings = new std::unordered_set<std::string>;
  std::lock_guard<std::mutex> lock(*mutex);
  return strings->emplace(text).first->c_str();
}

}  // namespace

void set_script_provider(script_provider* p) {
  if (p != nullptr && p->eval_begin() < p->eval_end()) {
    std::lock_guard<std::mutex> lock(loops_mutex);
    const size_t n = loops.load(std::memory_order_relaxed);
    bool known = false;
    for (size_t i = 0; i < n; ++i) known |= loop_begin[i].load(std::memory_order_relaxed) == p->eval_begin();
    if (!known && n < max_loops) {
      loop_begin[n].store(p->eval_begin(), std::memory_order_relaxed);
      loop_end[n].store(p->eval_end(), std::memory_order_relaxed);
      const code_range module = module_range_of(reinterpret_cast<const void*>(p->eval_begin()));
      interpreter_begin[n].store(module.begin, std::memory_order_relaxed);
      interpreter_end[n].store(module.end, std::memory_order_relaxed);
      loops.store(n + 1, std::memory_order_release);
    }
  }
  current.store(p, std::memory_order_release);
}

bool in_interpreter_module(uintptr_t return_address) {
  const uintptr_t pc = return_address - 1;
  const size_t n = loops.load(std::memory_order_acquire);
  for (size_t i = 0; i < n; ++i)
    if (pc >= interpreter_begin[i].load(std::memory_order_relaxed) &&
        pc < interpreter_end[i].load(std::memory_order_relaxed))
      return true;
  return false;
}

status add_bindings_module(const void* address_in_module) {
  const code_range module = module_range_of(address_in_module);
  if (module.begin == module.end)
    return fail(status::invalid_argument, "add_bindings_module: %p is in no loaded module", address_in_module);
  std::lock_guard<std::mutex> lock(loops_mutex);
  const size_t n = bindings.load(std::memory_order_relaxed);
  for (size_t i = 0; i < n; ++i)
    if (bindings_begin[i].load(std::memory_order_relaxed) == module.begin) return status::ok;
  if (n == max_bindings_modules)
    return fail(status::invalid_argument, "add_bindings_module: %zu modules already marked, the most kept", n);
  bindings_begin[n].store(module.begin, std::memory_order_relaxed);
  bindings_end[n].store(module.end, std::memory_order_relaxed);
  bindings.store(n + 1, std::memory_order_release);
  return status::ok;
}

bool in_bindings_module(uintptr_t return_address) {
  const uintptr_t pc = return_address - 1;
  const size_t n = bindings.load(std::memory_order_acquire);
  for (size_t i = 0; i < n; ++i)
    if (pc >= bindings_begin[i].load(std::memory_order_relaxed) && pc < bindings_end[i].load(std::memory_order_relaxed))
      return true;
  return false;
}

size_t capture_script_frames(uintptr_t* words, size_t max_frames) {
  script_provider* p = current.load(std::memory_order_acquire);
  return p == nullptr ? 0 : p->capture(words, max_frames);
}

script_frame* describe_script_frames(const uintptr_t* words, size_t frames) {
  script_provider* p = current.load(std::memory_order_acquire);
  if (p == nullptr || frames == 0) return nullptr;
  std::unique_ptr<described_frame[]> described(new described_frame[frames]);
  if (!p->describe(words, frames, described.get())) return nullptr;
  auto* out = new script_frame[frames];
  for (size_t i = 0; i < frames; ++i)
    out[i] = script_frame{intern(described[i].file), intern(described[i].function), described[i].line,
                          described[i].flags};
  return out;
}

bool in_interpreter_loop(uintptr_t return_address) {
  // A return address points just past its call, which may be the loop's last byte + 1.
  const uintptr_t pc = return_address - 1;
  const size_t n = loops.load(std::memory_order_acquire);
  for (size_t i = 0; i < n; ++i)
    if (pc >= loop_begin[i].load(std::memory_order_relaxed) && pc < loop_end[i].load(std::memory_order_relaxed))
      return true;
  return false;
}

}  // namespace tracepool::core
