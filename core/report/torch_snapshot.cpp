// torch_snapshot.cpp: the memory held now, and the allocation history, in the layout of PyTorch's
// torch.cuda.memory._snapshot() (notes/pytorch.md §3.3), as JSON: what pytorch.org/memory_viz and
// torch.cuda._memory_viz read once tracepool.torch has turned it into a pickle. It runs the report's
// first two steps (collect, describe: report/held_memory.h, report/site_describer.h) and lays the
// result out as PyTorch would. device_traces is the history (TRACEPOOL_CONF history:N) where it is on:
// every alloc, free, segment and OOM event kept, so that the Active Memory Timeline shows how the
// memory came to be held; without it, one "alloc" entry per live block, oldest mark first.
#include <algorithm>
#include <vector>

#include "history.h"
#include "report/held_memory.h"
#include "report/json_out.h"
#include "report/report.h"
#include "report/site_describer.h"

namespace tracepool::core {

namespace {

const char* state_name(const block_record& b) {
  if (b.live) return "active_allocated";
  return b.pending ? "active_pending_free" : "inactive";
}

void write_segments(json_out& j, const held_memory& held, site_describer& describer) {
  j.key("segments");
  j.open('[');
  for (const device_blocks& dev : held.devices) {
    const std::vector<block_record>& blocks = dev.blocks;
    // A pool lists each segment's blocks together and in address order.
    for (size_t first = 0, last; first < blocks.size(); first = last) {
      last = first;
      int64_t allocated = 0, active = 0, requested = 0;
      while (last < blocks.size() && blocks[last].segment == blocks[first].segment) {
        const block_record& b = blocks[last++];
        if (b.live) allocated += static_cast<int64_t>(b.size);
        if (b.live || b.pending) active += static_cast<int64_t>(b.size);
        requested += static_cast<int64_t>(b.requested);
      }
      const block_record& s = blocks[first];
      j.open('{');
      j.key("device"), j.value(static_cast<int64_t>(dev.device));
      j.key("address"), j.value(static_cast<int64_t>(s.segment));
      j.key("total_size"), j.value(static_cast<int64_t>(s.segment_size));
      j.key("allocated_size"), j.value(allocated);
      j.key("active_size"), j.value(active);
      j.key("requested_size"), j.value(requested);
      j.key("stream"), j.value(static_cast<int64_t>(s.stream));
      j.key("segment_type"), j.value(std::string(s.kind == pool_kind::small ? "small" : "large"));
      // PyTorch's pair from tracepool's pool id (Note [Pool ids] in torch_allocator.cpp).
      const auto half = static_cast<int64_t>(s.pool >> 1);
      const bool handle = (s.pool & 1) != 0;
      j.key("segment_pool_id"), j.open('['), j.value(handle ? int64_t{0} : half), j.value(handle ? half : int64_t{0}),
          j.close(']');
      j.key("is_expandable"), j.value(s.growable);  // PyTorch's name for a growable segment's mapped run
      j.key("frames"), j.open('['), j.close(']');
      j.key("blocks");
      j.open('[');
      for (size_t i = first; i < last; ++i) {
        const block_record& b = blocks[i];
        j.open('{');
        j.key("address"), j.value(static_cast<int64_t>(b.address));
        j.key("size"), j.value(static_cast<int64_t>(b.size));
        // A free block: what the last allocation freed into it asked, as PyTorch's snapshot keeps it.
        j.key("requested_size"), j.value(static_cast<int64_t>(b.live || b.pending ? b.requested : b.last_requested));
        j.key("state"), j.value(std::string(state_name(b)));
        write_frames(j, b.live || b.pending ? describer.of(b.site).frames : std::vector<frame_info>{},
                     frame_schema::pytorch);
        j.close('}');
      }
      j.close(']');
      j.close('}');
    }
  }
  j.close(']');
}

// PyTorch's labels of an event: the compiled region it ran in ("N/A" outside one) and the user metadata.
const history_labels::label& no_label() {
  static const history_labels::label none;
  return none;
}

void trace_entry(json_out& j, const char* action, const char* address_key, uintptr_t address, size_t size,
                 uintptr_t stream, uint64_t time_us, const std::vector<frame_info>& frames,
                 const history_labels::label& label) {
  j.open('{');
  j.key("action"), j.value(std::string(action));
  j.key(address_key), j.value(static_cast<int64_t>(address));
  j.key("size"), j.value(static_cast<int64_t>(size));
  j.key("stream"), j.value(static_cast<int64_t>(stream));
  j.key("time_us"), j.value(static_cast<int64_t>(time_us));
  write_frames(j, frames, frame_schema::pytorch);
  j.key("compile_context"), j.value(label.context.empty() ? std::string("N/A") : label.context);
  j.key("user_metadata"), j.value(label.metadata);
  j.close('}');
}

// The history's events of every device, as PyTorch records them: a free is both requested and
// completed (tracepool tells a free once; a block with record_stream streams completes later, which
// the history does not see).
void write_history(json_out& j, const std::vector<history_entry>& events, int devices,
                   const std::vector<history_labels::label>& labels, site_describer& describer) {
  for (int d = 0; d < devices; ++d) {
    j.open('[');
    for (const history_entry& e : events) {
      if (e.device != d) continue;
      const uint64_t us = e.time_ns / 1000;
      const std::vector<frame_info>& frames = describer.of(e.site).frames;
      const history_labels::label& l = e.label < labels.size() ? labels[e.label] : history_labels::overflow_label();
      switch (e.action) {
        case history_action::alloc:
          trace_entry(j, "alloc", "addr", e.address, e.size, e.stream, us, frames, l);
          break;
        case history_action::free:
          trace_entry(j, "free_requested", "addr", e.address, e.size, e.stream, us, frames, l);
          trace_entry(j, "free_completed", "addr", e.address, e.size, e.stream, us, frames, l);
          break;
        case history_action::segment_alloc:
          trace_entry(j, "segment_alloc", "addr", e.address, e.size, e.stream, us, frames, l);
          break;
        case history_action::segment_free:
          trace_entry(j, "segment_free", "addr", e.address, e.size, e.stream, us, frames, l);
          break;
        case history_action::oom:
          trace_entry(j, "oom", "device_free", e.address, e.size, e.stream, us, frames, l);
          break;
      }
    }
    j.close(']');
  }
}

// Without a history: what is held now, one "alloc" per live block, oldest mark first, then by address.
void write_live_blocks(json_out& j, const held_memory& held, site_describer& describer) {
  for (const device_blocks& dev : held.devices) {
    std::vector<const block_record*> live;
    for (const block_record& b : dev.blocks)
      if (b.live) live.push_back(&b);
    std::sort(live.begin(), live.end(), [](const block_record* x, const block_record* y) {
      return x->birth != y->birth ? x->birth < y->birth : x->address < y->address;
    });
    j.open('[');
    for (const block_record* b : live)
      trace_entry(j, "alloc", "addr", b->address, b->size, b->stream, 0, describer.of(b->site).frames, no_label());
    j.close(']');
  }
}

}  // namespace

status build_torch_snapshot(allocator& a, std::string* out) {
  // 1. Collect the blocks held now, then the history: events recorded in between only extend the
  // timeline past the segments' state.
  held_memory held;
  if (status s = collect(a, &held); s != status::ok) return s;
  const history* h = a.allocation_history();
  const std::vector<history_entry> events = h != nullptr ? h->entries() : std::vector<history_entry>{};
  // 2. Describe every site either names, each address once.
  site_describer describer(a.call_sites().sites());
  for (const device_blocks& dev : held.devices)
    for (const block_record& b : dev.blocks) describer.want(b.site);
  for (const history_entry& e : events) describer.want(e.site);
  describer.resolve();

  json_out j;
  j.open('{');
  write_segments(j, held, describer);
  j.key("device_traces");
  j.open('[');
  if (h != nullptr)
    write_history(j, events, a.device_count(), a.labels().table(), describer);
  else
    write_live_blocks(j, held, describer);
  j.close(']');
  j.key("allocator_settings"), j.open('{');
  j.key("history"), j.value(static_cast<int64_t>(h != nullptr ? h->capacity() : 0));
  j.close('}');
  j.key("external_annotations"), j.open('['), j.close(']');
  j.close('}');
  *out = std::move(j.text);
  return status::ok;
}

}  // namespace tracepool::core
