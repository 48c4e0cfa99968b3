// torch_allocator.cpp: libtracepool_torch.so, tracepool as PyTorch's CUDA allocator in PyTorch's own
// C++ terms: a subclass of CUDAPluggableAllocator that answers the calls the pluggable class refuses
// or drops. tracepool.torch.install() loads it and calls tracepool_torch_install().
//
// Why a subclass (notes/pytorch.md §1.2-1.3, PyTorch 2.11): CUDAPluggableAllocator forwards only
// begin/end/releasePool (as C++ std::function hooks) and refuses createOrIncrefPool (so
// torch.cuda.MemPool()), getPoolUseCount, checkPoolLiveAllocations and getCheckpointState (so
// torch.compile's CUDA-graph trees), attachOutOfMemoryObserver and getMemoryFraction; it turns a
// failed allocation into a null tensor, not torch.cuda.OutOfMemoryError. All of them are virtual on
// c10::cuda::CUDACachingAllocator::CUDAAllocator, and PyTorch's changeCurrentAllocator takes any
// subclass: this one overrides them over tracepool's C API. Built only where torch can be imported
// at build time (plugins/torch/CMakeLists.txt), with torch's headers and C++ ABI; libtracepool.so
// itself never depends on torch.
//
// Note [Exceptions out of the allocator]
// Everywhere else an exception never crosses tracepool's C ABI (STYLE.md, habit 5). Here PyTorch's
// C++ code is the only caller, through virtual calls that may throw c10::Error (PyTorch's own
// allocator does): failures are thrown as c10::Error, and an allocation that does not fit as
// c10::OutOfMemoryError, which PyTorch's bindings turn into torch.cuda.OutOfMemoryError. The C
// entry points at the end (tracepool_torch_install) catch everything.
#include <c10/core/Allocator.h>
#include <c10/core/AllocatorConfig.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "torch_profiling.h"
#include "tracepool/tracepool.h"

extern "C" {
// In libtracepool.so (plugins/torch/torch_plugin.cpp): frees and says what failed on stderr, once.
void tracepool_torch_free(void* ptr, size_t size, int device, void* stream);
}

