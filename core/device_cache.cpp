#include "device_cache.h"

#include <cstdio>
#include <memory>
#include <new>
#include <string>

namespace tracepool::core {

namespace {
std::string human(size_t bytes) {
  char buf[32];
  const double b = static_cast<double>(bytes);
  if (bytes >= (size_t{1} << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1 << 30));
  else if (bytes >= (size_t{1} << 20))
    std::snprintf(buf, sizeof buf, "%.2f MiB", b / (1 << 20));
  else
    std::snprintf(buf, sizeof buf, "%zu bytes", bytes);
  return buf;
}
}  // namespace

device_cache::device_cache(backend::backend& be, const capture_gate& gate, int device, size_t limit, bool validate,
                           const observer_list& observers, bool growable)
    : backend_(be),
      gate_(gate),
      device_(device),
      validate_(validate),
      observers_(observers),
      growable_(growable && be.page_size(device) != 0),
      limit_(limit) {}

device_cache::~device_cache() {
  // Unmapping waits for nothing (Note [Growable segments]); cuMemFree waits for the device itself.
  if (growable_ && !segments_.empty()) (void)backend_.synchronize_device(device_);
  for (auto& [start, seg] : segments_) {
    if (seg->growable()) unmap_all(seg);
    else (void)give_back(seg, seg->ptr, seg->size, seg->owner != nullptr ? seg->owner->stream() : nullptr);
    for (block* b = seg->first; b != nullptr;) {
      block* next = b->next;
      delete b->stream_uses;
      delete b;
      b = next;
    }
    delete seg;
  }
}

stream_pool* device_cache::pool_for(backend::stream_handle stream, uint64_t pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stream_pool* p = find_pool(stream, pool)) return p;
  pools_.push_back(std::make_unique<stream_pool>(backend_, gate_, device_, stream, pool));
  if (auto it = private_.find(pool); pool != 0 && it != private_.end()) pools_.back()->set_no_split(it->second.no_split);
  return pools_.back().get();
}

stream_pool* device_cache::find_pool(backend::stream_handle stream, uint64_t pool) {
  for (auto& p : pools_)
    if (p->stream() == stream && p->pool() == pool) return p.get();
  return nullptr;
}

std::vector<stream_pool*> device_cache::pools_snapshot() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<stream_pool*> out;
  out.reserve(pools_.size());
  for (auto& p : pools_) out.push_back(p.get());
  return out;
}

// The allocation ladder. Rungs 1-4 run under the pool's lock in try_allocate; rung 5 frees the
// cache without holding any lock and climbs once more.
status device_cache::malloc(stream_pool* pool, size_t size, block_tag tag, block** out, size_t at_least) {
  const size_t rounded = at_least > size && at_least <= max_request ? round_size(at_least) : round_size(size);
  status s = try_allocate(pool, rounded, size, tag, out);
  if (s != status::out_of_memory) return s;
  // During a capture nothing goes back to the device (Note [Capture] in private_pool.h).
  if (!gate_.closed()) {
    // Rung 5: the device is full. Give every fully free segment and every free piece back, after
    // waiting for pending frees.
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++counters_.num_alloc_retries;
    }
    (void)empty_cache(/*wait=*/true, tag.site);  // best effort: what it could not give back stays cached
    s = try_allocate(pool, rounded, size, tag, out);
    if (s != status::out_of_memory) return s;
  }
  // Rung 6: a pool that lends its free memory on OOM (MemPool(use_on_oom=True)).
  if (pool->pool() == 0 && borrow_on_oom(pool->stream(), rounded, size, tag, out)) return status::ok;
  return out_of_memory(size, rounded);
}

