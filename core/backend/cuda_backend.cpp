// cuda_backend.cpp: the backend over the CUDA driver API, which it calls only through the entry
// points cuda_driver.h loads at run time (ARCHITECTURE.md, decision 1).
//
// Note [Capture-safe calls]
// While a stream captures a CUDA graph, a "potentially unsafe" driver call invalidates the capture,
// and PyTorch's own state (its RNG) stays broken afterwards. tests/gpu/capture_probe.cu makes each
// call tracepool makes during a capture and sees whether the capture survives. On the H200 (driver
// 580.159, CUDA 13.0; 2026-11-23), in the capture's mode as the calling thread sees it:
//   - cuMemAlloc, cuMemFree, cuEventQuery, cuEventSynchronize, cuStreamQuery fail with
//     CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidate the capture: from any thread when it
//     captures in global mode (PyTorch's default for torch.cuda.graph), from the capturing thread in
//     thread_local mode (torch.compile's CUDA-graph trees), never in relaxed mode;
//   - with the calling thread switched to relaxed mode (cuThreadExchangeStreamCaptureMode),
//     cuMemAlloc and cuMemFree succeed and the capture survives;
//   - cuEventRecord (on any stream, the capturing one included) and cuMemGetInfo are always allowed;
//     an event recorded on the capturing stream becomes part of the graph, so it must not be waited on.
// So tracepool makes cuMemAlloc in relaxed mode (as PyTorch's own allocator does), and while a
// private pool's route is open makes none of the others (Note [Capture] in core/private_pool.h).
//
// Note [Primary context]: every device is used through its primary context, the one PyTorch,
// CuPy and the runtime API share. It is retained once, lazily, by the first call that uses the device
// (never by a question about it: Note [No context as a side effect] in backend.h), and never released:
// the host framework owns its lifetime and may still be using it when we are destroyed. Each call
// makes it current only for its own duration and restores the thread's previous context.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backend.h"
#include "cuda_driver.h"
#include "nvml.h"

namespace tracepool::backend {
namespace {

constexpr size_t kAlignment = 512;  // backend.h promises this; cuMemAlloc documents only 256

// Runs on the driver's host-callback thread and keeps everything queued behind it on the stream
// waiting until release_hold() opens the gate. It frees the gate itself, because only it knows
// when nobody will look at the gate again.
void wait_for_gate(void* data) {
  auto* gate = static_cast<std::atomic<bool>*>(data);
  while (!gate->load(std::memory_order_acquire)) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  delete gate;
}

// One per device. `context` goes from null to the retained primary context once, under `mutex`,
// and is read without the lock afterwards. `free_events` holds recorded-and-returned events,
// which are reusable because cuEventRecord re-arms an event.
struct device_state {
  CUdevice handle = 0;
  std::atomic<CUcontext> context{nullptr};
  std::mutex mutex;  // guards the retain of `context`, and `free_events`
  std::vector<CUevent> free_events;
  // Virtual memory: the page size (0 until asked; kNoPages where the device cannot map), and each
  // piece map() made, by address, with the physical allocation behind it.
  std::atomic<size_t> page{0};
  std::mutex vm_mutex;  // guards `mapped`; a leaf
  std::map<CUdeviceptr, std::pair<CUmemGenericAllocationHandle, size_t>> mapped;
  // The devices that can reach this one's memory (cuDeviceCanAccessPeer), at most kMaxPeers: map()
  // grants them access too, since cudaDeviceEnablePeerAccess covers cuMemAlloc's memory but not
  // cuMemMap's, and PyTorch's copies between devices assume peer access once enabled.
  static constexpr int kMaxPeers = 63;
  int peers[kMaxPeers] = {};
  int peer_count = 0;
};

constexpr size_t kNoPages = 1;  // device_state::page where the device has no virtual memory management

class cuda_backend final : public backend {
 public:
  cuda_backend(const driver_api& api, int count, std::unique_ptr<device_state[]> devices) noexcept
      : api_(api), count_(count), devices_(std::move(devices)) {}

