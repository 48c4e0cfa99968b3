// snapshot.cpp: the memory held now in the layout of PyTorch's torch.cuda.memory._snapshot()
// (notes/pytorch.md §3.3), as JSON: what pytorch.org/memory_viz and torch.cuda._memory_viz read once
// the Python package has turned it into a pickle. tracepool keeps no event history, so
// device_traces holds one "alloc" entry per live block: the viewer's timeline then shows what is
// held and by whom, not how it came to be.
#include <algorithm>
#include <vector>

#include "allocator.h"
#include "report/json_out.h"
#include "report/report.h"
#include "report/site_describer.h"

namespace tracepool::core {

namespace {

void frames(json_out& j, const std::vector<frame_info>& frames) {
  j.key("frames");
  j.open('[');
  for (const frame_info& f : frames) {
    j.open('{');
    j.key("filename"), j.value(!f.file.empty() ? f.file : f.module);
    j.key("line"), j.value(static_cast<int64_t>(f.line));
    j.key("name"), j.value(!f.function.empty() ? f.function : hex(f.address));
    j.close('}');
  }
  j.close(']');
}

const char* state_name(const block_record& b) {
  if (b.live) return "active_allocated";
  return b.pending ? "active_pending_free" : "inactive";
}

}  // namespace

status build_snapshot_json(allocator& a, std::string* out) {
  std::vector<std::vector<block_record>> devices(static_cast<size_t>(a.device_count()));
  site_describer describer(a.call_sites().sites());
  for (int d = 0; d < a.device_count(); ++d) {
    if (status s = a.collect_blocks(d, &devices[d]); s != status::ok) return s;
    for (const block_record& b : devices[d]) describer.want(b.site);
  }
  describer.resolve();
  std::unordered_map<uint32_t, std::vector<frame_info>> site_frames;
  auto frames_of = [&](uint32_t site) -> const std::vector<frame_info>& {
    auto [it, is_new] = site_frames.try_emplace(site);
    if (is_new) {
      std::vector<std::string> tags;
      describer.describe(site, &tags, &it->second);
    }
    return it->second;
  };

  json_out j;
  j.open('{');
  j.key("segments");
  j.open('[');
  for (int d = 0; d < a.device_count(); ++d) {
    const std::vector<block_record>& blocks = devices[d];
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
      j.key("device"), j.value(static_cast<int64_t>(d));
      j.key("address"), j.value(static_cast<int64_t>(s.segment));
      j.key("total_size"), j.value(static_cast<int64_t>(s.segment_size));
      j.key("allocated_size"), j.value(allocated);
      j.key("active_size"), j.value(active);
      j.key("requested_size"), j.value(requested);
      j.key("stream"), j.value(static_cast<int64_t>(s.stream));
      j.key("segment_type"), j.value(std::string(s.kind == pool_kind::small ? "small" : "large"));
      j.key("segment_pool_id"), j.open('['), j.value(int64_t{0}), j.value(int64_t{0}), j.close(']');
      j.key("is_expandable"), j.value(false);
      j.key("frames"), j.open('['), j.close(']');
      j.key("blocks");
      j.open('[');
      for (size_t i = first; i < last; ++i) {
        const block_record& b = blocks[i];
        j.open('{');
        j.key("address"), j.value(static_cast<int64_t>(b.address));
        j.key("size"), j.value(static_cast<int64_t>(b.size));
        j.key("requested_size"), j.value(static_cast<int64_t>(b.requested));
        j.key("state"), j.value(std::string(state_name(b)));
        frames(j, b.live || b.pending ? frames_of(b.site) : std::vector<frame_info>{});
        j.close('}');
      }
      j.close(']');
      j.close('}');
    }
  }
  j.close(']');

  j.key("device_traces");
  j.open('[');
  for (int d = 0; d < a.device_count(); ++d) {
    std::vector<const block_record*> live;
    for (const block_record& b : devices[d])
      if (b.live) live.push_back(&b);
    // Oldest epoch first (marks made before the allocation), then by address.
    std::sort(live.begin(), live.end(), [](const block_record* x, const block_record* y) {
      return x->birth != y->birth ? x->birth < y->birth : x->address < y->address;
    });
    j.open('[');
    for (const block_record* b : live) {
      j.open('{');
      j.key("action"), j.value(std::string("alloc"));
      j.key("addr"), j.value(static_cast<int64_t>(b->address));
      j.key("size"), j.value(static_cast<int64_t>(b->size));
      j.key("stream"), j.value(static_cast<int64_t>(b->stream));
      j.key("time_us"), j.value(int64_t{0});
      frames(j, frames_of(b->site));
      j.close('}');
    }
    j.close(']');
  }
  j.close(']');
  j.key("allocator_settings"), j.open('{'), j.close('}');
  j.key("external_annotations"), j.open('['), j.close(']');
  j.close('}');
  *out = std::move(j.text);
  return status::ok;
}

}  // namespace tracepool::core