status device_cache::try_allocate(stream_pool* pool, size_t rounded, size_t size, block_tag tag, block** out) {
  const pool_kind kind = pool_kind_for(rounded);
  std::lock_guard<std::mutex> lock(pool->mutex());
  pool->process_pending(/*wait=*/false, /*stream_alive=*/true);
  // Rung 1: a cached block of this stream; reusable at once, in stream order.
  block* b = pool->find_free(rounded, kind);
  if (b == nullptr) {
    // Rung 2, growable segments: map pieces after the free block that ends where memory is unmapped.
    // None is b == nullptr here: the range has no stretch left that large, and a classic segment serves.
    if (growable_ && !pool->classic_only())
      if (status s = grow_in_place(pool, rounded, kind, tag.site, &b); s != status::ok) return s;
  }
  if (b == nullptr) {
    // Rung 3: a whole free classic segment of another stream whose last use has completed.
    segment* seg = take_from_other_streams(pool, rounded, kind);
    // Rung 4: a new classic segment from the device.
    if (seg == nullptr) {
      if (status s = grow(pool, rounded, kind, tag.site, &seg); s != status::ok) return s;
    }
    pool->adopt(seg);
    b = pool->find_free(rounded, kind);
  }
  *out = pool->allocate(b, rounded, size, tag);
  if (!validate_) return status::ok;
  if (status s = check(pool, "an allocation"); s != status::ok) {
    (void)pool->free(*out);  // nothing handed out, nothing lost
    *out = nullptr;
    return s;
  }
  return status::ok;
}

segment* device_cache::take_from_other_streams(stream_pool* pool, size_t rounded, pool_kind kind) {
  for (stream_pool* other : pools_snapshot()) {
    if (other == pool || other->pool() != pool->pool()) continue;  // private memory stays private
    std::unique_lock<std::mutex> lock(other->mutex(), std::try_to_lock);
    if (!lock.owns_lock()) continue;  // busy: never wait on another pool while holding ours
    if (segment* s = other->disown_safe_segment(rounded, kind)) return s;
  }
  return nullptr;
}

status device_cache::grow(stream_pool* pool, size_t rounded, pool_kind kind, uint32_t site, segment** out) {
  // Under a limit any request up to it fits on an empty device: one under 10 MiB, whose segment is
  // 20 MiB, gets a segment of its own size (whole 2 MiB pages) where 20 MiB would pass the limit. A
  // no_split pool's segment holds one block: it gets that size always.
  const size_t own = (rounded + large_round - 1) / large_round * large_round;
  size_t bytes = pool->no_split() ? own : segment_size_for(rounded);
  if (!admit(bytes, "segment")) {
    if (own >= bytes || !admit(own, "segment")) return status::out_of_memory;
    bytes = own;
  }
  // The records are made before the memory is asked for, so that once the device has said yes
  // nothing can fail.
  std::unique_ptr<segment> seg(new (std::nothrow) segment());
  std::unique_ptr<block> whole(new (std::nothrow) block());
  void* ptr = nullptr;
  status s = status::ok;
  if (!seg || !whole) {
    s = fail(status::internal, "device %d: host memory exhausted while growing", device_);
  } else if ((seg->source = source_of(pool)) == nullptr) {
    s = backend_.allocate(device_, bytes, &ptr);
  } else if ((ptr = seg->source->alloc(seg->source->context, bytes, device_, pool->stream())) == nullptr) {
    s = fail(status::out_of_memory, "device %d: the pool's own allocator gave no memory for a segment of %zu bytes",
             device_, bytes);
  }
  std::unique_lock<std::mutex> lock(mutex_);
  reserving_ -= bytes;
  if (s != status::ok) return s;
  seg->ptr = static_cast<char*>(ptr);
  seg->size = bytes;
  seg->mapped = bytes;
  seg->device = device_;
  seg->kind = kind;
  seg->site = site;
  whole->ptr = seg->ptr;
  whole->size = bytes;
  whole->seg = seg.get();
  seg->first = whole.get();
  bool added = false;
  try {
    added = segments_.emplace(seg->ptr, seg.get()).second;
  } catch (const std::bad_alloc&) {
  }
  if (!added) {
    // Out of host memory for the map node, or the backend handed out an address we still hold
    // (Note [Release order] exists so that this cannot happen): either way the segment is not ours.
    const bool duplicate = segments_.count(seg->ptr) != 0;
    lock.unlock();
    // During a capture the memory stays the device's, lost, rather than break the capture.
    if (const capture_gate::pass open(gate_); !duplicate && open) (void)give_back(seg.get(), ptr, bytes, pool->stream());
    return fail(status::internal, "device %d: could not record a new segment at %p (%s)", device_, ptr,
                duplicate ? "the backend handed out an address tracepool still holds" : "host memory exhausted");
  }
  segment_stats_.increase(stat_kind::segment, kind, 1);
  segment_stats_.increase(stat_kind::reserved_bytes, kind, static_cast<int64_t>(bytes));
  ++counters_.num_device_alloc;
  lock.unlock();
  observers_.segment_alloc(segment_event{ptr, bytes, device_, pool->stream(), site});  // under the pool's lock
  whole.release();
  *out = seg.release();
  return status::ok;
}

