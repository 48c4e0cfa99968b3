// host_backend.cpp: devices, streams and events emulated in host memory, deterministically.
//
// Memory is anonymous mmap (untouched pages cost nothing, so a device of many GiB is cheap to
// emulate); each device has a fixed capacity. A stream is any handle value. Work never runs, it only
// waits: an event completes as soon as no hold (hold_stream) placed on its stream before it is still
// held, so a test decides exactly when a freed block's "last use" finishes. Recording an event on a
// destroyed stream aborts, as a driver may crash there. Faults: fail the k-th
// allocate() call, or every allocate() above n bytes, with out_of_memory.
#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "backend.h"

namespace tracepool::backend {
namespace {

struct host_event {
  int device;
  stream_handle stream;
  uint64_t holds_before;  // holds issued on the stream before the event was recorded
};

struct hold {
  int device;
  stream_handle stream;
  uint64_t id;
};

class host_backend final : public backend {
 public:
  explicit host_backend(const host_options& o) : options_(o), used_(static_cast<size_t>(o.devices), 0) {}
  ~host_backend() override {
    for (host_event* e : event_pool_) delete e;
  }

  const char* name() const noexcept override { return "host"; }
  int device_count() const noexcept override { return options_.devices; }

  status memory_info(int device, size_t* free_bytes, size_t* total_bytes) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status s = check(device); s != status::ok) return s;
    *total_bytes = options_.capacity;
    *free_bytes = options_.capacity - used_[static_cast<size_t>(device)];
    return status::ok;
  }

  status allocate(int device, size_t size, void** out) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status s = check(device); s != status::ok) return s;
    ++allocate_calls_;
    if (options_.fail_call != 0 && allocate_calls_ == options_.fail_call)
      return fail(status::out_of_memory, "host backend: injected failure of allocation call %zu", allocate_calls_);
    if (options_.fail_above != 0 && size > options_.fail_above)
      return fail(status::out_of_memory, "host backend: injected failure of a %zu-byte allocation (fail_above:%zu)",
                  size, options_.fail_above);
    size_t& used = used_[static_cast<size_t>(device)];
    if (size > options_.capacity - used)
      return fail(status::out_of_memory, "host backend: device %d has %zu of %zu bytes free", device,
                  options_.capacity - used, options_.capacity);
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return fail(status::out_of_memory, "host backend: mmap of %zu bytes failed", size);
    used += size;
    *out = p;
    return status::ok;
  }

  status release(int device, void* ptr, size_t size) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status s = check(device); s != status::ok) return s;
    munmap(ptr, size);
    used_[static_cast<size_t>(device)] -= size;
    return status::ok;
  }

  status record_event(int device, stream_handle stream, event_handle* out) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status s = check(device); s != status::ok) return s;
    if (destroyed_.count(key(device, stream)) != 0) {
      // CUDA would be undefined behaviour here (often a crash): make the bug loud in tests.
      std::fprintf(stderr, "host backend: event recorded on destroyed stream %p\n", stream);
      std::abort();
    }
    host_event* e = nullptr;
    if (!event_pool_.empty()) {
      e = event_pool_.back();
      event_pool_.pop_back();
    } else {
      e = new (std::nothrow) host_event();
      if (e == nullptr) return fail(status::internal, "host backend: out of host memory for an event");
    }
    *e = host_event{device, stream, holds_issued_[key(device, stream)]};
    *out = e;
    return status::ok;
  }

  status query_event(int device, event_handle event, bool* done) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status s = check(device); s != status::ok) return s;
    *done = complete(*static_cast<host_event*>(event));
    return status::ok;
  }

  // Nothing would ever release a hold while this thread waits, so waiting would hang: say so instead.
  status synchronize_event(int device, event_handle event) noexcept override {
    bool done = false;
    if (status s = query_event(device, event, &done); s != status::ok) return s;
    if (!done) return fail(status::backend_error, "host backend: event waits on a held stream; waiting would hang");
    return status::ok;
  }

  void return_event(int, event_handle event) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    event_pool_.push_back(static_cast<host_event*>(event));
  }

  status create_stream(int device, stream_handle* out) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status s = check(device); s != status::ok) return s;
    *out = reinterpret_cast<stream_handle>(++streams_created_ * 4096);  // distinct, never dereferenced
    return status::ok;
  }

  status destroy_stream(int device, stream_handle stream) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status s = check(device); s != status::ok) return s;
    destroyed_.insert(key(device, stream));  // create_stream never hands the value out again
    return status::ok;
  }

  status synchronize_stream(int device, stream_handle stream) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status s = check(device); s != status::ok) return s;
    for (const hold* h : held_)
      if (h->device == device && h->stream == stream)
        return fail(status::backend_error, "host backend: stream is held; waiting would hang");
    return status::ok;
  }

  status hold_stream(int device, stream_handle stream, void** out) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status s = check(device); s != status::ok) return s;
    auto* h = new (std::nothrow) hold{device, stream, ++holds_issued_[key(device, stream)]};
    if (h == nullptr) return fail(status::internal, "host backend: out of host memory for a hold");
    held_.insert(h);
    *out = h;
    return status::ok;
  }

  status release_hold(void* handle) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto* h = static_cast<hold*>(handle);
    if (held_.erase(h) == 0) return fail(status::invalid_argument, "host backend: unknown or released hold");
    delete h;
    return status::ok;
  }

 private:
  using stream_key = std::pair<int, stream_handle>;
  static stream_key key(int device, stream_handle s) { return {device, s}; }

  status check(int device) const {
    if (device >= 0 && device < options_.devices) return status::ok;
    return fail(status::invalid_device, "host backend: device %d does not exist (%d emulated)", device,
                options_.devices);
  }

  // Complete when every hold issued on its stream before it was recorded has been released.
  bool complete(const host_event& e) const {
    for (const hold* h : held_)
      if (h->device == e.device && h->stream == e.stream && h->id <= e.holds_before) return false;
    return true;
  }

  const host_options options_;
  std::mutex mutex_;
  std::vector<size_t> used_;                    // bytes allocated per device
  size_t allocate_calls_ = 0;
  uintptr_t streams_created_ = 0;
  std::map<stream_key, uint64_t> holds_issued_;  // per stream
  std::set<hold*> held_;                         // holds not yet released
  std::set<stream_key> destroyed_;
  std::vector<host_event*> event_pool_;
};

}  // namespace

std::unique_ptr<backend> make_host_backend(const host_options& options) {
  return std::make_unique<host_backend>(options);
}

}  // namespace tracepool::backend
