// host_backend.cpp: devices, streams and events emulated in host memory, deterministically.
//
// Memory is anonymous mmap (untouched pages cost nothing, so a device of many GiB is cheap to
// emulate); each device has a fixed capacity. A stream is any handle value. Captures are emulated as
// far as the allocator reads them: which streams capture which graph, and the graph's nodes and
// dependencies, which a test shapes with capture_work and capture_join. Work never runs, it only
// waits: an event completes as soon as no hold (hold_stream) placed on its stream before it is still
// held, so a test decides exactly when a freed block's "last use" finishes. Recording an event on a
// destroyed stream aborts, as a driver may crash there. Faults: fail the k-th allocate() call, or
// every allocate() above n bytes, with out_of_memory; or the k-th fallible call of any kind
// (host_ledger) with backend_error, for the fault sweep. Virtual memory: a reserved range is mmap'd
// without access, 2 MiB-aligned (the pages of an H100 or H200); map() grants access to pages and counts
// them as the device's, unmap() drops their contents and takes them back; misuse (a piece not mapped
// as one, a range freed while mapped) is an error, as it would be a driver error on CUDA.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>
#include <new>
#include <mutex>
#include <set>
#include <string>
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

  bool has_context(int device) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    return check(device) == status::ok && context_on(device);
  }

  // The same figures with or without a context: where there is none, they stand for NVML's.
  status memory_info(int device, size_t* free_bytes, size_t* total_bytes) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status s = check(device); s != status::ok) return s;
    *total_bytes = options_.capacity;
    *free_bytes = options_.capacity - options_.outside - used_[static_cast<size_t>(device)];
    return status::ok;
  }

  // This process alone, using what it allocated, where it has a context (NVML lists no process on a
  // device where it has none); host_outside is used by no process listed, as memory the driver keeps for
  // itself would be.
  bool processes(int device, std::vector<process_usage>* out, std::string* why) noexcept override {
    try {
      std::lock_guard<std::mutex> lock(mutex_);
      if (device < 0 || device >= options_.devices) {
        *why = "no device " + std::to_string(device);
        return false;
      }
      if (context_on(device))
        out->push_back({static_cast<int64_t>(getpid()), static_cast<int64_t>(used_[static_cast<size_t>(device)])});
      return true;
    } catch (...) {  // out of host memory: no list
      return false;
    }
  }

  status allocate(int device, size_t size, void** out) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status s = use(device); s != status::ok) return s;
    if (status s = admit(device, size); s != status::ok) return s;
    size_t& used = used_[static_cast<size_t>(device)];
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return fail(status::out_of_memory, "host backend: mmap of %zu bytes failed", size);
    used += size;
    ledger_.bytes_in_use += size;
    *out = p;
    return status::ok;
  }

  status release(int device, void* ptr, size_t size) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status s = use(device); s != status::ok) return s;
    refused_by_capture("release");
    if (status s = injected(1); s != status::ok) return s;
    munmap(ptr, size);
    used_[static_cast<size_t>(device)] -= size;
    ledger_.bytes_in_use -= size;
    return status::ok;
  }

  // ---- Virtual memory ----

  size_t page_size(int device) noexcept override { return check(device) == status::ok ? kPage : 0; }

  status reserve_range(int device, size_t size, void** out) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status s = use(device); s != status::ok) return s;
    if (size == 0 || size % kPage != 0)
      return fail(status::invalid_argument, "host backend: reserve_range of %zu bytes, not a multiple of %zu", size, kPage);
    if (size > (size_t{1} << 46))
      return fail(status::out_of_memory, "host backend: no %zu bytes of address space to reserve", size);
    // Over-reserved by a page, then trimmed to a page-aligned range.
    void* raw = mmap(nullptr, size + kPage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) return fail(status::out_of_memory, "host backend: no %zu bytes of address space", size);
    const uintptr_t start = reinterpret_cast<uintptr_t>(raw), base = (start + kPage - 1) & ~(kPage - 1);
    if (base > start) munmap(raw, base - start);
    if (base + size < start + size + kPage) munmap(reinterpret_cast<void*>(base + size), start + kPage - base);
    try {
      ranges_.emplace(base, reserved{device, size});
    } catch (...) {
      munmap(reinterpret_cast<void*>(base), size);
      return fail(status::internal, "host backend: out of host memory for a range");
    }
    *out = reinterpret_cast<void*>(base);
    return status::ok;
  }

  status free_range(int device, void* base, size_t size) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status s = use(device); s != status::ok) return s;
    const auto it = ranges_.find(reinterpret_cast<uintptr_t>(base));
    if (it == ranges_.end() || it->second.device != device || it->second.size != size)
      return fail(status::invalid_argument, "host backend: free_range(%p, %zu bytes) on device %d: no such range", base,
                  size, device);
    const auto inside = mapped_.lower_bound(it->first);
    if (inside != mapped_.end() && inside->first < it->first + size)
      return fail(status::invalid_argument, "host backend: free_range(%p): %p is still mapped", base,
                  reinterpret_cast<void*>(inside->first));
    munmap(base, size);
    ranges_.erase(it);
    return status::ok;
  }

  status map(int device, void* ptr, size_t size) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status s = use(device); s != status::ok) return s;
    const uintptr_t at = reinterpret_cast<uintptr_t>(ptr);
    if (status s = within_range(device, at, size, "map"); s != status::ok) return s;
    const auto next = mapped_.lower_bound(at);
    const bool overlaps = (next != mapped_.end() && next->first < at + size) ||
                          (next != mapped_.begin() && std::prev(next)->first + std::prev(next)->second > at);
    if (overlaps) return fail(status::invalid_argument, "host backend: map(%p, %zu bytes): already mapped", ptr, size);
    if (status s = admit(device, size); s != status::ok) return s;  // a map is an allocation
    size_t& used = used_[static_cast<size_t>(device)];
    try {
      mapped_.emplace(at, size);
    } catch (...) {
      return fail(status::internal, "host backend: out of host memory for a mapping");
    }
    if (mprotect(ptr, size, PROT_READ | PROT_WRITE) != 0) {
      mapped_.erase(at);
      return fail(status::out_of_memory, "host backend: cannot map %zu bytes at %p", size, ptr);
    }
    used += size;
    ledger_.bytes_in_use += size;
    return status::ok;
  }

  status unmap(int device, void* ptr, size_t size) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status s = use(device); s != status::ok) return s;
    const uintptr_t at = reinterpret_cast<uintptr_t>(ptr);
    if (status s = within_range(device, at, size, "unmap"); s != status::ok) return s;
    // Whole mappings only, back to back from `ptr` to its end.
    auto it = mapped_.find(at);
    uintptr_t covered = at;
    for (auto m = it; m != mapped_.end() && m->first == covered && covered < at + size; ++m) covered += m->second;
    if (it == mapped_.end() || covered != at + size)
      return fail(status::invalid_argument, "host backend: unmap(%p, %zu bytes): not whole mappings", ptr, size);
    refused_by_capture("unmap");
    if (status s = injected(1); s != status::ok) return s;
    madvise(ptr, size, MADV_DONTNEED);  // the contents go, as a real unmap's do
    mprotect(ptr, size, PROT_NONE);
    mapped_.erase(it, mapped_.lower_bound(at + size));
    used_[static_cast<size_t>(device)] -= size;
    ledger_.bytes_in_use -= size;
    return status::ok;
  }

  status record_event(int device, stream_handle stream, event_handle* out) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status s = use(device); s != status::ok) return s;
    if (capturing_.count(key(device, stream)) != 0) refused_by_capture("record_event on a capturing stream");
    if (destroyed_.count(key(device, stream)) != 0) {
      // CUDA would be undefined behaviour here (often a crash): make the bug loud in tests.
      std::fprintf(stderr, "host backend: event recorded on destroyed stream %p\n", stream);
      std::abort();
    }
    if (event_pool_.empty()) {  // event creation: a call of its own, as cuEventCreate is
      if (status s = injected(2); s != status::ok) return s;
      auto* created = new (std::nothrow) host_event();
      if (created == nullptr || !push_event(created)) {
        delete created;
        return fail(status::internal, "host backend: out of host memory for an event");
      }
    }
    if (status s = injected(3); s != status::ok) return s;
    host_event* e = event_pool_.back();
    event_pool_.pop_back();
    *e = host_event{device, stream, holds_issued_[key(device, stream)]};
    ++ledger_.events_out;
    *out = e;
    return status::ok;
  }

  status query_event(int device, event_handle event, bool* done) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status s = use(device); s != status::ok) return s;
    refused_by_capture("query_event");
    if (status s = injected(4); s != status::ok) return s;
    *done = complete(*static_cast<host_event*>(event));
    return status::ok;
  }

  // Nothing would ever release a hold while this thread waits, so waiting would hang: say so instead.
  status synchronize_event(int device, event_handle event) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status s = use(device); s != status::ok) return s;
    refused_by_capture("synchronize_event");
    if (status s = injected(5); s != status::ok) return s;
    if (!complete(*static_cast<host_event*>(event)))
      return fail(status::backend_error, "host backend: event waits on a held stream; waiting would hang");
    return status::ok;
  }

  // The pool has room for every event ever created (push_event), so this cannot fail.
  void return_event(int, event_handle event) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    event_pool_.push_back(static_cast<host_event*>(event));
    --ledger_.events_out;
  }

  status create_stream(int device, stream_handle* out) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status s = use(device); s != status::ok) return s;
    *out = reinterpret_cast<stream_handle>(++streams_created_ * 4096);  // distinct, never dereferenced
    return status::ok;
  }

  status destroy_stream(int device, stream_handle stream) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status s = use(device); s != status::ok) return s;
    destroyed_.insert(key(device, stream));  // create_stream never hands the value out again
    return status::ok;
  }

  status synchronize_stream(int device, stream_handle stream) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status s = use(device); s != status::ok) return s;
    for (const hold* h : held_)
      if (h->device == device && h->stream == stream)
        return fail(status::backend_error, "host backend: stream is held; waiting would hang");
    return status::ok;
  }

  // Every stream of the device: a hold on any of them would make the wait hang, so it fails instead.
  status synchronize_device(int device) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status s = use(device); s != status::ok) return s;
    refused_by_capture("synchronize_device");
    for (const hold* h : held_)
      if (h->device == device)
        return fail(status::backend_error, "host backend: a stream of device %d is held; waiting would hang", device);
    return status::ok;
  }

  status hold_stream(int device, stream_handle stream, void** out) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status s = use(device); s != status::ok) return s;
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

  status begin_capture(int device, stream_handle stream) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status s = use(device); s != status::ok) return s;
    if (capturing_.count(key(device, stream)) != 0)
      return fail(status::invalid_argument, "host backend: stream %p is capturing already", stream);
    if (capturing_.empty()) node_deps_.clear();  // node handles are handed out again (backend.h)
    return joined(key(device, stream), capture{++captures_begun_, key(device, stream), {}});
  }

  status end_capture(int device, stream_handle stream) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status s = use(device); s != status::ok) return s;
    auto it = capturing_.find(key(device, stream));
    if (it == capturing_.end() || it->second.origin != key(device, stream))
      return fail(status::invalid_argument, "host backend: stream %p began no capture", stream);
    const uint64_t id = it->second.id;
    for (auto c = capturing_.begin(); c != capturing_.end();) c = c->second.id == id ? capturing_.erase(c) : std::next(c);
    return status::ok;
  }

  status capture_work(int device, stream_handle stream) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status s = use(device); s != status::ok) return s;
    auto it = capturing_.find(key(device, stream));
    if (it == capturing_.end()) return status::ok;  // work outside a capture leaves no node
    try {
      node_deps_.push_back(it->second.frontier);
      it->second.frontier.assign(1, reinterpret_cast<graph_node>(node_deps_.size()));  // node n: deps in node_deps_[n - 1]
    } catch (const std::bad_alloc&) {
      return fail(status::internal, "host backend: out of host memory for a graph node");
    }
    return status::ok;
  }

  status capture_join(int device, stream_handle waiter, stream_handle waited) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status s = use(device); s != status::ok) return s;
    auto from = capturing_.find(key(device, waited));
    if (from == capturing_.end()) return status::ok;  // an event outside a capture orders no nodes
    auto to = capturing_.find(key(device, waiter));
    if (to == capturing_.end()) return joined(key(device, waiter), from->second);
    if (to->second.id != from->second.id)
      return fail(status::invalid_argument, "host backend: streams %p and %p capture different graphs", waiter, waited);
    try {
      std::vector<graph_node>& f = to->second.frontier;
      for (graph_node n : from->second.frontier)
        if (std::find(f.begin(), f.end(), n) == f.end()) f.push_back(n);
    } catch (const std::bad_alloc&) {
      return fail(status::internal, "host backend: out of host memory for a graph node");
    }
    return status::ok;
  }

  status capture_frontier(int device, stream_handle stream, bool* capturing, uint64_t* id,
                          std::vector<graph_node>* frontier) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status s = use(device); s != status::ok) return s;
    ++ledger_.frontier_reads;
    if (status s = injected(6); s != status::ok) return s;
    auto it = capturing_.find(key(device, stream));
    *capturing = it != capturing_.end();
    *id = *capturing ? it->second.id : 0;
    try {
      if (*capturing) *frontier = it->second.frontier;
      else frontier->clear();
    } catch (const std::bad_alloc&) {
      return fail(status::internal, "host backend: out of host memory for a capture's frontier");
    }
    return status::ok;
  }

  status node_dependencies(int device, graph_node node, std::vector<graph_node>* out) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status s = use(device); s != status::ok) return s;
    ++ledger_.node_reads;
    if (status s = injected(6); s != status::ok) return s;
    const uintptr_t n = reinterpret_cast<uintptr_t>(node);
    if (n == 0 || n > node_deps_.size()) return fail(status::invalid_argument, "host backend: no graph node %p", node);
    try {
      *out = node_deps_[n - 1];
    } catch (const std::bad_alloc&) {
      return fail(status::internal, "host backend: out of host memory for a node's dependencies");
    }
    return status::ok;
  }

  void lock_for_fork() noexcept override { mutex_.lock(); }
  void unlock_after_fork() noexcept override { mutex_.unlock(); }

  host_ledger ledger() {
    std::lock_guard<std::mutex> lock(mutex_);
    return ledger_;
  }

 private:
  using stream_key = std::pair<int, stream_handle>;
  static stream_key key(int device, stream_handle s) { return {device, s}; }

  // An emulated capture, as one of its streams sees it.
  struct capture {
    uint64_t id;
    stream_key origin;                 // the stream that began it
    std::vector<graph_node> frontier;  // what the stream's next work depends on
  };
  // `stream` captures `c` from now on. Caller holds mutex_.
  status joined(stream_key stream, const capture& c) {
    try {
      capturing_.emplace(stream, c);
    } catch (const std::bad_alloc&) {
      return fail(status::internal, "host backend: out of host memory for a capture");
    }
    return status::ok;
  }

  status check(int device) const {
    if (device >= 0 && device < options_.devices) return status::ok;
    return fail(status::invalid_device, "host backend: device %d does not exist (%d emulated)", device,
                options_.devices);
  }

  // check(), for a call that uses the device: it makes the device's context, as CUDA's calls do (Note [No
  // context as a side effect] in backend.h). Caller holds mutex_.
  status use(int device) {
    if (status s = check(device); s != status::ok) return s;
    ledger_.devices_with_context |= uint64_t{1} << device;
    return status::ok;
  }
  bool context_on(int device) const { return (ledger_.devices_with_context >> device) & 1; }

  // Whether `device` takes `size` more bytes now: the call counted, faults injected, capacity checked,
  // for allocate() and map() alike. Caller holds mutex_.
  status admit(int device, size_t size) {
    if (status s = injected(0); s != status::ok) return s;
    ++allocate_calls_;
    if (!capturing_.empty()) ++ledger_.allocations_during_capture;
    if (options_.fail_alloc != 0 && allocate_calls_ == options_.fail_alloc)
      return injected_fault(status::out_of_memory, "allocation call", allocate_calls_);
    if (options_.fail_above != 0 && size > options_.fail_above) {
      ++ledger_.faults;
      return fail(status::out_of_memory, "host backend: injected failure of a %zu-byte allocation (fail_above:%zu)",
                  size, options_.fail_above);
    }
    const size_t used = used_[static_cast<size_t>(device)];
    if (size > options_.capacity - options_.outside - used)
      return fail(status::out_of_memory, "host backend: device %d has %zu of %zu bytes free", device,
                  options_.capacity - options_.outside - used, options_.capacity);
    return status::ok;
  }

  // [at, at + size) inside one range of `device`, page-aligned. Caller holds mutex_.
  status within_range(int device, uintptr_t at, size_t size, const char* what) const {
    if (size == 0 || size % kPage != 0 || at % kPage != 0)
      return fail(status::invalid_argument, "host backend: %s(%p, %zu bytes): not whole %zu-byte pages", what,
                  reinterpret_cast<void*>(at), size, kPage);
    auto it = ranges_.upper_bound(at);
    if (it == ranges_.begin() || (--it)->second.device != device || at + size > it->first + it->second.size)
      return fail(status::invalid_argument, "host backend: %s(%p, %zu bytes): not inside a range of device %d", what,
                  reinterpret_cast<void*>(at), size, device);
    return status::ok;
  }

  // A call a real capture in global mode would refuse, made while one is on. Caller holds mutex_.
  void refused_by_capture(const char* what) {
    if (capturing_.empty()) return;
    ++ledger_.capture_violations;
    ledger_.last_violation = what;
  }

  // Counts a fallible call and fails it if it is the one fail_call names. Caller holds mutex_.
  status injected(int kind) {
    ++ledger_.calls;
    if (options_.fail_call == 0 || ledger_.calls != options_.fail_call) return status::ok;
    ++ledger_.faults_by_kind[kind];
    return injected_fault(status::backend_error, host_ledger::kind_names[kind], ledger_.calls);
  }
  status injected_fault(status s, const char* call, size_t k) {
    ++ledger_.faults;
    return fail(s, "host backend: injected failure of %s (call %zu)", call, k);
  }

  // A new event joins the pool, whose capacity is kept at the number of events that exist.
  bool push_event(host_event* e) {
    try {
      event_pool_.reserve(++events_created_);
    } catch (const std::bad_alloc&) {
      --events_created_;
      return false;
    }
    event_pool_.push_back(e);
    return true;
  }

  // Complete when every hold issued on its stream before it was recorded has been released.
  bool complete(const host_event& e) const {
    for (const hold* h : held_)
      if (h->device == e.device && h->stream == e.stream && h->id <= e.holds_before) return false;
    return true;
  }

  static constexpr size_t kPage = size_t{2} << 20;
  struct reserved {
    int device;
    size_t size;
  };

  const host_options options_;
  std::mutex mutex_;
  std::map<uintptr_t, reserved> ranges_;  // reserve_range's, by base
  std::map<uintptr_t, size_t> mapped_;    // map()'s pieces, by address
  std::vector<size_t> used_;                    // bytes allocated per device
  size_t allocate_calls_ = 0;
  size_t events_created_ = 0;
  host_ledger ledger_;
  std::map<stream_key, capture> capturing_;      // streams in a capture not yet ended
  uint64_t captures_begun_ = 0;
  std::vector<std::vector<graph_node>> node_deps_;  // node n (1-based) depends on node_deps_[n - 1]
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

