// block.h: segments (memory obtained from the backend in one call, or a growable range backed piece
// by piece) and blocks (pieces of a segment, handed out, free or unmapped). Plain data; the
// operations live in stream_pool, which owns both.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "base/size_class.h"
#include "trace/block_tag.h"

namespace tracepool::core {

class stream_pool;
struct segment;

enum class block_state : uint8_t {
  free,          // in its pool's free list
  allocated,     // handed to a caller
  pending_free,  // freed by the caller, waiting for events on record_stream streams (stream_reuse)
  unmapped,      // a stretch of a growable segment with no memory behind it (Note [Growable segments])
};

// Invariants (checked by stream_pool::validate):
//   - the blocks of a segment form a list in address order: first->ptr == seg->ptr,
//     b->next->ptr == b->ptr + b->size, and the sizes add up to seg->size;
//   - size is a multiple of min_block_size, so every block is 512-byte aligned (segments are);
//   - no two neighbours are both free, or both unmapped: they are merged;
//   - state == free  <=>  the block is in its pool's free list;
//   - counted_split  <=>  state == free, the block is not its whole segment, and the segment is not
//     growable (inactive_split stat; PyTorch leaves expandable segments out of it too);
//   - unmapped blocks are in growable segments only, and start and end on the segment's mapping
//     boundaries (segment::on_boundary: a multiple of `piece`, or a split); the bytes of the other
//     blocks add up to the segment's `mapped`.
struct block {
  char* ptr = nullptr;
  size_t size = 0;                 // bytes, rounded
  size_t requested = 0;            // bytes the caller asked for; while free, the last allocation freed into it asked
  segment* seg = nullptr;
  block* prev = nullptr;           // neighbours in the segment, address order
  block* next = nullptr;
  block* bin_prev = nullptr;       // links in a small free-list bin (free blocks only)
  block* bin_next = nullptr;
  uint64_t free_seq = 0;           // owner's free counter when the block became free (stream_reuse)
  uint32_t site = 0;               // call site of the allocation; while free, of the memory's last use
  uint32_t birth = 0;              // marks made before the allocation (tracer.h)
  block_state state = block_state::free;
  bool counted_split = false;
  std::vector<backend::stream_handle>* stream_uses = nullptr;  // record_stream streams; owned, usually null

