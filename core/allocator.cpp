#include "allocator.h"

#include <atomic>
#include <cstring>
#include <new>
#include <string>

#include "base/clock.h"
#include "trace/tags.h"

namespace tracepool::core {

namespace {

std::atomic<uint64_t> next_instance{1};

// The pool the calling thread used last. One thread nearly always allocates on one stream of one
// device (PyTorch's current stream), so this skips the device lock on the hot path.
struct last_pool {
  uint64_t instance = 0;
  int device = -1;
  backend::stream_handle stream = nullptr;
  stream_pool* pool = nullptr;
  uint32_t allocs = 0;  // counts to auto_sample_every (Note [Growth without marks])
};
thread_local last_pool tls_last_pool;

status choose_backend(const config& cfg, std::unique_ptr<backend::backend>* out) {
  if (cfg.backend == backend_choice::host) {
    *out = backend::make_host_backend(cfg.host);
    return status::ok;
  }
  const status s = backend::make_cuda_backend(out);
  if (s == status::ok || cfg.backend == backend_choice::cuda) return s;
  *out = backend::make_host_backend(cfg.host);  // auto: no usable GPU here, emulate one
  return status::ok;
}

}  // namespace

status allocator::create(const config& cfg, std::unique_ptr<allocator>* out) {
  std::unique_ptr<tracer> tr;
  if (status s = tracer::create(cfg, &tr); s != status::ok) return s;
  std::unique_ptr<history> h;
  if (cfg.history != 0)
    if (status s = history::create(cfg.history, &h); s != status::ok) return s;
  std::unique_ptr<backend::backend> be;
  if (status s = choose_backend(cfg, &be); s != status::ok) return s;
  out->reset(new allocator(cfg, std::move(be), std::move(tr), std::move(h)));
  return status::ok;
}

allocator::allocator(const config& cfg, std::unique_ptr<backend::backend> be, std::unique_ptr<tracer> tr,
                     std::unique_ptr<history> h)
    : instance_(next_instance.fetch_add(1)),
      backend_(std::move(be)),
      tracer_(std::move(tr)),
      labels_(backend_->device_count()),
      history_(std::move(h)) {
  (void)observers_.subscribe(tracer_.get());  // the list is empty: these cannot fail
  if (history_ != nullptr) {
    history_->label_with(&labels_);
    (void)observers_.subscribe(history_.get());
  }
  history_view_.store(history_.get(), std::memory_order_release);
  gate_.set_reuse_in_capture(cfg.capture_reuse);
  const bool growable = cfg.segments == segment_choice::growable ||
                        (cfg.segments == segment_choice::automatic && std::strcmp(backend_->name(), "cuda") == 0);
  for (int d = 0; d < backend_->device_count(); ++d)
    devices_.push_back(
        std::make_unique<device_cache>(*backend_, gate_, d, cfg.limit, cfg.validate, observers_, growable));
  register_fork_participant(this);
}

allocator::~allocator() { unregister_fork_participant(this); }

void allocator::lock_for_fork() {
  labels_.lock_for_fork();  // a leaf: taken alone everywhere else
  observed_.lock_for_fork();  // likewise
  routes_.lock_for_fork();
  live_.lock_all();
  for (auto& dev : devices_) dev->lock_for_fork();
  backend_->lock_for_fork();
  observers_.lock_for_fork();
}

void allocator::unlock_after_fork(bool child) {
  // In the child, with everything still locked: a backend the child cannot use (CUDA) takes its
  // device work with it, so that frees of inherited blocks wait for nothing.
  const bool forget = child && !backend_->usable_in_child();
  if (child) gate_.forget_passes();  // a parent thread inside empty_cache holds one and no lock
  if (forget) device_inherited_.store(true, std::memory_order_relaxed);
  observers_.unlock_after_fork();
  backend_->unlock_after_fork();
  for (auto it = devices_.rbegin(); it != devices_.rend(); ++it) (*it)->unlock_after_fork(forget);
  live_.unlock_all();
  routes_.unlock_after_fork();
  observed_.unlock_after_fork();
  labels_.unlock_after_fork();
}

// The call site of a free or a release (empty_cache, a pool's empty), where the history keeps it
// (block_event::freed_at, segment_event::freed_at); else 0, and nothing is captured.
uint32_t allocator::freeing_site() {
  const history* h = allocation_history();
  return h != nullptr && h->wants_freeing_sites() ? tracer_->capture_site() : 0;
}

status allocator::check_device(int device) const {
  if (device >= 0 && device < device_count()) return status::ok;
  return fail(status::invalid_device, "device %d does not exist: the %s backend has %d device(s)", device,
              backend_->name(), device_count());
}

stream_pool* allocator::pool_of(int device, backend::stream_handle stream) {
  last_pool& last = tls_last_pool;
  if (last.instance == instance_ && last.device == device && last.stream == stream) return last.pool;
  stream_pool* pool = devices_[static_cast<size_t>(device)]->pool_for(stream);
  last = last_pool{instance_, device, stream, pool};
  return pool;
}

status allocator::malloc(size_t size, int device, backend::stream_handle stream, void** out, size_t at_least) {
  if (out == nullptr) return fail(status::invalid_argument, "malloc: out is NULL");
  *out = nullptr;
  if (status s = check_device(device); s != status::ok) return s;
  if (size == 0) return status::ok;
  if (size > max_request)
    return fail(status::invalid_argument, "malloc: %zu bytes is beyond the largest supported request (%zu bytes)", size,
                max_request);
  if (device_inherited_.load(std::memory_order_relaxed)) return refuse_inherited_device(device);
  const block_tag tag = tracer_->capture(size);  // before any lock
  device_cache& dev = *devices_[static_cast<size_t>(device)];
  stream_pool* pool = nullptr;
  if (routes_.any_open())  // a capture or a scoped pool: maybe this allocation goes to a private pool
    if (const uint64_t routed = routes_.pool_for(device, stream); routed != 0) pool = dev.pool_for(stream, routed);
  if (pool == nullptr) pool = pool_of(device, stream);
  block* b = nullptr;
  if (status s = dev.malloc(pool, size, tag, &b, at_least); s != status::ok)
    return s == status::out_of_memory ? out_of_memory(device, size, stream, tag.site) : s;
  try {
    live_.insert(b->ptr, b);
  } catch (const std::bad_alloc&) {
    bool taken = false;
    (void)dev.free(b, &taken);  // nothing lost: the block goes back before the error is reported
    return fail(status::internal, "malloc: host memory exhausted while recording the block");
  }
  if (observers_.wanted(alloc_events))
    observers_.alloc(block_event{b->ptr, b->size, size, device, stream, tag.site, tag.birth});
  *out = b->ptr;
  // A sample for the growth of sites (Note [Growth without marks]): a thread-local count, and a
  // coarse clock read every auto_sample_every allocations. No lock is held here.
  if (tracer_->auto_mark_interval_ns() != 0 && ++tls_last_pool.allocs % auto_sample_every == 0) {
    const uint64_t now = monotonic_coarse_ns();
    if (tracer_->auto_mark_due(now, true)) (void)take_auto_mark("sample", now, true);
  }
  return status::ok;
}

// The calling thread's site for memory got outside the pool: the source is the innermost tag, so that the
// site is one of its own (Note [Observed memory]).
status allocator::capture_observed(observed_kind kind, const char* source, size_t size, block_tag* out) {
  if (status s = push_tag(observed_tag(kind, source).c_str()); s != status::ok) return s;
  *out = tracer_->capture(size);
  (void)pop_tag();
  tracer_->reached_driver(out->site);
  return status::ok;
}

status allocator::observe_alloc(const void* ptr, size_t size, int device, observed_kind kind, const char* source) {
  const char* what = "tracepool_observe_alloc";
  if (ptr == nullptr) return fail(status::invalid_argument, "%s: ptr is NULL", what);
  if (status s = check_device(device); s != status::ok) return s;
  if (size == 0 || size > max_request)
    return fail(status::invalid_argument, "%s: %zu bytes: expected 1 to %zu", what, size, max_request);
  const int k = static_cast<int>(kind);
  if (k < 0 || k >= observed_kinds)
    return fail(status::invalid_argument, "%s: kind %d: expected device (0), managed (1) or pinned host (2)", what, k);
  if (status s = check_source(what, source); s != status::ok) return s;
  if (live_.with_block(const_cast<void*>(ptr), [](block*) {}))
    return fail(status::invalid_argument, "%s: %p is a block of tracepool's own pool, counted there already", what, ptr);
  block_tag t;
  if (status s = capture_observed(kind, source, size, &t); s != status::ok) return s;
  const observed_block b{reinterpret_cast<uintptr_t>(ptr), size, device, kind, t.site, t.birth};
  if (status s = observed_.add(b); s != status::ok) return s;
  tracer_->on_alloc(block_event{ptr, size, size, device, nullptr, t.site, t.birth});
  return status::ok;
}

status allocator::observe_oom(size_t size, int device, const char* source) {
  const char* what = "tracepool_observe_oom";
  if (status s = check_device(device); s != status::ok) return s;
  if (size == 0) return fail(status::invalid_argument, "%s: 0 bytes", what);
  if (status s = check_source(what, source); s != status::ok) return s;
  block_tag t;  // the failed request's site, tagged by its source as an observed block's is
  if (status s = capture_observed(observed_kind::device, source, size, &t); s != status::ok) return s;
  (void)fail(status::out_of_memory, "%s: out of memory: %zu bytes on device %d refused outside tracepool's pool", source,
             size, device);
  return out_of_memory(device, size, nullptr, t.site);
}

status allocator::observe_free(const void* ptr) {
  if (ptr == nullptr) return status::ok;
  observed_block b;
  if (status s = observed_.take(reinterpret_cast<uintptr_t>(ptr), &b); s != status::ok) return s;
  const block_event e{ptr, b.size, b.size, b.device, nullptr, b.site, b.birth};
  tracer_->on_free(e);
  tracer_->on_freed(e);
  return status::ok;
}

status allocator::free(void* ptr) {
  if (ptr == nullptr) return status::ok;
  const uint32_t freed_at = freeing_site();  // before any lock, as at malloc
  block* b = live_.take(ptr);
  if (b == nullptr) return reject_free(ptr);
  // Ours alone until the pool has it: no other thread touches these fields. Told before the pool
  // takes it back (Note [Observers]).
  const bool told = observers_.wanted(free_events), counted = observers_.wanted(freed_events);
  block_event e{};
  if (told || counted)
    e = block_event{b->ptr, b->size, b->requested, b->seg->device, b->seg->owner->stream(), b->site, b->birth, freed_at};
  if (told) observers_.free(e);
  status s;
  bool taken = false;
  try {
    s = devices_[static_cast<size_t>(b->seg->device)]->free(b, &taken, freed_at);
  } catch (const std::bad_alloc&) {
    s = fail(status::internal, "free(%p): host memory exhausted", ptr);
  }
  if (!taken) {
    live_.insert(ptr, b);  // still live: nothing lost, the caller may free it again
    if (told) observers_.unfree(e);
  } else if (counted) {
    observers_.freed(e);
  }
  return s;
}

// In a forked child whose backend is the parent's (Note [Fork]): cached memory is the parent's device
// memory too, so nothing is handed out, cache or not. The backend says why.
status allocator::refuse_inherited_device(int device) {
  size_t free_bytes = 0, total_bytes = 0;
  if (backend_->memory_info(device, &free_bytes, &total_bytes) != status::ok) return status::unavailable;
  return fail(status::unavailable, "malloc: this process was forked from one whose %s device state it cannot use",
              backend_->name());
}

// An address that is not a live block: say whether it is ours (double free, interior pointer) or not.
status allocator::reject_free(void* ptr) {
  for (auto& dev : devices_) {
    if (!dev->contains(ptr)) continue;
    dev->count_invalid_free();
    return fail(status::double_free,
                "free(%p): the address lies in tracepool memory on device %d but is not a live block "
                "(freed twice, or not the start of a block)",
                ptr, dev->device());
  }
  if (!devices_.empty()) devices_[0]->count_invalid_free();
  return fail(status::unknown_pointer, "free(%p): tracepool never allocated this address", ptr);
}

status allocator::record_stream(void* ptr, backend::stream_handle stream) {
  if (ptr == nullptr) return fail(status::invalid_argument, "record_stream: ptr is NULL");
  block* found = nullptr;
  // The shard lock keeps the block alive while its pool lock is taken (shard -> pool is the only
  // place both are held, and free takes them one after the other, never nested).
  const bool live = live_.with_block(ptr, [&](block* b) {
    found = b;
    devices_[static_cast<size_t>(b->seg->device)]->record_stream(b, stream);
  });
  if (!live || found == nullptr) return fail(status::unknown_pointer, "record_stream(%p): not a live block", ptr);
  return status::ok;
}

template <typename Fn>
status allocator::for_devices(int device, Fn&& fn) {
  if (device == -1) {
    for (auto& dev : devices_) fn(*dev);
    return status::ok;
  }
  if (status s = check_device(device); s != status::ok) return s;
  fn(*devices_[static_cast<size_t>(device)]);
  return status::ok;
}

status allocator::empty_cache(int device) {
  const uint32_t released_by = freeing_site();
  status first = status::ok;
  const status s = for_devices(device, [&](device_cache& d) {
    if (status e = d.empty_cache(/*wait=*/false, released_by); e != status::ok && first == status::ok) first = e;
  });
  return s != status::ok ? s : first;
}

status allocator::stats(int device, device_stats* out) {
  if (out == nullptr) return fail(status::invalid_argument, "stats: out is NULL");
  if (status s = check_device(device); s != status::ok) return s;
  *out = devices_[static_cast<size_t>(device)]->stats();
  return status::ok;
}

status allocator::reset_peak(int device) {
  return for_devices(device, [](device_cache& d) { d.reset_peak(); });
}

status allocator::reset_accumulated(int device) {
  return for_devices(device, [](device_cache& d) { d.reset_accumulated(); });
}

status allocator::set_limit(int device, size_t bytes) {
  return for_devices(device, [bytes](device_cache& d) { d.set_limit(bytes); });
}

status allocator::memory_info(int device, size_t* free_bytes, size_t* total_bytes) {
  if (free_bytes == nullptr || total_bytes == nullptr)
    return fail(status::invalid_argument, "mem_get_info: an out-pointer is NULL");
  if (status s = check_device(device); s != status::ok) return s;
  return backend_->memory_info(device, free_bytes, total_bytes);
}

bool allocator::processes(int device, std::vector<backend::process_usage>* out, std::string* why) {
  if (device < 0 || device >= backend_->device_count()) {
    *why = "no device " + std::to_string(device);
    return false;
  }
  return backend_->processes(device, out, why);
}

status allocator::validate() {
  for (auto& dev : devices_)
    if (status s = dev->validate(); s != status::ok) return s;
  return status::ok;
}

status allocator::collect_blocks(int device, std::vector<block_record>* out) {
  if (status s = check_device(device); s != status::ok) return s;
  devices_[static_cast<size_t>(device)]->collect(out);
  return status::ok;
}

// ---- Private pools -------------------------------------------------------------------------------

status allocator::check_pool(int device, uint64_t pool) const {
  if (status s = check_device(device); s != status::ok) return s;
  if (pool == 0) return fail(status::invalid_argument, "private pools have nonzero ids; 0 is the default pool");
  return status::ok;
}

status allocator::retain_pool(int device, uint64_t pool) {
  if (status s = check_pool(device, pool); s != status::ok) return s;
  const uint32_t site = tracer_->capture_site();  // before any lock
  return devices_[static_cast<size_t>(device)]->retain_pool(pool, site);
}

status allocator::begin_pool(int device, uint64_t pool, route_filter_fn filter, void* context,
                             route_release_fn release) {
  if (status s = retain_pool(device, pool); s != status::ok) return s;
  const status s = routes_.open(route{device, pool, filter, context, release});
  if (s != status::ok) (void)devices_[static_cast<size_t>(device)]->release_pool(pool);
  return s;
}

status allocator::end_pool(int device, uint64_t pool) {
  if (status s = check_pool(device, pool); s != status::ok) return s;
  // The last route closed: frees made during the capture get their events now, so that a pool used
  // only inside captures (a graph's) gets those blocks back.
  if (routes_.close(device, pool) != 0 && !gate_.closed())
    for (auto& dev : devices_) dev->process_pending();
  return status::ok;
}

status allocator::release_pool(int device, uint64_t pool) {
  if (status s = check_pool(device, pool); s != status::ok) return s;
  return devices_[static_cast<size_t>(device)]->release_pool(pool);
}

status allocator::pool_use_count(int device, uint64_t pool, int* out) {
  if (out == nullptr) return fail(status::invalid_argument, "pool_use_count: out is NULL");
  if (status s = check_pool(device, pool); s != status::ok) return s;
  *out = devices_[static_cast<size_t>(device)]->pool_use_count(pool);
  return status::ok;
}

status allocator::empty_pool(int device, uint64_t pool) {
  if (status s = check_pool(device, pool); s != status::ok) return s;
  return devices_[static_cast<size_t>(device)]->empty_pool(pool, freeing_site());
}

status allocator::pool_blocks(int device, uint64_t pool, std::vector<void*>* out) {
  if (status s = check_pool(device, pool); s != status::ok) return s;
  devices_[static_cast<size_t>(device)]->pool_blocks(pool, out);
  return status::ok;
}

status allocator::set_pool_options(int device, uint64_t pool, bool no_split, bool use_on_oom) {
  if (status s = check_pool(device, pool); s != status::ok) return s;
  return devices_[static_cast<size_t>(device)]->set_pool_options(pool, no_split, use_on_oom);
}

status allocator::pool_options(int device, uint64_t pool, bool* no_split, bool* use_on_oom) {
  if (no_split == nullptr || use_on_oom == nullptr) return fail(status::invalid_argument, "pool_options: out is NULL");
  if (status s = check_pool(device, pool); s != status::ok) return s;
  return devices_[static_cast<size_t>(device)]->pool_options(pool, no_split, use_on_oom);
}

status allocator::set_pool_source(int device, uint64_t pool, std::shared_ptr<const segment_source> source) {
  if (status s = check_pool(device, pool); s != status::ok) return s;
  return devices_[static_cast<size_t>(device)]->set_pool_source(pool, std::move(source));
}

status allocator::checkpoint_pool(int device, uint64_t pool, pool_checkpoint* out) {
  if (out == nullptr) return fail(status::invalid_argument, "checkpoint_pool: out is NULL");
  if (status s = check_pool(device, pool); s != status::ok) return s;
  out->device = device;
  out->pool = pool;
  out->blocks.clear();
  return devices_[static_cast<size_t>(device)]->checkpoint(pool, &out->blocks);
}

status allocator::restore_pool(const pool_checkpoint& cp, std::vector<void*>* freed, std::vector<void*>* made) {
  if (freed == nullptr || made == nullptr) return fail(status::invalid_argument, "restore_pool: an out-list is NULL");
  if (status s = check_pool(cp.device, cp.pool); s != status::ok) return s;
  device_cache& dev = *devices_[static_cast<size_t>(cp.device)];
  // Waiting for record_stream events would break a capture running anywhere (Note [Capture]).
  const bool can_wait = !gate_.closed();
  if (status s = dev.check_restorable(cp, can_wait); s != status::ok) return s;
  std::vector<void*> now;
  dev.pool_blocks(cp.pool, &now);
  freed->reserve(freed->size() + now.size());
  made->reserve(made->size() + cp.blocks.size());
  for (void* ptr : now) {
    if (status s = free(ptr); s != status::ok) return s;
    freed->push_back(ptr);
  }
  dev.finish_pending(cp.pool, can_wait);
  for (const pool_checkpoint::held& h : cp.blocks) {
    block* b = nullptr;
    if (status s = dev.restore_block(cp.pool, h, &b); s != status::ok) return s;
    try {
      live_.insert(b->ptr, b);
    } catch (const std::bad_alloc&) {
      bool taken = false;
      (void)dev.free(b, &taken);
      return fail(status::internal, "restore_pool: host memory exhausted while recording a block");
    }
    if (observers_.wanted(alloc_events))
      observers_.alloc(block_event{b->ptr, b->size, h.requested, cp.device, h.stream, h.site, h.birth});
    made->push_back(b->ptr);
  }
  return status::ok;
}

status allocator::label_pool(int device, uint64_t pool, const char* label) {
  if (status s = check_pool(device, pool); s != status::ok) return s;
  if (status s = check_label("pool_label", label); s != status::ok) return s;
  return devices_[static_cast<size_t>(device)]->label_pool(pool, label);
}

status allocator::retained_pools(int device, std::vector<private_pool_info>* out) {
  if (status s = check_device(device); s != status::ok) return s;
  *out = devices_[static_cast<size_t>(device)]->retained_pools();
  return status::ok;
}

status allocator::record_history(size_t entries, bool clear, bool alloc_sites, history::free_sites frees) {
  if (entries > max_history_entries)
    return fail(status::invalid_argument, "record_history: %zu entries is more than %zu", entries, max_history_entries);
  std::lock_guard<std::mutex> lock(history_mutex_);
  if (entries == 0) {
    if (history_ != nullptr) {
      history_->set_recording(false);
      history_->clear();
    }
    return status::ok;
  }
  if (history_ == nullptr) {
    std::unique_ptr<history> h;
    if (status s = history::create(entries, &h); s != status::ok) return s;
    h->label_with(&labels_);
    h->set_sites(alloc_sites, frees);
    if (status s = observers_.subscribe(h.get()); s != status::ok) return s;
    history_ = std::move(h);
    history_view_.store(history_.get(), std::memory_order_release);
    return status::ok;
  }
  if (clear) history_->clear();
  if (entries != history_->capacity())
    if (status s = history_->resize(entries); s != status::ok) return s;
  history_->set_sites(alloc_sites, frees);
  history_->set_recording(true);
  return status::ok;
}

// A mark's figures: requested and reserved bytes now, summed over the devices (one stats pass each).
mark_event allocator::mark_figures(const char* label) {
  mark_event e{label, 0, 0};
  for (auto& dev : devices_) {
    const device_stats st = dev->stats();
    e.live_bytes += st.table.at(stat_kind::requested_bytes, all_pools).current;
    e.reserved_bytes += st.table.at(stat_kind::reserved_bytes, all_pools).current;
  }
  return e;
}

status allocator::mark(const char* label) {
  if (status s = check_label("mark", label); s != status::ok) return s;
  return observers_.mark(mark_figures(label));
}

status allocator::auto_mark(const char* label, bool* taken) {
  if (taken != nullptr) *taken = false;
  if (status s = check_label("auto_mark", label); s != status::ok) return s;
  const bool took = take_auto_mark(label, monotonic_coarse_ns(), false);
  if (taken != nullptr) *taken = took;
  return status::ok;
}

bool allocator::take_auto_mark(const char* label, uint64_t now_ns, bool sample) {
  if (!tracer_->auto_mark_due(now_ns, sample)) return false;  // the common case: no stats read
  return tracer_->auto_mark(mark_figures(label), now_ns, sample);
}

// The device said no after the cache was emptied. The observers are told (no allocator lock is held:
// the OOM reporter builds its report here) and may add lines to the error message.
status allocator::out_of_memory(int device, size_t size, backend::stream_handle stream, uint32_t site) {
  const std::string message = last_error();  // the device cache's words, before anything else fails
  size_t free_bytes = 0, total_bytes = 0;
  (void)backend_->memory_info(device, &free_bytes, &total_bytes);
  std::string detail;
  try {
    observers_.oom(oom_event{device, size, stream, site, free_bytes, message.c_str(), &detail});
  } catch (const std::bad_alloc&) {
    detail.clear();  // no room for a report either: the device's words alone
  }
  if (detail.empty()) return fail(status::out_of_memory, "%s", message.c_str());
  return fail(status::out_of_memory, "%s\n%s", message.c_str(), detail.c_str());
}

}  // namespace tracepool::core
