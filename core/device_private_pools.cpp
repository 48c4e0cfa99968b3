// device_private_pools.cpp: device_cache's private pools (Note [Private pools] in private_pool.h): their
// uses, their options (no_split, use_on_oom), the allocator their segments may come from, their
// checkpoints (Note [Pool checkpoints]) and what reports learn of them. stream_pool keeps their blocks.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "device_cache.h"

namespace tracepool::core {

status device_cache::retain_pool(uint64_t pool, uint32_t site) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto [it, created] = private_.try_emplace(pool);
  if (created) it->second.site = site;
  ++it->second.uses;
  return status::ok;
}

status device_cache::release_pool(uint64_t pool) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = private_.find(pool);
    if (it == private_.end())
      return fail(status::invalid_argument, "release_pool: device %d has no private pool %llu (released already?)",
                  device_, static_cast<unsigned long long>(pool));
    if (--it->second.uses > 0) return status::ok;
    private_.erase(it);  // retired
  }
  return empty_pool(pool);
}

int device_cache::pool_use_count(uint64_t pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = private_.find(pool);
  return it == private_.end() ? 0 : it->second.uses;
}

bool device_cache::pool_exists(uint64_t pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  return private_.count(pool) != 0;
}

bool device_cache::retired(const stream_pool* pool) {
  if (pool->pool() == 0) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  return private_.count(pool->pool()) == 0;
}

// PyTorch's emptyCache(mempool_id): nothing while the pool is retained (a graph may still replay
// into it, whoever else dropped their use); a retired pool's free memory goes back.
status device_cache::empty_pool(uint64_t pool, uint32_t released_by) {
  if (pool_exists(pool)) return status::ok;
  const capture_gate::pass open(gate_);
  if (!open) return status::ok;  // Note [Capture]: the next empty_cache gives it back
  status result = status::ok;
  for (stream_pool* p : pools_snapshot())
    if (p->pool() == pool)
      if (status s = release_free_segments(p, /*wait=*/false, released_by); s != status::ok && result == status::ok)
        result = s;
  return result;
}

void device_cache::pool_blocks(uint64_t pool, std::vector<void*>* out) {
  for (stream_pool* p : pools_snapshot()) {
    if (p->pool() != pool) continue;
    std::vector<block_record> records;
    {
      std::lock_guard<std::mutex> lock(p->mutex());
      p->collect(&records);
    }
    for (const block_record& r : records)
      if (r.live) out->push_back(reinterpret_cast<void*>(r.address));
  }
}

status device_cache::no_pool(const char* what, uint64_t pool) const {
  return fail(status::invalid_argument, "%s: device %d has no private pool %llu (released, or never retained)", what,
              device_, static_cast<unsigned long long>(pool));
}

status device_cache::checkpoint(uint64_t pool, std::vector<pool_checkpoint::held>* out) {
  if (!pool_exists(pool)) return no_pool("checkpoint_pool", pool);
  std::vector<block_record> records;
  for (stream_pool* p : pools_snapshot()) {
    if (p->pool() != pool) continue;
    std::lock_guard<std::mutex> lock(p->mutex());
    p->collect(&records);
  }
  for (const block_record& r : records)
    if (r.live)
      out->push_back(pool_checkpoint::held{reinterpret_cast<char*>(r.address), r.size, r.requested,
                                           reinterpret_cast<backend::stream_handle>(r.stream), r.site, r.birth});
  std::sort(out->begin(), out->end(), [](const auto& a, const auto& b) { return a.ptr < b.ptr; });
  return status::ok;
}

stream_pool* device_cache::existing_pool(backend::stream_handle stream, uint64_t pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  return find_pool(stream, pool);
}

status device_cache::check_restorable(const pool_checkpoint& cp, bool can_wait) {
  if (!pool_exists(cp.pool)) return no_pool("restore_pool", cp.pool);
  for (const pool_checkpoint::held& h : cp.blocks) {
    stream_pool* p = existing_pool(h.stream, cp.pool);
    bool ok = false;
    if (p != nullptr) {
      std::lock_guard<std::mutex> lock(p->mutex());
      ok = p->restorable(h.ptr, h.size, can_wait);
    }
    if (!ok)
      return fail(status::invalid_argument,
                  "restore_pool: the checkpoint's block at %p (%zu bytes, stream %p) is no longer in private pool "
                  "%llu on device %d with memory behind it%s; nothing was changed",
                  static_cast<void*>(h.ptr), h.size, h.stream, static_cast<unsigned long long>(cp.pool), device_,
                  can_wait ? "" : ", or waits for record_stream work while a capture runs");
  }
  return status::ok;
}

