// growable_segments.cpp: device_cache's growable segments (Note [Growable segments] in block.h):
// making one, mapping pieces into it as requests need them, unmapping the free pieces when the cache
// is emptied, and freeing the range once nothing of it is mapped. stream_pool keeps their blocks.
#include <algorithm>
#include <memory>
#include <new>
#include <string>

#include "device_cache.h"

namespace tracepool::core {

namespace {
// The bytes of each map() call: the device's page for the small pool, 20 MiB (whole pages) for the
// large one.
size_t piece_for(pool_kind kind, size_t page) {
  return kind == pool_kind::small ? page : (large_segment_size + page - 1) / page * page;
}

double mib(size_t bytes) { return static_cast<double>(bytes) / (1 << 20); }
}  // namespace

// b stays nullptr where the segment has no stretch that holds `rounded`, or no range could be
// reserved: a classic segment serves then.
status device_cache::grow_in_place(stream_pool* pool, size_t rounded, pool_kind kind, uint32_t site, block** out) {
  segment* s = pool->growable(kind);
  if (s == nullptr && new_growable(pool, kind, site, &s) != status::ok) return status::ok;
  size_t bytes = 0, least = 0;
  block* u = pool->growth_room(s, rounded, backend_.page_size(device_), &bytes, &least);
  if (u == nullptr) return status::ok;
  if (status st = map_pieces(pool, u, bytes, least, site); st != status::ok) return st;
  *out = pool->find_free(rounded, kind);
  return status::ok;
}

status device_cache::new_growable(stream_pool* pool, pool_kind kind, uint32_t site, segment** out) {
  size_t free_bytes = 0, total_bytes = 0;
  if (status s = backend_.memory_info(device_, &free_bytes, &total_bytes); s != status::ok) return s;
  const size_t piece = piece_for(kind, backend_.page_size(device_));
  // PyTorch's 1 1/8 of the device: room to map the whole device even where unmapped holes are left.
  const size_t range = (total_bytes + total_bytes / 8 + piece - 1) / piece * piece;
  std::unique_ptr<segment> seg(new (std::nothrow) segment());
  std::unique_ptr<block> whole(new (std::nothrow) block());
  if (!seg || !whole) return fail(status::internal, "device %d: host memory exhausted while growing", device_);
  void* base = nullptr;
  if (status s = backend_.reserve_range(device_, range, &base); s != status::ok) return s;
  seg->ptr = static_cast<char*>(base);
  seg->size = range;
  seg->device = device_;
  seg->kind = kind;
  seg->site = site;
  seg->piece = piece;
  whole->ptr = seg->ptr;
  whole->size = range;
  whole->seg = seg.get();
  whole->state = block_state::unmapped;
  seg->first = whole.get();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    bool added = false;
    try {
      added = segments_.emplace(seg->ptr, seg.get()).second;
    } catch (const std::bad_alloc&) {
    }
    if (added) segment_stats_.increase(stat_kind::segment, kind, 1);
    if (!added) {
      (void)backend_.free_range(device_, base, range);
      return fail(status::internal, "device %d: could not record a growable segment at %p", device_, base);
    }
  }
  whole.release();
  *out = seg.release();
  pool->adopt_growable(*out);
  return status::ok;
}

// One map() per piece, so that each can be unmapped alone. Pieces mapped before one fails stay, as
// cache: the out-of-memory retry gives them back with the rest. `least`: what serves the request with
// the last piece cut short, mapped where the limit refuses `bytes` (Note [Growable segments]).
status device_cache::map_pieces(stream_pool* pool, block* u, size_t bytes, size_t least, uint32_t site) {
  segment* s = u->seg;
  pool->keep_spares(1);  // may throw: before anything is mapped
  s->splits.reserve(s->splits.size() + 1);  // likewise: a short last piece adds a split
  // More than the device has free would be mapped piece by piece only to fail and be unmapped again
  // (thousands of pieces for a request beyond the device): the retry empties the cache first.
  size_t free_bytes = 0, total_bytes = 0;
  const bool fits = backend_.memory_info(device_, &free_bytes, &total_bytes) != status::ok || bytes <= free_bytes;
  bool admitted = fits && admit(bytes, "growable segment's map");
  if (fits && !admitted && least < bytes && admit(least, "growable segment's map")) bytes = least, admitted = true;
  status st = admitted ? status::ok : status::out_of_memory;
  if (!fits)
    fail(status::out_of_memory, "device %d: %.2f MiB to map, %.2f MiB free of %.2f MiB", device_, mib(bytes),
         mib(free_bytes), mib(total_bytes));
  const size_t start = static_cast<size_t>(u->ptr - s->ptr);
  size_t done = 0, maps = 0;
  while (st == status::ok && done < bytes) {
    const size_t len = std::min(s->next_boundary(start + done), start + bytes) - (start + done);
    if ((st = backend_.map(device_, u->ptr + done, len)) != status::ok) break;
    done += len;
    ++maps;
  }
  if (done == bytes && !s->on_boundary(start + bytes))  // the short last piece: room reserved above
    s->splits.insert(std::upper_bound(s->splits.begin(), s->splits.end(), start + bytes), start + bytes);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (admitted) reserving_ -= bytes;
    segment_stats_.increase(stat_kind::reserved_bytes, s->kind, static_cast<int64_t>(done));
    growable_mapped_ += done;
    counters_.num_device_alloc += maps;
  }
  if (done > 0) {
    observers_.segment_alloc(segment_event{u->ptr, done, device_, pool->stream(), site});
    pool->mapped(u, done, site);
  }
  if (st != status::ok && s->mapped == 0) {
    // During a capture the range stays, empty, for empty_cache to free later (Note [Capture]).
    if (const capture_gate::pass open(gate_); open) {
      const std::string reason = last_error();
      (void)drop_growable(pool, s);
      fail(st, "%s", reason.c_str());
    }
  }
  return st;
}