// Note [Release order]
// A segment leaves the segment map (and the statistics) before its memory goes back to the backend,
// and comes back only if the backend refuses. The other order loses segments: once the backend has
// the memory, a concurrent grow may get the same address from it, and the map still holding the old
// entry would drop the new one, which the old one's erase then removed. Bytes being released still
// count against the limit (releasing_) until the backend has them.
status device_cache::release(const std::vector<segment*>& segments, uint32_t released_by) {
  status result = status::ok;
  for (segment* seg : segments) {
    decltype(segments_)::node_type entry;  // kept, so that putting it back allocates nothing
    {
      std::lock_guard<std::mutex> lock(mutex_);
      entry = segments_.extract(seg->ptr);
      segment_stats_.decrease(stat_kind::segment, seg->kind, 1);
      segment_stats_.decrease(stat_kind::reserved_bytes, seg->kind, static_cast<int64_t>(seg->size));
      releasing_ += seg->size;
    }
    // Told before the backend has it (Note [Observers]): once it does, a grow may get the same address.
    const segment_event told{seg->ptr, seg->size, device_, seg->owner->stream(), seg->site, released_by};
    observers_.segment_free(told);
    const status s = give_back(seg, seg->ptr, seg->size, seg->owner->stream());
    if (s == status::ok) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        releasing_ -= seg->size;
        ++counters_.num_device_free;
      }
      delete seg->first;
      delete seg;
      continue;
    }
    // Refused: the memory is still the device's and still ours. It goes back where it came from, as
    // cache, so nothing is lost and a later empty_cache may try again.
    result = s;
    const std::string reason = last_error();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      releasing_ -= seg->size;
      segments_.insert(std::move(entry));
      segment_stats_.increase(stat_kind::segment, seg->kind, 1);
      segment_stats_.increase(stat_kind::reserved_bytes, seg->kind, static_cast<int64_t>(seg->size));
    }
    stream_pool* owner = seg->owner;
    std::lock_guard<std::mutex> lock(owner->mutex());
    owner->readopt(seg);
    observers_.segment_alloc(told);  // ours again, as when it was obtained: under its pool's lock
    fail(s, "%s", reason.c_str());
  }
  return result;
}

// Bytes about to be asked of the backend count against the limit from here (reserving_); the caller
// takes them off reserving_ once the backend has answered. False, with the reason set, past the limit.
bool device_cache::admit(size_t bytes, const char* what) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto reserved = static_cast<size_t>(segment_stats_.at(stat_kind::reserved_bytes, all_pools).current);
  if (limit_ != 0 && reserved + reserving_ + releasing_ + bytes > limit_) {
    fail(status::out_of_memory, "device %d: a %s of %s would pass the limit of %s (%s reserved)", device_, what,
         human(bytes).c_str(), human(limit_).c_str(), human(reserved).c_str());
    return false;
  }
  reserving_ += bytes;
  return true;
}

