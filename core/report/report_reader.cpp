// report_reader.cpp: a report saved as JSON (docs/report-schema.md) read back into a report, so that
// a saved report renders with the code that renders a live one: to_text(read(to_json(r))) == to_text(r).
//
// The text is untrusted (a file a user names). Nothing is rendered from it until every field the
// renderer reads has been checked, and a text that fails is refused with the JSON path of its first
// problem: "leaks[3].frames[0].line must be a non-negative integer or null, not \"x\"". The checks,
// in the order they run:
//   1. nesting: no more than max_parse_depth levels before parsing (what the parser would build is
//      bounded), then no value deeper than max_depth (a report nests 5 levels; unknown fields may add
//      some, not thousands), named by its path;
//   2. JSON (RFC 8259, UTF-8 included; parsed in time linear in the text, json_in.h), and "schema":
//      "tracepool.report/1";
//   3. the schema's fields (report_schema.h, Note [One schema]): each object is checked for its type,
//      then its required fields, then the fields it lists, in their order; what the fields do not say of
//      themselves (marks, growth, each device's statistics, the retained entries) last. Unknown fields are let through (schema 1 may gain
//      fields), and values are checked for type, not against the documented enumerations (reason,
//      kind), which a later version of schema 1 may extend. Integers are counts, sizes, ids, times or
//      line numbers: never negative, never a bool, and no larger than the field that holds them;
//   4. consistency: each retained entry is one of the leaks (its site, tags and frames) and names a
//      kept mark, since the renderer reaches both through indices.
// Reading one field, with its type check and its path, is report_reader.h's; the fields are
// report_schema.h's; this file walks them and holds the checks beyond them.
#include "report/report_reader.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <new>
#include <set>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "report/json_in.h"
#include "report/report.h"
#include "report/report_schema.h"