  ~cuda_backend() override {
    // At process exit the driver may be gone already (CUDA_ERROR_DEINITIALIZED), and the
    // events with it. Errors are ignored: there is nobody left to report them to.
    if (forked_from_.load(std::memory_order_relaxed) != 0) return;  // the parent's events
    CUcontext previous = nullptr;
    if (api_.ctx_get_current(&previous) != CUDA_SUCCESS) return;
    for (int d = 0; d < count_; ++d) {
      CUcontext context = devices_[d].context.load(std::memory_order_acquire);
      if (!context || devices_[d].free_events.empty()) continue;
      if (api_.ctx_set_current(context) != CUDA_SUCCESS) continue;
      for (CUevent event : devices_[d].free_events) api_.event_destroy(event);
    }
    api_.ctx_set_current(previous);
  }

  const char* name() const noexcept override { return "cuda"; }
  int device_count() const noexcept override { return count_; }

  // Ours, or the host framework's primary context: cuDevicePrimaryCtxGetState makes none.
  bool has_context(int device) noexcept override {
    if (!valid_device(device) || forked_from_.load(std::memory_order_relaxed) != 0) return false;
    if (devices_[device].context.load(std::memory_order_acquire) != nullptr) return true;
    unsigned int flags = 0;
    int active = 0;
    return api_.primary_ctx_get_state(devices_[device].handle, &flags, &active) == CUDA_SUCCESS && active != 0;
  }

  // cuMemGetInfo needs a context: a device without one is asked of NVML (Note [No context as a side effect]).
  status memory_info(int device, size_t* free_bytes, size_t* total_bytes) noexcept override {
    if (valid_device(device) && forked_from_.load(std::memory_order_relaxed) == 0 && !has_context(device)) {
      char bus_id[32] = {};
      std::string why = "cuDeviceGetPCIBusId failed";
      try {
        if (api_.device_get_pci_bus_id(bus_id, sizeof bus_id, devices_[device].handle) == CUDA_SUCCESS &&
            nvml_memory(bus_id, free_bytes, total_bytes, &why))
          return status::ok;
      } catch (...) {}  // out of host memory: the message below
      return fail(status::unavailable, "device %d: this process has no CUDA context there, and tracepool makes none "
                  "to ask how much memory it has (NVML cannot say: %s)", device, why.c_str());
    }
    return with_context(device, "cuMemGetInfo", [&] {
      CUresult r = api_.mem_get_info(free_bytes, total_bytes);
      return check(r, "cuMemGetInfo on device %d", device);
    });
  }

  // NVML names devices by PCI bus id, which CUDA_VISIBLE_DEVICES cannot renumber.
  bool processes(int device, std::vector<process_usage>* out, std::string* why) noexcept override {
    if (forked_from_.load(std::memory_order_relaxed) != 0) {  // Note [CUDA after fork]: no driver call
      try {
        *why = "not asked in a forked child";
      } catch (...) {}
      return false;
    }
    char bus_id[32] = {};
    if (valid_device(device) &&
        api_.device_get_pci_bus_id(bus_id, sizeof bus_id, devices_[device].handle) == CUDA_SUCCESS)
      return nvml_processes(bus_id, out, why);
    try {
      *why = "cuDeviceGetPCIBusId failed on device " + std::to_string(device);
    } catch (...) {}  // out of host memory: no reason given
    return false;
  }