namespace {

namespace cca = c10::cuda::CUDACachingAllocator;
using tracepool::torch_plugin::profile_alloc;
using tracepool::torch_plugin::profile_free;
using tracepool::torch_plugin::take_profiled;
using c10::CachingAllocator::format_size;
using c10::cuda::MempoolId_t;

tracepool_t* instance() {
  tracepool_t* tp = tracepool_default();
  TORCH_CHECK(tp != nullptr, "tracepool: the default instance could not be created: ", tracepool_last_error());
  return tp;
}

// Whether PyTorch's allocator configuration (PYTORCH_CUDA_ALLOC_CONF or PYTORCH_ALLOC_CONF, which its
// two parsers read in opposite orders) has a backend key (backend:native, backend:cudaMallocAsync).
bool names_a_backend() {
  for (const char* name : {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"})
    if (const char* conf = std::getenv(name); conf != nullptr && std::strstr(conf, "backend") != nullptr) return true;
  return false;
}

// PyTorch's roundup_power2_divisions, read at each allocation as PyTorch's allocator reads it (a
// configuration PyTorch cannot parse throws here as there): a request between two powers of two is
// rounded up to the next of that many equal steps between them (divisions taken as a power of two,
// as PyTorch does); 0, tracepool's own rounding, where none is set.
size_t pytorch_rounding(size_t size) {
  constexpr size_t min_block = 512;
  const size_t divisions = c10::CachingAllocator::AcceleratorAllocatorConfig::roundup_power2_divisions(size);
  if (divisions <= 1 || size <= min_block * divisions || (size & (size - 1)) == 0) return 0;
  const size_t floor = size_t{1} << (63 - __builtin_clzll(size));
  const size_t step = floor >> (63 - __builtin_clzll(divisions));
  if (step == 0) return floor << 1;
  return (size + step - 1) & ~(step - 1);
}

void check(int rc, const char* what) {
  TORCH_CHECK(rc == TRACEPOOL_OK, "tracepool: ", what, ": ", tracepool_status_string(rc), ": ", tracepool_last_error());
}

// For the calls PyTorch makes from destructors (~CUDAGraph, ~MemPool), where a throw would end the
// process: a failure is told on stderr instead.
void tell(int rc, const char* what) {
  if (rc != TRACEPOOL_OK)
    std::fprintf(stderr, "tracepool: %s: %s: %s\n", what, tracepool_status_string(rc), tracepool_last_error());
}

// The deleter of every DataPtr this allocator makes, and its raw_deleter(): CUDA-graph trees compare
// the two (torch._C._has_Standard_Deleter).
void delete_block(void* ptr) {
  std::pair<size_t, c10::DeviceIndex> was{};
  const bool told = take_profiled(ptr, &was);
  tracepool_torch_free(ptr, 0, 0, nullptr);
  if (told) profile_free(ptr, was.first, was.second);
}

// Note [Caching disabled]
// torch.cuda.caching_allocator_enable(False) asks for memory straight from the device, freed straight
// back (people use it for a flat footprint, or to have compute-sanitizer see each tensor): PyTorch's
// allocator then calls cudaMalloc and cudaFree and counts nothing. tracepool does the same, so such
// memory is in no tracepool statistic or report (the device's own figures and nvidia-smi have it).
// A DataPtr made so has its own deleter; raw_alloc's pointers, which come back through raw_delete,
// are listed, and the list is read only while it has any.
void delete_uncached(void* ptr) {
  const cudaError_t e = cudaFree(ptr);
  if (e != cudaSuccess) std::fprintf(stderr, "tracepool: cudaFree(%p) of an uncached tensor: %s\n", ptr, cudaGetErrorString(e));
}

void* allocate_uncached(size_t size, c10::DeviceIndex device) {
  void* ptr = nullptr;
  c10::cuda::CUDAGuard guard(device);
  const cudaError_t e = cudaMalloc(&ptr, size);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory. Tried to allocate ", c10::CachingAllocator::format_size(size),
                     " with the caching allocator disabled (torch.cuda.caching_allocator_enable(False)).");
  }
  C10_CUDA_CHECK(e);
  return ptr;
}

// Note [Pool ids]
// PyTorch names a private pool by a pair: {n, 0} for the pool a graph makes for itself, {0, n} for
// torch.cuda.graph_pool_handle() and MemPool (c10/cuda/MemPool.cpp). tracepool's id is one nonzero
// number: 2n for the first kind, 2n + 1 for the second.
uint64_t pool_key(MempoolId_t id) {
  const auto first = static_cast<uint64_t>(id.first), second = static_cast<uint64_t>(id.second);
  TORCH_CHECK((first == 0) != (second == 0), "tracepool: private pool id (", id.first, ", ", id.second,
              ") must have exactly one nonzero half");
  const uint64_t n = first != 0 ? first : second;
  TORCH_CHECK(n < (uint64_t{1} << 63), "tracepool: private pool id (", id.first, ", ", id.second, ") is too large");
  return (n << 1) | (first == 0 ? 1 : 0);
}

// pool_key, or 0 (which every pool call refuses, saying why) where the id is not one.
uint64_t key_or_zero(MempoolId_t id) noexcept {
  try {
    return pool_key(id);
  } catch (...) {
    return 0;
  }
}

// The filter PyTorch gives beginAllocateToPool, behind tracepool's C filter. It may throw (a
// graph's filter asks CUDA about the stream): an allocation it cannot judge is not routed.
int run_filter(void* context, void* stream) {
  try {
    return (*static_cast<std::function<bool(cudaStream_t)>*>(context))(static_cast<cudaStream_t>(stream)) ? 1 : 0;
  } catch (...) {
    return 0;
  }
}
void delete_filter(void* context) { delete static_cast<std::function<bool(cudaStream_t)>*>(context); }

// MemPool(allocator=...): the pool's segments come from that allocator (tracepool_pool_set_allocator),
// as PyTorch's allocPrimitive takes them, on the stream that needs them. The context owns a reference.
using allocator_ref = std::shared_ptr<cca::CUDAAllocator>;
void* source_alloc(void* context, size_t size, int device, void* stream) {
  try {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    return (*static_cast<allocator_ref*>(context))->raw_alloc_with_stream(size, static_cast<cudaStream_t>(stream));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tracepool: the MemPool's allocator failed to allocate %zu bytes: %s\n", size, e.what());
    return nullptr;
  }
}
void source_free(void* context, void* ptr, size_t, int device, void*) {
  try {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    (*static_cast<allocator_ref*>(context))->raw_delete(ptr);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tracepool: the MemPool's allocator failed to free %p: %s\n", ptr, e.what());
  }
}
void source_release(void* context) { delete static_cast<allocator_ref*>(context); }

// What getCheckpointState hands CUDA-graph trees: tracepool's checkpoint of the pool (Note [Pool
// checkpoints] in core/private_pool.h), for setCheckpointPoolState to restore.
struct pool_checkpoint final : cca::AllocatorState {
  c10::DeviceIndex device = 0;
  std::unique_ptr<tracepool_pool_checkpoint_t, void (*)(tracepool_pool_checkpoint_t*)> state{
      nullptr, &tracepool_pool_checkpoint_free};
};

// The lists a restore tells, in the C API's callbacks.
struct restore_lists {
  std::vector<void*> freed, made;
};
void note_freed(void* lists, void* ptr) { static_cast<restore_lists*>(lists)->freed.push_back(ptr); }
void note_made(void* lists, void* ptr) { static_cast<restore_lists*>(lists)->made.push_back(ptr); }

class tracepool_allocator final : public torch::cuda::CUDAPluggableAllocator::CUDAPluggableAllocator {
 public:
  tracepool_allocator()
      : CUDAPluggableAllocator([](size_t, int, cudaStream_t) -> void* { return nullptr; },
                               [](void*, size_t, int, cudaStream_t) {}) {}