namespace tracepool::core {

namespace {

using namespace saved_report;

constexpr size_t max_depth = 64;
constexpr size_t max_parse_depth = 512;

// True if `text` opens more than `limit` arrays or objects at once. Counts brackets outside strings
// only; a text that is not JSON at all is left to the parser.
bool nested_beyond(std::string_view text, size_t limit) {
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return false;
}

// The path of the first value nested deeper than max_depth, or "". Iterative: the depth is bounded
// by max_parse_depth already, but no stack frame per level is needed either.
std::string too_deep(const json& doc) {
  struct level {
    const json* node;
    json::const_iterator at;
    size_t index;
  };
  if (!doc.is_structured()) return "";
  std::vector<level> stack{{&doc, doc.cbegin(), 0}};  // each level's `at`: the child being looked at
  while (!stack.empty()) {
    level& top = stack.back();
    if (top.at == top.node->cend()) {
      stack.pop_back();
      if (!stack.empty()) ++stack.back().at, ++stack.back().index;
      continue;
    }
    if (stack.size() > max_depth) {  // the child is at depth stack.size()
      std::string path;
      for (const level& l : stack)
        path = l.node->is_object() ? field_path(path, l.at.key()) : index_path(path, l.index);
      return path;
    }
    const json& child = *top.at;
    if (child.is_structured()) {
      stack.push_back({&child, child.cbegin(), 0});
    } else {
      ++top.at;
      ++top.index;
    }
  }
  return "";
}

// A retained entry as saved: the site it belongs to is found among the leaks once they are read.
struct saved_retained {
  retained_summary summary;
  uint32_t site = 0;
  std::vector<std::string> tags;
  std::vector<frame_info> frames;
  bool born_after_a_mark = false;
  std::string born_after_mark;
};

// What a retained entry names its leak by: site, tags and frames, every field of each frame. Ordered by
// a digest of them first, so that most comparisons are of one integer (stacks share their innermost
// frames, which a field-by-field comparison walks every time), then field by field, so that names
// chosen to collide still cost a lookup in log time, never a scan.
struct site_identity {
  uint64_t digest;
  uint32_t site;
  const std::vector<std::string>* tags;
  const std::vector<frame_info>* frames;
};

site_identity identity_of(uint32_t site, const std::vector<std::string>& tags, const std::vector<frame_info>& frames) {
  uint64_t digest = site;
  const auto mix = [&digest](uint64_t v) { digest = (digest ^ v) * 0x100000001b3u; };  // FNV-1a's prime
  const std::hash<std::string> hash;
  for (const std::string& t : tags) mix(hash(t));
  mix(tags.size());
  for (const frame_info& f : frames) {
    mix(f.address), mix(hash(f.function)), mix(hash(f.file)), mix(static_cast<uint64_t>(f.line)), mix(hash(f.module));
    mix(uint64_t{f.script} | uint64_t{f.borrowed} << 1 | uint64_t{f.interpreter} << 2);
  }
  return {digest, site, &tags, &frames};
}

auto frame_fields(const frame_info& f) {
  return std::tie(f.address, f.function, f.file, f.line, f.module, f.script, f.borrowed, f.interpreter);
}

bool operator<(const site_identity& a, const site_identity& b) {
  if (a.digest != b.digest) return a.digest < b.digest;
  if (a.site != b.site) return a.site < b.site;
  if (*a.tags != *b.tags) return *a.tags < *b.tags;
  return std::lexicographical_compare(
      a.frames->begin(), a.frames->end(), b.frames->begin(), b.frames->end(),
      [](const frame_info& x, const frame_info& y) { return frame_fields(x) < frame_fields(y); });
}

bool read_capture(report_reader& in, const json& doc, report* r) {
  const auto it = doc.find("capture");
  if (it == doc.end()) return true;
  const json& c = *it;
  const std::string path = "capture";
  if (!in.object(c, path) || !in.string(c, path, "mode", &r->capture) ||
      !in.string(c, path, "unwinder", &r->unwinder) || !in.count(c, path, "depth", &r->capture_depth) ||
      !in.count(c, path, "python_depth", &r->python_depth) || !in.count(c, path, "sample_bytes", &r->sample_bytes))
    return false;
  bool estimated = false;  // said again by sample_bytes
  if (!in.flag(c, path, "estimated", &estimated) || !in.count(c, path, "sites", &r->sites) ||
      !in.count(c, path, "sites_dropped", &r->sites_dropped) ||
      !in.count(c, path, "cfi_slow_stacks", &r->cfi_slow_stacks) ||
      !in.count(c, path, "cfi_walks_replayed", &r->cfi_walks_replayed) ||
      !in.count(c, path, "cfi_walks_taken", &r->cfi_walks_taken))
    return false;
  const auto slow = c.find("cfi_last_slow");
  if (slow == c.end() || slow->is_null()) return true;
  const std::string where = path + ".cfi_last_slow";
  if (!slow->is_object()) return in.fail(where + " must be an object or null, not " + describe(*slow));
  std::string address;
  frame_info& f = r->cfi_last_slow_frame;
  if (!in.count(*slow, where, "reason", &r->cfi_last_slow_reason) ||
      !in.string(*slow, where, "function", &f.function) || !in.string(*slow, where, "module", &f.module, true) ||
      !in.string(*slow, where, "address", &address))
    return false;
  f.address = static_cast<uintptr_t>(std::strtoull(address.c_str(), nullptr, 16));
  return true;
}

// ---- The schema's objects (Note [One schema]) ------------------------------------------------------

// What a list or an object must hold beyond its fields' types.
bool check(report_reader&, const json&, const std::string&, const holder_summary&) { return true; }
bool check(report_reader&, const json&, const std::string&, const site_summary&) { return true; }
bool check(report_reader&, const json&, const std::string&, const cached_summary&) { return true; }
bool check(report_reader&, const json&, const std::string&, const pool_site_summary&) { return true; }
bool check(report_reader&, const json&, const std::string&, const pool_summary&) { return true; }
bool check(report_reader&, const json&, const std::string&, const holder_search&) { return true; }
bool check(report_reader&, const json&, const std::string&, const process_summary&) { return true; }
bool check(report_reader&, const json&, const std::string&, const backend::process_usage&) { return true; }
bool check(report_reader&, const json&, const std::string&, const device_share&) { return true; }

bool check(report_reader& in, const json&, const std::string& path, const mark_summary& m) {
  return m.time_ns <= static_cast<uint64_t>(INT64_MAX) ||  // a time in ns since the epoch: int64 in every writer
         in.fail(path + ".time_ns must be at most " + std::to_string(INT64_MAX));
}

bool check(report_reader& in, const json& v, const std::string& path, const device_summary& d) {
  const auto bytes = [](int64_t n) { return std::to_string(n); };
  if (d.used_bytes > d.total_bytes)
    return in.fail(path + ".used_bytes (" + bytes(d.used_bytes) + ") is more than its total_bytes (" +
                   bytes(d.total_bytes) + ")");
  for (size_t i = 0; i < d.processes.size(); ++i)
    if (d.processes[i].used_bytes > d.total_bytes)
      return in.fail(index_path(path + ".processes", i) + ".used_bytes (" + bytes(d.processes[i].used_bytes) +
                     ") is more than the device's total_bytes (" + bytes(d.total_bytes) + ")");
  if (v.contains("segments") && d.segments != segments_classic && d.segments != segments_growable)
    return in.fail(path + ".segments must be \"classic\" or \"growable\", not " + describe(json(d.segments)));
  if (d.free_page_bytes > d.cached_bytes)
    return in.fail(path + ".free_page_bytes (" + bytes(d.free_page_bytes) + ") is more than its cached_bytes (" +
                   bytes(d.cached_bytes) + ")");
  return true;
}

template <typename T>
bool check_list(report_reader&, const std::string&, const std::vector<T>&) {
  return true;
}

// A site's shares of devices: each device once.
bool check_list(report_reader& in, const std::string& path, const std::vector<device_share>& shares) {
  std::set<int> seen;
  for (size_t i = 0; i < shares.size(); ++i)
    if (!seen.insert(shares[i].device).second)
      return in.fail(index_path(path, i) + ".device " + std::to_string(shares[i].device) + " is listed twice");
  return true;
}

// The keys an object must have.
struct required_keys {
  std::vector<const char*> names;
  template <typename T>
  void operator()(const char* key, const T&, bool required = false) {
    if (required) names.push_back(key);
  }
  template <typename T>
  void unless(const char*, const T&, const T&) {}
  template <typename T>
  void nullable(const char* key, const T& value, const T& unset, bool required = false) {
    (*this)(key, value, required), (void)unset;
  }
  template <typename T>
  void derived(const char*, const T&) {}
  void processes(const device_summary&) {}
  void own(const char* key, const report&, bool required = false) {
    if (required) names.push_back(key);
  }
};

template <typename T>
bool read_object(report_reader& in, const json& v, const std::string& path, T* out);
bool read_timeline(report_reader& in, const json& doc, report* r);
bool read_holder_search(report_reader& in, const json& doc, report* r);
bool read_oom(report_reader& in, const json& doc, report* r);
bool check(report_reader& in, const json& doc, const std::string&, report& r);

// Reads the fields schema::fields lists into one object, as the schema's visitor; the first problem
// stops it.
struct json_reader {
  report_reader& in;
  const json& obj;
  const std::string& path;
  bool ok = true;