  // In relaxed capture mode: Note [Capture-safe calls].
  status allocate(int device, size_t size, void** out) noexcept override {
    return with_context(device, "cuMemAlloc", [&] {
      CUdeviceptr ptr = 0;
      CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
      const bool relaxed = api_.exchange_capture_mode(&mode) == CUDA_SUCCESS;
      CUresult r = api_.mem_alloc(&ptr, size);
      if (relaxed) (void)api_.exchange_capture_mode(&mode);  // the thread's own mode again
      if (r != CUDA_SUCCESS) {
        status s = check(r, "cuMemAlloc(%zu bytes) on device %d", size, device);
        return r == CUDA_ERROR_OUT_OF_MEMORY ? status::out_of_memory : s;
      }
      if (ptr % kAlignment != 0) {
        api_.mem_free(ptr);
        return fail(status::backend_error, "cuMemAlloc(%zu bytes) on device %d returned %p, not "
                    "%zu-byte aligned", size, device, reinterpret_cast<void*>(ptr), kAlignment);
      }
      *out = reinterpret_cast<void*>(ptr);
      return status::ok;
    });
  }

  status release(int device, void* ptr, size_t size) noexcept override {
    return with_context(device, "cuMemFree", [&] {
      CUresult r = api_.mem_free(reinterpret_cast<CUdeviceptr>(ptr));
      return check(r, "cuMemFree(%p, %zu bytes) on device %d", ptr, size, device);
    });
  }

  // ---- Virtual memory: cuMemAddressReserve, then cuMemCreate + cuMemMap + cuMemSetAccess a piece at a
  // time (PyTorch's expandable segments do the same per 2 or 20 MiB handle); unmap releases each piece.

  size_t page_size(int device) noexcept override {
    if (device < 0 || device >= count_) return 0;
    device_state& state = devices_[device];
    size_t page = state.page.load(std::memory_order_acquire);
    if (page == 0) {
      int supported = 0;
      size_t granularity = 0;
      const CUmemAllocationProp prop = allocation_prop(device);
      if (api_.device_get_attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                                    state.handle) != CUDA_SUCCESS || supported == 0 ||
          api_.mem_get_granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) != CUDA_SUCCESS ||
          granularity == 0 || (granularity & (granularity - 1)) != 0)
        granularity = kNoPages;
      state.page.store(granularity, std::memory_order_release);
      page = granularity;
    }
    return page == kNoPages ? 0 : page;
  }

  status reserve_range(int device, size_t size, void** out) noexcept override {
    const size_t page = page_size(device);
    if (page == 0) return backend::reserve_range(device, size, out);
    return with_context(device, "cuMemAddressReserve", [&] {
      CUdeviceptr ptr = 0;
      // Relaxed capture mode, as map()'s (a private pool's first allocation may come during a capture).
      CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
      const bool relaxed = api_.exchange_capture_mode(&mode) == CUDA_SUCCESS;
      const CUresult r = api_.mem_address_reserve(&ptr, size, page, 0, 0);
      if (relaxed) (void)api_.exchange_capture_mode(&mode);
      if (r != CUDA_SUCCESS) {
        const status s = check(r, "cuMemAddressReserve(%zu bytes) on device %d", size, device);
        return r == CUDA_ERROR_OUT_OF_MEMORY ? status::out_of_memory : s;
      }
      *out = reinterpret_cast<void*>(ptr);
      return status::ok;
    });
  }

  status free_range(int device, void* base, size_t size) noexcept override {
    if (page_size(device) == 0) return backend::free_range(device, base, size);
    return with_context(device, "cuMemAddressFree", [&] {
      return check(api_.mem_address_free(reinterpret_cast<CUdeviceptr>(base), size),
                   "cuMemAddressFree(%p, %zu bytes) on device %d", base, size, device);
    });
  }

