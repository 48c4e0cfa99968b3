// report_json.cpp: the JSON rendering of a report; the schema is docs/report-schema.md.
#include "report/json_out.h"
#include "report/report.h"

namespace tracepool::core {

namespace {

void tags(json_out& j, const std::vector<std::string>& labels) {
  j.key("tags");
  j.open('[');
  for (const std::string& t : labels) j.value(t);
  j.close(']');
}

// `"key": [{...}, ...]`: each item's fields written by `fields`.
template <typename T, typename Fields>
void objects(json_out& j, const char* key, const std::vector<T>& items, Fields&& fields) {
  j.key(key);
  j.open('[');
  for (const T& item : items) {
    j.open('{');
    fields(item);
    j.close('}');
  }
  j.close(']');
}

void counts(json_out& j, const char* key, const std::vector<int64_t>& values) {
  j.key(key);
  j.open('[');
  for (int64_t v : values) j.value(v);
  j.close(']');
}

void marks(json_out& j, const char* key, const std::vector<mark_summary>& kept) {
  objects(j, key, kept, [&](const mark_summary& m) {
    j.key("label"), j.value(m.label);
    j.key("index"), j.value(static_cast<int64_t>(m.index));
    j.key("time_ns"), j.value(static_cast<int64_t>(m.time_ns));
    j.key("live_bytes"), j.value(m.live_bytes);
    if (m.reserved_bytes >= 0) j.key("reserved_bytes"), j.value(m.reserved_bytes);
  });
}

void by_device(json_out& j, const std::vector<device_share>& shares) {
  objects(j, "by_device", shares, [&](const device_share& d) {
    j.key("device"), j.value(static_cast<int64_t>(d.device));
    j.key("bytes"), j.value(d.bytes);
    j.key("blocks"), j.value(d.blocks);
  });
}

}  // namespace

std::string to_json(const report& r) {
  json_out j;
  j.open('{');
  j.key("schema"), j.value(std::string(report_schema));
  j.key("reason"), j.value(r.reason);
  j.key("time_ns"), j.value(static_cast<int64_t>(r.time_ns));
  j.key("backend"), j.value(r.backend);
  j.key("process");
  j.open('{');
  j.key("pid"), j.value(r.process.pid);
  j.key("host"), j.value(r.process.host);
  const auto count_or_null = [&](const char* key, int64_t v, int64_t unset) {
    j.key(key);
    if (v == unset) j.null();
    else j.value(v);
  };
  count_or_null("rank", r.process.rank, -1);
  count_or_null("local_rank", r.process.local_rank, -1);
  count_or_null("world_size", r.process.world_size, 0);
  j.close('}');
  j.key("capture");
  j.open('{');
  j.key("mode"), j.value(r.capture);
  j.key("unwinder"), j.value(r.unwinder);
  j.key("depth"), j.value(static_cast<int64_t>(r.capture_depth));
  j.key("python_depth"), j.value(static_cast<int64_t>(r.python_depth));
  j.key("sample_bytes"), j.value(static_cast<int64_t>(r.sample_bytes));
  j.key("estimated"), j.value(r.sample_bytes != 0);
  j.key("sites"), j.value(static_cast<int64_t>(r.sites));
  j.key("sites_dropped"), j.value(static_cast<int64_t>(r.sites_dropped));
  j.key("cfi_slow_stacks"), j.value(static_cast<int64_t>(r.cfi_slow_stacks));
  j.key("cfi_walks_replayed"), j.value(static_cast<int64_t>(r.cfi_walks_replayed));
  j.key("cfi_walks_taken"), j.value(static_cast<int64_t>(r.cfi_walks_taken));
  j.key("cfi_last_slow");
  if (r.cfi_last_slow_reason == 0) {
    j.null();
  } else {
    j.open('{');
    j.key("reason"), j.value(static_cast<int64_t>(r.cfi_last_slow_reason));
    j.key("function"), j.value(r.cfi_last_slow_frame.function);
    j.key("module"), j.value(r.cfi_last_slow_frame.module);
    j.key("address"), j.value(hex(r.cfi_last_slow_frame.address));
    j.close('}');
  }
  j.close('}');

  j.key("stats");
  j.open('{');
  for (const device_summary& d : r.devices) {
    j.key(std::to_string(d.device).c_str());
    j.open('{');
    for (const auto& [name, value] : memory_stat_items(d.stats)) j.key(name.c_str()), j.value(value);
    j.close('}');
  }
  j.close('}');
  objects(j, "devices", r.devices, [&](const device_summary& d) {
    j.key("device"), j.value(static_cast<int64_t>(d.device));
    j.key("context"), j.value(d.context);
    j.key("cached_bytes"), j.value(d.cached_bytes);
    j.key("largest_free_block"), j.value(d.largest_free_block);
    j.key("total_bytes"), j.value(d.total_bytes);
    j.key("used_bytes"), j.value(d.used_bytes);
    j.key("outside_bytes"), j.value(outside_bytes(d));
    if (d.processes_listed) {
      objects(j, "processes", d.processes, [&](const backend::process_usage& p) {
        j.key("pid"), j.value(p.pid);
        j.key("used_bytes");
        if (p.used_bytes < 0) j.null();
        else j.value(p.used_bytes);
      });
    } else {
      j.key("processes"), j.null();
    }
    j.key("processes_note"), j.value(d.processes_note);
    // Note [Fragmentation in reports]; what a report read back does not know stays unwritten.
    j.key("fragmentation_bytes"), j.value(fragmentation_bytes(d));
    if (!d.segments.empty()) {
      j.key("segments"), j.value(d.segments);
      j.key("growable_available"), j.value(d.growable_available);
    }
    if (d.free_page_bytes >= 0) j.key("free_page_bytes"), j.value(d.free_page_bytes);
  });

  objects(j, "leaks", r.leaks, [&](const site_summary& s) {
    j.key("site"), j.value(static_cast<int64_t>(s.site));
    j.key("bytes"), j.value(s.bytes);
    j.key("blocks"), j.value(s.blocks);
    j.key("block_bytes"), j.value(s.block_bytes);
    j.key("peak_bytes"), j.value(s.peak_bytes);
    j.key("total_bytes"), j.value(s.total_bytes);
    j.key("total_blocks"), j.value(s.total_blocks);
    tags(j, s.tags);
    counts(j, "live_at_marks", s.live_at_marks);
    j.key("growing"), j.value(s.growing);
    counts(j, "growth_floors", s.growth_floors);
    counts(j, "live_at_auto_marks", s.live_at_auto_marks);
    by_device(j, s.by_device);
    objects(j, "held_by", s.held_by, [&](const holder_summary& h) {
      j.key("holder"), j.value(h.holder);
      j.key("bytes"), j.value(h.bytes);
      j.key("blocks"), j.value(h.blocks);
      j.key("example"), j.value(h.example);
    });
    write_frames(j, s.frames, frame_schema::tracepool);
    if (!s.addresses.empty()) {
      j.key("addresses");
      j.open('[');
      for (const auto& [address, bytes] : s.addresses) {
        j.open('[');
        j.value(static_cast<uint64_t>(address)), j.value(bytes);
        j.close(']');
      }
      j.close(']');
    }
  });

  objects(j, "retained", r.retained, [&](const retained_summary& t) {
    const site_summary& s = r.leaks[t.leak];
    j.key("site"), j.value(static_cast<int64_t>(s.site));
    j.key("bytes"), j.value(t.bytes);
    j.key("blocks"), j.value(t.blocks);
    j.key("born_after_mark");
    if (t.born_after < 0)
      j.null();
    else
      j.value(r.marks[static_cast<size_t>(t.born_after)].label);
    j.key("marks_survived"), j.value(static_cast<int64_t>(t.marks_survived));
    tags(j, s.tags);
    write_frames(j, s.frames, frame_schema::tracepool);
  });

  objects(j, "cached", r.cached, [&](const cached_summary& c) {
    j.key("site"), j.value(static_cast<int64_t>(c.site));
    j.key("bytes"), j.value(c.bytes);
    j.key("blocks"), j.value(c.blocks);
    j.key("largest_free_block"), j.value(c.largest_free_block);
    j.key("inactive_split_bytes"), j.value(c.inactive_split_bytes);
    by_device(j, c.by_device);
    tags(j, c.tags);
    write_frames(j, c.frames, frame_schema::tracepool);
  });

  objects(j, "pools", r.pools, [&](const pool_summary& p) {
    j.key("device"), j.value(static_cast<int64_t>(p.device));
    j.key("pool"), j.value(p.pool);
    j.key("label"), j.value(p.label);
    j.key("site"), j.value(static_cast<int64_t>(p.site));
    write_frames(j, p.frames, frame_schema::tracepool);
    j.key("bytes"), j.value(p.bytes);
    j.key("blocks"), j.value(p.blocks);
    j.key("block_bytes"), j.value(p.block_bytes);
    j.key("reserved_bytes"), j.value(p.reserved_bytes);
    j.key("cached_bytes"), j.value(p.cached_bytes);
    objects(j, "sites", p.sites, [&](const pool_site_summary& s) {
      j.key("site"), j.value(static_cast<int64_t>(s.site));
      j.key("bytes"), j.value(s.bytes);
      j.key("blocks"), j.value(s.blocks);
      write_frames(j, s.frames, frame_schema::tracepool);
    });
  });

  marks(j, "marks", r.marks);
  j.key("marks_made"), j.value(static_cast<int64_t>(r.marks_made));
  marks(j, "auto_marks", r.auto_marks);
  j.key("auto_marks_made"), j.value(static_cast<int64_t>(r.auto_marks_made));
  j.key("auto_mark_ms"), j.value(static_cast<int64_t>(r.auto_mark_ms));
  j.key("auto_mark_seconds"), j.value(r.auto_mark_seconds);
  j.key("growth_basis"), j.value(r.growth_basis);
  objects(j, "timeline", r.timeline, [&](const device_timeline& t) {
    j.key("device"), j.value(static_cast<int64_t>(t.device));
    j.key("points");
    j.open('[');
    for (const timeline_point& p : t.points) {
      j.open('[');
      j.value(static_cast<int64_t>(p.time_ns)), j.value(p.allocated_bytes), j.value(p.reserved_bytes);
      j.close(']');
    }
    j.close(']');
  });
  j.key("history_events"), j.value(static_cast<int64_t>(r.history_events));
  j.key("holder_search");
  if (!r.holders.made) {
    j.null();
  } else {
    j.open('{');
    j.key("complete"), j.value(r.holders.complete);
    j.key("objects"), j.value(r.holders.objects);
    j.key("exposing"), j.value(r.holders.exposing);
    j.key("seconds"), j.value(r.holders.seconds);
    j.key("note"), j.value(r.holders.note);
    j.close('}');
  }

  if (r.reason == "oom") {
    j.key("oom");
    j.open('{');
    j.key("device"), j.value(static_cast<int64_t>(r.oom_device));
    j.key("requested_bytes"), j.value(static_cast<int64_t>(r.oom_requested));
    j.key("message"), j.value(r.oom_message);
    j.close('}');
  }
  j.close('}');
  j.text += '\n';
  return j.text;
}

}  // namespace tracepool::core
