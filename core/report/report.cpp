#include "report/report.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <map>
#include <unordered_map>

#include "allocator.h"
#include "trace/tags.h"

namespace tracepool::core {

namespace {

uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

// Live blocks of one site, as counted while walking the pools.
struct live_tally {
  int64_t bytes = 0;
  int64_t blocks = 0;  // x block_unit
  double block_bytes = 0;
  std::map<uint32_t, std::pair<int64_t, int64_t>> by_birth;  // birth -> (bytes, blocks x block_unit)
};

int64_t whole_blocks(int64_t fixed) { return (fixed + block_unit / 2) / block_unit; }

// Frames and tags of the sites a report names, symbolized together (each address once).
class site_describer {
 public:
  explicit site_describer(call_site_table& sites) : sites_(sites) {}

  void want(uint32_t site) {
    if (!sites_.ready(site)) return;
    const site_record& r = sites_.at(site);
    for (uint32_t i = 0; i < r.depth; ++i) addresses_.emplace(r.frames[i], frame_info{});
  }
  void resolve() {
    std::vector<uintptr_t> all;
    all.reserve(addresses_.size());
    for (auto& [pc, info] : addresses_) all.push_back(pc);
    const std::vector<frame_info> resolved = symbolize(all);
    for (size_t i = 0; i < all.size(); ++i) addresses_[all[i]] = resolved[i];
  }
  void describe(uint32_t site, std::vector<std::string>* tags, std::vector<frame_info>* frames) {
    if (!sites_.ready(site)) return;
    const site_record& r = sites_.at(site);
    *tags = tag_labels(r.tags);
    for (uint32_t i = 0; i < r.depth; ++i) frames->push_back(addresses_[r.frames[i]]);
  }

 private:
  call_site_table& sites_;
  std::unordered_map<uintptr_t, frame_info> addresses_;
};

}  // namespace

bool is_growing(const std::vector<int64_t>& v) {
  int rises = 0;
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i] < v[i - 1]) return false;
    rises += v[i] > v[i - 1];
  }
  return rises >= 2 && v.back() > v[v.size() - 2];
}

status build_report(allocator& a, const char* reason, report* out) {
  tracer& t = a.call_sites();
  call_site_table& sites = t.sites();
  report r;
  r.reason = reason;
  r.time_ns = now_ns();
  r.backend = a.device_backend().name();
  r.capture = t.mode() == capture_mode::off ? "off" : "native";
  r.unwinder = t.mode() == capture_mode::off ? "" : t.stack_unwinder().name();
  r.capture_depth = t.depth();
  r.sample_bytes = t.sample_bytes();
  r.sites = sites.end() - 1;
  r.sites_dropped = sites.dropped();
  const std::vector<mark_record> marks = t.marks();
  for (const mark_record& m : marks) r.marks.push_back(mark_summary{m.label, m.time_ns, m.live_bytes});

  // 1. Walk every block once: live blocks by site (and birth), free blocks by last holder.
  std::unordered_map<uint32_t, live_tally> live;
  std::unordered_map<uint32_t, cached_summary> cached;
  std::vector<block_record> blocks;
  for (int d = 0; d < a.device_count(); ++d) {
    device_summary ds;
    ds.device = d;
    if (status s = a.stats(d, &ds.stats); s != status::ok) return s;
    blocks.clear();
    if (status s = a.collect_blocks(d, &blocks); s != status::ok) return s;
    for (const block_record& b : blocks) {
      if (!b.live) {
        cached_summary& c = cached[b.site];
        c.site = b.site;
        c.bytes += static_cast<int64_t>(b.size);
        c.blocks += 1;
        c.largest_free_block = std::max(c.largest_free_block, static_cast<int64_t>(b.size));
        if (b.split_free) c.inactive_split_bytes += static_cast<int64_t>(b.size);
        ds.cached_bytes += static_cast<int64_t>(b.size);
        ds.largest_free_block = std::max(ds.largest_free_block, static_cast<int64_t>(b.size));
        continue;
      }
      // Sampling on: a block that was not sampled is represented by the weights of those that were.
      if (b.site == 0 && r.sample_bytes != 0) continue;
      live_tally& l = live[b.site];
      const int64_t bytes = t.weighted_bytes(b.requested), count = t.weighted_blocks(b.requested);
      l.bytes += bytes;
      l.blocks += count;
      l.block_bytes += static_cast<double>(b.size) * t.weight(b.requested);
      auto& born = l.by_birth[b.birth];
      born.first += bytes;
      born.second += count;
    }
    r.devices.push_back(std::move(ds));
  }

  // 2. One summary per site: what it holds now, its counters, its live bytes at each mark.
  site_describer describer(sites);
  for (auto& [site, l] : live) {
    site_summary s;
    s.site = site;
    s.bytes = l.bytes;
    s.blocks = whole_blocks(l.blocks);
    s.block_bytes = std::llround(l.block_bytes);
    if (sites.ready(site)) {
      const site_record& rec = sites.at(site);
      s.peak_bytes = rec.peak_bytes.load(std::memory_order_relaxed);
      s.total_bytes = rec.total_bytes.load(std::memory_order_relaxed);
      s.total_blocks = whole_blocks(rec.total_blocks.load(std::memory_order_relaxed));
    }
    for (const mark_record& m : marks) {
      auto it = std::lower_bound(m.site_live.begin(), m.site_live.end(), std::make_pair(site, INT64_MIN));
      s.live_at_marks.push_back(it != m.site_live.end() && it->first == site ? it->second : 0);
    }
    s.growing = is_growing(s.live_at_marks);
    describer.want(site);
    r.leaks.push_back(std::move(s));
  }
  auto by_bytes = [](const auto& x, const auto& y) {
    if (x.bytes != y.bytes) return x.bytes > y.bytes;
    if (x.blocks != y.blocks) return x.blocks > y.blocks;
    return x.site < y.site;
  };
  std::sort(r.leaks.begin(), r.leaks.end(), by_bytes);

  // 3. Retained: live blocks that outlived at least one mark, by site and the epoch of their birth.
  for (size_t i = 0; i < r.leaks.size(); ++i)
    for (const auto& [birth, tally] : live[r.leaks[i].site].by_birth)
      if (birth < marks.size()) r.retained.push_back(retained_summary{i, birth, tally.first, whole_blocks(tally.second)});
  std::sort(r.retained.begin(), r.retained.end(), [](const retained_summary& x, const retained_summary& y) {
    if (x.bytes != y.bytes) return x.bytes > y.bytes;
    return x.leak != y.leak ? x.leak < y.leak : x.born_after < y.born_after;
  });

  for (auto& [site, c] : cached) {
    describer.want(site);
    r.cached.push_back(std::move(c));
  }
  std::sort(r.cached.begin(), r.cached.end(), by_bytes);

  // 4. Names, files and lines, only now.
  describer.resolve();
  for (site_summary& s : r.leaks) describer.describe(s.site, &s.tags, &s.frames);
  for (cached_summary& c : r.cached) describer.describe(c.site, &c.tags, &c.frames);
  *out = std::move(r);
  return status::ok;
}

}  // namespace tracepool::core