  status map(int device, void* ptr, size_t size) noexcept override {
    if (page_size(device) == 0) return backend::map(device, ptr, size);
    return with_context(device, "cuMemMap", [&] {
      const CUdeviceptr at = reinterpret_cast<CUdeviceptr>(ptr);
      const CUmemAllocationProp prop = allocation_prop(device);
      CUmemGenericAllocationHandle handle = 0;
      // Relaxed capture mode, as allocate's cuMemAlloc (Note [Capture-safe calls]).
      CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
      const bool relaxed = api_.exchange_capture_mode(&mode) == CUDA_SUCCESS;
      CUresult r = api_.mem_create(&handle, size, &prop, 0);
      const char* step = "cuMemCreate";
      bool mapped = false;
      if (r == CUDA_SUCCESS) {
        r = api_.mem_map(at, size, 0, handle, 0);
        step = "cuMemMap";
        mapped = r == CUDA_SUCCESS;
      }
      if (r == CUDA_SUCCESS) {
        const device_state& state = devices_[device];
        CUmemAccessDesc access[1 + device_state::kMaxPeers] = {};
        for (int i = 0; i <= state.peer_count; ++i) {
          access[i].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
          access[i].location.id = i == 0 ? prop.location.id : state.peers[i - 1];
          access[i].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        }
        r = api_.mem_set_access(at, size, access, static_cast<size_t>(1 + state.peer_count));
        // A peer the driver lists but will not map for: the device's own access still serves.
        if (r != CUDA_SUCCESS && r != CUDA_ERROR_OUT_OF_MEMORY && state.peer_count > 0)
          r = api_.mem_set_access(at, size, access, 1);
        step = "cuMemSetAccess";
      }
      if (relaxed) (void)api_.exchange_capture_mode(&mode);
      if (r == CUDA_SUCCESS) {
        try {
          std::lock_guard<std::mutex> lock(devices_[device].vm_mutex);
          devices_[device].mapped.emplace(at, std::make_pair(handle, size));
          return status::ok;
        } catch (...) {
          r = CUDA_ERROR_OUT_OF_MEMORY;  // out of host memory: undone below
          step = "recording the mapping";
        }
      }
      const status s = check(r, "%s(%p, %zu bytes) on device %d", step, ptr, size, device);
      if (mapped) (void)api_.mem_unmap(at, size);  // nothing of it stays mapped
      if (handle != 0) (void)api_.mem_release(handle);
      return r == CUDA_ERROR_OUT_OF_MEMORY ? status::out_of_memory : s;
    });
  }

  status unmap(int device, void* ptr, size_t size) noexcept override {
    if (page_size(device) == 0) return backend::unmap(device, ptr, size);
    return with_context(device, "cuMemUnmap", [&] {
      const CUdeviceptr at = reinterpret_cast<CUdeviceptr>(ptr);
      device_state& state = devices_[device];
      std::lock_guard<std::mutex> lock(state.vm_mutex);
      // Whole mappings only, back to back from `ptr` to its end.
      const auto first = state.mapped.find(at);
      CUdeviceptr covered = at;
      auto last = first;
      for (; last != state.mapped.end() && last->first == covered && covered < at + size; ++last)
        covered += last->second.second;
      if (first == state.mapped.end() || covered != at + size)
        return fail(status::invalid_argument, "backend cuda: unmap(%p, %zu bytes) on device %d: not whole mappings",
                    ptr, size, device);
      for (auto it = first; it != last;) {
        const auto [piece, held] = *it;
        if (CUresult r = api_.mem_unmap(piece, held.second); r != CUDA_SUCCESS)
          return check(r, "cuMemUnmap(%p, %zu bytes) on device %d", reinterpret_cast<void*>(piece), held.second, device);
        (void)api_.mem_release(held.first);  // the memory goes once no mapping holds it
        it = state.mapped.erase(it);
      }
      return status::ok;
    });
  }

  status synchronize_device(int device) noexcept override {
    return with_context(device, "cuCtxSynchronize", [&] {
      return check(api_.ctx_synchronize(), "cuCtxSynchronize on device %d", device);
    });
  }