status device_cache::release_free_segments(stream_pool* pool, bool wait, uint32_t released_by) {
  status result = status::ok;
  std::vector<segment*> freed;
  {
    std::lock_guard<std::mutex> lock(pool->mutex());
    pool->process_pending(wait, /*stream_alive=*/false);
    if (growable_) result = unmap_free_pieces(pool, released_by);  // first: it may throw, and then nothing is disowned
    pool->disown_free_segments(&freed);
    if (validate_)
      if (status s = check(pool, "emptying the cache"); s != status::ok) result = s;
  }
  if (status s = release(freed, released_by); s != status::ok && result == status::ok) result = s;
  return result;
}

// The default pools and retired private pools; a private pool still retained keeps its memory (a
// graph replays into it). During a capture, nothing (Note [Capture]).
status device_cache::empty_cache(bool wait, uint32_t released_by) {
  const capture_gate::pass open(gate_);
  if (!open) return status::ok;
  status result = status::ok;
  for (stream_pool* pool : pools_snapshot()) {
    if (pool->pool() != 0 && !retired(pool)) continue;
    if (status s = release_free_segments(pool, wait, released_by); s != status::ok && result == status::ok) result = s;
  }
  if (result != status::ok) {
    const std::string reason = last_error();
    return fail(result, "empty_cache on device %d: a segment could not be given back and stays cached: %s", device_,
                reason.c_str());
  }
  return status::ok;
}

status device_cache::out_of_memory(size_t size, size_t rounded) {
  const std::string reason = last_error();  // the backend's or the limit's words
  size_t free_bytes = 0, total_bytes = 0;
  (void)backend_.memory_info(device_, &free_bytes, &total_bytes);
  const device_stats st = stats();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++counters_.num_ooms;
  }
  const auto reserved = static_cast<size_t>(st.table.at(stat_kind::reserved_bytes, all_pools).current);
  const auto allocated = static_cast<size_t>(st.table.at(stat_kind::allocated_bytes, all_pools).current);
  // What the device was asked for: a classic segment, or growable pieces (as growable_segments.cpp maps them).
  std::string asked = "segment of " + human(segment_size_for(rounded));
  if (const size_t page = backend_.page_size(device_); growable_ && page != 0)
    asked = "pieces of " +
            human(pool_kind_for(rounded) == pool_kind::small ? page : (large_segment_size + page - 1) / page * page);
  return fail(status::out_of_memory,
              "out of memory on device %d (%s): tried to allocate %s (%zu bytes requested, %s). "
              "Device total %s, free %s. tracepool holds %s: %s allocated, %s cached. Cause: %s",
              device_, backend_.name(), human(rounded).c_str(), size, asked.c_str(), human(total_bytes).c_str(),
              human(free_bytes).c_str(), human(reserved).c_str(), human(allocated).c_str(),
              human(reserved - allocated).c_str(), reason.c_str());
}

status device_cache::free(block* b, bool* taken, uint32_t freed_at) {
  stream_pool* pool = b->seg->owner;  // stable: only whole free segments change owner
  status s;
  {
    std::lock_guard<std::mutex> lock(pool->mutex());
    s = pool->free(b);
    *taken = s == status::ok;
    if (s == status::ok && validate_) s = check(pool, "a free");
  }
  // A retired private pool's memory goes back as its last blocks are freed (Note [Private pools]).
  // A segment the backend refuses stays cached, for empty_cache to try again: the free itself is done.
  if (*taken && pool->pool() != 0 && retired(pool))
    if (const capture_gate::pass open(gate_); open) (void)release_free_segments(pool, /*wait=*/false, freed_at);
  return s;
}

void device_cache::process_pending() {
  for (stream_pool* pool : pools_snapshot()) {
    std::lock_guard<std::mutex> lock(pool->mutex());
    pool->forget_graph();
    pool->process_pending(/*wait=*/false, /*stream_alive=*/false);
  }
}

void device_cache::record_stream(block* b, backend::stream_handle used_on) {
  stream_pool* pool = b->seg->owner;
  std::lock_guard<std::mutex> lock(pool->mutex());
  pool->record_stream(b, used_on);
}