  bool is_whole_segment() const { return prev == nullptr && next == nullptr; }
};

// What a report needs of a block (copied under the pool lock, read after it is released).
struct block_record {
  uint32_t site;
  uint32_t birth;
  size_t size;       // rounded
  size_t requested;  // 0 when free
  bool live;         // handed out (else free, cached, or pending)
  bool split_free;   // free inside a partly used segment (inactive split)
  bool pending;      // freed by its owner, waiting for record_stream streams: neither held nor cached
  pool_kind kind;
  uintptr_t address;
  uintptr_t segment;  // address of its segment, and the segment's size
  size_t segment_size;
  uintptr_t stream;  // the stream the segment serves
  uint64_t pool;     // the private pool it belongs to, 0 for the default (Note [Private pools])
  bool growable;     // its segment is growable (segment_size is then the mapped run it lies in)
  size_t last_requested;  // free: what the last allocation freed into it asked (PyTorch's snapshot shows it), else 0
};

// Note [Growable segments]
// Rationale: a classic segment is one backend allocation of fixed size, so the free tail of one
// segment and the free head of the next can never serve one request together, and a segment goes
// back to the device only when wholly free: fragmentation. A growable segment (segments:growable) is
// a reserved address range of about the device's size, backed by `piece`-sized mappings
// (backend::map) where blocks need memory, and unbacked again (backend::unmap) where whole pieces lie
// inside free blocks. A large request then extends the free block at the end of what is mapped, and
// empty_cache gives back the free pieces of a segment that is still partly in use.
// Approach (device_cache grows and shrinks, stream_pool keeps the blocks):
//   - one growable segment per stream pool and pool kind, made on first need and given back (its
//     range freed) once nothing of it is mapped; a growable segment never moves to another stream:
//     its free pieces are unmapped instead, and other streams map the memory again;
//   - its blocks cover the whole range; the unbacked stretches are `unmapped` blocks;
//   - pieces: the device's page (2 MiB) for the small pool, 20 MiB for the large, as PyTorch's
//     expandable segments, because each map costs a cuMemCreate, a cuMemMap and a cuMemSetAccess;
//   - under a limit, any request up to it fits on an empty device: where a whole last piece would
//     pass the limit, the last piece is cut to the pages the request needs (61 MiB under 64 MiB:
//     three pieces and 2 MiB, not four pieces, 80 MiB). Its end is a `split`: mappings never cross a
//     multiple of `piece` nor a split, so each is the stretch between two boundaries, and unmap()
//     gets whole mappings (CUDA unmaps nothing less). Later growth from a split maps the rest of that
//     20 MiB stretch as a mapping of its own; once the stretch is wholly unmapped its splits go, and
//     it is mapped as one piece again. Splits are rare (a limit reached), so they are a short list;
//   - reserved_bytes counts mapped bytes; `segment` counts growable segments; num_device_alloc and
//     num_device_free count map and unmap calls, one per piece.
// Limits: the range is 1 1/8 of the device's memory (PyTorch's figure): a request the range cannot
// hold in one stretch gets a classic segment instead. Unmapping first waits for the whole device
// (backend::synchronize_device): a freed block's last kernels may still be running.

// Where a private pool's segments come from when not from the backend: an allocator of the caller's
// (PyTorch's MemPool(allocator=...)). Shared by the pool and each segment obtained from it; `release`
// runs on `context` when the last of them is gone.
struct segment_source {
  void* (*alloc)(void* context, size_t size, int device, void* stream);  // nullptr: no memory
  void (*free)(void* context, void* ptr, size_t size, int device, void* stream);
  void* context;
  void (*release)(void* context);
  segment_source(decltype(alloc) a, decltype(free) f, void* c, decltype(release) r)
      : alloc(a), free(f), context(c), release(r) {}
  segment_source(const segment_source&) = delete;
  segment_source& operator=(const segment_source&) = delete;
  ~segment_source() {
    if (release != nullptr) release(context);
  }
};

// A segment belongs to one stream pool at a time (`owner`), and so all its blocks do: every block
// operation needs only that pool's lock. A fully free segment may move to another pool once the
// stream it was last used on has been fenced (Note [Stream reuse] in stream_reuse.h). `first` is
// never null: a segment between pools (moving, or being released) keeps its one free block, on no
// free list, so that moving it allocates nothing.
struct segment {
  char* ptr = nullptr;
  size_t size = 0;
  int device = 0;
  pool_kind kind = pool_kind::small;
  stream_pool* owner = nullptr;
  block* first = nullptr;
  segment* pool_prev = nullptr;    // the owner's list of segments
  segment* pool_next = nullptr;
  uint32_t site = 0;               // call site of the allocation that made the device grow
  size_t piece = 0;                // growable: the bytes of each map() call, its pieces; 0: classic
  size_t mapped = 0;               // bytes with memory behind them: `size` unless growable
  // Growable: offsets from ptr, ascending, that are no multiple of `piece` but where one mapping ends
  // and the next may begin (Note [Growable segments]). Each lies in a `piece` stretch with memory.
  std::vector<size_t> splits;
  std::shared_ptr<const segment_source> source;  // null: the backend's memory

  bool growable() const { return piece != 0; }
  // Growable: where the mapping that would begin at `offset` ends, the next boundary after it.
  size_t next_boundary(size_t offset) const {
    const size_t next = (offset / piece + 1) * piece;
    for (size_t x : splits)
      if (x > offset) return x < next ? x : next;
    return next;
  }
  bool on_boundary(size_t offset) const {
    if (offset % piece == 0) return true;
    for (size_t x : splits)
      if (x == offset) return true;
    return false;
  }
  // The boundary at or after `offset`, and at or before it.
  size_t boundary_up(size_t offset) const { return on_boundary(offset) ? offset : next_boundary(offset); }
  size_t boundary_down(size_t offset) const {
    size_t down = offset / piece * piece;
    for (size_t x : splits)
      if (x > down && x <= offset) down = x;
    return down;
  }
};

}  // namespace tracepool::core
