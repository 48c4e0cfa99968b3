// report.cpp: build_report, the pipeline every report runs: collect (held_memory.h), describe
// (site_describer.h), then group: call sites as a reader tells them apart, retained blocks by mark,
// cached memory by its last holder, and each retained private pool apart from all three.
#include "report/report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>

#include "base/clock.h"
#include "report/held_memory.h"
#include "report/site_describer.h"
#include "trace/cfi_unwinder.h"
#include "trace/tags.h"

namespace tracepool::core {

namespace {

// Live blocks of one site, as counted while walking the pools.
struct live_tally {
  int64_t bytes = 0;
  int64_t blocks = 0;  // x block_unit
  double block_bytes = 0;
  std::map<uint32_t, std::pair<int64_t, int64_t>> by_birth;  // birth -> (bytes, blocks x block_unit)
  std::map<int, std::pair<int64_t, int64_t>> by_device;       // device -> (bytes, blocks x block_unit)
  std::vector<std::pair<uint64_t, int64_t>> addresses;        // when asked

  // With sampling on, a sampled block stands for 1/P(sampled) blocks of its size.
  void add(const tracer& t, const block_record& b, int device) {
    const int64_t weighted = t.weighted_bytes(b.requested), count = t.weighted_blocks(b.requested);
    bytes += weighted;
    blocks += count;
    block_bytes += static_cast<double>(b.size) * t.weight(b.requested);
    auto& born = by_birth[b.birth];
    born.first += weighted;
    born.second += count;
    auto& on = by_device[device];
    on.first += weighted;
    on.second += count;
  }
};

// Adds `bytes` and `blocks` to the entry of `device` in `shares` (device ascending).
void add_share(std::vector<device_share>* shares, int device, int64_t bytes, int64_t blocks) {
  auto it = std::lower_bound(shares->begin(), shares->end(), device,
                             [](const device_share& d, int dev) { return d.device < dev; });
  if (it == shares->end() || it->device != device) it = shares->insert(it, device_share{device, 0, 0});
  it->bytes += bytes;
  it->blocks += blocks;
}

int64_t whole_blocks(int64_t fixed) { return (fixed + block_unit / 2) / block_unit; }

// The bytes of [address, address + size) in whole free_page_size pages (Note [Fragmentation in reports]).
int64_t whole_page_bytes(uintptr_t address, size_t size) {
  const auto page = static_cast<uintptr_t>(free_page_size);
  const uintptr_t first = (address + page - 1) / page * page, end = (address + size) / page * page;
  return end > first ? static_cast<int64_t>(end - first) : 0;
}

// Largest first; ties by blocks, then by site id, so that a report does not depend on hash order.
constexpr auto by_bytes = [](const auto& x, const auto& y) {
  if (x.bytes != y.bytes) return x.bytes > y.bytes;
  if (x.blocks != y.blocks) return x.blocks > y.blocks;
  return x.site < y.site;
};

// What a reader tells call sites apart by: tags, then each frame's function, file, line and module
// (the address where nothing is known), the interpreter's own frames left out.
std::string site_key(const std::vector<std::string>& tags, const std::vector<frame_info>& frames) {
  std::string key;
  for (const std::string& t : tags) key += t + '\x1f';
  key += '\x1e';
  for (const frame_info& f : frames) {
    // The interpreter's own C frames between script frames change as CPython specialises a call
    // (a vectorcall helper appears or goes), yet name no line of anyone's: not part of a site.
    if (f.interpreter) continue;
    if (f.function.empty() && f.file.empty() && !f.script)
      key += std::to_string(f.address);
    else
      key += f.function + '\x1f' + f.file + '\x1f' + std::to_string(f.line) + '\x1f' + f.module;
    key += '\x1e';
  }
  return key;
}

// Growth of a call site as a user reads it, which may merge several interned stacks (site_key). One
// stack: its trend, exact over every mark. Several: the series of their summed bytes, exact while
// every mark is kept; once marks were dropped, growing only if none of them ever fell, one rose at
// two marks at least, and one rose into the latest (stacks that name the same lines rarely differ).
bool group_growing(const std::vector<site_trend>& trends, const std::vector<int64_t>& kept_series,
                   uint64_t marks_made) {
  if (trends.size() == 1) return trend_is_growing(trends[0]);
  if (marks_made == kept_series.size()) return is_growing(kept_series);
  site_trend all;
  for (const site_trend& t : trends) {
    all.fell = all.fell || t.fell;
    all.rises = std::max(all.rises, t.rises);
    all.rose_last = all.rose_last || t.rose_last;
  }
  return trend_is_growing(all);
}

// The summed live bytes of `members` (site ids, ascending) at each of `marks`.
std::vector<int64_t> series_of(const std::vector<uint32_t>& members, const std::vector<mark_record>& marks) {
  std::vector<int64_t> out(marks.size(), 0);
  for (size_t m = 0; m < marks.size(); ++m) {
    const auto& at_mark = marks[m].site_live;  // ids ascending
    for (uint32_t site : members) {
      auto found = std::lower_bound(at_mark.begin(), at_mark.end(), std::make_pair(site, INT64_MIN));
      if (found != at_mark.end() && found->first == site) out[m] += found->second;
    }
  }
  return out;
}

// Retained private pools (Note [Private pools]), each a group of its own: its segments, the free
// memory inside them, its live blocks and their sites. Read while the blocks are walked, so that a
// pool's blocks are counted here and nowhere else.
class pool_groups {
 public:
  explicit pool_groups(const tracer& t) : tracer_(t) {}