  // ---- Allocation ------------------------------------------------------------------------------
  c10::DataPtr allocate(size_t size) override {
    const c10::DeviceIndex device = c10::cuda::current_device();
    if (size != 0 && !caching_.load(std::memory_order_relaxed)) {  // Note [Caching disabled]
      void* ptr = allocate_uncached(size, device);
      return {ptr, ptr, &delete_uncached, c10::Device(c10::DeviceType::CUDA, device)};
    }
    void* ptr = size == 0 ? nullptr : allocate_on(size, device, c10::cuda::getCurrentCUDAStream(device).stream());
    return {ptr, ptr, &delete_block, c10::Device(c10::DeviceType::CUDA, device)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &delete_block; }
  void* raw_alloc(size_t nbytes) override {
    const c10::DeviceIndex device = c10::cuda::current_device();
    return raw_alloc_with_stream(nbytes, c10::cuda::getCurrentCUDAStream(device).stream());
  }
  void* raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) override {
    if (nbytes != 0 && !caching_.load(std::memory_order_relaxed)) {  // Note [Caching disabled]
      void* ptr = allocate_uncached(nbytes, c10::cuda::current_device());
      std::lock_guard<std::mutex> lock(mutex_);
      uncached_.insert(ptr);
      uncached_count_.store(uncached_.size(), std::memory_order_relaxed);
      return ptr;
    }
    return nbytes == 0 ? nullptr : allocate_on(nbytes, c10::cuda::current_device(), stream);
  }
  void raw_delete(void* ptr) override {
    if (uncached_count_.load(std::memory_order_relaxed) != 0) {
      std::unique_lock<std::mutex> lock(mutex_);
      if (uncached_.erase(ptr) != 0) {
        uncached_count_.store(uncached_.size(), std::memory_order_relaxed);
        lock.unlock();
        return delete_uncached(ptr);
      }
    }
    delete_block(ptr);
  }
  // C++ callers of the history (an extension's c10::cuda::CUDACachingAllocator::recordHistory): tracepool's
  // history on with room for max_entries events, or off. Python's _record_memory_history goes through
  // tracepool.torch.memory_history, which also honours context and stacks in the snapshot.
  void recordHistory(bool enabled, cca::CreateContextFn, size_t max_entries, cca::RecordContext when, bool clear,
                     const std::vector<std::string>&) override {
    constexpr size_t most = size_t{1} << 22;  // memory_history.MAX_ENTRIES
    const size_t entries = enabled ? std::min(std::max<size_t>(max_entries, 1), most) : 0;
    // PyTorch's `when`: STATE and NEVER keep no stacks in the trace, ALLOC only at allocations, ALL at frees too.
    int flags = clear ? TRACEPOOL_HISTORY_CLEAR : 0;
    if (when == cca::RecordContext::NEVER || when == cca::RecordContext::STATE)
      flags |= TRACEPOOL_HISTORY_NO_ALLOC_SITES | TRACEPOOL_HISTORY_NO_FREE_SITES;
    else
      flags |= when == cca::RecordContext::ALL ? TRACEPOOL_HISTORY_FREEING_SITES : TRACEPOOL_HISTORY_NO_FREE_SITES;
    check(tracepool_record_history(instance(), entries, flags), "recordHistory");
    history_.store(enabled, std::memory_order_relaxed);
  }
  bool isHistoryEnabled() override { return history_.load(std::memory_order_relaxed); }
  // The labels of the history's events (PyTorch's user_metadata and compile_context), per device as
  // in PyTorch. Compile contexts come from PyTorch's profiler callbacks, which its
  // _record_memory_history(compile_context=True) installs; like PyTorch's allocator, they are taken
  // only while the history is on.
  void setUserMetadata(const std::string& metadata) override {
    check(tracepool_history_set_metadata(instance(), c10::cuda::current_device(), metadata.c_str()), "setUserMetadata");
  }
  std::string getUserMetadata() override {
    char* text = nullptr;
    check(tracepool_history_metadata(instance(), c10::cuda::current_device(), &text), "getUserMetadata");
    std::string metadata(text);
    tracepool_string_free(text);
    return metadata;
  }
  void pushCompileContext(std::string& context) override {
    if (history_.load(std::memory_order_relaxed))
      check(tracepool_history_push_context(instance(), c10::cuda::current_device(), context.c_str()),
            "pushCompileContext");
  }
  void popCompileContext() override {
    if (history_.load(std::memory_order_relaxed))
      check(tracepool_history_pop_context(instance(), c10::cuda::current_device()), "popCompileContext");
  }
  void enable(bool value) override { caching_.store(value, std::memory_order_relaxed); }
  bool isEnabled() const override { return caching_.load(std::memory_order_relaxed); }

