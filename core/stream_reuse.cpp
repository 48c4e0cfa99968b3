#include "stream_reuse.h"

#include <chrono>

namespace tracepool::core {

stream_reuse::~stream_reuse() {
  if (fence_event_ != nullptr) backend_.return_event(device_, fence_event_);
  for (auto& p : pending_)
    for (auto e : p.events) backend_.return_event(device_, e);
}

status stream_reuse::poll_fence() {
  if (fence_event_ == nullptr) return status::ok;
  const capture_gate::pass open(gate_);
  if (!open) return status::ok;
  bool done = false;
  if (status s = backend_.query_event(device_, fence_event_, &done); s != status::ok) return s;
  if (done) {
    safe_seq_ = fence_seq_;
    backend_.return_event(device_, fence_event_);
    fence_event_ = nullptr;
  }
  return status::ok;
}

uint64_t stream_reuse::on_free(bool stream_alive) {
  ++free_seq_;
  if (!stream_alive) return free_seq_;
  // No fence in flight: record one now (cost: one cuEventRecord). Otherwise look at the clock only
  // every poll_every frees, and at the driver only once poll_interval has passed. The gate's pass is
  // taken only then: most frees touch nothing shared.
  if (fence_event_ == nullptr || frees_until_check_-- == 0) {
    if (const capture_gate::pass open(gate_); open) maintain_fence();
    else frees_until_check_ = poll_every;  // during a capture: look again later
  }
  return free_seq_;
}

void stream_reuse::maintain_fence() {
  frees_until_check_ = poll_every;
  if (fence_event_ != nullptr) {
    const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count();
    if (now - last_poll_ns_ < poll_interval_ns) return;
    last_poll_ns_ = now;
    if (poll_fence() != status::ok || fence_event_ != nullptr) return;
  }
  // A failed record only means these frees stay with this stream until a later fence.
  if (backend_.record_event(device_, stream_, &fence_event_) != status::ok) {
    fence_event_ = nullptr;
    return;
  }
  fence_seq_ = free_seq_;
}

status stream_reuse::record_uses(pending_block* p) {
  p->events.reserve(p->b->stream_uses->size());
  for (backend::stream_handle used : *p->b->stream_uses) {
    backend::event_handle e = nullptr;
    if (status s = backend_.record_event(device_, used, &e); s != status::ok) {
      for (auto taken : p->events) backend_.return_event(device_, taken);
      p->events.clear();
      return s;
    }
    p->events.push_back(e);
  }
  p->deferred = false;
  return status::ok;
}

status stream_reuse::defer_free(block* b) {
  pending_block p{b, {}, true};
  if (const capture_gate::pass open(gate_); open)
    if (status s = record_uses(&p); s != status::ok) return s;
  pending_.push_back(std::move(p));
  return status::ok;
}

void stream_reuse::forget_device_work(std::vector<block*>* ready) {
  for (pending_block& p : pending_) ready->push_back(p.b);
  pending_.clear();
  fence_event_ = nullptr;
  safe_seq_ = free_seq_;
}

void stream_reuse::collect_ready(std::vector<block*>* ready, bool wait) {
  const capture_gate::pass open(gate_);
  if (!open) return;
  size_t kept = 0;
  for (size_t i = 0; i < pending_.size(); ++i) {
    pending_block& p = pending_[i];
    // Freed during a capture: its streams' events are recorded now, and waited for from here on.
    // One that cannot be recorded leaves the block pending for a later try.
    bool all_done = !p.deferred || record_uses(&p) == status::ok;
    for (auto e : p.events) {
      if (!all_done) break;
      bool done = false;
      status s = wait ? backend_.synchronize_event(device_, e) : backend_.query_event(device_, e, &done);
      if (wait) done = s == status::ok;
      all_done = all_done && done;
    }
    if (all_done) {
      for (auto e : p.events) backend_.return_event(device_, e);
      ready->push_back(p.b);
    } else {
      if (kept != i) pending_[kept] = std::move(p);
      ++kept;
    }
  }
  pending_.resize(kept);
}

}  // namespace tracepool::core