  // The device whose blocks add() is given next.
  void start_device(const device_blocks& dev) {
    of_device_.clear();
    for (const private_pool_info& info : dev.pools) {
      of_device_[info.pool] = pools_.size();
      pools_.emplace_back();
      pool_summary& s = pools_.back().summary;
      s.device = dev.device;
      s.pool = info.pool;
      s.label = info.label.empty() ? unlabelled_pool : info.label;
      s.site = info.site;
    }
  }

  // Counts the block if a retained pool holds it; false if it is ordinary memory.
  bool add(const block_record& b) {
    if (b.pool == 0) return false;
    const auto it = of_device_.find(b.pool);
    if (it == of_device_.end()) return false;  // its pool retired: ordinary memory again
    tally& p = pools_[it->second];
    p.summary.reserved_bytes += static_cast<int64_t>(b.size);
    if (b.pending) return true;  // freed, waiting for record_stream streams: neither live nor free
    if (!b.live) {
      p.summary.cached_bytes += static_cast<int64_t>(b.size);
      return true;
    }
    p.summary.bytes += static_cast<int64_t>(b.requested);
    p.summary.blocks += 1;
    p.summary.block_bytes += static_cast<int64_t>(b.size);
    // Sampling on: a block not sampled (site 0) is represented by the weights of those that were.
    if (b.site != 0 || tracer_.sample_bytes() == 0) p.live[b.site].add(tracer_, b, p.summary.device);
    return true;
  }

  void want(site_describer& describer) const {
    for (const tally& p : pools_) {
      describer.want(p.summary.site);
      for (const auto& [site, l] : p.live) describer.want(site);
    }
  }

  // Every pool described, reserved bytes descending.
  std::vector<pool_summary> summaries(site_describer& describer) {
    std::vector<pool_summary> out;
    for (tally& p : pools_) {
      std::vector<std::string> tags;  // a pool is named by where it was made; its tags say nothing
      describer.describe(p.summary.site, &tags, &p.summary.frames);
      p.summary.sites = top_sites(p.live, describer);
      out.push_back(std::move(p.summary));
    }
    std::sort(out.begin(), out.end(), [](const pool_summary& x, const pool_summary& y) {
      if (x.reserved_bytes != y.reserved_bytes) return x.reserved_bytes > y.reserved_bytes;
      return x.device != y.device ? x.device < y.device : x.pool < y.pool;
    });
    return out;
  }

 private:
  struct tally {
    pool_summary summary;
    std::unordered_map<uint32_t, live_tally> live;  // by site
  };