  // Reading a graph under capture is allowed in every capture mode (PyTorch's allocator does the same
  // for graph_capture_record_stream_reuse). An edge with data (programmatic dependent launch) makes the
  // CUDA 12.0 entry points fail with CUDA_ERROR_LOSSY_QUERY: the caller then treats the block as not
  // yet safe, which is never wrong.
  status capture_frontier(int device, stream_handle stream, bool* capturing, uint64_t* capture,
                          std::vector<graph_node>* frontier) noexcept override {
    return with_context(device, "cuStreamGetCaptureInfo", [&] {
      CUstreamCaptureStatus state = CU_STREAM_CAPTURE_STATUS_NONE;
      cuuint64_t id = 0;
      CUgraph graph = nullptr;
      const CUgraphNode* nodes = nullptr;
      size_t count = 0;
      CUresult r = api_.stream_get_capture_info(static_cast<CUstream>(stream), &state, &id, &graph, &nodes, &count);
      if (r != CUDA_SUCCESS) return check(r, "cuStreamGetCaptureInfo(stream %p) on device %d", stream, device);
      *capturing = state == CU_STREAM_CAPTURE_STATUS_ACTIVE;
      *capture = *capturing ? id : 0;
      try {
        if (*capturing && count != 0) frontier->assign(nodes, nodes + count);
        else frontier->clear();
      } catch (const std::bad_alloc&) {
        return fail(status::internal, "cuStreamGetCaptureInfo: host memory exhausted");
      }
      return status::ok;
    });
  }

  status node_dependencies(int device, graph_node node, std::vector<graph_node>* out) noexcept override {
    return with_context(device, "cuGraphNodeGetDependencies", [&] {
      auto n = static_cast<CUgraphNode>(node);
      size_t count = 0;
      CUresult r = api_.graph_node_get_dependencies(n, nullptr, &count);
      try {
        out->resize(r == CUDA_SUCCESS ? count : 0);
      } catch (const std::bad_alloc&) {
        return fail(status::internal, "cuGraphNodeGetDependencies: host memory exhausted");
      }
      if (r == CUDA_SUCCESS && count != 0)
        r = api_.graph_node_get_dependencies(n, reinterpret_cast<CUgraphNode*>(out->data()), &count);
      if (r != CUDA_SUCCESS) return check(r, "cuGraphNodeGetDependencies(node %p) on device %d", node, device);
      out->resize(std::min(count, out->size()));  // no larger than before: cannot throw
      return status::ok;
    });
  }

  status record_event(int device, stream_handle stream, event_handle* out) noexcept override {
    return with_context(device, "cuEventRecord", [&] {
      CUevent event = nullptr;
      if (status s = take_event(device, &event); s != status::ok) return s;
      CUresult r = api_.event_record(event, static_cast<CUstream>(stream));
      if (r != CUDA_SUCCESS) {
        return_event(device, event);
        return check(r, "cuEventRecord(stream %p) on device %d", stream, device);
      }
      *out = event;
      return status::ok;
    });
  }