// Every whole piece inside a free block of the pool's growable segments goes back to the device.
// The caller holds the pool's lock and a pass of the capture gate.
status device_cache::unmap_free_pieces(stream_pool* pool, uint32_t released_by) {
  status result = status::ok;
  bool waited = false;
  for (pool_kind kind : {pool_kind::small, pool_kind::large}) {
    segment* s = pool->growable(kind);
    if (s == nullptr) continue;
    std::vector<stream_pool::free_pieces> stretches;
    pool->unmappable(s, &stretches);
    const bool idle = std::all_of(stretches.begin(), stretches.end(), [](const auto& p) { return p.idle; });
    if (!idle && !waited) {
      // A block freed on its stream may still be read by kernels queued before the free: unmap waits
      // for nothing, so the device is waited for first (Note [Growable segments]).
      if (status st = backend_.synchronize_device(device_); st != status::ok) {
        const std::string reason = last_error();
        return fail(st, "device %d: free pieces stay mapped, since the device could not be waited for: %s", device_,
                    reason.c_str());
      }
      waited = true;
    }
    for (const auto& p : stretches)
      if (status st = unmap_stretch(pool, p, released_by); st != status::ok && result == status::ok) result = st;
    if (s->mapped == 0)
      if (status st = drop_growable(pool, s); st != status::ok && result == status::ok) result = st;
  }
  return result;
}

status device_cache::unmap_stretch(stream_pool* pool, const stream_pool::free_pieces& p, uint32_t released_by) {
  const segment* s = p.b->seg;
  pool->keep_spares(2);  // may throw: before anything is unmapped
  // Told before the backend has it (Note [Observers]); what it refuses is told again as ours.
  observers_.segment_free(segment_event{p.begin, p.bytes, device_, pool->stream(), p.b->site, released_by});
  const size_t start = static_cast<size_t>(p.begin - s->ptr);
  size_t done = 0, unmaps = 0;
  status st = status::ok;
  while (done < p.bytes) {
    const size_t len = s->next_boundary(start + done) - (start + done);  // one mapping
    if ((st = backend_.unmap(device_, p.begin + done, len)) != status::ok) break;
    done += len;
    ++unmaps;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    segment_stats_.decrease(stat_kind::reserved_bytes, s->kind, static_cast<int64_t>(done));
    growable_mapped_ -= done;
    counters_.num_device_free += unmaps;
  }
  if (done < p.bytes)
    observers_.segment_alloc(segment_event{p.begin + done, p.bytes - done, device_, pool->stream(), p.b->site});
  if (done > 0) pool->unmapped(p, done);
  return st;
}

// `s` has nothing mapped: its range goes back. It leaves the segment map first (Note [Release order]).
status device_cache::drop_growable(stream_pool* pool, segment* s) {
  pool->disown_growable(s);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    segments_.erase(s->ptr);
    segment_stats_.decrease(stat_kind::segment, s->kind, 1);
  }
  // Refused, the range stays reserved and unused: address space lost, no memory.
  const status st = backend_.free_range(device_, s->ptr, s->size);
  delete s->first;
  delete s;
  return st;
}

// At the end: every mapped run, a piece at a time, then the range. Live blocks go too.
void device_cache::unmap_all(segment* s) {
  for (const block* b = s->first; b != nullptr; b = b->next) {
    if (b->state == block_state::unmapped || (b->prev != nullptr && b->prev->state != block_state::unmapped)) continue;
    const block* end = b;
    while (end != nullptr && end->state != block_state::unmapped) end = end->next;
    const char* stop = end == nullptr ? s->ptr + s->size : end->ptr;
    for (char* at = b->ptr; at < stop;) {
      const size_t offset = static_cast<size_t>(at - s->ptr), len = s->next_boundary(offset) - offset;
      (void)backend_.unmap(device_, at, len);
      at += len;
    }
  }
  (void)backend_.free_range(device_, s->ptr, s->size);
}

}  // namespace tracepool::core