  // PyTorch's CUDA start-up. PyTorch's allocator configuration (PYTORCH_CUDA_ALLOC_CONF, and
  // torch.cuda.memory._set_allocator_settings later) is honoured where it shapes what tracepool does:
  // per_process_memory_fraction caps every device from the start (PyTorch's parser, which refuses a
  // value outside [0, 1], runs at the first read; a device whose size cannot be learnt yet is told of
  // and left uncapped), roundup_power2_divisions rounds requests (pytorch_rounding), and
  // graph_capture_record_stream_reuse is read as each capture's route opens (beginAllocateToPool). A
  // configuration that names a backend is not read: PyTorch's parser would stop the start-up at it
  // (the backend it names is not the allocator in charge, tracepool), so it is told once.
  void init(int device_count) override {
    devices_ = device_count;
    if (names_a_backend()) {
      std::fprintf(stderr, "tracepool: PyTorch's allocator configuration names a backend; tracepool is installed "
                           "and stays PyTorch's allocator, and the configuration is not read\n");
    } else {
      if (const double fraction = cca::CUDAAllocatorConfig::per_process_memory_fraction(); fraction < 1.0)
        for (int d = 0; d < device_count; ++d) {
          try {
            setMemoryFraction(fraction, static_cast<c10::DeviceIndex>(d));
          } catch (const c10::Error& e) {
            std::fprintf(stderr, "tracepool: per_process_memory_fraction %g not applied to device %d: %s\n", fraction,
                         d, e.what_without_backtrace());
          }
        }
      follows_pytorch_config_.store(true, std::memory_order_relaxed);
    }
    initialized_ = true;
  }
  bool initialized() override { return initialized_; }

