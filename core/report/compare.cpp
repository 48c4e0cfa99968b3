// compare.cpp: merge and diff of saved reports (compare.h). Each report is read, reduced to what the
// view needs (its process, totals and each site's bytes), and let go before the next is read: a merge
// holds one report at a time and the sites of them all.
#include "report/compare.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <set>
#include <tuple>
#include <unordered_map>

#include "base/printable.h"
#include "report/json_out.h"
#include "report/wording.h"

namespace tracepool::core {

namespace {

constexpr size_t many_reports = 8;  // more than this: min, median and max columns instead of one each

std::string signed_bytes(int64_t n) { return (n > 0 ? "+" : "") + human_bytes(n); }

// `text` padded with spaces to `width` bytes.
std::string padded(std::string text, size_t width) {
  if (text.size() < width) text.append(width - text.size(), ' ');
  return text;
}

// Sizes from a saved report are any non-negative int64: their sums stop at the largest.
int64_t add_bytes(int64_t a, int64_t b) {
  int64_t sum = 0;
  return __builtin_add_overflow(a, b, &sum) ? INT64_MAX : sum;
}

// What a site is across processes (compare.h): tags, then each frame's kind, function, file and line,
// each part after its length (the strings are a report's: no separator can be trusted).
std::string site_key(const std::vector<std::string>& tags, const std::vector<frame_info>& frames) {
  std::string key;
  const auto part = [&key](const std::string& s) { key += std::to_string(s.size()) + ':' + s; };
  key += std::to_string(tags.size()) + 't';
  for (const std::string& t : tags) part(t);
  for (const frame_info& f : frames) {
    key += f.script ? 'p' : 'n';
    part(f.function), part(f.file), part(std::to_string(f.line));
  }
  return key;
}

// The call sites of the reports read so far, each once, in the order first seen.
struct site_table {
  struct site {
    std::vector<std::string> tags;
    std::vector<frame_info> frames;
    std::string where;  // its title and tags (Note [Site titles])
  };
  std::vector<site> sites;
  std::unordered_map<std::string, size_t> index;

