#include "private_pool.h"

#include <new>
#include <thread>

namespace tracepool::core {

void capture_gate::route_opened() {
  open_routes_.fetch_add(1, std::memory_order_seq_cst);
  // A pass that saw the gate open may still be at work: wait for it (device work is short; an
  // empty_cache with many segments is the longest).
  while (in_flight_.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
}

route_table::~route_table() {
  for (const route& r : routes_)
    if (r.release != nullptr) r.release(r.context);
}

status route_table::open(const route& r) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const route& o : routes_)
      if (o.device == r.device && o.pool == r.pool)
        return fail(status::invalid_argument,
                    "begin_pool: pool %llu on device %d has a route open already (end it first; PyTorch's "
                    "allocator refuses this too)",
                    static_cast<unsigned long long>(r.pool), r.device);
    try {
      routes_.push_back(r);
    } catch (const std::bad_alloc&) {
      return fail(status::internal, "begin_pool: host memory exhausted");
    }
  }
  gate_.route_opened();  // outside the lock: passes in flight never need it
  return status::ok;
}

size_t route_table::close(int device, uint64_t pool) {
  std::vector<route> closed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = 0; i < routes_.size();) {
      if (routes_[i].device == device && routes_[i].pool == pool) {
        closed.push_back(routes_[i]);
        routes_.erase(routes_.begin() + static_cast<std::ptrdiff_t>(i));
        gate_.route_closed();
      } else {
        ++i;
      }
    }
  }
  // No allocation can be evaluating these filters now: they ran under the lock just released.
  for (const route& r : closed)
    if (r.release != nullptr) r.release(r.context);
  return closed.size();
}

uint64_t route_table::pool_for(int device, void* stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = routes_.rbegin(); it != routes_.rend(); ++it) {
    if (it->device != device) continue;
    const bool taken = it->filter != nullptr ? it->filter(it->context, stream) != 0 : it->context == stream;
    if (taken) return it->pool;
  }
  return 0;
}

}  // namespace tracepool::core