  // ---- Cache and limits --------------------------------------------------------------------------
  // Also called by ~MemPool: never throws.
  void emptyCache(MempoolId_t pool) noexcept override {
    tracepool_t* tp = tracepool_default();
    if (tp == nullptr) return;
    if (pool.first == 0 && pool.second == 0) {
      empty_caches_.fetch_add(1, std::memory_order_relaxed);
      return tell(tracepool_empty_cache(tp, -1), "empty_cache");
    }
    int n = 0;
    tell(tracepool_device_count(tp, &n), "empty_cache(pool)");
    for (int d = 0; d < n; ++d) tell(tracepool_pool_empty(tp, d, key_or_zero(pool)), "empty_cache(pool)");
  }
  // PyTorch's meaning: the device may hold at most fraction x its total memory (reserved bytes).
  void setMemoryFraction(double fraction, c10::DeviceIndex device) override {
    TORCH_CHECK(fraction >= 0.0 && fraction <= 1.0, "invalid fraction:", fraction, ". Please set within [0, 1].");
    size_t free_bytes = 0, total = 0;
    check(tracepool_mem_get_info(instance(), device, &free_bytes, &total), "set_per_process_memory_fraction");
    // 1 lifts the cap (0 means none to tracepool); 0 allows nothing (a cap of one byte).
    const size_t limit = fraction >= 1.0 ? 0 : static_cast<size_t>(fraction * static_cast<double>(total)) + (fraction == 0.0);
    check(tracepool_set_limit(instance(), device, limit), "set_per_process_memory_fraction");
    std::lock_guard<std::mutex> lock(mutex_);
    fractions_.resize(std::max(fractions_.size(), static_cast<size_t>(device) + 1), 1.0);
    fractions_[static_cast<size_t>(device)] = fraction;
  }
  double getMemoryFraction(c10::DeviceIndex device) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<size_t>(device) < fractions_.size() ? fractions_[static_cast<size_t>(device)] : 1.0;
  }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    size_t free_bytes = 0, total = 0;
    check(tracepool_mem_get_info(instance(), device, &free_bytes, &total), "mem_get_info");
    return {free_bytes, total};
  }
  // What cuDNN's benchmark mode sizes its workspace by: the device's free memory (tracepool keeps no
  // per-size index of its cache to add the largest cached block).
  void cacheInfo(c10::DeviceIndex device, size_t* largest) override {
    size_t free_bytes = 0, total = 0;
    check(tracepool_mem_get_info(instance(), device, &free_bytes, &total), "cache_info");
    if (free_bytes > *largest) *largest = free_bytes;
  }
  void recordStream(const c10::DataPtr& ptr, c10::cuda::CUDAStream stream) override {
    if (ptr.get() == nullptr || ptr.get_deleter() != &delete_block) return;  // not ours: nothing to wait for
    check(tracepool_record_stream(instance(), ptr.get(), stream.stream()), "record_stream");
  }

  // ---- Statistics --------------------------------------------------------------------------------
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    tracepool_stats_t s{};
    s.size = sizeof s;
    check(tracepool_get_stats(instance(), device, &s), "memory_stats");
    c10::CachingDeviceAllocator::DeviceStats out;
    auto put = [](c10::CachingDeviceAllocator::StatArray& to, const tracepool_stat_t& all, const tracepool_stat_t& small,
                  const tracepool_stat_t& large) {
      const tracepool_stat_t* from[] = {&all, &small, &large};
      for (size_t i = 0; i < 3; ++i) {
        to[i].current = static_cast<int64_t>(from[i]->current);
        to[i].peak = static_cast<int64_t>(from[i]->peak);
        to[i].allocated = static_cast<int64_t>(from[i]->allocated);
        to[i].freed = static_cast<int64_t>(from[i]->freed);
      }
    };
#define TRACEPOOL_PUT_STAT_(name) put(out.name, s.name, s.small_pool.name, s.large_pool.name);
    TRACEPOOL_STAT_MAP(TRACEPOOL_PUT_STAT_)
