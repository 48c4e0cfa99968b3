// private_pool.h: private pools (a CUDA graph's memory, PyTorch's MemPool), the routes that send
// allocations to them, and the capture gate that keeps tracepool's own device work out of a stream
// capture. See Note [Private pools] and Note [Capture].
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "backend/backend.h"
#include "base/status.h"

namespace tracepool::core {

// Note [Private pools]
// Rationale: a captured CUDA graph replays with the addresses it was captured with. Memory the
// capture allocated, freed inside the capture included, must stay the graph's until the graph is
// gone: no other allocation may be handed it, and nothing may give it back to the device.
// Approach (PyTorch's, from its CUDACachingAllocator's private pools):
//   - A private pool has an id (a 64-bit key; 0 is the default pool) and a use count. retain creates
//     it or adds a use; release drops one. While a route to it is open, allocations the route's
//     filter accepts come from it, in stream pools of its own (one per stream), and grow it with
//     segments of its own. Frees of its blocks return to it, wherever they come from.
//   - Its memory is reused only by allocations routed to it (graphs sharing a pool share it on
//     purpose); its free segments never move to other streams' pools and empty_cache keeps them.
//   - When its use count reaches 0 it is retired: its whole free segments go back to the device at
//     once (no capture running) or at the next empty_cache, and so do the ones its last live blocks
//     free later. cuMemFree waits for the device, so a replay still running cannot be overrun.
//     Until then nothing gives its memory back, empty_pool (PyTorch's emptyCache(id), which
//     ~MemPool calls while a graph may still hold the pool) included. Choice: PyTorch frees a
//     freeable pool only at emptyCache or OOM; tracepool at once, which holds less memory.
//   - One route per pool and device at a time (PyTorch refuses a second beginAllocateToPool too):
//     end_pool closes it.
//   - Blocks record nothing new: their segment's stream pool knows the pool. Reports group a private
//     pool's blocks under the call site that opened its first route (the capture's line).
//   - Its segments are classic ones, even where the default pool grows growable segments. Choice:
//     PyTorch's private pools are classic under its default settings, and its tests and users read
//     their segment counts (segment.small_pool.current, MemPool.snapshot()); a retained pool never
//     gives memory back, so what growable segments save elsewhere (unmapping the free pieces of a
//     partly used segment) would not be saved here.
//   - PyTorch's MemPool options: no_split (each allocation a segment of its own, sized to it),
//     use_on_oom (the default pool may take its free blocks when the device is full), and an allocator
//     of the pool's own (segment_source in block.h) that its segments come from.

// Note [Pool checkpoints]
// Rationale: torch.compile's CUDA-graph trees record every graph of a tree into one private pool. When
// a program takes a second path (training, then evaluation; a new input shape while earlier outputs
// are kept), the new graph must be recorded as if it followed the graph it branches from: the pool
// must hold exactly the blocks that were allocated when that graph's recording ended, at the same
// addresses, whatever was allocated in the pool since. PyTorch's allocator offers getCheckpointState
// and setCheckpointPoolState for this (Note [Checkpointing PrivatePoolState] in its
// CUDACachingAllocator.cpp); tracepool offers the same.
// Approach:
//   - A checkpoint is the pool's allocated blocks: address, size, requested bytes, stream, call site.
//     Free memory needs no record: free neighbours always merge, so the allocated blocks alone fix
//     every free block of the pool's segments.
//   - Restoring first checks that every checkpointed block still lies in a segment of the pool, on its
//     stream, with memory behind it (private pools keep their segments while retained), and changes
//     nothing if one does not. Then every block the pool has allocated now is freed (its owner is told
//     to forget it: PyTorch swaps the storages' deleters), pending record_stream frees are waited for,
//     and each checkpointed block is carved out of the free memory at its address and handed out
//     again, with its old call site. The caller learns both lists: the addresses freed and the blocks
//     made (the same address may be in both).
//   - Observers hear ordinary frees and allocations, so the call-site counts, the history and reports
//     stay exact.
// Limits: not during a capture of the pool (PyTorch restores between recordings); a block whose
// record_stream work is still pending is waited for, which needs no capture running anywhere.
struct pool_checkpoint {
  struct held {
    char* ptr;
    size_t size;       // rounded, as the block had it
    size_t requested;
    backend::stream_handle stream;
    uint32_t site;
    uint32_t birth;
  };
  int device = 0;
  uint64_t pool = 0;
  std::vector<held> blocks;  // address order
};

// A route's filter: nonzero when an allocation on `stream` goes to the route's pool. Runs on the
// allocating thread before any allocator lock, under the routes' own lock: it must not call back
// into tracepool. NULL filter: allocations on the stream `context` are routed.
using route_filter_fn = int (*)(void* context, void* stream);
using route_release_fn = void (*)(void* context);

struct route {
  int device;
  uint64_t pool;
  route_filter_fn filter;
  void* context;
  route_release_fn release;  // called on context when the route closes; may be null
};

// Note [Capture]
// While any stream of the process captures in CUDA's global mode, a call that may synchronise with
// the device or ask about work in flight, from any thread, invalidates the capture (which calls do:
// Note [Capture-safe calls] in backend/cuda_backend.cpp, measured by tests/gpu/capture_probe.cu).
// tracepool learns of captures from the routes: while one is open, the gate is closed and
//   - stream_reuse records and queries no event: frees count as not yet safe for other streams,
//     and record_stream frees wait (pending, with no event) until the gate opens again;
//   - nothing goes back to the device: empty_cache keeps the cache and an allocation that does not
//     fit fails without emptying it (the device is asked for new memory only, in relaxed mode);
//   - pending frees are not polled; when the last route closes, every pool's pending frees get
//     their events (a graph's pool, used only inside captures, would otherwise never see them).
// The host backend emulates captures (begin_capture) and counts every call a real capture would
// have refused (host_ledger::capture_violations); the tests require none.
//
// The check and the device work must not be split by a capture beginning in between: a pass holds
// the gate open for one piece of device work (a fence, an event query, an empty_cache); opening a
// route waits until every pass given before it has ended. PyTorch opens the route before it begins
// the capture, so no pass outlives the capture's start.
class capture_gate {
 public:
  bool closed() const { return open_routes_.load(std::memory_order_seq_cst) != 0; }