  // The sites of a pool's live blocks, merged as a reader tells them apart (site_key, by frames
  // alone), the largest pool_sites_kept of them.
  static std::vector<pool_site_summary> top_sites(const std::unordered_map<uint32_t, live_tally>& live,
                                                  site_describer& describer) {
    std::vector<uint32_t> ids;
    for (const auto& [site, l] : live) ids.push_back(site);
    std::sort(ids.begin(), ids.end());  // merged entries take the smallest site id
    std::vector<pool_site_summary> out;
    std::vector<int64_t> blocks_fixed;
    std::unordered_map<std::string, size_t> group_of;
    for (uint32_t site : ids) {
      pool_site_summary s;
      s.site = site;
      std::vector<std::string> tags;
      describer.describe(site, &tags, &s.frames);
      auto [it, is_new] = group_of.emplace(site_key({}, s.frames), out.size());
      if (is_new) {
        out.push_back(std::move(s));
        blocks_fixed.push_back(0);
      }
      out[it->second].bytes += live.at(site).bytes;
      blocks_fixed[it->second] += live.at(site).blocks;
    }
    for (size_t i = 0; i < out.size(); ++i) out[i].blocks = whole_blocks(blocks_fixed[i]);
    std::sort(out.begin(), out.end(), by_bytes);
    if (out.size() > pool_sites_kept) out.resize(pool_sites_kept);
    return out;
  }

