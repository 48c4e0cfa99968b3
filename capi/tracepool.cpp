// tracepool.cpp: the C ABI. Each function checks its arguments, calls core, and turns every failure
// (status or exception) into a status code with a thread-local message. Nothing throws past here.
// Reports, strings and files at the C ABI are in reports.cpp.
#include "tracepool/tracepool.h"

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "allocator.h"
#include "base/config.h"
#include "base/excerpt.h"
#include "base/fork_guard.h"
#include "base/size_class.h"
#include "base/status.h"
#include "exit_report.h"
#include "handle.h"
#include "report/oom_reporter.h"
#include "report/report.h"
#include "trace/script_frames.h"
#include "trace/tags.h"

using tracepool::status;
namespace capi = tracepool::capi;
namespace core = tracepool::core;


namespace {

using tracepool::capi::check_handle;
using tracepool::capi::guarded;

status create(const char* what, const char* conf, tracepool_t** out) {
  core::config cfg;
  if (status s = core::parse_config(conf, &cfg); s != status::ok) return s;
  cfg.own_code = reinterpret_cast<const void*>(&tracepool_malloc);  // frames in this library are ours
  auto tp = std::make_unique<tracepool_s>();
  if (status s = core::allocator::create(cfg, &tp->impl); s != status::ok) return s;
  tp->oom = std::make_unique<core::oom_reporter>(*tp->impl, cfg.oom_report);
  if (status s = tp->impl->subscribe(tp->oom.get()); s != status::ok) return s;
  if (!capi::live_handles.add(tp.get()))
    return tracepool::fail(status::invalid_argument, "%s: %zu instances are live already; destroy one first", what,
                           capi::handle_registry::most);
  *out = tp.release();
  return status::ok;
}

void fill(const core::stat& from, tracepool_stat_t* to) {
  to->current = static_cast<uint64_t>(from.current);
  to->peak = static_cast<uint64_t>(from.peak);
  to->allocated = static_cast<uint64_t>(from.allocated);
  to->freed = static_cast<uint64_t>(from.freed);
}

void fill(const core::stat_table& t, int column, tracepool_stat_t* first_of_nine) {
  for (int k = 0; k < core::stat_kind_count; ++k) fill(t.at(static_cast<core::stat_kind>(k), column), first_of_nine + k);
}

// The nine stats are laid out in stat_kind order in both structs.
static_assert(offsetof(tracepool_stats_t, requested_bytes) - offsetof(tracepool_stats_t, allocation) ==
              8 * sizeof(tracepool_stat_t));
static_assert(sizeof(tracepool_stat_set_t) == 9 * sizeof(tracepool_stat_t));

tracepool_stats_t to_c(const core::device_stats& st) {
  tracepool_stats_t c{};
  c.size = sizeof c;
  fill(st.table, core::all_pools, &c.allocation);
  fill(st.table, static_cast<int>(core::pool_kind::small), &c.small_pool.allocation);
  fill(st.table, static_cast<int>(core::pool_kind::large), &c.large_pool.allocation);
  c.num_alloc_retries = st.counters.num_alloc_retries;
  c.num_ooms = st.counters.num_ooms;
  c.num_device_alloc = st.counters.num_device_alloc;
  c.num_device_free = st.counters.num_device_free;
  c.num_invalid_frees = st.counters.num_invalid_frees;
  c.limit_bytes = st.limit_bytes;
  return c;
}

// The process-wide instance: made on first use from tracepool_configure_default()'s text or
// TRACEPOOL_CONF, and never destroyed: frees arrive from other threads and atexit handlers until the
// very end of the process (notes/pytorch.md §1.4). Leaked, so no static destructor races them.
struct default_state {
  std::mutex mutex;
  bool made = false;        // creation was tried (the result, good or bad, is final)
  bool configured = false;  // conf came from tracepool_configure_default
  std::string conf;         // the text it was (or will be) made from
  std::string failure;      // why creation failed
};
default_state& default_slot() {
  static default_state* d = [] {
    auto* made = new default_state;
    // Held while the instance is made, so taken before fork() like every tracepool lock (Note [Fork]);
    // the registry's lock is taken under it as the instance is added, so it comes next.
    core::register_fork_lock(&made->mutex);
    core::register_fork_lock(&capi::live_handles.writers());
    return made;
  }();
  return *d;
}
[[maybe_unused]] const bool default_registered_at_load = (default_slot(), true);  // Note [Fork]
std::atomic<tracepool_t*> default_instance{nullptr};

// Adapts a C frame provider (tracepool_set_frame_provider) to the core's interface.
class c_frame_provider final : public core::script_provider {
 public:
  explicit c_frame_provider(const tracepool_frame_provider_t& p) : p_(p) {}
  size_t capture(uintptr_t* words, size_t max_frames) override { return p_.capture(words, max_frames); }
  bool describe(const uintptr_t* words, size_t frames, core::described_frame* out) override {
    std::unique_ptr<tracepool_script_frame_t[]> c(new tracepool_script_frame_t[frames]());
    if (p_.describe(words, frames, c.get()) != 0) return false;
    for (size_t i = 0; i < frames; ++i) {
      const tracepool_script_frame_t& f = c[i];
      out[i].file = std::string_view(f.file != nullptr ? f.file : "", f.file != nullptr ? f.file_len : 0);
      out[i].function = std::string_view(f.function != nullptr ? f.function : "", f.function != nullptr ? f.function_len : 0);
      out[i].line = f.line;
      out[i].flags = f.flags;
    }
    return true;
  }
  uintptr_t eval_begin() const override { return p_.eval_begin; }
  uintptr_t eval_end() const override { return p_.eval_end; }