bool read_host_ledger(backend& be, host_ledger* out) {
  auto* host = dynamic_cast<host_backend*>(&be);
  if (host == nullptr) return false;
  *out = host->ledger();
  return true;
}

}  // namespace tracepool::backend

namespace tracepool::backend {

bool backend::processes(int, std::vector<process_usage>*, std::string* why) noexcept {
  try {
    *why = std::string("the ") + name() + " backend cannot list processes";
  } catch (...) {}  // out of host memory: no reason given
  return false;
}

size_t backend::page_size(int) noexcept { return 0; }

status backend::reserve_range(int, size_t, void**) noexcept {
  return fail(status::unavailable, "the %s backend cannot reserve address ranges", name());
}

status backend::free_range(int, void*, size_t) noexcept {
  return fail(status::unavailable, "the %s backend cannot reserve address ranges", name());
}

status backend::map(int, void*, size_t) noexcept {
  return fail(status::unavailable, "the %s backend cannot map memory into address ranges", name());
}

status backend::unmap(int, void*, size_t) noexcept {
  return fail(status::unavailable, "the %s backend cannot map memory into address ranges", name());
}

status backend::begin_capture(int, stream_handle) noexcept {
  return fail(status::unavailable, "the %s backend does not emulate stream capture", name());
}

status backend::end_capture(int, stream_handle) noexcept {
  return fail(status::unavailable, "the %s backend does not emulate stream capture", name());
}

status backend::capture_work(int, stream_handle) noexcept {
  return fail(status::unavailable, "the %s backend does not emulate stream capture", name());
}

status backend::capture_join(int, stream_handle, stream_handle) noexcept {
  return fail(status::unavailable, "the %s backend does not emulate stream capture", name());
}

status backend::capture_frontier(int, stream_handle, bool*, uint64_t*, std::vector<graph_node>*) noexcept {
  return fail(status::unavailable, "the %s backend cannot read a capture's graph", name());
}

status backend::node_dependencies(int, graph_node, std::vector<graph_node>*) noexcept {
  return fail(status::unavailable, "the %s backend cannot read a capture's graph", name());
}

}  // namespace tracepool::backend
