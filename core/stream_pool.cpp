#include "stream_pool.h"

#include <algorithm>
#include <cinttypes>

namespace tracepool::core {

stream_pool::stream_pool(backend::backend& be, const capture_gate& gate, int device, backend::stream_handle stream,
                         uint64_t pool)
    : stream_(stream), pool_(pool), reuse_(be, gate, device, stream) {}

stream_pool::~stream_pool() {
  while (spare_ != nullptr) {
    block* next = spare_->bin_next;
    delete spare_;
    spare_ = next;
  }
}

// Block structs are recycled: the split of an alloc and the merge of its free would otherwise cost
// a host malloc and free per pair.
block* stream_pool::new_block() {
  if (spare_ == nullptr) return new block();
  block* b = spare_;
  spare_ = b->bin_next;
  --spares_;
  *b = block();
  return b;
}

void stream_pool::recycle(block* b) {
  delete b->stream_uses;
  b->stream_uses = nullptr;
  b->bin_next = spare_;
  spare_ = b;
  ++spares_;
}

void stream_pool::keep_spares(size_t n) {
  while (spares_ < n) recycle(new block());
}

void stream_pool::insert_free(block* b) {
  b->state = block_state::free;
  const pool_kind kind = b->seg->kind;
  if (kind == pool_kind::small) small_.insert(b);
  else large_.insert(b);
  b->counted_split = !b->is_whole_segment() && !b->seg->growable();
  if (b->counted_split) {
    stats_.increase(stat_kind::inactive_split, kind, 1);
    stats_.increase(stat_kind::inactive_split_bytes, kind, static_cast<int64_t>(b->size));
  }
}

void stream_pool::erase_free(block* b) {
  const pool_kind kind = b->seg->kind;
  if (kind == pool_kind::small) small_.erase(b);
  else large_.erase(b);
  if (b->counted_split) {
    stats_.decrease(stat_kind::inactive_split, kind, 1);
    stats_.decrease(stat_kind::inactive_split_bytes, kind, static_cast<int64_t>(b->size));
    b->counted_split = false;
  }
}

block* stream_pool::find_free(size_t rounded, pool_kind kind) const {
  return kind == pool_kind::small ? small_.best_fit(rounded) : large_.best_fit(rounded);
}

block* stream_pool::allocate(block* b, size_t rounded, size_t requested, block_tag tag) {
  const pool_kind kind = b->seg->kind;
  // may throw: before any change
  block* rest = !no_split() && should_split(kind, b->size, rounded, b->seg->growable()) ? new_block() : nullptr;
  erase_free(b);
  if (rest != nullptr) {
    rest->ptr = b->ptr + rounded;
    rest->size = b->size - rounded;
    rest->seg = b->seg;
    rest->prev = b;
    rest->next = b->next;
    rest->free_seq = b->free_seq;  // same memory, same last use
    rest->site = b->site;
    rest->requested = b->requested;  // free memory keeps its last request, as PyTorch's remainder block does
    if (b->next != nullptr) b->next->prev = rest;
    b->next = rest;
    b->size = rounded;
    insert_free(rest);
  }
  hand_out(b, requested, tag);
  return b;
}

// A block leaves the free lists' world: allocated to a caller, counted.
void stream_pool::hand_out(block* b, size_t requested, block_tag tag) {
  const pool_kind kind = b->seg->kind;
  b->state = block_state::allocated;
  b->requested = requested;
  b->site = tag.site;
  b->birth = tag.birth;
  const auto bytes = static_cast<int64_t>(b->size);
  stats_.increase(stat_kind::allocation, kind, 1);
  stats_.increase(stat_kind::allocated_bytes, kind, bytes);
  stats_.increase(stat_kind::active, kind, 1);
  stats_.increase(stat_kind::active_bytes, kind, bytes);
  stats_.increase(stat_kind::requested_bytes, kind, static_cast<int64_t>(requested));
}

// The block of this pool that holds address `ptr`, in whatever state; nullptr if none does.
block* stream_pool::block_at(const char* ptr) const {
  for (segment* s = segments_; s != nullptr; s = s->pool_next) {
    if (ptr < s->ptr || ptr >= s->ptr + s->size) continue;
    for (block* b = s->first; b != nullptr; b = b->next)
      if (ptr < b->ptr + b->size) return b;
  }
  return nullptr;
}

bool stream_pool::restorable(const char* ptr, size_t size, bool can_wait) const {
  const block* b = block_at(ptr);
  if (b == nullptr || size == 0 || ptr + size > b->seg->ptr + b->seg->size) return false;
  for (; b != nullptr && b->ptr < ptr + size; b = b->next) {
    const bool waits = b->state == block_state::pending_free ||
                       (b->state == block_state::allocated && b->stream_uses != nullptr && !b->stream_uses->empty());
    if (b->state == block_state::unmapped || (waits && !can_wait)) return false;
  }
  return true;
}

block* stream_pool::allocate_at(char* ptr, size_t size, size_t requested, block_tag tag) {
  block* b = block_at(ptr);
  if (b == nullptr || b->state != block_state::free || ptr + size > b->ptr + b->size) return nullptr;
  keep_spares(2);  // may throw: before any change
  erase_free(b);
  if (ptr > b->ptr) {
    block* at = split_off(b, static_cast<size_t>(ptr - b->ptr));
    insert_free(b);
    b = at;
  }
  if (b->size > size) insert_free(split_off(b, size));
  hand_out(b, requested, tag);
  return b;
}

status stream_pool::free(block* b) {
  const pool_kind kind = b->seg->kind;
  if (b->stream_uses != nullptr && !b->stream_uses->empty()) {
    if (status s = reuse_.defer_free(b); s != status::ok) return s;
    b->state = block_state::pending_free;
  }
  stats_.decrease(stat_kind::allocation, kind, 1);
  stats_.decrease(stat_kind::allocated_bytes, kind, static_cast<int64_t>(b->size));
  stats_.decrease(stat_kind::requested_bytes, kind, static_cast<int64_t>(b->requested));
  if (b->state == block_state::allocated) release_to_free_list(b, /*stream_alive=*/true);
  return status::ok;
}

void stream_pool::process_pending(bool wait, bool stream_alive) {
  if (!reuse_.has_pending()) return;
  std::vector<block*> ready;
  reuse_.collect_ready(&ready, wait, stream_alive);
  for (block* b : ready) release_to_free_list(b, stream_alive);
}

void stream_pool::forget_device_work() {
  std::vector<block*> ready;
  reuse_.forget_device_work(&ready);
  for (block* b : ready) release_to_free_list(b, /*stream_alive=*/false);
  for (segment* s = segments_; s != nullptr; s = s->pool_next)
    for (block* b = s->first; b != nullptr; b = b->next) {
      delete b->stream_uses;
      b->stream_uses = nullptr;
    }
}

// The end of a block's life as active memory: merge with free neighbours, back to the free list.
void stream_pool::release_to_free_list(block* b, bool stream_alive) {
  const pool_kind kind = b->seg->kind;
  stats_.decrease(stat_kind::active, kind, 1);
  stats_.decrease(stat_kind::active_bytes, kind, static_cast<int64_t>(b->size));
  b->free_seq = reuse_.on_free(stream_alive);
  delete b->stream_uses;
  b->stream_uses = nullptr;
  merge_into_free_list(b);
}

// Joins `b` (on no list) with its free neighbours and lists the result, attributed to b's site and
// request: the memory last in use.
void stream_pool::merge_into_free_list(block* b) {
  const uint32_t site = b->site;
  const size_t requested = b->requested;
  if (block* p = b->prev; p != nullptr && p->state == block_state::free) {
    erase_free(p);
    absorb(p, b);
    b = p;
  }
  if (block* n = b->next; n != nullptr && n->state == block_state::free) {
    erase_free(n);
    absorb(b, n);
  }
  b->site = site;
  b->requested = requested;
  insert_free(b);
}

// Joins `right` into its left neighbour. Neither is on a free list.
void stream_pool::absorb(block* left, block* right) {
  left->size += right->size;
  left->next = right->next;
  if (right->next != nullptr) right->next->prev = left;
  left->free_seq = std::max(left->free_seq, right->free_seq);
  recycle(right);
}

// A segment travels with its one whole-segment block (segment::first), so adopting it allocates
// nothing and cannot fail halfway.
void stream_pool::adopt(segment* s) {
  s->first->free_seq = 0;  // idle on the device, so safe for every stream
  s->first->site = s->site;
  readopt(s);
}

void stream_pool::readopt(segment* s) {
  s->owner = this;
  link(s);
  insert_free(s->first);
}

// Takes whole free segment `s` out of this pool, its block with it (not on any free list).
void stream_pool::disown(segment* s) {
  erase_free(s->first);
  unlink(s);
}

segment* stream_pool::disown_safe_segment(size_t rounded, pool_kind kind) {
  reuse_.poll();
  segment* best = nullptr;
  for (segment* s = segments_; s != nullptr; s = s->pool_next) {
    const block* b = s->first;
    if (s->growable() || s->kind != kind || s->size < rounded || b->state != block_state::free || !b->is_whole_segment()) continue;
    if (!reuse_.safe_for_other_streams(*b)) continue;
    if (best == nullptr || s->size < best->size) best = s;
  }
  if (best != nullptr) disown(best);
  return best;
}

void stream_pool::disown_free_segments(std::vector<segment*>* out) {
  auto whole_free = [](const segment* s) {
    return !s->growable() && s->first->state == block_state::free && s->first->is_whole_segment();
  };
  size_t n = 0;
  for (segment* s = segments_; s != nullptr; s = s->pool_next) n += whole_free(s);
  out->reserve(out->size() + n);  // may throw: before anything changes
  for (segment* s = segments_; s != nullptr;) {
    segment* next = s->pool_next;
    if (whole_free(s)) {
      disown(s);
      out->push_back(s);
    }
    s = next;
  }
}

void stream_pool::record_stream(block* b, backend::stream_handle used_on) {
  if (used_on == stream_) return;
  if (b->stream_uses == nullptr) b->stream_uses = new std::vector<backend::stream_handle>();
  for (auto s : *b->stream_uses)
    if (s == used_on) return;
  b->stream_uses->push_back(used_on);
}

// A report's segment is a stretch of mapped memory: a classic segment, or one mapped run of a growable
// one (as PyTorch's snapshots show expandable segments).
void stream_pool::collect(std::vector<block_record>* out) const {
  for (const segment* s = segments_; s != nullptr; s = s->pool_next) {
    const block* run = nullptr;
    size_t run_size = 0;
    for (const block* b = s->first; b != nullptr; b = b->next) {
      if (b->state == block_state::unmapped) continue;
      if (b->prev == nullptr || b->prev->state == block_state::unmapped) {
        run = b;
        run_size = 0;
        for (const block* r = b; r != nullptr && r->state != block_state::unmapped; r = r->next) run_size += r->size;
      }
      const bool live = b->state == block_state::allocated, pending = b->state == block_state::pending_free;
      const bool active = live || pending;
      out->push_back(block_record{b->site, b->birth, b->size, active ? b->requested : 0, live, b->counted_split, pending,
                                  s->kind, reinterpret_cast<uintptr_t>(b->ptr), reinterpret_cast<uintptr_t>(run->ptr),
                                  run_size, reinterpret_cast<uintptr_t>(stream_), pool_, s->growable(),
                                  active ? 0 : b->requested});
    }
  }
}

// ---- Growable segments --------------------------------------------------------------------------

void stream_pool::adopt_growable(segment* s) {
  s->owner = this;
  link(s);
  growable_[static_cast<int>(s->kind)] = s;
}

void stream_pool::disown_growable(segment* s) {
  unlink(s);
  growable_[static_cast<int>(s->kind)] = nullptr;
}

// Splits `b` at `at` bytes; the new right part, in b's state and with its history, is returned.
block* stream_pool::split_off(block* b, size_t at) {
  block* r = new_block();
  r->ptr = b->ptr + at;
  r->size = b->size - at;
  r->seg = b->seg;
  r->prev = b;
  r->next = b->next;
  r->state = b->state;
  r->free_seq = b->free_seq;
  r->site = b->site;
  if (b->next != nullptr) b->next->prev = r;
  b->next = r;
  b->size = at;
  return r;
}

block* stream_pool::merge_unmapped(block* u) {
  if (block* p = u->prev; p != nullptr && p->state == block_state::unmapped) {
    absorb(p, u);
    u = p;
  }
  if (block* n = u->next; n != nullptr && n->state == block_state::unmapped) absorb(u, n);
  return u;
}

// A walk over the segment's blocks: it runs only when no cached block fits, before a map that costs
// tens of microseconds.
block* stream_pool::growth_room(const segment* s, size_t rounded, size_t page, size_t* bytes, size_t* least) const {
  block* best = nullptr;
  for (block* u = s->first; u != nullptr; u = u->next) {
    if (u->state != block_state::unmapped) continue;
    const size_t have = u->prev != nullptr && u->prev->state == block_state::free ? u->prev->size : 0;
    const size_t at = static_cast<size_t>(u->ptr - s->ptr), want = have >= rounded ? 1 : rounded - have;
    const size_t need = s->boundary_up(at + want) - at;
    if (need > u->size || (best != nullptr && need >= *bytes)) continue;
    best = u;
    *bytes = need;
    *least = (want + page - 1) / page * page;
  }
  return best;
}

void stream_pool::mapped(block* u, size_t bytes, uint32_t site) {
  if (bytes < u->size) split_off(u, bytes);  // the rest stays unmapped
  u->free_seq = 0;                            // new memory: idle on the device
  u->site = site;
  u->seg->mapped += bytes;
  merge_into_free_list(u);
}

void stream_pool::unmappable(const segment* s, std::vector<free_pieces>* out) const {
  for (block* b = s->first; b != nullptr; b = b->next) {
    if (b->state != block_state::free) continue;
    const size_t at = static_cast<size_t>(b->ptr - s->ptr);
    const size_t begin = s->boundary_up(at), end = s->boundary_down(at + b->size);
    if (end > begin) out->push_back(free_pieces{b, s->ptr + begin, end - begin, reuse_.safe_for_other_streams(*b)});
  }
}

void stream_pool::unmapped(const free_pieces& p, size_t bytes) {
  block* b = p.b;
  erase_free(b);
  const size_t from = static_cast<size_t>(p.begin - b->ptr), to = from + bytes;
  block* tail = to < b->size ? split_off(b, to) : nullptr;
  block* middle = from > 0 ? split_off(b, from) : b;
  middle->state = block_state::unmapped;
  middle->free_seq = 0;
  middle->site = 0;
  b->seg->mapped -= bytes;
  if (middle != b) insert_free(b);
  if (tail != nullptr) insert_free(tail);
  const block* gap = merge_unmapped(middle);
  // Splits of stretches now wholly unmapped go (erase allocates nothing): they map as one piece again.
  segment* s = gap->seg;
  const size_t gap_from = static_cast<size_t>(gap->ptr - s->ptr), gap_to = gap_from + gap->size;
  s->splits.erase(std::remove_if(s->splits.begin(), s->splits.end(),
                                 [&](size_t x) {
                                   const size_t stretch = x / s->piece * s->piece;
                                   return stretch >= gap_from && stretch + s->piece <= gap_to;
                                 }),
                  s->splits.end());
}

void stream_pool::link(segment* s) {
  s->pool_prev = nullptr;
  s->pool_next = segments_;
  if (segments_ != nullptr) segments_->pool_prev = s;
  segments_ = s;
}

void stream_pool::unlink(segment* s) {
  if (s->pool_prev != nullptr) s->pool_prev->pool_next = s->pool_next;
  else segments_ = s->pool_next;
  if (s->pool_next != nullptr) s->pool_next->pool_prev = s->pool_prev;
  s->pool_prev = s->pool_next = nullptr;
}

// ---- validate -----------------------------------------------------------------------------------

// One block's place among its neighbours and lists.
status stream_pool::validate_block(const segment* s, const block* b) const {
  if (b->next != nullptr && b->next->prev != b)
    return fail(status::internal, "validate: block %p has a broken neighbour link", b->ptr);
  const bool is_free = b->state == block_state::free, unmapped = b->state == block_state::unmapped;
  if ((is_free || unmapped) && b->next != nullptr && b->next->state == b->state)
    return fail(status::internal, "validate: %s blocks %p and %p were not merged", unmapped ? "unmapped" : "free",
                b->ptr, b->next->ptr);
  const bool listed = s->kind == pool_kind::small ? small_.contains(b) : large_.contains(b);
  if (is_free != listed || b->counted_split != (is_free && !b->is_whole_segment() && !s->growable()))
    return fail(status::internal, "validate: block %p free-list membership disagrees with its state", b->ptr);
  const size_t at = static_cast<size_t>(b->ptr - s->ptr);
  if (unmapped && (!s->growable() || !s->on_boundary(at) || !s->on_boundary(at + b->size)))
    return fail(status::internal, "validate: unmapped block %p of segment %p is not whole pieces of a growable segment",
                b->ptr, s->ptr);
  return status::ok;
}

// Splits ascend, lie strictly inside a `piece` stretch, and only in a stretch with memory behind it.
status stream_pool::validate_splits(const segment* s) const {
  for (size_t i = 0; i < s->splits.size(); ++i) {
    const size_t x = s->splits[i], stretch = x / s->piece * s->piece;
    bool mapped = false;
    for (const block* b = s->first; b != nullptr; b = b->next) {
      const size_t at = static_cast<size_t>(b->ptr - s->ptr);
      mapped |= b->state != block_state::unmapped && at < stretch + s->piece && at + b->size > stretch;
    }
    if (x % s->piece == 0 || x % min_block_size != 0 || (i > 0 && s->splits[i - 1] >= x) || !mapped)
      return fail(status::internal, "validate: split %zu of segment %p is misplaced, or its stretch has no memory", x,
                  s->ptr);
  }
  return status::ok;
}

status stream_pool::validate_segment(const segment* s, stat_table* seen) const {
  const char* where = s->kind == pool_kind::small ? "small" : "large";
  if (s->owner != this || s->first == nullptr || s->first->ptr != s->ptr || s->first->prev != nullptr)
    return fail(status::internal, "validate: %s segment %p has a bad owner or first block", where, s->ptr);
  if (s->growable() != (growable_[static_cast<int>(s->kind)] == s))
    return fail(status::internal, "validate: %s segment %p is growable but not its pool's, or the other way", where,
                s->ptr);
  size_t total = 0, mapped = 0;
  for (const block* b = s->first; b != nullptr; b = b->next) {
    if (b->seg != s || b->size == 0 || b->size % min_block_size != 0 || b->ptr != s->ptr + total)
      return fail(status::internal, "validate: block %p in segment %p is misplaced or misaligned", b->ptr, s->ptr);
    if (status st = validate_block(s, b); st != status::ok) return st;
    const bool is_free = b->state == block_state::free;
    const auto bytes = static_cast<int64_t>(b->size);
    if (is_free && b->counted_split) {
      seen->increase(stat_kind::inactive_split, s->kind, 1);
      seen->increase(stat_kind::inactive_split_bytes, s->kind, bytes);
    }
    if (b->state != block_state::unmapped) mapped += b->size;
    if (b->state == block_state::allocated || b->state == block_state::pending_free) {
      seen->increase(stat_kind::active, s->kind, 1);
      seen->increase(stat_kind::active_bytes, s->kind, bytes);
    }
    if (b->state == block_state::allocated) {
      seen->increase(stat_kind::allocation, s->kind, 1);
      seen->increase(stat_kind::allocated_bytes, s->kind, bytes);
      seen->increase(stat_kind::requested_bytes, s->kind, static_cast<int64_t>(b->requested));
    }
    total += b->size;
  }
  if (total != s->size || mapped != s->mapped)
    return fail(status::internal, "validate: blocks of segment %p add up to %zu bytes, %zu mapped, not %zu and %zu",
                s->ptr, total, mapped, s->size, s->mapped);
  return s->growable() ? validate_splits(s) : status::ok;
}

status stream_pool::validate() const {
  stat_table seen;
  size_t free_blocks = 0;
  for (const segment* s = segments_; s != nullptr; s = s->pool_next) {
    if (status st = validate_segment(s, &seen); st != status::ok) return st;
    for (const block* b = s->first; b != nullptr; b = b->next) free_blocks += b->state == block_state::free;
  }
  if (free_blocks != small_.size() + large_.size())
    return fail(status::internal, "validate: %zu free blocks but %zu listed", free_blocks, small_.size() + large_.size());
  static const char* const names[] = {"allocation",     "segment",      "active",
                                      "inactive_split", "allocated_bytes", "reserved_bytes",
                                      "active_bytes",   "inactive_split_bytes", "requested_bytes"};
  for (int k = 0; k < stat_kind_count; ++k) {
    if (k == static_cast<int>(stat_kind::segment) || k == static_cast<int>(stat_kind::reserved_bytes)) continue;
    for (int p = 0; p <= pool_kind_count; ++p) {
      const auto kind = static_cast<stat_kind>(k);
      const int64_t want = seen.at(kind, p).current, have = stats_.at(kind, p).current;
      if (want != have)
        return fail(status::internal, "validate: stat %s[%d] is %" PRId64 " but the blocks say %" PRId64, names[k], p,
                    have, want);
    }
  }
  return status::ok;
}

}  // namespace tracepool::core
