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
  if (!p->markers.empty()) {  // its events say it now, not the graph
    std::vector<backend::graph_node>().swap(p->markers);
    --marked_;
  }
  return status::ok;
}

status stream_reuse::defer_free(block* b) {
  pending_block p{b, {}, true, 0, {}};
  if (const capture_gate::pass open(gate_); open) {
    if (status s = record_uses(&p); s != status::ok) return s;
  } else if (gate_.reuses_in_capture()) {
    mark_last_uses(&p);
  }
  pending_.push_back(std::move(p));
  if (!pending_.back().markers.empty()) ++marked_;
  return status::ok;
}

// The frontier of the pool's stream and of each stream the block was used on, all in one capture
// (Note [Reuse inside a capture]); no markers where that cannot be said.
void stream_reuse::mark_last_uses(pending_block* p) {
  std::vector<backend::graph_node> frontier;
  bool first = true;
  auto add = [&](backend::stream_handle s) {
    bool capturing = false;
    uint64_t capture = 0;
    if (backend_.capture_frontier(device_, s, &capturing, &capture, &frontier) != status::ok || !capturing) return false;
    if (first) p->capture = capture;
    first = false;
    if (capture != p->capture) return false;
    p->markers.insert(p->markers.end(), frontier.begin(), frontier.end());
    return true;
  };
  try {
    bool marked = add(stream_);
    for (size_t i = 0; marked && i < p->b->stream_uses->size(); ++i) marked = add((*p->b->stream_uses)[i]);
    if (marked && !p->markers.empty()) return;
  } catch (const std::bad_alloc&) {
  }
  p->markers.clear();  // waits for the capture's end
  p->capture = 0;
}

void stream_reuse::forget_device_work(std::vector<block*>* ready) {
  for (pending_block& p : pending_) ready->push_back(p.b);
  pending_.clear();
  marked_ = 0;
  fence_event_ = nullptr;
  safe_seq_ = free_seq_;
}

void stream_reuse::collect_ready(std::vector<block*>* ready, bool wait, bool stream_alive) {
  const capture_gate::pass open(gate_);
  if (!open) {
    if (stream_alive) collect_safe_in_capture(ready);
    return;
  }
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

// Pending blocks of this capture whose markers all precede this stream's frontier. Costs nothing while
// no pending block has markers (the option off, or none freed in a capture).
void stream_reuse::collect_safe_in_capture(std::vector<block*>* ready) {
  if (marked_ == 0 || !gate_.reuses_in_capture()) return;
  bool capturing = false;
  uint64_t capture = 0;
  std::vector<backend::graph_node> frontier;
  try {
    if (backend_.capture_frontier(device_, stream_, &capturing, &capture, &frontier) != status::ok || !capturing) return;
    if (capture != visited_capture_) {
      forget_graph();
      visited_capture_ = capture;
    }
    // A read that failed once (an edge the CUDA 12.0 entry point cannot describe fails every time)
    // is not tried again in this capture: the blocks wait for its end.
    if (walk_failed_ || !walk_ancestors(frontier)) return;
    ready->reserve(ready->size() + marked_);
  } catch (const std::bad_alloc&) {
    forget_graph();
    return;
  }
  size_t kept = 0;
  for (size_t i = 0; i < pending_.size(); ++i) {
    pending_block& p = pending_[i];
    bool safe = !p.markers.empty() && p.capture == capture;
    for (size_t m = 0; safe && m < p.markers.size(); ++m) safe = visited_.count(p.markers[m]) != 0;
    if (safe) {
      ready->push_back(p.b);  // reserved: cannot throw
      --marked_;
    } else {
      if (kept != i) pending_[kept] = std::move(p);
      ++kept;
    }
  }
  pending_.resize(kept);
}

// Adds every ancestor of `from` (and `from`) to visited_, stopping at nodes walked before: they are
// there with all their ancestors. On failure visited_ is dropped, so that it stays closed.
bool stream_reuse::walk_ancestors(const std::vector<backend::graph_node>& from) {
  const uint64_t capture_of_walk = visited_capture_;
  std::vector<backend::graph_node> todo(from), parents;
  while (!todo.empty()) {
    backend::graph_node n = todo.back();
    todo.pop_back();
    if (!visited_.insert(n).second) continue;
    if (backend_.node_dependencies(device_, n, &parents) != status::ok) {
      forget_graph();
      visited_capture_ = capture_of_walk;
      walk_failed_ = true;
      return false;
    }
    todo.insert(todo.end(), parents.begin(), parents.end());
  }
  return true;
}

}  // namespace tracepool::core
