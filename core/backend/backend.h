// backend.h: the narrow interface between the caching allocator and the memory it caches.
//
// Contract, for every function:
//   - it never throws and returns a status (0 is success); on failure it has changed nothing and
//     has set the thread's message through tracepool::fail();
//   - out-parameters are non-null; `device` is in [0, device_count());
//   - `size` is > 0 and a multiple of 512; memory returned by allocate() is aligned to >= 512 bytes;
//   - streams and events belong to `device`; a null stream is the device's legacy default stream;
//   - functions are thread-safe.
// allocate() distinguishes "the device is full" (status::out_of_memory, which makes the allocator
// free its cache and retry) from every other failure.
//
// Two implementations: cuda_backend (the driver API, loaded at run time) and host_backend (device
// memory, streams and events emulated in host memory, deterministic, with fault injection).
//
// Note [No context as a side effect]
// A CUDA context costs about 500 MiB of the device's memory. A process of a multi-GPU job uses one
// device; if anything of tracepool made a context on the others (a report asking every device what it
// has free, say), each rank would hold 0.5 GiB on every other rank's GPU: 7 x 0.5 GiB on each GPU of an
// 8-GPU node, enough for an OOM report on one rank to push the others out of memory. So the questions a
// report, an OOM message or a host asks of a device (has_context, memory_info, processes, page_size) never
// make one: they read the context the process has, or ask NVML, which makes none. Only the calls that
// use a device (allocate, map, streams, events) make its context, as the host framework would.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/config.h"
#include "base/status.h"

namespace tracepool::backend {

using stream_handle = void*;  // cudaStream_t / CUstream; nullptr is the legacy default stream
using event_handle = void*;   // backend-owned; taken by record_event, given back by return_event
using graph_node = void*;     // CUgraphNode: a node of a graph being captured

// One process's memory on a device, as the driver's management library sees it (Note [Where the
// memory went] in core/report/device_memory.cpp).
struct process_usage {
  int64_t pid = 0;
  int64_t used_bytes = -1;  // -1: the library lists the process but may not say how much it uses
};

class backend {
 public:
  virtual ~backend() = default;

  virtual const char* name() const noexcept = 0;  // "cuda" | "host"
  virtual int device_count() const noexcept = 0;

  // ---- Questions about a device: none of them makes a context (Note [No context as a side effect]) ----
  // Whether this process has a context on `device`, whoever made it (CUDA: the primary context is active).
  virtual bool has_context(int device) noexcept = 0;
  // What the device has free and in all. Where the process has no context, the driver's management
  // library answers (NVML on CUDA), or the call fails with status::unavailable.
  virtual status memory_info(int device, size_t* free_bytes, size_t* total_bytes) noexcept = 0;
  // The processes that use `device`, this one included where it is listed, appended to *out; false
  // with the reason in *why when they cannot be listed (*out may then hold some: the caller drops
  // them). Report time only. Unlike the rest, it leaves the thread's message alone: a report must not
  // replace the error a caller is about to read.
  virtual bool processes(int device, std::vector<process_usage>* out, std::string* why) noexcept;

  // ---- Using a device: each call below makes the device's context if the process has none ----

  // pre: size > 0, multiple of 512. post ok: *out aligned to >= 512 bytes, size bytes usable.
  virtual status allocate(int device, size_t size, void** out) noexcept = 0;
  // pre: ptr came from allocate(device, size). Waits for nothing: the caller has ensured that no
  // work still uses the memory (cuMemFree itself synchronizes with the device).
  virtual status release(int device, void* ptr, size_t size) noexcept = 0;

  // Takes an event from the backend's pool and records it on `stream`: it completes when all work
  // submitted to `stream` before this call has completed.
  virtual status record_event(int device, stream_handle stream, event_handle* out) noexcept = 0;
  // post ok: *done says whether the event has completed. Never blocks.
  virtual status query_event(int device, event_handle event, bool* done) noexcept = 0;
  // Blocks until the event has completed.
  virtual status synchronize_event(int device, event_handle event) noexcept = 0;
  // Gives the event back to the pool; it must not be used again.
  virtual void return_event(int device, event_handle event) noexcept = 0;

  // ---- A graph being captured (Note [Reuse inside a capture] in core/stream_reuse.h) ----
  // Both only read the graph: a capture survives them, whatever its mode. Backends that cannot read
  // a capture fail them with status::unavailable (the default).
  //
  // Whether `stream` is capturing now (an invalidated capture is not); if so, *capture is the
  // capture's id (unique in the process) and *frontier the nodes the next work submitted to `stream`
  // will depend on (*frontier is replaced; empty when not capturing).
  virtual status capture_frontier(int device, stream_handle stream, bool* capturing, uint64_t* capture,
                                  std::vector<graph_node>* frontier) noexcept;
  // The nodes `node`, of a graph being captured on `device`, depends on (*out is replaced).
  virtual status node_dependencies(int device, graph_node node, std::vector<graph_node>* out) noexcept;