 private:
  const tracepool_frame_provider_t p_;
};



}  // namespace

extern "C" {

tracepool_t* tracepool_default(void) {
  if (tracepool_t* tp = default_instance.load(std::memory_order_acquire); tp != nullptr) return tp;
  default_state& d = default_slot();
  std::lock_guard<std::mutex> lock(d.mutex);
  if (!d.made) {
    d.made = true;
    if (!d.configured) {
      const char* env = std::getenv("TRACEPOOL_CONF");
      d.conf = env != nullptr ? env : "";
    }
    tracepool_t* tp = nullptr;
    const int rc = guarded("tracepool_default", [&] { return create("tracepool_default", d.conf.c_str(), &tp); });
    if (rc != TRACEPOOL_OK) d.failure = tracepool::last_error();
    const char* report = std::getenv("TRACEPOOL_REPORT");
    if (rc == TRACEPOOL_OK && report != nullptr && *report != '\0') tracepool::capi::arm_exit_report(tp, report);
    default_instance.store(tp, std::memory_order_release);
  }
  tracepool_t* tp = default_instance.load(std::memory_order_relaxed);
  if (tp == nullptr) tracepool::fail(status::unavailable, "%s", d.failure.c_str());
  return tp;
}

int tracepool_configure_default(const char* conf) {
  return guarded("tracepool_configure_default", [&] {
    const std::string text = conf != nullptr ? conf : "";
    core::config cfg;
    if (status s = core::parse_config(text.c_str(), &cfg); s != status::ok) return s;
    default_state& d = default_slot();
    std::lock_guard<std::mutex> lock(d.mutex);
    if (d.made && text != d.conf)
      return tracepool::fail(status::invalid_argument,
                             "tracepool_configure_default('%s'): the default instance already exists, configured "
                             "with '%s'; configure it before its first use",
                             core::excerpt(text).c_str(), core::excerpt(d.conf).c_str());
    d.configured = true;
    d.conf = text;
    return status::ok;
  });
}

int tracepool_create(const char* conf, tracepool_t** out) {
  return guarded("tracepool_create", [&] {
    if (out == nullptr) return tracepool::fail(status::invalid_argument, "tracepool_create: out is NULL");
    *out = nullptr;
    return create("tracepool_create", conf, out);
  });
}

// The default instance is judged by its address, as every handle (Note [Live handles]): a stale
// handle is never read, and a second destroy finds it gone from the registry.
void tracepool_destroy(tracepool_t* tp) {
  if (tp == nullptr || tp == default_instance.load(std::memory_order_acquire)) return;
  if (!capi::live_handles.remove(tp)) {
    (void)check_handle(tp, "tracepool_destroy");  // says why in the last error
    return;
  }
  delete tp;
}

int tracepool_malloc(tracepool_t* tp, size_t size, int device, void* stream, void** out) {
  return guarded("tracepool_malloc", [&] {
    if (status s = check_handle(tp, "tracepool_malloc"); s != status::ok) return s;
    return tp->impl->malloc(size, device, stream, out);
  });
}

int tracepool_malloc_rounded(tracepool_t* tp, size_t size, size_t rounded, int device, void* stream, void** out) {
  return guarded("tracepool_malloc_rounded", [&] {
    if (status s = check_handle(tp, "tracepool_malloc_rounded"); s != status::ok) return s;
    return tp->impl->malloc(size, device, stream, out, rounded);
  });
}

size_t tracepool_segment_size(size_t size) {
  using namespace tracepool::core;
  return size <= max_request ? segment_size_for(round_size(size)) : size;
}

int tracepool_free(tracepool_t* tp, void* ptr, void* /*stream*/) {
  return guarded("tracepool_free", [&] {
    if (status s = check_handle(tp, "tracepool_free"); s != status::ok) return s;
    return tp->impl->free(ptr);
  });
}

int tracepool_observe_alloc(tracepool_t* tp, const void* ptr, size_t size, int device, int kind, const char* source) {
  return guarded("tracepool_observe_alloc", [&] {
    if (status s = check_handle(tp, "tracepool_observe_alloc"); s != status::ok) return s;
    return tp->impl->observe_alloc(ptr, size, device, static_cast<tracepool::core::observed_kind>(kind), source);
  });
}

int tracepool_observe_oom(tracepool_t* tp, size_t size, int device, const char* source) {
  return guarded("tracepool_observe_oom", [&] {
    if (status s = check_handle(tp, "tracepool_observe_oom"); s != status::ok) return s;
    return tp->impl->observe_oom(size, device, source);
  });
}

int tracepool_observe_free(tracepool_t* tp, const void* ptr) {
  return guarded("tracepool_observe_free", [&] {
    if (status s = check_handle(tp, "tracepool_observe_free"); s != status::ok) return s;
    return tp->impl->observe_free(ptr);
  });
}

int tracepool_record_stream(tracepool_t* tp, void* ptr, void* stream) {
  return guarded("tracepool_record_stream", [&] {
    if (status s = check_handle(tp, "tracepool_record_stream"); s != status::ok) return s;
    return tp->impl->record_stream(ptr, stream);
  });
}

int tracepool_empty_cache(tracepool_t* tp, int device) {
  return guarded("tracepool_empty_cache", [&] {
    if (status s = check_handle(tp, "tracepool_empty_cache"); s != status::ok) return s;
    return tp->impl->empty_cache(device);
  });
}

int tracepool_mem_get_info(tracepool_t* tp, int device, size_t* free_bytes, size_t* total_bytes) {
  return guarded("tracepool_mem_get_info", [&] {
    if (status s = check_handle(tp, "tracepool_mem_get_info"); s != status::ok) return s;
    return tp->impl->memory_info(device, free_bytes, total_bytes);
  });
}

int tracepool_set_limit(tracepool_t* tp, int device, size_t bytes) {
  return guarded("tracepool_set_limit", [&] {
    if (status s = check_handle(tp, "tracepool_set_limit"); s != status::ok) return s;
    if (bytes > core::max_byte_size)
      return tracepool::fail(status::invalid_argument,
                             "tracepool_set_limit: %zu bytes is more than a report can hold (at most %zu); 0 removes "
                             "the limit",
                             bytes, core::max_byte_size);
    return tp->impl->set_limit(device, bytes);
  });
}

int tracepool_set_capture_reuse(tracepool_t* tp, int on) {
  return guarded("tracepool_set_capture_reuse", [&] {
    if (status s = check_handle(tp, "tracepool_set_capture_reuse"); s != status::ok) return s;
    tp->impl->set_capture_reuse(on != 0);
    return status::ok;
  });
}

int tracepool_capture_reuse(tracepool_t* tp, int* out) {
  return guarded("tracepool_capture_reuse", [&] {
    if (status s = check_handle(tp, "tracepool_capture_reuse"); s != status::ok) return s;
    if (out == nullptr) return tracepool::fail(status::invalid_argument, "tracepool_capture_reuse: out is NULL");
    *out = tp->impl->capture_reuse() ? 1 : 0;
    return status::ok;
  });
}

int tracepool_pool_begin(tracepool_t* tp, int device, uint64_t pool, tracepool_pool_filter_fn filter, void* context,
                         void (*release)(void* context)) {
  return guarded("tracepool_pool_begin", [&] {
    if (status s = check_handle(tp, "tracepool_pool_begin"); s != status::ok) return s;
    return tp->impl->begin_pool(device, pool, filter, context, release);
  });
}

int tracepool_pool_end(tracepool_t* tp, int device, uint64_t pool) {
  return guarded("tracepool_pool_end", [&] {
    if (status s = check_handle(tp, "tracepool_pool_end"); s != status::ok) return s;
    return tp->impl->end_pool(device, pool);
  });
}

int tracepool_pool_retain(tracepool_t* tp, int device, uint64_t pool) {
  return guarded("tracepool_pool_retain", [&] {
    if (status s = check_handle(tp, "tracepool_pool_retain"); s != status::ok) return s;
    return tp->impl->retain_pool(device, pool);
  });
}

int tracepool_pool_release(tracepool_t* tp, int device, uint64_t pool) {
  return guarded("tracepool_pool_release", [&] {
    if (status s = check_handle(tp, "tracepool_pool_release"); s != status::ok) return s;
    return tp->impl->release_pool(device, pool);
  });
}

int tracepool_pool_use_count(tracepool_t* tp, int device, uint64_t pool, int* out) {
  return guarded("tracepool_pool_use_count", [&] {
    if (status s = check_handle(tp, "tracepool_pool_use_count"); s != status::ok) return s;
    return tp->impl->pool_use_count(device, pool, out);
  });
}

int tracepool_pool_empty(tracepool_t* tp, int device, uint64_t pool) {
  return guarded("tracepool_pool_empty", [&] {
    if (status s = check_handle(tp, "tracepool_pool_empty"); s != status::ok) return s;
    return tp->impl->empty_pool(device, pool);
  });
}

int tracepool_pool_blocks(tracepool_t* tp, int device, uint64_t pool, void** out, size_t capacity, size_t* count) {
  return guarded("tracepool_pool_blocks", [&] {
    if (status s = check_handle(tp, "tracepool_pool_blocks"); s != status::ok) return s;
    if (count == nullptr || (out == nullptr && capacity != 0))
      return fail(status::invalid_argument, "tracepool_pool_blocks: count is NULL, or out is NULL with capacity %zu",
                  capacity);
    std::vector<void*> blocks;
    if (status s = tp->impl->pool_blocks(device, pool, &blocks); s != status::ok) return s;
    *count = blocks.size();
    for (size_t i = 0; i < blocks.size() && i < capacity; ++i) out[i] = blocks[i];
    return status::ok;
  });
}

int tracepool_pool_set_options(tracepool_t* tp, int device, uint64_t pool, unsigned options) {
  return guarded("tracepool_pool_set_options", [&] {
    if (status s = check_handle(tp, "tracepool_pool_set_options"); s != status::ok) return s;
    constexpr unsigned known = TRACEPOOL_POOL_NO_SPLIT | TRACEPOOL_POOL_USE_ON_OOM;
    if ((options & ~known) != 0)
      return fail(status::invalid_argument, "tracepool_pool_set_options: unknown option bits 0x%x", options & ~known);
    return tp->impl->set_pool_options(device, pool, (options & TRACEPOOL_POOL_NO_SPLIT) != 0,
                                      (options & TRACEPOOL_POOL_USE_ON_OOM) != 0);
  });
}

int tracepool_pool_options(tracepool_t* tp, int device, uint64_t pool, unsigned* out) {
  return guarded("tracepool_pool_options", [&] {
    if (status s = check_handle(tp, "tracepool_pool_options"); s != status::ok) return s;
    if (out == nullptr) return fail(status::invalid_argument, "tracepool_pool_options: out is NULL");
    bool no_split = false, use_on_oom = false;
    if (status s = tp->impl->pool_options(device, pool, &no_split, &use_on_oom); s != status::ok) return s;
    *out = (no_split ? TRACEPOOL_POOL_NO_SPLIT : 0u) | (use_on_oom ? TRACEPOOL_POOL_USE_ON_OOM : 0u);
    return status::ok;
  });
}

int tracepool_pool_set_allocator(tracepool_t* tp, int device, uint64_t pool, tracepool_segment_alloc_fn alloc,
                                 tracepool_segment_free_fn free, void* context, void (*release)(void* context)) {
  // From here `release` runs exactly once, whatever happens: the source owns the context.
  std::shared_ptr<const core::segment_source> source;
  try {
    source = std::make_shared<const core::segment_source>(alloc, free, context, release);
  } catch (...) {
    if (release != nullptr) release(context);
    return capi::code(fail(status::internal, "tracepool_pool_set_allocator: host memory exhausted"));
  }
  return guarded("tracepool_pool_set_allocator", [&] {
    if (status s = check_handle(tp, "tracepool_pool_set_allocator"); s != status::ok) return s;
    if (alloc == nullptr || free == nullptr)
      return fail(status::invalid_argument, "tracepool_pool_set_allocator: alloc and free must both be given");
    return tp->impl->set_pool_source(device, pool, std::move(source));
  });
}

struct tracepool_pool_checkpoint {
  const tracepool_t* owner;
  core::pool_checkpoint state;
};

int tracepool_pool_checkpoint(tracepool_t* tp, int device, uint64_t pool, tracepool_pool_checkpoint_t** out) {
  return guarded("tracepool_pool_checkpoint", [&] {
    if (status s = check_handle(tp, "tracepool_pool_checkpoint"); s != status::ok) return s;
    if (out == nullptr) return fail(status::invalid_argument, "tracepool_pool_checkpoint: out is NULL");
    *out = nullptr;
    auto cp = std::make_unique<tracepool_pool_checkpoint_t>();
    cp->owner = tp;
    if (status s = tp->impl->checkpoint_pool(device, pool, &cp->state); s != status::ok) return s;
    *out = cp.release();
    return status::ok;
  });
}

int tracepool_pool_restore(tracepool_t* tp, const tracepool_pool_checkpoint_t* checkpoint, tracepool_pointer_fn freed,
                           tracepool_pointer_fn made, void* context) {
  return guarded("tracepool_pool_restore", [&] {
    if (status s = check_handle(tp, "tracepool_pool_restore"); s != status::ok) return s;
    if (checkpoint == nullptr) return fail(status::invalid_argument, "tracepool_pool_restore: checkpoint is NULL");
    if (checkpoint->owner != tp)
      return fail(status::invalid_argument, "tracepool_pool_restore: the checkpoint was taken by another instance");
    std::vector<void*> gone, back;
    const status s = tp->impl->restore_pool(checkpoint->state, &gone, &back);
    // What happened is told even after a failure part way (it can only be internal): the caller's
    // records must follow the pool's.
    if (freed != nullptr)
      for (void* p : gone) freed(context, p);
    if (made != nullptr)
      for (void* p : back) made(context, p);
    return s;
  });
}

void tracepool_pool_checkpoint_free(tracepool_pool_checkpoint_t* checkpoint) { delete checkpoint; }

int tracepool_record_history(tracepool_t* tp, size_t max_entries, int flags) {
  return guarded("tracepool_record_history", [&] {
    if (status s = check_handle(tp, "tracepool_record_history"); s != status::ok) return s;
    constexpr int known = TRACEPOOL_HISTORY_CLEAR | TRACEPOOL_HISTORY_NO_ALLOC_SITES | TRACEPOOL_HISTORY_NO_FREE_SITES |
                          TRACEPOOL_HISTORY_FREEING_SITES;
    constexpr int both = TRACEPOOL_HISTORY_NO_FREE_SITES | TRACEPOOL_HISTORY_FREEING_SITES;
    if ((flags & ~known) != 0 || (flags & both) == both)
      return fail(status::invalid_argument, "tracepool_record_history: flags 0x%x: unknown bits, or both free-site "
                  "choices", static_cast<unsigned>(flags));
    using frees = core::history::free_sites;
    const frees free_sites = (flags & TRACEPOOL_HISTORY_NO_FREE_SITES) != 0   ? frees::none
                             : (flags & TRACEPOOL_HISTORY_FREEING_SITES) != 0 ? frees::freeing
                                                                              : frees::allocation;
    return tp->impl->record_history(max_entries, (flags & TRACEPOOL_HISTORY_CLEAR) != 0,
                                    (flags & TRACEPOOL_HISTORY_NO_ALLOC_SITES) == 0, free_sites);
  });
}

int tracepool_history_set_metadata(tracepool_t* tp, int device, const char* metadata) {
  return guarded("tracepool_history_set_metadata", [&] {
    if (status s = check_handle(tp, "tracepool_history_set_metadata"); s != status::ok) return s;
    if (metadata == nullptr) return fail(status::invalid_argument, "tracepool_history_set_metadata: metadata is NULL");
    return tp->impl->labels().set_metadata(device, metadata);
  });
}

int tracepool_history_metadata(tracepool_t* tp, int device, char** out) {
  return guarded("tracepool_history_metadata", [&] {
    if (status s = check_handle(tp, "tracepool_history_metadata"); s != status::ok) return s;
    if (out == nullptr) return fail(status::invalid_argument, "tracepool_history_metadata: out is NULL");
    *out = nullptr;
    std::string text;
    if (status s = tp->impl->labels().metadata(device, &text); s != status::ok) return s;
    return tracepool::capi::copy_out(text, out);
  });
}

int tracepool_history_push_context(tracepool_t* tp, int device, const char* context) {
  return guarded("tracepool_history_push_context", [&] {
    if (status s = check_handle(tp, "tracepool_history_push_context"); s != status::ok) return s;
    if (context == nullptr) return fail(status::invalid_argument, "tracepool_history_push_context: context is NULL");
    return tp->impl->labels().push_context(device, context);
  });
}

int tracepool_history_pop_context(tracepool_t* tp, int device) {
  return guarded("tracepool_history_pop_context", [&] {
    if (status s = check_handle(tp, "tracepool_history_pop_context"); s != status::ok) return s;
    return tp->impl->labels().pop_context(device);
  });
}

int tracepool_pool_label(tracepool_t* tp, int device, uint64_t pool, const char* label) {
  return guarded("tracepool_pool_label", [&] {
    if (status s = check_handle(tp, "tracepool_pool_label"); s != status::ok) return s;
    return tp->impl->label_pool(device, pool, label);
  });
}

int tracepool_get_stats(tracepool_t* tp, int device, tracepool_stats_t* out) {
  return guarded("tracepool_get_stats", [&] {
    if (status s = check_handle(tp, "tracepool_get_stats"); s != status::ok) return s;
    if (out == nullptr) return tracepool::fail(status::invalid_argument, "tracepool_get_stats: out is NULL");
    const size_t caller_size = out->size;
    if (caller_size < offsetof(tracepool_stats_t, allocation) + sizeof(tracepool_stat_t))
      return tracepool::fail(status::invalid_argument,
                             "tracepool_get_stats: out->size is %zu; set it to sizeof(tracepool_stats_t)", caller_size);
    core::device_stats st;
    if (status s = tp->impl->stats(device, &st); s != status::ok) return s;
    tracepool_stats_t full = to_c(st);
    full.size = caller_size < sizeof full ? caller_size : sizeof full;
    std::memcpy(out, &full, full.size);  // an older, smaller struct gets the fields it knows
    return status::ok;
  });
}

int tracepool_reset_peak_stats(tracepool_t* tp, int device) {
  return guarded("tracepool_reset_peak_stats", [&] {
    if (status s = check_handle(tp, "tracepool_reset_peak_stats"); s != status::ok) return s;
    return tp->impl->reset_peak(device);
  });
}

int tracepool_reset_accumulated_stats(tracepool_t* tp, int device) {
  return guarded("tracepool_reset_accumulated_stats", [&] {
    if (status s = check_handle(tp, "tracepool_reset_accumulated_stats"); s != status::ok) return s;
    return tp->impl->reset_accumulated(device);
  });
}

int tracepool_device_count(tracepool_t* tp, int* out) {
  return guarded("tracepool_device_count", [&] {
    if (status s = check_handle(tp, "tracepool_device_count"); s != status::ok) return s;
    if (out == nullptr) return tracepool::fail(status::invalid_argument, "tracepool_device_count: out is NULL");
    *out = tp->impl->device_count();
    return status::ok;
  });
}

const char* tracepool_backend_name(tracepool_t* tp) {
  if (check_handle(tp, "tracepool_backend_name") != status::ok) return "";
  return tp->impl->device_backend().name();
}

int tracepool_validate(tracepool_t* tp) {
  return guarded("tracepool_validate", [&] {
    if (status s = check_handle(tp, "tracepool_validate"); s != status::ok) return s;
    return tp->impl->validate();
  });
}

int tracepool_tag_push(const char* label) {
  return guarded("tracepool_tag_push", [&] { return core::push_tag(label); });
}

int tracepool_tag_pop(void) {
  return guarded("tracepool_tag_pop", [&] { return core::pop_tag(); });
}

int tracepool_mark(tracepool_t* tp, const char* label) {
  return guarded("tracepool_mark", [&] {
    if (status s = check_handle(tp, "tracepool_mark"); s != status::ok) return s;
    return tp->impl->mark(label);
  });
}

int tracepool_auto_mark(tracepool_t* tp, const char* label, int* taken) {
  return guarded("tracepool_auto_mark", [&] {
    if (taken != nullptr) *taken = 0;
    if (status s = check_handle(tp, "tracepool_auto_mark"); s != status::ok) return s;
    bool took = false;
    const status s = tp->impl->auto_mark(label, &took);
    if (taken != nullptr) *taken = took ? 1 : 0;
    return s;
  });
}

int tracepool_set_frame_provider(const tracepool_frame_provider_t* p) {
  return guarded("tracepool_set_frame_provider", [&] {
    if (p == nullptr) {
      core::set_script_provider(nullptr);
      return status::ok;
    }
    if (p->size < sizeof(tracepool_frame_provider_t) || p->capture == nullptr || p->describe == nullptr)
      return tracepool::fail(status::invalid_argument,
                             "tracepool_set_frame_provider: size must be sizeof(tracepool_frame_provider_t) and "
                             "capture and describe set");
    if (p->eval_begin > p->eval_end)
      return tracepool::fail(status::invalid_argument, "tracepool_set_frame_provider: eval_begin > eval_end");
    core::set_script_provider(new c_frame_provider(*p));  // never deleted: see script_frames.h
    return status::ok;
  });
}

int tracepool_add_bindings_module(const void* address) {
  return guarded("tracepool_add_bindings_module", [&] {
    if (address == nullptr) return tracepool::fail(status::invalid_argument, "tracepool_add_bindings_module: NULL");
    return core::add_bindings_module(address);
  });
}

int tracepool_thread_origin(tracepool_t* tp, uint64_t* out) {
  return guarded("tracepool_thread_origin", [&] {
    if (out == nullptr) return tracepool::fail(status::invalid_argument, "tracepool_thread_origin: out is NULL");
    *out = 0;
    if (status s = check_handle(tp, "tracepool_thread_origin"); s != status::ok) return s;
    *out = tp->impl->call_sites().thread_origin();
    return status::ok;
  });
}

void tracepool_adopt_thread_origin(uint64_t origin) { core::tracer::adopt_thread_origin(origin); }

int tracepool_write_exit_report(void) { return tracepool::capi::write_exit_report_once(); }

const char* tracepool_status_string(int s) {
  switch (s) {
#define TRACEPOOL_STATUS_CASE(name, core_name, code, message, python_class) \
  case TRACEPOOL_##name:                                                    \
    return "TRACEPOOL_" #name ": " message;
    TRACEPOOL_STATUS_MAP(TRACEPOOL_STATUS_CASE)
#undef TRACEPOOL_STATUS_CASE
  }
  return "TRACEPOOL_ERR_?: unknown status code";
}

const char* tracepool_last_error(void) { return tracepool::last_error(); }

}  // extern "C"