  status query_event(int device, event_handle event, bool* done) noexcept override {
    return with_context(device, "cuEventQuery", [&] {
      CUresult r = api_.event_query(static_cast<CUevent>(event));
      if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY) {
        return check(r, "cuEventQuery(%p) on device %d", event, device);
      }
      *done = r == CUDA_SUCCESS;
      return status::ok;
    });
  }

  status synchronize_event(int device, event_handle event) noexcept override {
    return with_context(device, "cuEventSynchronize", [&] {
      CUresult r = api_.event_synchronize(static_cast<CUevent>(event));
      return check(r, "cuEventSynchronize(%p) on device %d", event, device);
    });
  }

  void return_event(int device, event_handle event) noexcept override {
    if (!valid_device(device) || !event) return;  // no sane way to pool a foreign handle
    if (forked_from_.load(std::memory_order_relaxed) != 0) return;  // the parent's event
    device_state& state = devices_[device];
    std::lock_guard<std::mutex> lock(state.mutex);
    try {
      state.free_events.push_back(static_cast<CUevent>(event));
    } catch (...) {}  // out of host memory: leaking one event beats aborting the host process
  }

  status create_stream(int device, stream_handle* out) noexcept override {
    return with_context(device, "cuStreamCreate", [&] {
      CUstream stream = nullptr;
      CUresult r = api_.stream_create(&stream, CU_STREAM_NON_BLOCKING);
      if (r == CUDA_SUCCESS) *out = stream;
      return check(r, "cuStreamCreate on device %d", device);
    });
  }

  status destroy_stream(int device, stream_handle stream) noexcept override {
    return with_context(device, "cuStreamDestroy", [&] {
      CUresult r = api_.stream_destroy(static_cast<CUstream>(stream));
      return check(r, "cuStreamDestroy(%p) on device %d", stream, device);
    });
  }

  status synchronize_stream(int device, stream_handle stream) noexcept override {
    return with_context(device, "cuStreamSynchronize", [&] {
      CUresult r = api_.stream_synchronize(static_cast<CUstream>(stream));
      return check(r, "cuStreamSynchronize(%p) on device %d", stream, device);
    });
  }

  status hold_stream(int device, stream_handle stream, void** hold) noexcept override {
    return with_context(device, "cuLaunchHostFunc", [&] {
      auto* gate = new (std::nothrow) std::atomic<bool>(false);
      if (!gate) return fail(status::internal, "hold_stream on device %d: out of memory", device);
      CUresult r = api_.launch_host_func(static_cast<CUstream>(stream), wait_for_gate, gate);
      if (r != CUDA_SUCCESS) {
        delete gate;  // never enqueued, so wait_for_gate will not free it
        return check(r, "cuLaunchHostFunc(stream %p) on device %d", stream, device);
      }
      *hold = gate;
      return status::ok;
    });
  }

  // Note [CUDA after fork]: the driver's state (contexts, memory, events) belongs to the process that
  // initialised it; a forked child that touches it gets errors or worse (CUDA documents fork as
  // unsupported once the driver is initialised). Every call in the child fails, saying so.
  void lock_for_fork() noexcept override {
    for (int d = 0; d < count_; ++d) {
      devices_[d].mutex.lock();
      devices_[d].vm_mutex.lock();
    }
  }
  void unlock_after_fork() noexcept override {
    for (int d = count_; d-- > 0;) {
      devices_[d].vm_mutex.unlock();
      devices_[d].mutex.unlock();
    }
  }
  bool usable_in_child() noexcept override {
    forked_from_.store(static_cast<int>(getppid()), std::memory_order_relaxed);
    return false;
  }

  status release_hold(void* hold) noexcept override {
    if (!hold) return fail(status::invalid_argument, "release_hold: null hold");
    // The last touch: wait_for_gate may free the gate as soon as it sees it open.
    static_cast<std::atomic<bool>*>(hold)->store(true, std::memory_order_release);
    return status::ok;
  }

 private:
  bool valid_device(int device) const noexcept { return device >= 0 && device < count_; }

  // ok for CUDA_SUCCESS; otherwise status::backend_error with "<call>: <error name> (<text>)".
  __attribute__((format(printf, 3, 4))) status check(CUresult r, const char* fmt, ...) const {
    if (r == CUDA_SUCCESS) return status::ok;
    char what[256];
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(what, sizeof what, fmt, args);
    va_end(args);
    return fail(status::backend_error, "%s: %s", what, describe(api_, r));
  }

  // Runs body() with the device's primary context current (Note [Primary context]). Inside
  // PyTorch that context is nearly always current already: then the overhead is one
  // cuCtxGetCurrent, a thread-local read in the driver.
  template <class Body>
  status with_context(int device, const char* call, Body&& body) noexcept {
    if (!valid_device(device)) {
      return fail(status::invalid_device, "%s: device %d is not in [0, %d)", call, device, count_);
    }
    if (int parent = forked_from_.load(std::memory_order_relaxed); parent != 0) {
      return fail(status::unavailable,
                  "%s on device %d: this process (pid %d) was forked from pid %d after tracepool had initialised "
                  "CUDA there, and a forked child cannot use its parent's CUDA state: start worker processes with "
                  "the 'spawn' or 'forkserver' method, or fork before CUDA is first used",
                  call, device, static_cast<int>(getpid()), parent);
    }
    CUcontext context = nullptr;
    if (status s = primary_context(device, &context); s != status::ok) return s;
    CUcontext previous = nullptr;
    if (CUresult r = api_.ctx_get_current(&previous); r != CUDA_SUCCESS) {
      return check(r, "cuCtxGetCurrent (before %s on device %d)", call, device);
    }
    CUresult r = previous == context ? CUDA_SUCCESS : api_.ctx_set_current(context);
    if (r != CUDA_SUCCESS) {
      return check(r, "cuCtxSetCurrent(primary context of device %d) before %s", device, call);
    }
    status s = body();
    // Restoring a context that was current a moment ago does not fail in practice; if it did,
    // reporting it would hide body()'s own result, which the caller must see.
    if (previous != context) api_.ctx_set_current(previous);
    return s;
  }

  // Pinned device memory on `device`, as cuMemAlloc's.
  CUmemAllocationProp allocation_prop(int device) const noexcept {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = devices_[device].handle;
    return prop;
  }

  status primary_context(int device, CUcontext* out) noexcept {
    device_state& state = devices_[device];
    *out = state.context.load(std::memory_order_acquire);
    if (*out) return status::ok;  // the path taken by every call after the first
    std::lock_guard<std::mutex> lock(state.mutex);
    *out = state.context.load(std::memory_order_relaxed);
    if (*out) return status::ok;
    if (CUresult r = api_.primary_ctx_retain(out, state.handle); r != CUDA_SUCCESS) {
      return check(r, "cuDevicePrimaryCtxRetain(device %d)", device);
    }
    state.context.store(*out, std::memory_order_release);
    return status::ok;
  }

  // Called with the device's context current. Creation happens outside the lock: it is slow
  // and only happens until the pool has grown to the number of events in flight.
  status take_event(int device, CUevent* out) noexcept {
    device_state& state = devices_[device];
    std::unique_lock<std::mutex> lock(state.mutex);
    if (!state.free_events.empty()) {
      *out = state.free_events.back();
      state.free_events.pop_back();
      return status::ok;
    }
    lock.unlock();
    CUresult r = api_.event_create(out, CU_EVENT_DISABLE_TIMING);
    return check(r, "cuEventCreate on device %d", device);
  }

  const driver_api api_;
  const int count_;
  std::unique_ptr<device_state[]> devices_;
  std::atomic<int> forked_from_{0};  // in a forked child: the parent's pid (Note [CUDA after fork])
};

}  // namespace