#undef TRACEPOOL_PUT_STAT_
    out.num_alloc_retries = static_cast<int64_t>(s.num_alloc_retries);
    out.num_ooms = static_cast<int64_t>(s.num_ooms);
    out.num_device_alloc = static_cast<int64_t>(s.num_device_alloc);
    out.num_device_free = static_cast<int64_t>(s.num_device_free);
    // PyTorch counts the times its cache waited for every stream's events, once per empty_cache;
    // tracepool waits for nothing there, and counts the empty_cache calls.
    out.num_sync_all_streams = empty_caches_.load(std::memory_order_relaxed);
    return out;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    check(tracepool_reset_accumulated_stats(instance(), device), "reset_accumulated_memory_stats");
  }
  void resetPeakStats(c10::DeviceIndex device) override {
    check(tracepool_reset_peak_stats(instance(), device), "reset_peak_memory_stats");
  }

  // ---- Private pools (Note [Private pools] in core/private_pool.h) -------------------------------
  void beginAllocateToPool(c10::DeviceIndex device, MempoolId_t pool, std::function<bool(cudaStream_t)> filter) override {
    tracepool_t* tp = instance();
    const uint64_t key = pool_key(pool);
    follow_capture_reuse(tp);
    auto* context = new std::function<bool(cudaStream_t)>(std::move(filter));  // the route owns it from here
    const int rc = tracepool_pool_begin(tp, device, key, &run_filter, context, &delete_filter);
    if (rc != TRACEPOOL_OK) delete context;
    check(rc, "beginAllocateToPool");
    // A pool made by its first route is a graph's (torch.cuda.graph, torch.compile's graph trees);
    // a MemPool's is made, and named, by createOrIncrefPool.
    int uses = 0;
    if (tracepool_pool_use_count(tp, device, key, &uses) == TRACEPOOL_OK && uses == 1)
      tell(tracepool_pool_label(tp, device, key, "CUDA graph"), "beginAllocateToPool");
  }
  // PyTorch's graph_capture_record_stream_reuse, read where PyTorch's allocator reads it, as a capture
  // allocates (Note [Reuse inside a capture] in core/stream_reuse.h). tracepool's setting is written
  // only when PyTorch's changes, so that TRACEPOOL_CONF's capture_reuse:on and a later
  // tracepool_set_capture_reuse stand until then.
  void follow_capture_reuse(tracepool_t* tp) {
    if (!follows_pytorch_config_.load(std::memory_order_relaxed)) return;
    const int wanted = cca::CUDAAllocatorConfig::graph_capture_record_stream_reuse() ? 1 : 0;
    const int before = pytorch_capture_reuse_.exchange(wanted, std::memory_order_relaxed);
    if (before == wanted) return;
    int configured = 0;  // the first time: what TRACEPOOL_CONF set, kept if PyTorch's is off
    if (before < 0 && (tracepool_capture_reuse(tp, &configured) != TRACEPOOL_OK || configured != 0)) return;
    tell(tracepool_set_capture_reuse(tp, wanted), "beginAllocateToPool");
  }
  // Both also run from destructors (~CUDAGraph via reset, ~MemPool): never throw.
  void endAllocateToPool(c10::DeviceIndex device, MempoolId_t pool) noexcept override {
    if (tracepool_t* tp = tracepool_default()) tell(tracepool_pool_end(tp, device, key_or_zero(pool)), "endAllocateToPool");
  }
  void releasePool(c10::DeviceIndex device, MempoolId_t pool) noexcept override {
    if (tracepool_t* tp = tracepool_default()) tell(tracepool_pool_release(tp, device, key_or_zero(pool)), "releasePool");
  }
  // A MemPool with an allocator of its own (MemPool(allocator=...)) gets its segments from it; tracepool
  // still splits, caches and attributes the blocks.
  void createOrIncrefPool(c10::DeviceIndex device, MempoolId_t pool, std::shared_ptr<cca::CUDAAllocator> allocator) override {
    tracepool_t* tp = instance();
    const uint64_t key = pool_key(pool);
    check(tracepool_pool_retain(tp, device, key), "createOrIncrefPool");
    int uses = 0;
    if (tracepool_pool_use_count(tp, device, key, &uses) != TRACEPOOL_OK || uses != 1) return;
    tell(tracepool_pool_label(tp, device, key, "torch.cuda.MemPool"), "createOrIncrefPool");
    if (allocator == nullptr) return;
    const int rc = tracepool_pool_set_allocator(tp, device, key, &source_alloc, &source_free,
                                                new allocator_ref(std::move(allocator)), &source_release);
    if (rc != TRACEPOOL_OK) tell(tracepool_pool_release(tp, device, key), "createOrIncrefPool");
    check(rc, "createOrIncrefPool");
  }
  int getPoolUseCount(c10::DeviceIndex device, MempoolId_t pool) override {
    int uses = 0;
    check(tracepool_pool_use_count(instance(), device, pool_key(pool), &uses), "getPoolUseCount");
    return uses;
  }
  // MemPool(use_on_oom=..., no_split=...): tracepool_pool_set_options.
  void setUseOnOOM(c10::DeviceIndex device, MempoolId_t pool, bool use_on_oom) override {
    set_option(device, pool, TRACEPOOL_POOL_USE_ON_OOM, use_on_oom, "setUseOnOOM");
  }
  void setNoSplit(c10::DeviceIndex device, MempoolId_t pool) override {
    set_option(device, pool, TRACEPOOL_POOL_NO_SPLIT, true, "setNoSplit");
  }
  bool checkPoolLiveAllocations(c10::DeviceIndex device, MempoolId_t pool,
                                const std::unordered_set<void*>& expected) override {
    const std::vector<void*> blocks = pool_blocks(device, pool);
    if (blocks.size() != expected.size()) return false;
    for (void* b : blocks)
      if (expected.count(b) == 0) return false;
    return true;
  }
  std::shared_ptr<cca::AllocatorState> getCheckpointState(c10::DeviceIndex device, MempoolId_t pool) override {
    auto cp = std::make_shared<pool_checkpoint>();
    cp->device = device;
    tracepool_pool_checkpoint_t* state = nullptr;
    check(tracepool_pool_checkpoint(instance(), device, pool_key(pool), &state), "getCheckpointState");
    cp->state.reset(state);
    return cp;
  }
  // PyTorch's contract (Module.cpp's _cuda_setCheckpointPoolState): ptrs_freed are the blocks the pool
  // had allocated, which their storages no longer own; dataptrs_allocd own the checkpoint's blocks, made
  // again, with this allocator's deleter (PyTorch hands them to the live storages, releases the rest).
  cca::CheckpointDelta setCheckpointPoolState(c10::DeviceIndex device, std::shared_ptr<cca::AllocatorState> as) override {
    const auto* cp = dynamic_cast<const pool_checkpoint*>(as.get());
    TORCH_CHECK(cp != nullptr && cp->state != nullptr, "tracepool: setCheckpointPoolState: the state is not a "
                "checkpoint that tracepool's getCheckpointState made");
    TORCH_CHECK(cp->device == device, "tracepool: setCheckpointPoolState: the checkpoint is of device ",
                static_cast<int>(cp->device), ", not ", static_cast<int>(device));
    restore_lists seen;
    const int rc = tracepool_pool_restore(instance(), cp->state.get(), &note_freed, &note_made, &seen);
    cca::CheckpointDelta delta;
    delta.ptrs_freed = std::move(seen.freed);
    for (void* p : seen.made) delta.dataptrs_allocd.emplace_back(p, p, &delete_block, c10::Device(c10::DeviceType::CUDA, device));
    check(rc, "setCheckpointPoolState");  // a failure part way frees what was made, through the DataPtrs
    return delta;
  }

  // ---- Out of memory -----------------------------------------------------------------------------
  void attachOutOfMemoryObserver(cca::OutOfMemoryObserver observer) override {
    std::lock_guard<std::mutex> lock(mutex_);
    oom_observers_.push_back(std::move(observer));
  }

  std::string name() override { return "tracepool"; }

 private:
  int devices() {
    if (devices_ > 0) return devices_;
    int n = 0;
    check(tracepool_device_count(instance(), &n), "device_count");
    return n;
  }

  void set_option(c10::DeviceIndex device, MempoolId_t pool, unsigned option, bool on, const char* what) {
    tracepool_t* tp = instance();
    const uint64_t key = pool_key(pool);
    unsigned options = 0;
    check(tracepool_pool_options(tp, device, key, &options), what);
    check(tracepool_pool_set_options(tp, device, key, on ? options | option : options & ~option), what);
  }

  std::vector<void*> pool_blocks(c10::DeviceIndex device, MempoolId_t pool) {
    size_t count = 0;
    const uint64_t key = pool_key(pool);
    check(tracepool_pool_blocks(instance(), device, key, nullptr, 0, &count), "checkPoolLiveAllocations");
    std::vector<void*> blocks(count + 16);  // room for blocks made meanwhile
    check(tracepool_pool_blocks(instance(), device, key, blocks.data(), blocks.size(), &count),
          "checkPoolLiveAllocations");
    blocks.resize(std::min(count, blocks.size()));
    return blocks;
  }

  void* allocate_on(size_t size, c10::DeviceIndex device, cudaStream_t stream) {
    tracepool_t* tp = instance();
    void* ptr = nullptr;
    const size_t rounded = follows_pytorch_config_.load(std::memory_order_relaxed) ? pytorch_rounding(size) : 0;
    // Tagged "torch": with CuPy and Numba in the same pool, the report says which runtime asked.
    const bool tagged = tracepool_tag_push("torch") == TRACEPOOL_OK;
    const int rc = tracepool_malloc_rounded(tp, size, rounded, device, stream, &ptr);
    const std::string why = rc == TRACEPOOL_OK ? std::string() : tracepool_last_error();  // before the pop
    if (tagged) (void)tracepool_tag_pop();
    if (rc == TRACEPOOL_OK) {
      if (c10::memoryProfilingEnabled()) profile_alloc(ptr, size, device);  // Note [Memory profiling] in torch_profiling.cpp
      return ptr;
    }
    TORCH_CHECK_WITH(OutOfMemoryError, size < (uint64_t{1} << 60), "CUDA out of memory. Tried to allocate more than 1EB memory.");
    if (rc == TRACEPOOL_ERR_OOM || rc == TRACEPOOL_ERR_INVALID_ARGUMENT) out_of_memory(tp, size, device, why);
    TORCH_CHECK(false, "tracepool: ", tracepool_status_string(rc), ": ", why);
  }

  // PyTorch's sentence first (tools match on it: "CUDA out of memory. Tried to allocate"), then
  // tracepool's own lines: the holders, the cache, the largest free block. The observers are told
  // first, as PyTorch's allocator does, with no lock held.
  [[noreturn]] void out_of_memory(tracepool_t* tp, size_t size, c10::DeviceIndex device, const std::string& why) {
    size_t free_bytes = 0, total = 0;
    (void)tracepool_mem_get_info(tp, device, &free_bytes, &total);
    tracepool_stats_t s{};
    s.size = sizeof s;
    (void)tracepool_get_stats(tp, device, &s);
    const double fraction = getMemoryFraction(device);
    const size_t allowed = fraction < 1.0 ? static_cast<size_t>(fraction * static_cast<double>(total)) : total;
    const size_t segment = tracepool_segment_size(size);  // the size PyTorch's message names
    std::vector<cca::OutOfMemoryObserver> observers;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      observers = oom_observers_;
    }
    for (const auto& observer : observers) observer(device, segment, allowed, free_bytes);
    const uint64_t allocated = s.allocated_bytes.current, reserved = s.reserved_bytes.current;
    TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory. Tried to allocate ", format_size(segment), ". GPU ",
                     static_cast<int>(device), " has a total capacity of ", format_size(total), " of which ",
                     format_size(free_bytes), " is free. ",
                     fraction < 1.0 ? format_size(allowed) + " allowed; " : std::string(), "Of the allocated memory ",
                     format_size(allocated), " is allocated by PyTorch, and ",
                     format_size(reserved > allocated ? reserved - allocated : 0),
                     " is reserved by PyTorch but unallocated.\ntracepool: ", why);
  }

  std::atomic<bool> caching_{true};        // Note [Caching disabled]
  std::atomic<bool> history_{false};       // recordHistory's
  std::atomic<int> pytorch_capture_reuse_{-1};  // PyTorch's setting last applied; -1: none yet
  std::atomic<bool> follows_pytorch_config_{false};  // init read PyTorch's configuration (pytorch_rounding, capture reuse)
  std::atomic<size_t> uncached_count_{0};  // uncached_.size(), read without the lock
  std::atomic<int> devices_{0};
  std::atomic<int64_t> empty_caches_{0};  // torch.cuda.empty_cache() calls, for num_sync_all_streams
  std::mutex mutex_;  // a leaf: guards the lists below
  std::vector<double> fractions_;
  std::vector<cca::OutOfMemoryObserver> oom_observers_;
  std::unordered_set<void*> uncached_;  // raw_alloc's pointers from the device while caching was off
};