  template <typename T>
  void operator()(const char* key, T& member, bool /*required: checked before*/ = false) {
    ok = ok && read(key, member, false);
  }
  template <typename T>
  void unless(const char* key, T& member, const T& /*unset: what stays when absent*/) {
    (*this)(key, member);
  }
  template <typename T>
  void nullable(const char* key, T& member, const T& /*unset*/, bool = false) {
    ok = ok && read(key, member, true);
  }
  template <typename T>
  void derived(const char*, const T&) {}  // computed again from what is read
  // The report's parts of their own; "stats" and "retained" are read once the rest is (check).
  void own(const char* key, report& r, bool = false) {
    const std::string_view part = key;
    if (!ok) return;
    if (part == "capture") ok = read_capture(in, obj, &r);
    else if (part == "timeline") ok = read_timeline(in, obj, &r);
    else if (part == "holder_search") ok = read_holder_search(in, obj, &r);
    else if (part == "oom") ok = read_oom(in, obj, &r);
  }
  // "processes": a list, or null (or absent, before it was written) when none could be listed.
  void processes(device_summary& d) {
    const auto it = obj.find("processes");
    if (!ok || it == obj.end() || it->is_null()) return;
    d.processes_listed = true;
    ok = read("processes", d.processes, false);
  }

  bool read(const char* key, std::string& s, bool or_null) { return in.string(obj, path, key, &s, or_null); }
  bool read(const char* key, bool& b, bool) { return in.flag(obj, path, key, &b); }
  bool read(const char* key, double& x, bool) { return in.seconds(obj, path, key, &x); }
  bool read(const char* key, std::vector<std::string>& v, bool) { return in.strings(obj, path, key, &v); }
  bool read(const char* key, std::vector<int64_t>& v, bool) { return in.counts(obj, path, key, &v); }
  bool read(const char*, std::vector<frame_info>& v, bool) { return in.frames(obj, path, &v); }
  template <typename T>
  bool read(const char* key, T& n, bool or_null) {
    if constexpr (std::is_integral_v<T>) {
      return in.count(obj, path, key, &n, or_null);
    } else {
      const auto it = obj.find(key);
      return it == obj.end() || read_object(in, *it, field_path(path, key), &n);
    }
  }
  template <typename T>
  bool read(const char* key, std::vector<T>& items, bool) {
    return in.list(obj, path, key,
                   [&](const json& item, const std::string& where, size_t) {
                     items.emplace_back();
                     return read_object(in, item, where, &items.back());
                   }) &&
           check_list(in, field_path(path, key), items);
  }
};

template <typename T>
bool read_object(report_reader& in, const json& v, const std::string& path, T* out) {
  required_keys keys;
  schema::fields(keys, *out);
  if (!in.object(v, path, keys.names)) return false;
  json_reader fields{in, v, path};
  schema::fields(fields, *out);
  return fields.ok && check(in, v, path, *out);
}

// "holder_search", where `doc` has one.
bool read_holder_search(report_reader& in, const json& doc, report* r) {
  const auto h = doc.find("holder_search");
  if (h == doc.end() || h->is_null()) return true;
  r->holders.made = true;
  return read_object(in, *h, "holder_search", &r->holders);
}

// "stats", by device: each device's figures go to its entry of "devices" (read before).
bool read_stats(report_reader& in, const json& doc, report* r) {
  std::map<std::string, device_stats> stats;
  if (const auto it = doc.find("stats"); it != doc.end()) {
    if (!in.object(*it, "stats")) return false;
    for (const auto& [device, items] : it->items()) {
      const std::string where = key_path("stats", device);
      if (!in.object(items, where)) return false;
      device_stats& st = stats[device];
      for (const auto& [name, value] : items.items()) {
        int64_t n = 0;
        if (!in.count_value(value, key_path(where, name), &n)) return false;
        (void)set_memory_stat(name, n, &st);  // names this tracepool does not know are let through
      }
    }
  }
  for (device_summary& d : r->devices)
    if (const auto st = stats.find(std::to_string(d.device)); st != stats.end()) d.stats = st->second;
  return true;
}

// The marks kept against those made, and what growth was judged by (absent from reports made before
// Note [Growth without marks]: then told from the marks).
bool check_marks(report_reader& in, const json& doc, report* r) {
  if (!doc.contains("marks_made")) r->marks_made = r->marks.size();
  // Marks are dropped only from a full window (Note [Marks without end]), which keeps the first and
  // the latest: made >= kept, and more made than kept only with two kept at least.
  if (r->marks_made < r->marks.size() || (r->marks_made > r->marks.size() && r->marks.size() < 2))
    return in.fail("marks_made is " + std::to_string(r->marks_made) + " with " + std::to_string(r->marks.size()) +
                   " marks kept: a report keeps every mark made, or the first, the latest and some between");
  if (!doc.contains("auto_marks_made")) r->auto_marks_made = r->auto_marks.size();
  if (r->auto_marks_made < r->auto_marks.size())
    return in.fail("auto_marks_made is " + std::to_string(r->auto_marks_made) + " with " +
                   std::to_string(r->auto_marks.size()) + " automatic marks kept");
  if (!doc.contains("growth_basis")) r->growth_basis = r->marks_made > 0 ? growth_basis_marks : growth_basis_none;
  if (r->growth_basis != growth_basis_marks && r->growth_basis != growth_basis_auto &&
      r->growth_basis != growth_basis_none)
    return in.fail("growth_basis must be \"marks\", \"automatic marks\" or \"none\", not " + describe(json(r->growth_basis)));
  return true;
}

// The history's timeline (absent without history:N and in older reports): each device once, each
// point [time_ns, allocated_bytes, reserved_bytes], times never going back.
bool read_timeline(report_reader& in, const json& doc, report* r) {
  std::set<int> seen;
  return in.list(doc, "", "timeline", [&](const json& item, const std::string& where, size_t) {
    device_timeline t;
    if (!in.object(item, where, {"device", "points"}) || !in.count(item, where, "device", &t.device)) return false;
    if (!seen.insert(t.device).second)
      return in.fail(where + ".device " + std::to_string(t.device) + " is listed twice");
    if (!in.list(item, where, "points", [&](const json& p, const std::string& at, size_t) {
          if (!p.is_array() || p.size() != 3) return in.fail(at + " must be [time_ns, allocated_bytes, reserved_bytes]");
          timeline_point point;
          int64_t time_ns = 0;
          if (!in.count_value(p[0], at + "[0]", &time_ns) ||
              !in.count_value(p[1], at + "[1]", &point.allocated_bytes) ||
              !in.count_value(p[2], at + "[2]", &point.reserved_bytes))
            return false;
          point.time_ns = static_cast<uint64_t>(time_ns);
          if (!t.points.empty() && point.time_ns < t.points.back().time_ns)
            return in.fail(at + " is earlier than the point before it");
          t.points.push_back(point);
          return true;
        }))
      return false;
    r->timeline.push_back(std::move(t));
    return true;
  });
}

bool read_retained(report_reader& in, const json& v, const std::string& path, saved_retained* t) {
  if (!in.object(v, path, {"bytes", "blocks"}) || !in.count(v, path, "site", &t->site) ||
      !in.count(v, path, "bytes", &t->summary.bytes) || !in.count(v, path, "blocks", &t->summary.blocks) ||
      !in.strings(v, path, "tags", &t->tags) || !in.frames(v, path, &t->frames))
    return false;
  if (const auto born = v.find("born_after_mark"); born != v.end() && !born->is_null()) {
    if (!born->is_string()) return in.fail(path + ".born_after_mark must be a string or null, not " + describe(*born));
    t->born_after_a_mark = true;
    t->born_after_mark = born->get<std::string>();
  }
  return in.count(v, path, "marks_survived", &t->summary.marks_survived);
}

// Every retained entry is a view of one leak and of one kept mark, which the renderer reaches by index:
// the first leak of its site, tags and frames, and the latest mark of its label. Both are looked up in
// an index made once, so that reading stays linear in the entries (a scan per entry took minutes for
// 100,000 of them).
bool link_retained(report_reader& in, std::vector<saved_retained>& saved, report* r) {
  std::map<site_identity, size_t> leaks;
  for (size_t i = 0; i < r->leaks.size(); ++i)
    leaks.emplace(identity_of(r->leaks[i].site, r->leaks[i].tags, r->leaks[i].frames), i);  // keeps the first
  std::map<std::string_view, int> marks;
  for (size_t i = 0; i < r->marks.size(); ++i) marks[r->marks[i].label] = static_cast<int>(i);  // keeps the latest
  for (size_t i = 0; i < saved.size(); ++i) {
    saved_retained& t = saved[i];
    const auto leak = leaks.find(identity_of(t.site, t.tags, t.frames));
    if (leak == leaks.end())
      return in.fail(index_path("retained", i) +
                     " is none of the leaks: no entry of \"leaks\" has its site, tags and frames");
    t.summary.leak = leak->second;
    if (t.born_after_a_mark) {
      const auto mark = marks.find(t.born_after_mark);
      if (mark == marks.end())
        return in.fail(index_path("retained", i) + ".born_after_mark " + describe(json(t.born_after_mark)) +
                       " is the label of no entry of \"marks\"");
      t.summary.born_after = mark->second;
    }
    r->retained.push_back(t.summary);
  }
  return true;
}

// "oom": the failed allocation of a report whose reason is "oom".
bool read_oom(report_reader& in, const json& doc, report* r) {
  const auto oom = doc.find("oom");
  return oom == doc.end() ||
         (in.object(*oom, "oom") && in.count(*oom, "oom", "device", &r->oom_device) &&
          in.count(*oom, "oom", "requested_bytes", &r->oom_requested) &&
          in.string(*oom, "oom", "message", &r->oom_message));
}

// What the report's own fields do not say of themselves, once they are read: the marks and growth, each
// device's statistics, and the retained entries, each a view of one leak and one kept mark.
bool check(report_reader& in, const json& doc, const std::string&, report& r) {
  if (!check_marks(in, doc, &r) || !read_stats(in, doc, &r)) return false;
  std::vector<saved_retained> retained;
  return in.list(doc, "", "retained",
                 [&](const json& v, const std::string& path, size_t) {
                   retained.emplace_back();
                   return read_retained(in, v, path, &retained.back());
                 }) &&
         link_retained(in, retained, &r);
}

bool read_body(report_reader& in, const json& doc, report* r) {
  r->reason = "demand";
  r->backend = "?";
  r->oom_device = 0;  // a report whose reason is "oom" has a device, even when the text did not say
  return read_object(in, doc, "", r);
}

}  // namespace

status read_holders_json(std::string_view text, report* r) {
  const char* who = "the holder search's answer";
  if (nested_beyond(text, max_parse_depth))
    return fail(status::invalid_argument, "%s is nested more than %zu levels deep", who, max_parse_depth);
  try {
    json doc;
    try {
      doc = parse_json(text);
    } catch (const json::exception& e) {
      return fail(status::invalid_argument, "%s is not JSON (%s)", who, e.what());
    }
    if (!doc.is_object() || !doc.contains("held_by"))
      return fail(status::invalid_argument, "%s must be an object with \"held_by\"", who);
    report_reader in;
    report found;
    std::vector<std::pair<size_t, std::vector<holder_summary>>> held;
    const bool read =
        read_holder_search(in, doc, &found) &&
        in.object(doc["held_by"], "held_by") && [&] {
          for (const auto& [key, list] : doc["held_by"].items()) {
            const std::string where = "held_by." + key;
            char* end = nullptr;
            const unsigned long long leak = std::strtoull(key.c_str(), &end, 10);
            if (key.empty() || *end != '\0' || leak >= r->leaks.size())
              return in.fail(where + ": the key must be the index of a leak, 0 to " + std::to_string(r->leaks.size()) +
                             " excluded");
            held.emplace_back(static_cast<size_t>(leak), std::vector<holder_summary>());
            if (!list.is_array()) return in.fail(where + " must be a list");
            for (size_t i = 0; i < list.size(); ++i) {
              held.back().second.emplace_back();
              if (!read_object(in, list[i], where + "[" + std::to_string(i) + "]", &held.back().second.back()))
                return false;
            }
          }
          return true;
        }();
    if (!read) return fail(status::invalid_argument, "%s: %s", who, in.problem.c_str());
    for (auto& [leak, holders] : held) r->leaks[leak].held_by = std::move(holders);
    r->holders = std::move(found.holders);
    return status::ok;
  } catch (const std::bad_alloc&) {
    return fail(status::internal, "read_holders_json: host memory exhausted");
  } catch (const std::exception& e) {
    return fail(status::internal, "read_holders_json: %s", e.what());
  }
}

status read_report_json(std::string_view text, report* out, const char* subject) {
  if (out == nullptr) return fail(status::invalid_argument, "read_report_json: out is NULL");
  const std::string who = subject != nullptr ? subject : "the report";
  if (nested_beyond(text, max_parse_depth))
    return fail(status::invalid_argument, "%s is not a tracepool report (JSON nested too deeply: more than %zu levels)",
                who.c_str(), max_parse_depth);
  try {
    json doc;
    try {
      doc = parse_json(text);  // as json::parse, in time linear in the text
    } catch (const json::exception& e) {  // a syntax error, or a number beyond a double (out_of_range 406)
      std::string why = e.what();
      if (const size_t end = why.find("] "); why.rfind("[json.exception.", 0) == 0 && end != std::string::npos)
        why.erase(0, end + 2);
      return fail(status::invalid_argument, "%s is not a tracepool report (not JSON: %s)", who.c_str(), why.c_str());
    }
    const auto schema = doc.is_object() ? doc.find("schema") : doc.end();
    if (schema == doc.end() || !schema->is_string() || *schema != report_schema) {
      if (schema != doc.end() && schema->is_string() && schema->get<std::string>().rfind("tracepool.report/", 0) == 0)
        return fail(status::invalid_argument, "%s has schema %s; this tracepool reads %s", who.c_str(),
                    schema->get<std::string>().c_str(), report_schema);
      return fail(status::invalid_argument, "%s is not a tracepool report (no \"schema\": \"%s\")", who.c_str(),
                  report_schema);
    }
    if (const std::string deep = too_deep(doc); !deep.empty())
      return fail(status::invalid_argument, "%s: %s is nested more than %zu levels deep", who.c_str(), deep.c_str(),
                  max_depth);
    report_reader in;
    report r;
    if (!read_body(in, doc, &r)) return fail(status::invalid_argument, "%s: %s", who.c_str(), in.problem.c_str());
    *out = std::move(r);
    return status::ok;
  } catch (const std::bad_alloc&) {
    return fail(status::internal, "read_report_json: host memory exhausted");
  } catch (const std::exception& e) {  // nlohmann's type and range errors: a bug here, not the text's
    return fail(status::internal, "read_report_json: %s", e.what());
  }
}

}  // namespace tracepool::core