  const tracer& tracer_;
  std::vector<tally> pools_;
  std::map<uint64_t, size_t> of_device_;  // index into pools_ of the current device's pools, by id
};

// ---- The stages of build_report, in its order ----------------------------------------------------

// What the report says of the process and of how it was traced, and the marks: the header.
void describe_tracing(allocator& a, const char* reason, report* r) {
  tracer& t = a.call_sites();
  const call_site_table& sites = t.sites();
  r->reason = reason;
  r->time_ns = realtime_ns();
  r->process = this_process();
  r->backend = a.device_backend().name();
  r->capture = capture_mode_name(t.mode());
  r->unwinder = captures_native(t.mode()) ? t.stack_unwinder().name() : "";
  r->capture_depth = t.depth();
  r->python_depth = t.script_depth();
  r->sample_bytes = t.sample_bytes();
  r->sites = sites.end() - 1;
  r->sites_dropped = sites.dropped();
  r->cfi_slow_stacks = cfi_slow_stacks();
  const cfi_walk_counts walks = cfi_walks();
  r->cfi_walks_replayed = walks.replayed;
  r->cfi_walks_taken = walks.walked;
  if (const uint64_t last = cfi_last_slow(); last != 0) {
    r->cfi_last_slow_reason = static_cast<int>(last & 0xffff);
    r->cfi_last_slow_frame = symbolize({static_cast<uintptr_t>(last >> 16)})[0];
  }
}

// The kept marks of both kinds, into the report and (as recorded) into *marks and *auto_marks, and
// what growth is told by. The program's marks take precedence (Note [Growth without marks]).
void take_marks(tracer& t, report* r, std::vector<mark_record>* marks, std::vector<mark_record>* auto_marks) {
  *marks = t.marks(&r->marks_made);
  for (const mark_record& m : *marks)
    r->marks.push_back(mark_summary{m.label, m.index, m.time_ns, m.live_bytes, m.reserved_bytes});
  *auto_marks = t.auto_marks(&r->auto_marks_made);
  for (const mark_record& m : *auto_marks)
    r->auto_marks.push_back(mark_summary{m.label, m.index, m.time_ns, m.live_bytes, m.reserved_bytes});
  r->auto_mark_ms = t.auto_mark_interval_ns() / 1000000;
  r->auto_mark_seconds = static_cast<double>(t.auto_mark_cost_ns()) * 1e-9;
  r->growth_basis = r->marks_made > 0                          ? growth_basis_marks
                    : auto_marks->size() >= min_growth_marks ? growth_basis_auto
                                                               : growth_basis_none;
}

// Every block, walked once: a retained private pool's by pool, other live blocks by site (and birth),
// other free blocks by last holder.
struct walked_blocks {
  std::unordered_map<uint32_t, live_tally> live;
  std::unordered_map<uint32_t, cached_summary> cached;
};

// One device's summary: its statistics, its blocks tallied into *w and *pools, and what the driver
// says of its memory and processes (Note [Where the memory went]).
device_summary walk_device(allocator& a, const device_blocks& dev, const report& r, bool addresses,
                           pool_groups* pools, walked_blocks* w) {
  const tracer& t = a.call_sites();
  device_summary ds;
  ds.device = dev.device;
  ds.context = a.device_backend().has_context(dev.device);
  ds.stats = dev.stats;
  ds.segments = a.growable_segments(dev.device) ? segments_growable : segments_classic;
  ds.growable_available = a.device_backend().page_size(dev.device) != 0;
  ds.free_page_bytes = 0;
  pools->start_device(dev);
  for (const block_record& b : dev.blocks) {
    if (pools->add(b)) continue;  // a retained private pool's: neither a leak nor cache
    if (b.pending) continue;      // freed by its owner: neither held nor cached
    if (!b.live) {
      cached_summary& c = w->cached[b.site];
      c.site = b.site;
      c.bytes += static_cast<int64_t>(b.size);
      c.blocks += 1;
      c.largest_free_block = std::max(c.largest_free_block, static_cast<int64_t>(b.size));
      if (b.split_free) c.inactive_split_bytes += static_cast<int64_t>(b.size);
      add_share(&c.by_device, dev.device, static_cast<int64_t>(b.size), 1);
      ds.cached_bytes += static_cast<int64_t>(b.size);
      ds.largest_free_block = std::max(ds.largest_free_block, static_cast<int64_t>(b.size));
      ds.free_page_bytes += whole_page_bytes(b.address, b.size);
      continue;
    }
    // Sampling on: a block that was not sampled is represented by the weights of those that were.
    if (b.site == 0 && r.sample_bytes != 0) continue;
    live_tally& l = w->live[b.site];
    l.add(t, b, dev.device);
    // The bytes asked for, as the site's own figure counts them: a holder's share then adds up to it.
    if (addresses) l.addresses.emplace_back(b.address, static_cast<int64_t>(b.requested));
  }
  for (const observed_block& o : dev.observed) {  // live as pool blocks are, at sites of their own
    (o.kind == observed_kind::host      ? ds.observed_host_bytes
     : o.kind == observed_kind::managed ? ds.observed_managed_bytes
                                        : ds.observed_bytes) += static_cast<int64_t>(o.size);
    if (o.site == 0 && r.sample_bytes != 0) continue;
    block_record b{};
    b.site = o.site, b.birth = o.birth, b.size = b.requested = o.size, b.live = true, b.address = o.address;
    live_tally& l = w->live[b.site];
    l.add(t, b, dev.device);
    if (addresses) l.addresses.emplace_back(b.address, static_cast<int64_t>(b.size));
  }
  size_t free_bytes = 0, total_bytes = 0;
  if (a.memory_info(ds.device, &free_bytes, &total_bytes) == status::ok && free_bytes <= total_bytes) {
    ds.total_bytes = static_cast<int64_t>(total_bytes);
    ds.used_bytes = static_cast<int64_t>(total_bytes - free_bytes);
  }
  ds.processes_listed = a.processes(ds.device, &ds.processes, &ds.processes_note);
  if (!ds.processes_listed) ds.processes.clear();
  std::stable_sort(ds.processes.begin(), ds.processes.end(),
                   [](const auto& x, const auto& y) { return x.used_bytes > y.used_bytes; });
  return ds;
}

// The device timelines drawn from the allocation history, where one is kept (Note [Timeline from the
// history]).
void add_timeline(allocator& a, report* r) {
  const history* h = a.allocation_history();
  if (h == nullptr) return;
  const std::vector<history_entry> entries = h->entries(&r->history_events, timeline_events_read);
  std::vector<device_figures> now;
  for (const device_summary& d : r->devices)
    now.push_back(device_figures{d.device, d.stats.table.at(stat_kind::allocated_bytes, all_pools).current,
                                 d.stats.table.at(stat_kind::reserved_bytes, all_pools).current});
  r->timeline = timelines_from(entries, now);
}

// One call site as a user reads it, with what retained and the timeline still need of it.
struct leak_group {
  site_summary summary;
  std::vector<uint32_t> members;  // site ids
  std::map<uint32_t, std::pair<int64_t, int64_t>> by_birth;
  int64_t blocks_fixed = 0;
  double block_bytes = 0;
  std::vector<int64_t> auto_series;  // its live bytes at the automatic marks, when growth was told by them
};

// Live blocks grouped by call site as a user reads it: stacks that differ only in return addresses
// yet name the same lines (an unrolled loop calls from several addresses) are merged. Bytes descending,
// each with its growth.
std::vector<leak_group> group_leaks(tracer& t, const walked_blocks& w, site_describer& describer, const report& r,
                                    const std::vector<mark_record>& marks, const std::vector<mark_record>& auto_marks) {
  call_site_table& sites = t.sites();
  std::vector<leak_group> groups;
  std::unordered_map<std::string, size_t> group_of;
  std::vector<uint32_t> live_sites;
  for (const auto& [site, l] : w.live) live_sites.push_back(site);
  std::sort(live_sites.begin(), live_sites.end());  // merged entries take the smallest site id
  for (uint32_t site : live_sites) {
    const live_tally& l = w.live.at(site);
    site_summary s;
    describer.describe(site, &s.tags, &s.frames);
    auto [it, is_new] = group_of.emplace(site_key(s.tags, s.frames), groups.size());
    if (is_new) {
      groups.emplace_back();
      groups.back().summary = std::move(s);
      groups.back().summary.site = site;
    }
    leak_group& g = groups[it->second];
    g.members.push_back(site);
    g.summary.bytes += l.bytes;
    g.blocks_fixed += l.blocks;
    g.summary.addresses.insert(g.summary.addresses.end(), l.addresses.begin(), l.addresses.end());
    g.block_bytes += l.block_bytes;
    for (const auto& [birth, tally] : l.by_birth) {
      g.by_birth[birth].first += tally.first;
      g.by_birth[birth].second += tally.second;
    }
    for (const auto& [device, tally] : l.by_device) add_share(&g.summary.by_device, device, tally.first, tally.second);
    if (sites.ready(site)) {
      const site_record& rec = sites.at(site);
      g.summary.peak_bytes += rec.peak_bytes.load(std::memory_order_relaxed);
      g.summary.total_bytes += rec.total_bytes.load(std::memory_order_relaxed);
      g.summary.total_blocks += rec.total_blocks.load(std::memory_order_relaxed);  // x block_unit until the end
    }
  }
  for (leak_group& g : groups) {
    g.summary.blocks = whole_blocks(g.blocks_fixed);
    for (device_share& d : g.summary.by_device) d.blocks = whole_blocks(d.blocks);
    g.summary.block_bytes = std::llround(g.block_bytes);
    g.summary.total_blocks = whole_blocks(g.summary.total_blocks);
    g.summary.live_at_marks = series_of(g.members, marks);
    if (r.growth_basis == growth_basis_marks) {
      g.summary.growing = group_growing(t.trends(g.members), g.summary.live_at_marks, r.marks_made);
    } else if (r.growth_basis == growth_basis_auto) {
      g.auto_series = series_of(g.members, auto_marks);
      g.summary.growth_floors = window_floors(g.auto_series);
      g.summary.growing = floors_growing(g.auto_series, g.summary.growth_floors);
    }
  }
  std::sort(groups.begin(), groups.end(),
            [&](const leak_group& x, const leak_group& y) { return by_bytes(x.summary, y.summary); });
  return groups;
}

// The series a timeline draws over the automatic marks: the growing sites first, then the largest.
void draw_auto_series(std::vector<leak_group>* groups, const std::vector<mark_record>& auto_marks) {
  if (auto_marks.empty()) return;
  std::vector<leak_group*> drawn;
  for (leak_group& g : *groups)
    if (g.summary.growing) drawn.push_back(&g);
  for (leak_group& g : *groups)
    if (!g.summary.growing && drawn.size() < auto_series_sites) drawn.push_back(&g);
  drawn.resize(std::min(drawn.size(), auto_series_sites));
  for (leak_group* g : drawn)
    g->summary.live_at_auto_marks = g->auto_series.empty() ? series_of(g->members, auto_marks) : std::move(g->auto_series);
}

// The leaks into the report, each with its retained parts: live blocks that outlived at least one
// mark, by site and the latest kept mark made before their birth (the birth itself is exact: marks
// made before the block).
void add_leaks_and_retained(std::vector<leak_group>* groups, report* r) {
  for (size_t i = 0; i < groups->size(); ++i) {
    std::map<int, retained_summary> by_mark;
    for (const auto& [birth, tally] : (*groups)[i].by_birth) {
      if (birth >= r->marks_made) continue;  // no mark made since
      // The newest kept mark with index < birth.
      const auto after = std::partition_point(r->marks.begin(), r->marks.end(),
                                              [born = birth](const mark_summary& m) { return m.index < born; });
      const int kept = static_cast<int>(after - r->marks.begin()) - 1;
      retained_summary& t = by_mark[kept];
      t.leak = i;
      t.born_after = kept;
      t.marks_survived = r->marks_made - birth;  // births ascend: the youngest comes last
      t.bytes += tally.first;
      t.blocks += tally.second;
    }
    for (auto& [kept, t] : by_mark) {
      t.blocks = whole_blocks(t.blocks);
      r->retained.push_back(t);
    }
    r->leaks.push_back(std::move((*groups)[i].summary));
  }
  std::sort(r->retained.begin(), r->retained.end(), [](const retained_summary& x, const retained_summary& y) {
    if (x.bytes != y.bytes) return x.bytes > y.bytes;
    return x.leak != y.leak ? x.leak < y.leak : x.born_after < y.born_after;
  });
}

// Cached memory by its last holder, merged as the leaks are; bytes descending.
std::vector<cached_summary> group_cached(walked_blocks* w, site_describer& describer) {
  std::vector<uint32_t> cached_sites;
  for (const auto& [site, c] : w->cached) cached_sites.push_back(site);
  std::sort(cached_sites.begin(), cached_sites.end());
  std::vector<cached_summary> out;
  std::unordered_map<std::string, size_t> group_of;
  for (uint32_t site : cached_sites) {
    cached_summary& c = w->cached[site];
    describer.describe(site, &c.tags, &c.frames);
    auto [it, is_new] = group_of.emplace(site_key(c.tags, c.frames), out.size());
    if (is_new) {
      out.push_back(std::move(c));
      continue;
    }
    cached_summary& into = out[it->second];
    into.bytes += c.bytes;
    into.blocks += c.blocks;
    into.largest_free_block = std::max(into.largest_free_block, c.largest_free_block);
    into.inactive_split_bytes += c.inactive_split_bytes;
    for (const device_share& d : c.by_device) add_share(&into.by_device, d.device, d.bytes, d.blocks);
  }
  std::sort(out.begin(), out.end(), by_bytes);
  return out;
}

}  // namespace

status build_report(allocator& a, const char* reason, report* out, bool addresses) {
  tracer& t = a.call_sites();
  report r;
  describe_tracing(a, reason, &r);
  std::vector<mark_record> marks, auto_marks;
  take_marks(t, &r, &marks, &auto_marks);

  // 1. Collect, then walk every block once.
  held_memory held;
  if (status s = collect(a, &held); s != status::ok) return s;
  walked_blocks w;
  pool_groups pools(t);
  for (const device_blocks& dev : held.devices) r.devices.push_back(walk_device(a, dev, r, addresses, &pools, &w));
  add_timeline(a, &r);

  // 2. Describe: names, files and lines, only now, each address once.
  site_describer describer(t.sites());
  for (const auto& [site, l] : w.live) describer.want(site);
  for (const auto& [site, c] : w.cached) describer.want(site);
  pools.want(describer);
  describer.resolve();

  // 3. Group the leaks, 4. with their retained parts; 5. the cache; 6. the retained private pools.
  std::vector<leak_group> groups = group_leaks(t, w, describer, r, marks, auto_marks);
  draw_auto_series(&groups, auto_marks);
  add_leaks_and_retained(&groups, &r);
  r.cached = group_cached(&w, describer);
  r.pools = pools.summaries(describer);
  *out = std::move(r);
  return status::ok;
}

}  // namespace tracepool::core