// This library's frames are the top of every stack it allocates for: as bindings, they are dropped
// from call sites like libtracepool.so's own frames. Runs when PyTorch loads the library, after
// libtracepool.so (a dependency) is initialised.
const int registered_as_bindings = tracepool_add_bindings_module(reinterpret_cast<const void*>(&delete_block));

char install_error[1024];

}  // namespace

extern "C" {

// Makes tracepool PyTorch's CUDA allocator. 0 on success; otherwise -1, and
// tracepool_torch_install_error() says why (PyTorch's words: "Can't swap an already initialized
// allocator" when CUDA is initialised already).
__attribute__((visibility("default"))) int tracepool_torch_install(void) {
  try {
    (void)instance();
    torch::cuda::CUDAPluggableAllocator::changeCurrentAllocator(std::make_shared<tracepool_allocator>());
    return 0;
  } catch (const c10::Error& e) {
    std::snprintf(install_error, sizeof install_error, "%s", e.what_without_backtrace());
  } catch (const std::exception& e) {
    std::snprintf(install_error, sizeof install_error, "%s", e.what());
  } catch (...) {
    std::snprintf(install_error, sizeof install_error, "unknown exception");
  }
  return -1;
}

__attribute__((visibility("default"))) const char* tracepool_torch_install_error(void) { return install_error; }

}  // extern "C"
