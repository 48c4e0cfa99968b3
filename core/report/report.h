// report.h: what a report says, as data (docs/report-schema.md), and the ways out: JSON, text, a
// file written atomically, a descriptor, a device or a FIFO. Built from an allocator with no
// allocator lock held across the build: pools are copied one at a time, then everything is
// aggregated and symbolized.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "stats.h"
#include "backend/backend.h"
#include "base/bounded_write.h"
#include "base/status.h"
#include "report/growth.h"
#include "report/process_info.h"
#include "report/timeline.h"
#include "trace/call_site_table.h"
#include "trace/symbolizer.h"

namespace tracepool::core {

class allocator;

inline constexpr const char* report_schema = "tracepool.report/1";

// What keeps some of a site's blocks alive, as the host named it (tracepool's Python package follows
// referrers from the objects that expose the blocks: "list `kept` (global in train.py)"). Reports
// made by the library alone have none; the package adds them to the JSON before rendering.
struct holder_summary {
  std::string holder;
  int64_t bytes = 0;   // of the distinct blocks it holds
  int64_t blocks = 0;
  std::string example;  // the access path of one of them from its root ("kept[17]")
};

// A site's share of one device's memory (site_summary::by_device, cached_summary::by_device).
struct device_share {
  int device = 0;
  int64_t bytes = 0;
  int64_t blocks = 0;
};

// How the search for holders went, when one was made.
struct holder_search {
  bool made = false;
  bool complete = true;  // false: cut short by its time budget (note says so)
  int64_t objects = 0;   // Python objects examined
  int64_t exposing = 0;  // of them, those exposing a block
  double seconds = 0;
  std::string note;
};

// Memory held by one call site (stack + tags). Sizes are the bytes requested; with sampling on,
// bytes and blocks are unbiased estimates.
struct site_summary {
  uint32_t site = 0;  // 0: no call site known (capture off, or the table was full)
  std::vector<std::string> tags;
  std::vector<frame_info> frames;  // innermost first, tracepool's own frames removed
  int64_t bytes = 0;               // live requested bytes
  int64_t blocks = 0;
  int64_t block_bytes = 0;  // live bytes at the rounded sizes the device holds
  int64_t peak_bytes = 0;   // highest live bytes (summed over merged stacks: an upper bound)
  int64_t total_bytes = 0;  // allocated since the start (freed or not)
  int64_t total_blocks = 0;
  std::vector<int64_t> live_at_marks;  // live bytes when each mark was made
  bool growing = false;                // across the marks, or the automatic ones (report::growth_basis)
  std::vector<int64_t> growth_floors;  // automatic basis: the floor of each window (growth.h)
  // Live bytes at each kept automatic mark, for the sites a timeline draws: the largest and the
  // growing ones (auto_series_sites at most); empty for the rest.
  std::vector<int64_t> live_at_auto_marks;
  std::vector<device_share> by_device;  // device ascending; one entry where a single device holds it
  std::vector<holder_summary> held_by;  // what keeps it alive, where the host could tell; bytes descending
  std::vector<std::pair<uint64_t, int64_t>> addresses;  // (address, bytes) of its live blocks, when asked
};

// Live blocks of one site born before a mark and still alive after it and every later one, grouped
// by the latest kept mark before their birth.
struct retained_summary {
  size_t leak = 0;             // index into report::leaks (the site)
  int born_after = -1;         // index into report::marks of that kept mark; -1: born before the first mark
  uint64_t marks_survived = 0; // marks made since the youngest of them was born (>= 1)
  int64_t bytes = 0;
  int64_t blocks = 0;
};

// Reserved but free memory, by the site whose blocks last held it (or that grew the segment).
struct cached_summary {
  uint32_t site = 0;
  std::vector<std::string> tags;
  std::vector<frame_info> frames;
  int64_t bytes = 0;
  int64_t blocks = 0;
  int64_t largest_free_block = 0;
  int64_t inactive_split_bytes = 0;  // free bytes inside segments that are partly in use
  std::vector<device_share> by_device;
};

// Memory of a private pool still retained (a CUDA graph's, a torch.cuda.MemPool's; Note [Private
// pools]): a group of its own. Its live blocks are not leaks (the program still holds what keeps
// them), and the free memory inside it is not cache (only the pool's own allocations may reuse it).
// Blocks of a retired pool are ordinary memory again.
struct pool_site_summary {
  uint32_t site = 0;
  std::vector<frame_info> frames;
  int64_t bytes = 0;  // live requested bytes (estimates with sampling on, as a leak's)
  int64_t blocks = 0;
};

inline constexpr const char* unlabelled_pool = "private pool";

struct pool_summary {
  int device = 0;
  uint64_t pool = 0;
  std::string label;  // its kind (tracepool_pool_label), else unlabelled_pool
  uint32_t site = 0;  // the call that created it
  std::vector<frame_info> frames;
  int64_t bytes = 0;                     // live requested bytes, exact
  int64_t blocks = 0;                    // live blocks
  int64_t block_bytes = 0;               // their rounded sizes
  int64_t reserved_bytes = 0;            // its segments
  int64_t cached_bytes = 0;              // free inside them
  std::vector<pool_site_summary> sites;  // where its live blocks were allocated: bytes descending, the top few
};

inline constexpr size_t pool_sites_kept = 5;

// Sites whose series over the automatic marks a report keeps (site_summary::live_at_auto_marks):
// enough for a timeline's lines, few enough that 512 marks of them stay small.
inline constexpr size_t auto_series_sites = 32;

struct device_summary {
  int device = 0;
  // Whether this process had a context on the device (Note [No context as a side effect] in backend.h).
  // Without one it has used nothing there, and the figures below are NVML's.
  bool context = true;
  device_stats stats;
  int64_t cached_bytes = 0;  // free memory outside retained private pools
  int64_t largest_free_block = 0;
  // What the driver says of the whole device when the report was made (cuMemGetInfo: total - free,
  // every process's memory and the driver's own); 0 when it could not say. Note [Where the memory went]
  int64_t total_bytes = 0;
  int64_t used_bytes = 0;
  // The processes using the device (NVML's list on CUDA), bytes descending; when none could be listed,
  // `processes_listed` is false and `processes_note` says why.
  std::vector<backend::process_usage> processes;
  bool processes_listed = false;
  std::string processes_note;
  // Note [Fragmentation in reports]. "" and -1: not known (reports made before these fields).
  std::string segments;             // segments_classic or segments_growable, what the device uses
  bool growable_available = false;  // the backend can map pages on it (backend::page_size != 0)
  int64_t free_page_bytes = -1;     // of cached_bytes, those in whole free_page_size pages
  // Memory seen outside the pool (Note [Observed memory] in observed.h): on the device, managed (on the
  // device only where the program touched it, so not part of the driver's figure), and pinned host memory
  // its context made. 0 in reports made before these fields.
  int64_t observed_bytes = 0;
  int64_t observed_managed_bytes = 0;
  int64_t observed_host_bytes = 0;
};

// Note [Fragmentation in reports]
// An out-of-memory error with memory cached raises two questions: how much of the cache could not
// serve the request, and would growable segments (Note [Growable segments] in block.h) have served it.
// The first is fragmentation_bytes: the cache outside its largest free block (a request larger than
// that block cannot use it, whatever its size). The second is free_page_bytes: the free bytes of the
// cache that lie in whole pages of free_page_size at page-aligned addresses, which growable segments
// give back to the device (empty_cache, the OOM retry) while their segment is still partly in use.
// Together with what the driver says is free, they bound what the device could have offered the
// request. An estimate, optimistic: the large pool maps 20 MiB pieces, not single pages, and the
// request needs them in one stretch. Counted as cached_bytes is: free blocks outside retained private
// pools, neither live nor pending.
inline constexpr const char* segments_classic = "classic";
inline constexpr const char* segments_growable = "growable";
inline constexpr int64_t free_page_size = int64_t{2} << 20;  // a device page (CUDA's granularity)

// Cached bytes outside the largest free block (>= 0).
inline int64_t fragmentation_bytes(const device_summary& d) {
  return d.cached_bytes > d.largest_free_block ? d.cached_bytes - d.largest_free_block : 0;
}

// Bytes the driver counts used on the device that tracepool has not reserved (>= 0).
int64_t outside_bytes(const device_summary& d);

// A device's used bytes by process (Note [Where the memory went]), for a list that was made.
struct process_split {
  bool self_listed = false;    // this process is listed (not when NVML sees another PID namespace)
  bool self_known = false;     // ... with a figure
  int64_t self_bytes = 0;      // what NVML counts for it: tracepool's reserved bytes, its context, libraries
  int64_t others_bytes = 0;    // every other process listed with a figure
  int others = 0;              // other processes listed
  int unknown = 0;             // processes listed without a figure (this one included)
  int64_t unlisted_bytes = 0;  // used_bytes less every figure listed (>= 0): the driver's own, and
                               // the processes listed without a figure
};
process_split split_by_process(const device_summary& d, int64_t pid);

struct mark_summary {
  std::string label;
  uint64_t index = 0;  // marks made before it
  uint64_t time_ns = 0;
  int64_t live_bytes = 0;
  int64_t reserved_bytes = -1;  // reserved on all devices then; -1: not recorded (older reports)
};

struct report {
  std::string reason;  // "demand" | "exit" | "oom"
  uint64_t time_ns = 0;
  process_summary process;  // Note [Ranks]
  std::string backend;
  std::string capture;  // "off" | "native" | "python" | "all" | "hybrid"
  std::string unwinder;
  int capture_depth = 0;
  int python_depth = 0;
  size_t sample_bytes = 0;  // 0: every allocation captured, figures exact
  uint32_t sites = 0;       // call sites interned so far
  uint64_t sites_dropped = 0;
  uint64_t cfi_slow_stacks = 0;  // process-wide: captures the cfi unwinder handed to boost
  uint64_t cfi_walks_replayed = 0;  // process-wide: cfi captures that re-read a remembered walk,
  uint64_t cfi_walks_taken = 0;     // and those that walked (cfi_unwinder.h)
  int cfi_last_slow_reason = 0;  // and why the last one did (cfi_unwinder.h), where
  frame_info cfi_last_slow_frame;
  std::vector<device_summary> devices;
  std::vector<site_summary> leaks;  // bytes descending
  std::vector<retained_summary> retained;
  std::vector<cached_summary> cached;  // bytes descending
  std::vector<pool_summary> pools;     // retained private pools, reserved bytes descending
  std::vector<mark_summary> marks;  // the kept ones (Note [Marks without end] in mark_window.h)
  uint64_t marks_made = 0;          // in all
  std::vector<mark_summary> auto_marks;  // the kept automatic ones (Note [Growth without marks])
  uint64_t auto_marks_made = 0;
  uint64_t auto_mark_ms = 0;        // their spacing when the report was made (0: off)
  double auto_mark_seconds = 0;     // spent taking them, in all
  std::string growth_basis = "none";  // growth_basis_* below
  holder_search holders;
  // From the allocation history (history:N; empty without one): each device's allocated and reserved
  // bytes after each event it still holds (Note [Timeline from the history]), and the events recorded
  // in all.
  std::vector<device_timeline> timeline;
  uint64_t history_events = 0;
  // Set for reason "oom".
  int oom_device = -1;
  size_t oom_requested = 0;
  std::string oom_message;
};

// What report::growth_basis says: which marks told growing sites apart.
inline constexpr const char* growth_basis_marks = "marks";            // the program's (tracepool_mark)
inline constexpr const char* growth_basis_auto = "automatic marks";   // none of its own: automatic ones
inline constexpr const char* growth_basis_none = "none";              // too few of either

// With `addresses`, each leak lists its live blocks (site_summary::addresses).
status build_report(allocator& a, const char* reason, report* out, bool addresses = false);
// The memory held now and the allocation history in the layout of PyTorch's
// torch.cuda.memory._snapshot(), as JSON (torch_snapshot.cpp): what memory_viz reads.
status build_torch_snapshot(allocator& a, std::string* out);
std::string to_json(const report& r);
std::string to_text(const report& r, size_t top_sites = 10);
// A report saved as JSON (to_json's output, or any text of schema tracepool.report/1) read back, so
// that to_text renders it exactly as it rendered the live report (report_reader.cpp). The text is
// untrusted: anything but a well-formed report is invalid_argument with a message that begins with
// `subject` and names the JSON path of the first problem ("r.json: leaks[3].bytes must be a
// non-negative integer, not -1", "r.json has schema tracepool.report/2; this tracepool reads
// tracepool.report/1", "r.json is not a tracepool report (not JSON: ...)"). Never throws.
status read_report_json(std::string_view text, report* out, const char* subject = "the report");
// What a host's holder search found (Note [Who holds it] in bindings/python/tracepool/_holders.py), as
// JSON: {"held_by": {"<leak index>": [holder, ...]}, "holder_search": {...}}, each holder and the search
// as the report's JSON has them. Read into r's leaks and r->holders; anything else is invalid_argument
// naming the first problem, and r is left as it was. Never throws.
status read_holders_json(std::string_view text, report* r);
// One self-contained HTML page (report_html.cpp) that draws the reports in a browser: one report, or
// several (the ranks of one job), each a view of its own and all of them merged.
std::string to_html(const report& r);
std::string to_html(const std::vector<const report*>& reports);
// The same page holding `data_json` as it is (a diff's, compare.cpp: the change between two reports and
// the two reports), its window named `title`.
std::string to_html(const std::string& title, const std::string& data_json);

enum class report_format { json, text, html };
// `format` "json", "text" or "html"; nullptr or "": by `path`'s extension (".json" JSON, ".html" or
// ".htm" HTML, anything else text; no path: text). Anything else is invalid_argument ("unknown report
// format 'xml': expected one of json, text, html").
status report_format_of(const char* format, const char* path, report_format* out);
std::string render(const report& r, report_format format, size_t top_sites = 10);

// The few lines added to an out-of-memory message: largest free block, cached bytes, fragmentation and
// whether growable segments would have helped (Note [Fragmentation in reports]), top sites.
std::string oom_summary(const report& r, int device);

// Writes the report to `path` (report_file.cpp, Note [Report paths]): "stderr", /dev/stdout,
// /dev/stderr, /dev/fd/N and /proc/self/fd/N go straight into that descriptor; a new path or a
// regular file is replaced atomically (a reader never sees half a report, a killed writer leaves no
// temporary file); a character device or a FIFO is written in place (a FIFO without a reader is an
// error); anything else, a symbolic link included, is refused and left alone.
// format: as report_format_of's; top_sites as to_text's.
// A write that must wait for a reader (a pipe, a FIFO) waits at most 10 s for each step of progress,
// and gives up when SIGINT arrives (Note [Bounded writes] in base/bounded_write.h).
status write_report_to(const report& r, const char* path, const char* format, size_t top_sites = 10);
// The same for any bytes (tracepool_write_file), the wait for a reader at most `stall_ms` a step. data
// may be NULL when size is 0.
status write_file_to(const char* path, const void* data, size_t size, int stall_ms = default_write_stall_ms);
// Whether a report could be written at `path` (its rank's path, Note [Ranks]) now, writing nothing: ok,
// or the error the write would give (a missing or read-only folder, a directory, a link, a name too
// long, a descriptor not open for writing). A FIFO without a reader yet is fine.
status check_report_path(const char* path);
// write_file_to, and where that fails, a new file in the temporary folder (Note [When a report cannot
// be written] in report_file.cpp). ok: *written_to says where it went, and *why_not_path why not at
// `path` ("" when it went there). Otherwise neither could be written, and the error is the fallback's.
status write_file_or_fallback(const char* path, const void* data, size_t size, std::string* written_to,
                              std::string* why_not_path);

std::string human_bytes(int64_t bytes);

}  // namespace tracepool::core