  // ---- Virtual memory: address ranges backed page by page (growable segments, issue 18) ----
  // A range is reserved once and backed by device memory in pieces: map() backs a piece of pages, and
  // unmap() takes back exactly the pieces that map() calls made (CUDA's cuMemUnmap unmaps whole
  // mappings only). The contract of release() holds for unmap(): the caller has ensured that no work
  // still uses the memory. Backends without virtual memory answer page_size 0 and fail the others with
  // status::unavailable.
  //
  // The size pages are mapped in on `device`, a power of two (CUDA's recommended granularity); 0 where
  // the backend cannot map memory into reserved ranges. Never makes a context.
  virtual size_t page_size(int device) noexcept;
  // pre: size > 0, a multiple of page_size. post ok: *out page-aligned; no memory behind the range.
  virtual status reserve_range(int device, size_t size, void** out) noexcept;
  // pre: [base, base + size) is a range reserve_range returned, with nothing of it mapped.
  virtual status free_range(int device, void* base, size_t size) noexcept;
  // Backs [ptr, ptr + size) of a reserved range with new device memory, readable and writable on
  // `device`. pre: page-aligned, size a multiple of page_size, nothing of it mapped. out_of_memory when
  // the device cannot hold it; on failure nothing of it is mapped.
  virtual status map(int device, void* ptr, size_t size) noexcept;
  // Takes back the memory of [ptr, ptr + size), which map() calls covered exactly (one or several).
  virtual status unmap(int device, void* ptr, size_t size) noexcept;
  // Blocks until all work submitted to `device`, on every stream, has completed: the fence before an
  // unmap (cuMemUnmap, unlike cuMemFree, does not wait for the device). Never called during a capture.
  virtual status synchronize_device(int device) noexcept = 0;

  // ---- fork() (Note [Fork] in fork_guard.h) ----
  // Takes the backend's own locks before fork(); releases them after it, in parent and child.
  virtual void lock_for_fork() noexcept {}
  virtual void unlock_after_fork() noexcept {}
  // In a forked child, with every lock held: whether the child may go on using what this backend
  // set up in the parent. One that says no fails every later call with status::unavailable, saying
  // why, and return_event does nothing.
  virtual bool usable_in_child() noexcept { return true; }

  // ---- Support for tests and benchmarks; the allocator never calls these. ----
  virtual status create_stream(int device, stream_handle* out) noexcept = 0;
  virtual status destroy_stream(int device, stream_handle stream) noexcept = 0;
  virtual status synchronize_stream(int device, stream_handle stream) noexcept = 0;
  // Holds back all work submitted to `stream` after this call until release_hold(*hold): lets a
  // test keep a freed block "still in use" on its stream. At most one hold per stream at a time.
  virtual status hold_stream(int device, stream_handle stream, void** hold) noexcept = 0;
  virtual status release_hold(void* hold) noexcept = 0;
  // Emulated stream capture in CUDA's global mode (host backend only; real captures are CUDA's own
  // calls). While one is on, every call a real capture would refuse is counted in the host ledger
  // (capture_violations): release, query_event and synchronize_event from any stream, and
  // record_event on a capturing stream. allocate is allowed: the CUDA backend makes it in relaxed
  // mode (Note [Capture-safe calls] in cuda_backend.cpp).
  virtual status begin_capture(int device, stream_handle stream) noexcept;
  // Ends the capture `stream` began, for every stream that joined it.
  virtual status end_capture(int device, stream_handle stream) noexcept;
  // In an emulated capture, the graph's shape (host backend only): capture_work adds a node for work
  // submitted to capturing `stream`, after its frontier, and makes it the frontier; capture_join is
  // `waiter` waiting for an event recorded on capturing `waited` just before (cudaEventRecord, then
  // cudaStreamWaitEvent): the waiter joins the capture if it was not in it, and its frontier gains
  // waited's. A capture begun while no other is on numbers its nodes from 1 again, as a driver may hand
  // out a destroyed graph's node handles again.
  virtual status capture_work(int device, stream_handle stream) noexcept;
  virtual status capture_join(int device, stream_handle waiter, stream_handle waited) noexcept;
};

// Options of the host backend: base/config.h (host_options), since TRACEPOOL_CONF sets them.
using core::host_options;

std::unique_ptr<backend> make_host_backend(const host_options& options);

// What a host backend has done, for tests. Fallible calls: allocate, release, event creation (inside
// record_event, when its pool is empty), record_event, query_event, synchronize_event, and the graph
// reads (capture_frontier, node_dependencies).
struct host_ledger {
  static constexpr int kinds = 7;
  static constexpr const char* kind_names[kinds] = {"allocate",    "release",           "event creation", "record_event",
                                                    "query_event", "synchronize_event", "graph read"};
  size_t calls = 0;               // fallible calls so far
  size_t faults = 0;              // of them, failed by injection (fail_alloc, fail_call, fail_above)
  size_t faults_by_kind[kinds] = {};  // fail_call's, by kind
  size_t bytes_in_use = 0;  // allocated and not released, all devices
  size_t events_out = 0;    // handed out by record_event and not yet returned
  size_t capture_violations = 0;             // calls a real capture would have refused (begin_capture)
  const char* last_violation = nullptr;      // the kind of the latest one
  size_t allocations_during_capture = 0;     // allocate calls while a capture was on (allowed)
  size_t frontier_reads = 0;                 // capture_frontier calls
  size_t node_reads = 0;                     // node_dependencies calls
  uint64_t devices_with_context = 0;  // bit d: device d has a context, made by the first call that used it
};
// The ledger of `be`; false if `be` is not a host backend.
bool read_host_ledger(backend& be, host_ledger* out);

// Loads libcuda.so.1 and initialises the driver. Returns status::unavailable (with the reason in
// last_error()) where there is no driver or no device.
status make_cuda_backend(std::unique_ptr<backend>* out);

}  // namespace tracepool::backend
