#include "private_pool.h"

namespace tracepool::core {

route_table::~route_table() {
  for (const route& r : routes_)
    if (r.release != nullptr) r.release(r.context);
}

status route_table::open(const route& r) {
  std::lock_guard<std::mutex> lock(mutex_);
  routes_.push_back(r);  // may throw: the caller's guard turns that into status::internal
  gate_.route_opened();
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