void device_cache::finish_pending(uint64_t pool, bool wait) {
  for (stream_pool* p : pools_snapshot()) {
    if (p->pool() != pool) continue;
    std::lock_guard<std::mutex> lock(p->mutex());
    p->process_pending(wait, /*stream_alive=*/false);
  }
}

status device_cache::restore_block(uint64_t pool, const pool_checkpoint::held& h, block** out) {
  *out = nullptr;
  if (stream_pool* p = existing_pool(h.stream, pool)) {
    std::lock_guard<std::mutex> lock(p->mutex());
    *out = p->allocate_at(h.ptr, h.size, h.requested, block_tag{h.site, h.birth});
    if (*out != nullptr && validate_)
      if (status s = check(p, "restoring a checkpoint"); s != status::ok) {
        (void)p->free(*out);  // nothing handed out, nothing lost
        *out = nullptr;
        return s;
      }
  }
  if (*out != nullptr) return status::ok;
  return fail(status::internal, "restore_pool: the memory of the checkpoint's block at %p (%zu bytes) is not free "
              "after the pool's blocks were freed (a bug in tracepool)", static_cast<void*>(h.ptr), h.size);
}

status device_cache::set_pool_options(uint64_t pool, bool no_split, bool use_on_oom) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = private_.find(pool);
  if (it == private_.end())
    return no_pool("pool options", pool);
  it->second.no_split = no_split;
  it->second.use_on_oom = use_on_oom;
  for (auto& p : pools_)
    if (p->pool() == pool) p->set_no_split(no_split);
  return status::ok;
}

status device_cache::pool_options(uint64_t pool, bool* no_split, bool* use_on_oom) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = private_.find(pool);
  if (it == private_.end())
    return no_pool("pool options", pool);
  *no_split = it->second.no_split;
  *use_on_oom = it->second.use_on_oom;
  return status::ok;
}

status device_cache::set_pool_source(uint64_t pool, std::shared_ptr<const segment_source> source) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = private_.find(pool);
  if (it == private_.end())
    return no_pool("pool allocator", pool);
  for (const auto& [start, seg] : segments_)
    if (seg->owner != nullptr && seg->owner->pool() == pool)
      return fail(status::invalid_argument, "pool allocator: private pool %llu on device %d has memory already; "
                  "its allocator is set before its first allocation", static_cast<unsigned long long>(pool), device_);
  it->second.source = std::move(source);
  return status::ok;
}

std::shared_ptr<const segment_source> device_cache::source_of(const stream_pool* pool) {
  if (pool->pool() == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = private_.find(pool->pool());
  return it == private_.end() ? nullptr : it->second.source;
}

// A segment's memory back where it came from: the backend, or the pool's allocator (which cannot say no).
status device_cache::give_back(const segment* seg, void* ptr, size_t bytes, backend::stream_handle stream) {
  if (seg == nullptr || seg->source == nullptr) return backend_.release(device_, ptr, bytes);
  seg->source->free(seg->source->context, ptr, bytes, device_, stream);
  return status::ok;
}

// PyTorch's try_mempool_fallback: a free block of a use_on_oom pool, on the same stream.
bool device_cache::borrow_on_oom(backend::stream_handle stream, size_t rounded, size_t size, block_tag tag,
                                 block** out) {
  std::vector<uint64_t> lenders;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [id, p] : private_)
      if (p.use_on_oom) lenders.push_back(id);
  }
  const pool_kind kind = pool_kind_for(rounded);
  for (uint64_t id : lenders) {
    stream_pool* p = existing_pool(stream, id);
    if (p == nullptr) continue;
    std::lock_guard<std::mutex> lock(p->mutex());
    p->process_pending(/*wait=*/false, /*stream_alive=*/true);
    if (block* b = p->find_free(rounded, kind)) {
      *out = p->allocate(b, rounded, size, tag);
      return true;
    }
  }
  return false;
}

// The label is copied by the caller, so that nothing is allocated under the device lock.
status device_cache::label_pool(uint64_t pool, std::string label) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = private_.find(pool);
  if (it == private_.end())
    return no_pool("pool_label", pool);
  it->second.label.swap(label);
  return status::ok;
}

std::vector<private_pool_info> device_cache::retained_pools() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<private_pool_info> out;
  out.reserve(private_.size());
  for (const auto& [id, p] : private_) out.push_back(private_pool_info{id, p.site, p.label});
  return out;
}

}  // namespace tracepool::core
