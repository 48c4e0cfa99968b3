#include "script_frames.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "base/fork_guard.h"
#include "unwinder.h"

namespace tracepool::core {

namespace {

std::atomic<script_provider*> current{nullptr};
std::atomic<uint32_t> ranges_generation{0};  // ranges added to any list below

// Address ranges that every capture may test: append-only, written under one mutex, read without
// it (a reader sees a prefix of the entries). Never shrinks: sites captured under an earlier
// provider still merge.
class range_list {
 public:
  static constexpr size_t capacity = 8;
  // false if full; adding a range whose begin is known is a no-op.
  bool add(code_range r) {
    std::lock_guard<std::mutex> lock(mutex_);
    const size_t n = count_.load(std::memory_order_relaxed);
    for (size_t i = 0; i < n; ++i)
      if (begin_[i].load(std::memory_order_relaxed) == r.begin) return true;
    if (n == capacity) return false;
    begin_[n].store(r.begin, std::memory_order_relaxed);
    end_[n].store(r.end, std::memory_order_relaxed);
    count_.store(n + 1, std::memory_order_release);
    ranges_generation.fetch_add(1, std::memory_order_release);  // after the range: a reader of it sees it
    return true;
  }
  std::mutex& mutex() { return mutex_; }
  // A return address points just past its call, which may be a range's last byte + 1.
  bool holds_return_address(uintptr_t return_address) const {
    const uintptr_t pc = return_address - 1;
    const size_t n = count_.load(std::memory_order_acquire);
    for (size_t i = 0; i < n; ++i)
      if (pc >= begin_[i].load(std::memory_order_relaxed) && pc < end_[i].load(std::memory_order_relaxed)) return true;
    return false;
  }

 private:
  std::mutex mutex_;
  std::atomic<uintptr_t> begin_[capacity] = {}, end_[capacity] = {};
  std::atomic<size_t> count_{0};
};

range_list loops;         // interpreter loops of every provider registered
range_list interpreters;  // the modules (executable or libpython) that hold them
range_list bindings;      // modules of bindings that call tracepool
static_assert(range_list::capacity == max_bindings_modules);

// Leaked, so that reports made from atexit handlers find them: file and function names, each stored
// once for the life of the process, and every provider ever registered.
struct script_state {
  std::mutex strings_mutex;
  std::unordered_set<std::string> strings;
  std::mutex providers_mutex;
  std::vector<script_provider*> providers;  // kept for good, and reachable: a capture may still use one
};

script_state& state() {
  static script_state* s = [] {
    auto* made = new script_state();
    // Before fork() (Note [Fork]); registered when the library loads, before any use.
    for (std::mutex* m : {&made->strings_mutex, &made->providers_mutex, &loops.mutex(), &interpreters.mutex(),
                          &bindings.mutex()})
      register_fork_lock(m);
    return made;
  }();
  return *s;
}
[[maybe_unused]] const bool registered_at_load = (state(), true);

const char* intern(std::string_view text) {
  script_state& s = state();
  std::lock_guard<std::mutex> lock(s.strings_mutex);
  return s.strings.emplace(text).first->c_str();
}

}  // namespace

void set_script_provider(script_provider* p) {
  if (p != nullptr) {
    script_state& s = state();
    std::lock_guard<std::mutex> lock(s.providers_mutex);
    s.providers.push_back(p);
  }
  if (p != nullptr && p->eval_begin() < p->eval_end()) {
    loops.add(code_range{p->eval_begin(), p->eval_end()});
    interpreters.add(module_range_of(reinterpret_cast<const void*>(p->eval_begin())));
  }
  current.store(p, std::memory_order_release);
}

uint32_t code_ranges_generation() { return ranges_generation.load(std::memory_order_acquire); }

bool in_interpreter_loop(uintptr_t return_address) { return loops.holds_return_address(return_address); }

bool in_interpreter_module(uintptr_t return_address) { return interpreters.holds_return_address(return_address); }

bool in_bindings_module(uintptr_t return_address) { return bindings.holds_return_address(return_address); }

status add_bindings_module(const void* address_in_module) {
  const code_range module = module_range_of(address_in_module);
  if (module.begin == module.end)
    return fail(status::invalid_argument, "add_bindings_module: %p is in no loaded module", address_in_module);
  if (!bindings.add(module))
    return fail(status::invalid_argument, "add_bindings_module: %zu modules already marked, the most kept",
                max_bindings_modules);
  return status::ok;
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

}  // namespace tracepool::core