  size_t of(const std::vector<std::string>& tags, const std::vector<frame_info>& frames) {
    const auto [it, added] = index.emplace(site_key(tags, frames), sites.size());
    if (added) sites.push_back({tags, frames, site_title(frames) + tag_list(tags)});
    return it->second;
  }
};

// One report as a view needs it.
struct report_digest {
  std::string file, reason, backend, host;
  int64_t pid = 0, rank = -1, world_size = 0;
  int64_t live_bytes = 0, allocated_bytes = 0, reserved_bytes = 0, cached_bytes = 0;
  site_table sites;  // its own sites, first seen first, until placed among all reports' (place)
  std::unordered_map<size_t, int64_t> live, cached;  // site -> bytes (sites of one stack summed)
  std::set<size_t> growing;
  std::string label;  // set once all are read
};

void digest(const report& r, const std::string& name, report_digest* d) {
  d->file = name, d->reason = r.reason, d->backend = r.backend, d->host = r.process.host;
  d->pid = r.process.pid, d->rank = r.process.rank, d->world_size = r.process.world_size;
  for (const device_summary& dev : r.devices) {
    d->allocated_bytes = add_bytes(d->allocated_bytes, dev.stats.table.at(stat_kind::allocated_bytes, all_pools).current);
    d->reserved_bytes = add_bytes(d->reserved_bytes, dev.stats.table.at(stat_kind::reserved_bytes, all_pools).current);
    d->cached_bytes = add_bytes(d->cached_bytes, dev.cached_bytes);
  }
  for (const site_summary& s : r.leaks) {
    const size_t site = d->sites.of(s.tags, s.frames);
    d->live[site] = add_bytes(d->live[site], s.bytes);
    d->live_bytes = add_bytes(d->live_bytes, s.bytes);
    if (s.growing) d->growing.insert(site);
  }
  for (const cached_summary& c : r.cached) {
    const size_t site = d->sites.of(c.tags, c.frames);
    d->cached[site] = add_bytes(d->cached[site], c.bytes);
  }
}

status digest(const saved_text& saved, report_digest* d) {
  report r;
  if (status s = read_report_json(saved.text, &r, saved.name.c_str()); s != status::ok) return s;
  digest(r, saved.name, d);
  return status::ok;
}

// The report's sites among all reports' (`all`, in the order the reports are placed), so that which
// report names a shared site does not depend on the order the files were given.
void place(report_digest* d, site_table* all) {
  std::vector<size_t> global(d->sites.sites.size());
  for (size_t i = 0; i < global.size(); ++i) global[i] = all->of(d->sites.sites[i].tags, d->sites.sites[i].frames);
  const auto moved = [&](const std::unordered_map<size_t, int64_t>& local) {
    std::unordered_map<size_t, int64_t> out;
    for (const auto& [site, bytes] : local) out[global[site]] = bytes;
    return out;
  };
  d->live = moved(d->live), d->cached = moved(d->cached);
  std::set<size_t> growing;
  for (size_t site : d->growing) growing.insert(global[site]);
  d->growing = std::move(growing);
  d->sites = site_table{};
}

int64_t bytes_of(const std::unordered_map<size_t, int64_t>& held, size_t site) {
  const auto it = held.find(site);
  return it == held.end() ? 0 : it->second;
}

void write_site(json_out& j, const site_table::site& s) {
  j.key("where"), j.value(s.where);
  j.key("tags"), j.open('[');
  for (const std::string& t : s.tags) j.value(t);
  j.close(']');
  j.key("title"), j.value(site_title(s.frames));
  write_frames(j, s.frames, frame_schema::tracepool);
}

void counts(json_out& j, const char* key, const std::vector<int64_t>& values) {
  j.key(key), j.open('[');
  for (int64_t v : values) j.value(v);
  j.close(']');
}

// ---- merge ---------------------------------------------------------------------------------------

struct merged_site {
  size_t site = 0;
  std::vector<int64_t> live, cached;
  std::vector<bool> growing;
  int64_t total_live = 0, total_cached = 0;
  size_t most = 0;         // the report holding the most live bytes
  double imbalance = -1;   // its bytes over the mean; -1: no live bytes anywhere
};

struct merged {
  site_table table;
  std::vector<report_digest> reports;  // ranks in order, then reports without one, by file
  std::vector<merged_site> sites;      // live bytes descending, then cached, then by title
};

status merge(const std::vector<saved_text>& inputs, merged* m) {
  m->reports.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    if (status s = digest(inputs[i], &m->reports[i]); s != status::ok) return s;
  std::stable_sort(m->reports.begin(), m->reports.end(), [](const report_digest& a, const report_digest& b) {
    const auto key = [](const report_digest& d) { return std::make_tuple(d.rank < 0, d.rank < 0 ? 0 : d.rank); };
    return key(a) != key(b) ? key(a) < key(b) : a.file < b.file;
  });
  std::set<int64_t> ranks;
  for (const report_digest& d : m->reports)
    if (d.rank >= 0) ranks.insert(d.rank);
  const bool by_rank = ranks.size() == m->reports.size();
  for (report_digest& d : m->reports) d.label = by_rank ? "rank " + std::to_string(d.rank) : base_name(d.file);
  for (report_digest& d : m->reports) place(&d, &m->table);

  const size_t n = m->reports.size();
  for (size_t site = 0; site < m->table.sites.size(); ++site) {
    merged_site s;
    s.site = site;
    for (const report_digest& d : m->reports) {
      s.live.push_back(bytes_of(d.live, site));
      s.cached.push_back(bytes_of(d.cached, site));
      s.growing.push_back(d.growing.count(site) != 0);
      s.total_live = add_bytes(s.total_live, s.live.back()), s.total_cached = add_bytes(s.total_cached, s.cached.back());
    }
    s.most = static_cast<size_t>(std::max_element(s.live.begin(), s.live.end()) - s.live.begin());
    const double mean = static_cast<double>(s.total_live) / static_cast<double>(n);
    if (mean > 0) s.imbalance = std::round(static_cast<double>(s.live[s.most]) / mean * 1000) / 1000;
    m->sites.push_back(std::move(s));
  }
  std::stable_sort(m->sites.begin(), m->sites.end(), [&](const merged_site& a, const merged_site& b) {
    if (a.total_live != b.total_live) return a.total_live > b.total_live;
    if (a.total_cached != b.total_cached) return a.total_cached > b.total_cached;
    return m->table.sites[a.site].where < m->table.sites[b.site].where;
  });
  return status::ok;
}

std::string merge_json(const merged& m) {
  json_out j;
  j.open('{');
  j.key("schema"), j.value(std::string(merge_schema));
  j.key("reports"), j.open('[');
  for (const report_digest& d : m.reports) {
    j.open('{');
    j.key("file"), j.value(d.file);
    j.key("label"), j.value(d.label);
    j.key("reason"), j.value(d.reason);
    j.key("backend"), j.value(d.backend);
    j.key("pid"), j.value(d.pid);  // 0: the report did not say
    j.key("host"), j.value(d.host);
    j.key("rank"), d.rank >= 0 ? j.value(d.rank) : j.null();
    j.key("world_size"), d.world_size > 0 ? j.value(d.world_size) : j.null();
    j.key("live_bytes"), j.value(d.live_bytes);
    j.key("allocated_bytes"), j.value(d.allocated_bytes);
    j.key("reserved_bytes"), j.value(d.reserved_bytes);
    j.key("cached_bytes"), j.value(d.cached_bytes);
    j.close('}');
  }
  j.close(']');
  j.key("sites"), j.open('[');
  for (const merged_site& s : m.sites) {
    j.open('{');
    write_site(j, m.table.sites[s.site]);
    counts(j, "live_bytes", s.live);
    counts(j, "cached_bytes", s.cached);
    j.key("growing"), j.open('[');
    for (bool g : s.growing) j.value(g);
    j.close(']');
    j.key("total_live_bytes"), j.value(s.total_live);
    j.key("total_cached_bytes"), j.value(s.total_cached);
    j.key("most_live"), s.imbalance >= 0 ? j.value(m.reports[s.most].label) : j.null();
    j.key("imbalance"), s.imbalance >= 0 ? j.value(s.imbalance) : j.null();  // 1.0: every report alike
    j.close('}');
  }
  j.close(']');
  j.close('}');
  return j.text + "\n";
}

// One column per report, or their spread where there are many.
std::string columns(const std::vector<int64_t>& values, const std::vector<std::string>& labels) {
  std::string out;
  if (values.size() <= many_reports) {
    for (size_t i = 0; i < values.size(); ++i) out += (i ? "  " : "") + labels[i] + " " + human_bytes(values[i]);
    return out;
  }
  std::vector<int64_t> sorted = values;
  std::sort(sorted.begin(), sorted.end());
  const size_t half = sorted.size() / 2;
  const int64_t median =
      sorted.size() % 2 ? sorted[half] : sorted[half - 1] / 2 + sorted[half] / 2 + (sorted[half - 1] % 2 + sorted[half] % 2) / 2;
  return "min " + human_bytes(sorted.front()) + "  median " + human_bytes(median) + "  max " +
         human_bytes(sorted.back());
}

std::string merge_text(const merged& m, size_t top) {
  const std::vector<report_digest>& reports = m.reports;
  std::vector<std::string> labels;
  std::set<int64_t> worlds;
  for (const report_digest& d : reports) {
    labels.push_back(printable(d.label));
    if (d.world_size > 0) worlds.insert(d.world_size);
  }
  std::string out = printf_string("== tracepool merge: %zu report%s", reports.size(), reports.size() == 1 ? "" : "s");
  if (worlds.size() == 1) out += printf_string(" of a world of %" PRId64, *worlds.begin());
  out += "\n";
  for (size_t i = 0; i < reports.size(); ++i) {
    const report_digest& d = reports[i];
    const std::string who = d.pid > 0 ? printf_string("pid %" PRId64 " on ", d.pid) + printable(d.host)
                                      : std::string("process not recorded");
    out += "  " + padded(labels[i], 10) + " " + who + ", " + printable(d.reason) + ": " + human_bytes(d.live_bytes) +
           " live, " + human_bytes(d.reserved_bytes) + " reserved, " + human_bytes(d.cached_bytes) + " cached  (" +
           printable(d.file) + ")\n";
  }
  std::vector<int64_t> held;
  for (const report_digest& d : reports) held.push_back(d.live_bytes);
  const size_t hi = static_cast<size_t>(std::max_element(held.begin(), held.end()) - held.begin());
  const size_t lo = static_cast<size_t>(std::min_element(held.begin(), held.end()) - held.begin());
  if (reports.size() > 1 && held[hi] > held[lo]) {
    out += "\nImbalance: " + labels[hi] + " holds " + human_bytes(held[hi] - held[lo]) + " more live memory than " +
           labels[lo] + " (" + human_bytes(held[hi]) + " against " + human_bytes(held[lo]) + ")\n";
    std::vector<const merged_site*> gaps;
    for (const merged_site& s : m.sites)
      if (s.live[hi] > s.live[lo]) gaps.push_back(&s);
    std::stable_sort(gaps.begin(), gaps.end(), [&](const merged_site* a, const merged_site* b) {
      return a->live[hi] - a->live[lo] > b->live[hi] - b->live[lo];
    });
    for (size_t i = 0; i < gaps.size() && i < 3; ++i)
      out += "  " + signed_bytes(gaps[i]->live[hi] - gaps[i]->live[lo]) + " at " +
             printable(m.table.sites[gaps[i]->site].where) + "\n";
  }
  for (const bool live : {true, false}) {
    std::vector<const merged_site*> listed;
    for (const merged_site& s : m.sites)
      if ((live ? s.total_live : s.total_cached) > 0) listed.push_back(&s);
    std::stable_sort(listed.begin(), listed.end(), [&](const merged_site* a, const merged_site* b) {
      return live ? a->total_live > b->total_live : a->total_cached > b->total_cached;
    });
    out += live ? "\nLive memory by call site, across reports, largest total first:\n"
                : "\nCached memory by the call site that last used it:\n";
    if (listed.empty()) out += "  none\n";
    for (size_t i = 0; i < listed.size() && i < top; ++i) {
      const merged_site& s = *listed[i];
      const std::string total = human_bytes(live ? s.total_live : s.total_cached);
      out += "  " + std::string(total.size() < 10 ? 10 - total.size() : 0, ' ') + total + "  " +
             printable(m.table.sites[s.site].where) + "\n      " + columns(live ? s.live : s.cached, labels);
      if (live && s.imbalance >= 0 && reports.size() > 1)
        out += "  (most: " + labels[s.most] + printf_string(", %.2fx the mean)", s.imbalance);
      std::string grown;
      for (size_t r = 0; r < reports.size(); ++r)
        if (s.growing[r]) grown += (grown.empty() ? "" : ", ") + labels[r];
      if (live && !grown.empty()) out += "\n      GROWING on " + grown;
      out += "\n";
    }
    if (listed.size() > top) out += printf_string("  ... %zu more sites (--top)\n", listed.size() - top);
  }
  return out;
}

// ---- diff ----------------------------------------------------------------------------------------

struct diff_row {
  size_t site = 0;
  int64_t live[2] = {0, 0}, cached[2] = {0, 0};
  int64_t live_change() const { return live[1] - live[0]; }
  int64_t cached_change() const { return cached[1] - cached[0]; }
  const char* state() const {
    if (live[0] == 0 && cached[0] == 0) return "new";
    return live[1] == 0 && cached[1] == 0 ? "gone" : "both";
  }
};

struct compared {
  site_table table;
  report_digest side[2];
  std::vector<diff_row> rows;  // largest change first (live and cached), then by title
};

// `kept`: where the two reports go when a page shows them too (else each is let go once digested).
status diff(const saved_text& before, const saved_text& after, compared* c, report (*kept)[2] = nullptr) {
  const saved_text* texts[2] = {&before, &after};
  for (int k = 0; k < 2; ++k) {
    report r;
    if (status s = read_report_json(texts[k]->text, &r, texts[k]->name.c_str()); s != status::ok) return s;
    digest(r, texts[k]->name, &c->side[k]);
    if (kept != nullptr) (*kept)[k] = std::move(r);
  }
  place(&c->side[0], &c->table), place(&c->side[1], &c->table);
  c->rows.resize(c->table.sites.size());
  for (size_t site = 0; site < c->rows.size(); ++site) {
    diff_row& row = c->rows[site];
    row.site = site;
    for (int k = 0; k < 2; ++k)
      row.live[k] = bytes_of(c->side[k].live, site), row.cached[k] = bytes_of(c->side[k].cached, site);
  }
  std::stable_sort(c->rows.begin(), c->rows.end(), [&](const diff_row& a, const diff_row& b) {
    const int64_t x = add_bytes(std::llabs(a.live_change()), std::llabs(a.cached_change()));
    const int64_t y = add_bytes(std::llabs(b.live_change()), std::llabs(b.cached_change()));
    return x != y ? x > y : c->table.sites[a.site].where < c->table.sites[b.site].where;
  });
  return status::ok;
}

struct total_field {
  const char* name;
  const char* label;
  int64_t report_digest::*bytes;
};
constexpr total_field totals[] = {{"allocated_bytes", "allocated", &report_digest::allocated_bytes},
                                  {"reserved_bytes", "reserved", &report_digest::reserved_bytes},
                                  {"cached_bytes", "cached", &report_digest::cached_bytes}};

// `shown`: the two reports, in a page's data (its "reports", what the page draws beside the change).
std::string diff_json(const compared& c, const report (*shown)[2] = nullptr) {
  json_out j;
  j.open('{');
  j.key("schema"), j.value(std::string(diff_schema));
  j.key("before"), j.value(c.side[0].file);
  j.key("after"), j.value(c.side[1].file);
  j.key("totals"), j.open('{');
  for (const total_field& t : totals) {
    const int64_t before = c.side[0].*t.bytes, after = c.side[1].*t.bytes;
    j.key(t.name), j.open('{');
    j.key("before"), j.value(before);
    j.key("after"), j.value(after);
    j.key("change"), j.value(after - before);
    j.close('}');
  }
  j.close('}');
  j.key("sites"), j.open('[');
  for (const diff_row& row : c.rows) {
    j.open('{');
    write_site(j, c.table.sites[row.site]);
    j.key("live_before"), j.value(row.live[0]);
    j.key("live_after"), j.value(row.live[1]);
    j.key("live_change"), j.value(row.live_change());
    j.key("cached_before"), j.value(row.cached[0]);
    j.key("cached_after"), j.value(row.cached[1]);
    j.key("cached_change"), j.value(row.cached_change());
    j.key("status"), j.value(std::string(row.state()));
    j.close('}');
  }
  j.close(']');
  if (shown != nullptr) {
    j.key("reports"), j.open('[');
    for (const report& r : *shown) j.json(to_json(r));
    j.close(']');
  }
  j.close('}');
  return j.text + "\n";
}

std::string diff_text(const compared& c, size_t top) {
  std::string out = "== tracepool diff: " + printable(c.side[0].file) + " -> " + printable(c.side[1].file) + "\n";
  for (const total_field& t : totals) {
    const int64_t before = c.side[0].*t.bytes, after = c.side[1].*t.bytes;
    out += "  " + padded(t.label, 9) + " " + human_bytes(before) + " -> " + human_bytes(after) + " (" +
           signed_bytes(after - before) + ")\n";
  }
  std::vector<const diff_row*> changed;
  for (const diff_row& row : c.rows)
    if (row.live_change() != 0 || row.cached_change() != 0) changed.push_back(&row);
  out += "\nChanged call sites, largest change first (live, then cached):\n";
  if (changed.empty()) out += "  none\n";
  for (size_t i = 0; i < changed.size() && i < top; ++i) {
    const diff_row& row = *changed[i];
    const std::string state = row.state();
    out += "  live " + signed_bytes(row.live_change()) + ", cached " + signed_bytes(row.cached_change()) + "  " +
           printable(c.table.sites[row.site].where) + (state == "both" ? "" : " (" + state + ")") + "\n      live " +
           human_bytes(row.live[0]) + " -> " + human_bytes(row.live[1]) + ", cached " + human_bytes(row.cached[0]) +
           " -> " + human_bytes(row.cached[1]) + "\n";
  }
  if (changed.size() > top) out += printf_string("  ... %zu more sites (--top)\n", changed.size() - top);
  return out;
}

}  // namespace

status merge_reports(const std::vector<saved_text>& reports, report_format format, size_t top, std::string* out) {
  if (reports.empty()) return fail(status::invalid_argument, "merge: no report");
  if (format == report_format::html) {
    std::vector<report> read(reports.size());
    std::vector<const report*> pages;
    for (size_t i = 0; i < reports.size(); ++i) {
      if (status s = read_report_json(reports[i].text, &read[i], reports[i].name.c_str()); s != status::ok) return s;
      pages.push_back(&read[i]);
    }
    *out = to_html(pages);
    return status::ok;
  }
  merged m;
  if (status s = merge(reports, &m); s != status::ok) return s;
  *out = format == report_format::json ? merge_json(m) : merge_text(m, top);
  return status::ok;
}

status diff_reports(const saved_text& before, const saved_text& after, report_format format, size_t top,
                    std::string* out) {
  compared c;
  if (format == report_format::html) {
    report both[2];
    if (status s = diff(before, after, &c, &both); s != status::ok) return s;
    *out = to_html("tracepool diff: " + printable(base_name(before.name)) + " -> " + printable(base_name(after.name)),
                   diff_json(c, &both));
    return status::ok;
  }
  if (status s = diff(before, after, &c); s != status::ok) return s;
  *out = format == report_format::json ? diff_json(c) : diff_text(c, top);
  return status::ok;
}

}  // namespace tracepool::core