status make_cuda_backend(std::unique_ptr<backend>* out) {
  if (!out) return fail(status::invalid_argument, "make_cuda_backend: null out");
  driver_api api;
  if (status s = load_driver(&api); s != status::ok) return s;
  int count = 0;
  if (status s = init_driver(api, &count); s != status::ok) return s;
  std::unique_ptr<device_state[]> devices(new (std::nothrow) device_state[count]);
  if (!devices) return fail(status::internal, "backend cuda: out of host memory");
  for (int d = 0; d < count; ++d) {
    if (CUresult r = api.device_get(&devices[d].handle, d); r != CUDA_SUCCESS) {
      return fail(status::unavailable, "backend cuda: cuDeviceGet(%d): %s", d, describe(api, r));
    }
  }
  for (int d = 0; d < count; ++d)
    for (int p = 0; p < count && devices[d].peer_count < device_state::kMaxPeers; ++p) {
      int can = 0;
      if (p != d && api.device_can_access_peer(&can, devices[p].handle, devices[d].handle) == CUDA_SUCCESS && can)
        devices[d].peers[devices[d].peer_count++] = devices[p].handle;
    }
  auto* cuda = new (std::nothrow) cuda_backend(api, count, std::move(devices));
  if (!cuda) return fail(status::internal, "backend cuda: out of host memory");
  out->reset(cuda);
  return status::ok;
}

}  // namespace tracepool::backend
