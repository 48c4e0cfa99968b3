// history.cpp: the ring of history.h and its clock.
#include "history.h"

#include <algorithm>

#include <ctime>
#include <new>

#include "base/clock.h"

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

namespace tracepool::core {

namespace {

// An event's time, cheaply: the TSC (about 10 ns; clock_gettime costs 30 ns on a plain machine and
// over 100 ns in some virtual machines, twice per alloc+free pair), turned into CLOCK_REALTIME when
// the entries are read, by the rate seen between creation and then (what PyTorch's history does too).
uint64_t ticks() {
#if defined(__x86_64__) || defined(__i386__)
  return __rdtsc();
#else
  return monotonic_ns();
#endif
}

// An event's entry, with the call site the history keeps for it (history::set_sites); record() labels it.
history_entry block_entry(history_action action, const block_event& e, uint32_t site) {
  return history_entry{0,
                       reinterpret_cast<uintptr_t>(e.ptr),
                       e.size,
                       e.requested,
                       reinterpret_cast<uintptr_t>(e.stream),
                       site,
                       history_labels::none,
                       static_cast<uint8_t>(e.device),
                       action};
}

history_entry segment_entry(history_action action, const segment_event& e, uint32_t site) {
  return history_entry{0,    reinterpret_cast<uintptr_t>(e.ptr), e.size, 0, reinterpret_cast<uintptr_t>(e.stream),
                       site, history_labels::none, static_cast<uint8_t>(e.device), action};
}

constexpr int most_devices = UINT8_MAX + 1;  // history_entry::device

}  // namespace

history::history(size_t capacity, std::unique_ptr<history_entry[]> ring)
    : capacity_(capacity),
      start_ticks_(ticks()),
      start_monotonic_ns_(monotonic_ns()),
      start_ns_(realtime_ns()),
      ring_(std::move(ring)) {}

status history::create(size_t capacity, std::unique_ptr<history>* out) {
  // Default-initialised: the pages are touched as the ring fills, so a large N costs only what is used.
  std::unique_ptr<history_entry[]> ring(new (std::nothrow) history_entry[capacity]);
  if (ring == nullptr)
    return fail(status::bad_config, "history:%zu: no room for that many entries (%zu bytes)", capacity,
                capacity * sizeof(history_entry));
  out->reset(new history(capacity, std::move(ring)));
  return status::ok;
}

status history::resize(size_t capacity) {
  std::unique_ptr<history_entry[]> ring(new (std::nothrow) history_entry[capacity]);  // outside the lock
  if (ring == nullptr)
    return fail(status::invalid_argument, "history of %zu entries: no room for it (%zu bytes)", capacity,
                capacity * sizeof(history_entry));
  lock_.lock();
  const uint64_t n = recorded_;
  const uint64_t first = n - std::min<uint64_t>({n, capacity_, capacity});  // the newest that fit
  for (uint64_t i = first; i < n; ++i) ring[i - first] = ring_[i % capacity_];
  ring_.swap(ring);
  capacity_ = capacity;
  recorded_ = n - first;
  next_ = static_cast<size_t>(recorded_ % capacity);
  lock_.unlock();
  return status::ok;  // the old ring is freed here, outside the lock
}

void history::clear() {
  lock_.lock();
  recorded_ = 0;
  next_ = 0;
  lock_.unlock();
}

size_t history::capacity() const {
  lock_.lock();
  const size_t c = capacity_;
  lock_.unlock();
  return c;
}

void history::record(int device, history_entry e) {
  if (!recording() || device >= most_devices) return;
  if (const history_labels* l = labels()) e.label = l->current(device);
  lock_.lock();
  e.time_ns = ticks();  // under the lock: times ascend in ring order
  ring_[next_] = e;
  if (++next_ == capacity_) next_ = 0;
  ++recorded_;
  lock_.unlock();
}

uint32_t history::free_site(uint32_t allocation_site, uint32_t freeing_site) const {
  switch (free_sites_.load(std::memory_order_relaxed)) {
    case free_sites::allocation: return allocation_site;
    case free_sites::none: return 0;
    case free_sites::freeing: return freeing_site;
  }
  return 0;
}

void history::on_alloc(const block_event& e) {
  record(e.device, block_entry(history_action::alloc, e, alloc_site(e.site)));
}
void history::on_free(const block_event& e) {
  record(e.device, block_entry(history_action::free, e, free_site(e.site, e.freed_at)));
}
void history::on_segment_alloc(const segment_event& e) {
  record(e.device, segment_entry(history_action::segment_alloc, e, alloc_site(e.site)));
}
void history::on_segment_free(const segment_event& e) {
  record(e.device, segment_entry(history_action::segment_free, e, free_site(e.site, e.freed_at)));
}

void history::on_oom(const oom_event& e) {
  record(e.device, history_entry{0, e.device_free, e.requested, e.requested, reinterpret_cast<uintptr_t>(e.stream),
                                 alloc_site(e.site), history_labels::none, static_cast<uint8_t>(e.device),
                                 history_action::oom});
}

std::vector<history_entry> history::entries(uint64_t* recorded, size_t most) const {
  lock_.lock();
  const uint64_t before = recorded_;
  const size_t capacity_before = capacity_;
  lock_.unlock();
  std::vector<history_entry> out;
  out.reserve(static_cast<size_t>(std::min<uint64_t>({before, capacity_before, most})));  // nothing under the lock allocates
  lock_.lock();
  const uint64_t n = recorded_;
  uint64_t first = n > capacity_ ? n - capacity_ : 0;
  const uint64_t room = std::min<uint64_t>(out.capacity(), most);
  if (n - first > room) first = n - room;  // recorded meanwhile, or more than asked: the newest that fit
  for (uint64_t i = first; i < n; ++i) out.push_back(ring_[i % capacity_]);
  lock_.unlock();
  // Ticks to CLOCK_REALTIME, at the rate seen since creation (1 ns a tick where the clock is in ns).
  const uint64_t now_ticks = ticks(), now_ns = realtime_ns();
  const double ns_per_tick =
      now_ticks > start_ticks_ && now_ns > start_ns_
          ? static_cast<double>(now_ns - start_ns_) / static_cast<double>(now_ticks - start_ticks_)
          : 1.0;
  for (history_entry& e : out) {
    const double since = static_cast<double>(static_cast<int64_t>(e.time_ns - start_ticks_)) * ns_per_tick;
    e.time_ns = start_ns_ + static_cast<uint64_t>(since > 0 ? since : 0);
  }
  if (recorded != nullptr) *recorded = n;
  return out;
}

}  // namespace tracepool::core