device_stats device_cache::stats() {
  device_stats out;
  for (stream_pool* pool : pools_snapshot()) {
    std::lock_guard<std::mutex> lock(pool->mutex());
    out.table += pool->stats();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  for (stat_kind k : {stat_kind::segment, stat_kind::reserved_bytes})
    for (int p = 0; p <= pool_kind_count; ++p) out.table.at(k, p) = segment_stats_.at(k, p);
  out.counters = counters_;
  out.limit_bytes = limit_;
  return out;
}

void device_cache::collect(std::vector<block_record>* out) {
  for (stream_pool* pool : pools_snapshot()) {
    std::lock_guard<std::mutex> lock(pool->mutex());
    pool->collect(out);
  }
}

void device_cache::reset_peak() {
  for (stream_pool* pool : pools_snapshot()) {
    std::lock_guard<std::mutex> lock(pool->mutex());
    pool->stats().reset_peak();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  segment_stats_.reset_peak();
}

void device_cache::reset_accumulated() {
  for (stream_pool* pool : pools_snapshot()) {
    std::lock_guard<std::mutex> lock(pool->mutex());
    pool->stats().reset_accumulated();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  segment_stats_.reset_accumulated();
  const uint64_t invalid = counters_.num_invalid_frees;
  counters_ = event_counters();
  counters_.num_invalid_frees = invalid;  // evidence of misuse survives a reset
}

void device_cache::set_limit(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  limit_ = bytes;
}

void device_cache::count_invalid_free() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++counters_.num_invalid_frees;
}

bool device_cache::contains(const void* ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = segments_.upper_bound(static_cast<const char*>(ptr));
  if (it == segments_.begin()) return false;
  --it;
  return static_cast<const char*>(ptr) < it->second->ptr + it->second->size;
}

// Pools are only ever appended, so the locked ones are a prefix of pools_. A pool made while the
// others were being locked is locked too before the device lock is kept.
void device_cache::lock_for_fork() {
  size_t locked = 0;
  for (;;) {
    const std::vector<stream_pool*> pools = pools_snapshot();
    for (; locked < pools.size(); ++locked) pools[locked]->mutex().lock();
    mutex_.lock();
    if (pools_.size() == locked) return;
    mutex_.unlock();
  }
}

void device_cache::unlock_after_fork(bool forget_device_work) {
  if (forget_device_work)
    for (auto& p : pools_) p->forget_device_work();
  // The pools first, while the device lock still keeps pools_ from growing under this loop.
  for (size_t i = pools_.size(); i-- > 0;) pools_[i]->mutex().unlock();
  mutex_.unlock();
}

// Every pool's invariants, and that the segments of all pools add up to the reserved bytes.
status device_cache::validate() {
  for (stream_pool* pool : pools_snapshot()) {
    std::lock_guard<std::mutex> lock(pool->mutex());
    if (status s = pool->validate(); s != status::ok) return s;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t reserved = 0;
  // A growable segment's `mapped` changes under its pool's lock, not this one: its bytes are counted
  // by growable_mapped_, which changes with the statistics (each pool's validate checks `mapped`).
  for (auto& [start, seg] : segments_)
    if (!seg->growable()) reserved += static_cast<int64_t>(seg->size);
  reserved += static_cast<int64_t>(growable_mapped_);
  if (reserved != segment_stats_.at(stat_kind::reserved_bytes, all_pools).current ||
      static_cast<int64_t>(segments_.size()) != segment_stats_.at(stat_kind::segment, all_pools).current)
    return fail(status::internal, "validate: device %d segments add up to %lld bytes, stats say otherwise", device_,
                static_cast<long long>(reserved));
  return status::ok;
}

// validate:on and debug builds check the pool after every operation (see the head of device_cache.h).
status device_cache::check(stream_pool* pool, const char* after) {
  if (pool->validate() == status::ok) return status::ok;
  const std::string broken = last_error();
  return fail(status::internal, "invariant broken on device %d after %s (a bug in tracepool): %s", device_, after,
              broken.c_str());
}

}  // namespace tracepool::core