  // Lets one piece of device work run while no route is open; false (and nothing held) if one is.
  class pass {
   public:
    explicit pass(const capture_gate& g) : gate_(g) {
      gate_.in_flight_.fetch_add(1, std::memory_order_seq_cst);
      open_ = !gate_.closed();
      if (!open_) gate_.in_flight_.fetch_sub(1, std::memory_order_seq_cst);
    }
    ~pass() {
      if (open_) gate_.in_flight_.fetch_sub(1, std::memory_order_seq_cst);
    }
    pass(const pass&) = delete;
    pass& operator=(const pass&) = delete;
    explicit operator bool() const { return open_; }

   private:
    const capture_gate& gate_;
    bool open_;
  };

  // Closes the gate (one more open route); route_opened returns once no pass is in flight.
  void route_opened();
  void route_closed() { open_routes_.fetch_sub(1, std::memory_order_seq_cst); }
  // In a forked child: the passes of the parent's other threads went with them (Note [Fork]).
  void forget_passes() { in_flight_.store(0, std::memory_order_seq_cst); }

  // Whether a record_stream block freed during a capture may be reused inside it once the graph allows
  // (Note [Reuse inside a capture] in stream_reuse.h). Off by default, as in PyTorch.
  bool reuses_in_capture() const { return reuse_in_capture_.load(std::memory_order_relaxed); }
  void set_reuse_in_capture(bool on) { reuse_in_capture_.store(on, std::memory_order_relaxed); }

 private:
  // On lines of their own: open_routes_ is read by every allocation and free, in_flight_ written by
  // passes; neither may share a line with anything written often.
  alignas(64) std::atomic<int> open_routes_{0};
  alignas(64) mutable std::atomic<int> in_flight_{0};
  std::atomic<bool> reuse_in_capture_{false};  // read at frees and allocations during captures only
};

// The open routes of one allocator. Locking: mutex_ is taken alone, before any allocator lock.
class route_table {
 public:
  explicit route_table(capture_gate& gate) : gate_(gate) {}
  ~route_table();
  route_table(const route_table&) = delete;
  route_table& operator=(const route_table&) = delete;

  status open(const route& r);
  // Closes the route of `pool` on `device` (there is at most one); returns how many were open.
  size_t close(int device, uint64_t pool);
  // The pool an allocation on (device, stream) goes to: the newest route that accepts it, else 0.
  uint64_t pool_for(int device, void* stream);
  bool any_open() const { return gate_.closed(); }

  void lock_for_fork() { mutex_.lock(); }
  void unlock_after_fork() { mutex_.unlock(); }

 private:
  capture_gate& gate_;
  std::mutex mutex_;
  std::vector<route> routes_;
};

}  // namespace tracepool::core
