// host.cpp: a C++ host that owns its device memory through RAII over tracepool's C API. A buffer is
// freed when it goes out of scope, on the stream it was allocated on; an error is an exception that
// carries tracepool's message; a tag is a scope. Built against an installed tracepool with
// find_package (examples/cpp/CMakeLists.txt); run in CI on the host backend and by the GPU check on
// CUDA.
//
// The "model" keeps a cache of results keyed by step that nobody evicts: the report printed at the
// end names remember() as the site that grew at every mark. Exit status 0 if every call succeeded.
#include <tracepool/tracepool.h>

#include <cstdio>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace host {

class error : public std::runtime_error {
 public:
  error(const char* what, int status)
      : std::runtime_error(std::string(what) + ": " + tracepool_status_string(status) + ": " + tracepool_last_error()) {}
};

inline void check(int status, const char* what) {
  if (status != TRACEPOOL_OK) throw error(what, status);
}

// Device memory owned by one object: movable, not copyable, freed by its destructor.
class buffer {
 public:
  buffer() = default;
  buffer(tracepool_t* tp, size_t bytes, int device = 0, void* stream = nullptr) : tp_(tp), stream_(stream) {
    check(tracepool_malloc(tp, bytes, device, stream, &ptr_), "tracepool_malloc");
    bytes_ = bytes;
  }
  buffer(buffer&& other) noexcept { swap(other); }
  buffer& operator=(buffer&& other) noexcept {
    buffer(std::move(other)).swap(*this);
    return *this;
  }
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;
  ~buffer() {
    // A destructor must not throw: a failed free is told, and the memory stays tracepool's.
    if (ptr_ != nullptr && tracepool_free(tp_, ptr_, stream_) != TRACEPOOL_OK)
      std::fprintf(stderr, "host: free of %p failed: %s\n", ptr_, tracepool_last_error());
  }
  void* get() const { return ptr_; }
  size_t size() const { return bytes_; }

 private:
  void swap(buffer& o) noexcept {
    std::swap(tp_, o.tp_);
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    std::swap(stream_, o.stream_);
  }
  tracepool_t* tp_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  void* stream_ = nullptr;
};

// Everything allocated while it lives carries `label` in the report.
class tag {
 public:
  explicit tag(const char* label) { check(tracepool_tag_push(label), "tracepool_tag_push"); }
  ~tag() { (void)tracepool_tag_pop(); }
  tag(const tag&) = delete;
  tag& operator=(const tag&) = delete;
};

// The report of what is held now, as text.
inline std::string report(tracepool_t* tp, int top) {
  tracepool_report_options_t options{};
  options.size = sizeof options;
  options.format = "text";
  options.top = top;
  char* text = nullptr;
  check(tracepool_report_string_with(tp, &options, &text), "tracepool_report_string_with");
  std::unique_ptr<char, void (*)(char*)> owned(text, tracepool_string_free);
  return owned.get();
}

}  // namespace host

namespace {

struct model {
  explicit model(tracepool_t* tp) : tp(tp) {
    weights.reserve(4);  // one call site for all four
    for (int i = 0; i < 4; ++i) weights.emplace_back(tp, size_t{1} << 20);
  }
  // The activations live only for the step: freed at the closing brace, then cached.
  __attribute__((noinline)) void step(int i) {
    std::vector<host::buffer> activations;
    for (int layer = 0; layer < 4; ++layer) activations.emplace_back(tp, size_t{256} << 10);
    remember(i);
  }
  // The leak: a result per step, kept in a map nobody trims.
  __attribute__((noinline)) void remember(int i) { results.emplace(i, host::buffer(tp, size_t{64} << 10)); }

  tracepool_t* tp;
  std::vector<host::buffer> weights;
  std::map<int, host::buffer> results;
};

}  // namespace

int main() {
  try {
    tracepool_t* tp = tracepool_default();
    if (tp == nullptr) throw std::runtime_error(std::string("tracepool_default: ") + tracepool_last_error());
    std::printf("host.cpp on the %s backend, tracepool %d\n", tracepool_backend_name(tp), TRACEPOOL_VERSION);
    model m(tp);
    {
      host::tag training("c++ host");
      for (int i = 0; i < 4; ++i) {
        m.step(i);
        host::check(tracepool_mark(tp, ("step " + std::to_string(i)).c_str()), "tracepool_mark");
      }
    }
    std::fputs(host::report(tp, 3).c_str(), stdout);
    host::buffer too_big;
    try {
      too_big = host::buffer(tp, size_t{1} << 62);  // an error is an exception with tracepool's words
      std::fprintf(stderr, "host: a 4 EiB request succeeded\n");
      return 1;
    } catch (const host::error& e) {
      std::printf("refused as expected: %s\n", e.what());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "host: %s\n", e.what());
    return 1;
  }
  // Every buffer is gone here: nothing is live.
  tracepool_stats_t s{};
  s.size = sizeof s;
  if (tracepool_get_stats(tracepool_default(), 0, &s) != TRACEPOOL_OK || s.allocation.current != 0) {
    std::fprintf(stderr, "host: %lld blocks still live after every buffer was destroyed\n",
                 static_cast<long long>(s.allocation.current));
    return 1;
  }
  std::printf("every buffer freed by its destructor\n");
  return 0;
}
