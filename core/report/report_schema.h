// report_schema.h: the report's fields, each listed once (Note [One schema]).
//
// Note [One schema]
// Each object of a saved report has one function here, fields(v, s), that names its fields in the
// order the JSON has them: the key, the member it comes from and goes to, and its rule. The JSON writer
// (report_json.cpp), the reader (report_reader.cpp) and the check of docs/report-schema.md
// (tests/unit/report_schema_test.cpp) are visitors that walk these lists, so a new field is one line
// here (and its computation), and no rendering can forget it. The visitor is called as
//   v(key, member)                  a field every writer writes; a reader takes it where present
//   v(key, member, required)        ... and refuses an object without it
//   v.unless(key, member, unset)    written only when it is known (not `unset`): absent in older reports
//   v.nullable(key, member, unset)  null when it is `unset`
//   v.derived(key, value)           computed from the others: written, never read (a reader recomputes)
//   v.own(key, report[, required])  a part of the report that each visitor writes or reads with code of
//                                   its own: the schema's name, the capture settings (flat in the
//                                   report), the statistics (by device), the retained entries (views of
//                                   the leaks), the timeline, the holder search and the OOM details
// A member that is a list of objects with fields() of their own is visited item by item. What a list
// cannot say of itself (a device listed twice, a retained entry that is none of the leaks) is the
// reader's to check after the visit.
#pragma once

#include <type_traits>

#include "report/report.h"
#include "report/wording.h"

namespace tracepool::core::schema {

inline constexpr bool required = true;

// fields() of one struct, for a visitor `v` over a `T` or a `const T`.
#define TRACEPOOL_FIELDS_OF(T) \
  template <typename V, typename S> \
  std::enable_if_t<std::is_same_v<std::remove_const_t<S>, T>> fields(V& v, S& s)

TRACEPOOL_FIELDS_OF(holder_summary) {
  v("holder", s.holder, required);
  v("bytes", s.bytes);
  v("blocks", s.blocks);
  v("example", s.example);
}

TRACEPOOL_FIELDS_OF(device_share) {
  v("device", s.device, required);
  v("bytes", s.bytes, required);
  v("blocks", s.blocks, required);
}

TRACEPOOL_FIELDS_OF(mark_summary) {
  v("label", s.label);
  v("index", s.index);
  v("time_ns", s.time_ns);
  v("live_bytes", s.live_bytes);
  v.unless("reserved_bytes", s.reserved_bytes, int64_t{-1});
}

TRACEPOOL_FIELDS_OF(site_summary) {
  v("site", s.site);
  v("bytes", s.bytes, required);
  v("blocks", s.blocks, required);
  v("block_bytes", s.block_bytes);
  v("peak_bytes", s.peak_bytes);
  v("total_bytes", s.total_bytes);
  v("total_blocks", s.total_blocks);
  v("tags", s.tags, required);
  v("live_at_marks", s.live_at_marks);
  v("growing", s.growing);
  v("growth_floors", s.growth_floors);
  v("live_at_auto_marks", s.live_at_auto_marks);
  v("by_device", s.by_device);
  v("held_by", s.held_by);
  v.derived("title", site_title(s.frames));
  v("frames", s.frames, required);
}

TRACEPOOL_FIELDS_OF(cached_summary) {
  v("site", s.site);
  v("bytes", s.bytes, required);
  v("blocks", s.blocks, required);
  v("largest_free_block", s.largest_free_block);
  v("inactive_split_bytes", s.inactive_split_bytes);
  v("by_device", s.by_device);
  v("tags", s.tags);
  v.derived("title", site_title(s.frames));
  v("frames", s.frames, required);
}

TRACEPOOL_FIELDS_OF(pool_site_summary) {
  v("site", s.site);
  v("bytes", s.bytes, required);
  v("blocks", s.blocks, required);
  v.derived("title", site_title(s.frames));
  v("frames", s.frames, required);
}

TRACEPOOL_FIELDS_OF(pool_summary) {
  v("device", s.device, required);
  v("pool", s.pool, required);
  v("label", s.label);
  v("site", s.site);
  v.derived("title", site_title(s.frames));
  v("frames", s.frames);
  v("bytes", s.bytes, required);
  v("blocks", s.blocks, required);
  v("block_bytes", s.block_bytes);
  v("reserved_bytes", s.reserved_bytes, required);
  v("cached_bytes", s.cached_bytes, required);
  v("sites", s.sites);
}

TRACEPOOL_FIELDS_OF(holder_search) {
  v("complete", s.complete);
  v("objects", s.objects);
  v("exposing", s.exposing);
  v("seconds", s.seconds);
  v("note", s.note);
}

TRACEPOOL_FIELDS_OF(process_summary) {
  v("pid", s.pid);
  v("host", s.host);
  v.nullable("rank", s.rank, int64_t{-1});
  v.nullable("local_rank", s.local_rank, int64_t{-1});
  v.nullable("world_size", s.world_size, int64_t{0});
}

TRACEPOOL_FIELDS_OF(backend::process_usage) {
  v("pid", s.pid, required);
  v.nullable("used_bytes", s.used_bytes, int64_t{-1}, required);
}

// A device's figures; "processes" (a list, or null when none could be listed) and the statistics (the
// report's "stats", by device) are the writer's and the reader's own.
TRACEPOOL_FIELDS_OF(device_summary) {
  v("device", s.device, required);
  v("context", s.context);
  v("cached_bytes", s.cached_bytes);
  v("largest_free_block", s.largest_free_block);
  v("total_bytes", s.total_bytes);
  v("used_bytes", s.used_bytes);
  v.derived("outside_bytes", outside_bytes(s));
  v.processes(s);
  v("processes_note", s.processes_note);
  // Note [Fragmentation in reports]; what a report read back does not know stays unwritten.
  v.derived("fragmentation_bytes", fragmentation_bytes(s));
  v.unless("segments", s.segments, std::string());
  if (!s.segments.empty()) v("growable_available", s.growable_available);  // read after "segments"
  v.unless("free_page_bytes", s.free_page_bytes, int64_t{-1});
  v("observed_bytes", s.observed_bytes);  // Note [Observed memory]
  v("observed_managed_bytes", s.observed_managed_bytes);
  v("observed_host_bytes", s.observed_host_bytes);
}

// The report itself (docs/report-schema.md's top level).
TRACEPOOL_FIELDS_OF(report) {
  v.own("schema", s, required);
  v("reason", s.reason);
  v("time_ns", s.time_ns);
  v("backend", s.backend);
  v("process", s.process);
  v.own("capture", s);
  v.own("stats", s, required);
  v("devices", s.devices);
  v("leaks", s.leaks, required);
  v.own("retained", s);
  v("cached", s.cached, required);
  v("pools", s.pools);
  v("marks", s.marks, required);
  v("marks_made", s.marks_made);
  v("auto_marks", s.auto_marks);
  v("auto_marks_made", s.auto_marks_made);
  v("auto_mark_ms", s.auto_mark_ms);
  v("auto_mark_seconds", s.auto_mark_seconds);
  v("growth_basis", s.growth_basis);
  v.own("timeline", s);
  v("history_events", s.history_events);
  v.own("holder_search", s);
  v.own("oom", s);
}

#undef TRACEPOOL_FIELDS_OF

}  // namespace tracepool::core::schema
