// observed.cpp: the table of observed memory (observed.h, Note [Observed memory]).
#include "observed.h"

#include <algorithm>

#include "trace/tags.h"

namespace tracepool::core {

namespace {

constexpr size_t max_source_bytes = 32;

}  // namespace

std::string observed_tag(observed_kind kind, const char* source) {
  return std::string(kind == observed_kind::host ? "pinned host: " : "outside the pool: ") + source;
}

status check_source(const char* what, const char* source) {
  return check_name(what, "source", source, max_source_bytes);
}

status observed_memory::add(const observed_block& b) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto [it, added] = blocks_.emplace(b.address, b);
  if (!added)
    return fail(status::invalid_argument,
                "tracepool_observe_alloc: %p is observed already (%zu bytes on device %d); observe its free first",
                reinterpret_cast<void*>(b.address), it->second.size, it->second.device);
  return status::ok;
}

status observed_memory::take(uintptr_t address, observed_block* out) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = blocks_.find(address);
  if (it == blocks_.end())
    return fail(status::invalid_argument, "tracepool_observe_free: %p was never observed (or its free was told already)",
                reinterpret_cast<void*>(address));
  *out = it->second;
  blocks_.erase(it);
  return status::ok;
}

std::vector<observed_block> observed_memory::blocks(int device) {
  std::vector<observed_block> out;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [address, b] : blocks_)
      if (b.device == device) out.push_back(b);
  }
  std::sort(out.begin(), out.end(),
            [](const observed_block& x, const observed_block& y) { return x.address < y.address; });
  return out;
}

}  // namespace tracepool::core
