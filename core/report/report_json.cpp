// report_json.cpp: the JSON rendering of a report; the schema is docs/report-schema.md, its fields
// report_schema.h's (Note [One schema]).
#include <string_view>
#include <type_traits>

#include "report/json_out.h"
#include "report/report.h"
#include "report/report_schema.h"

namespace tracepool::core {

namespace {

template <typename T, typename = void>
struct has_fields : std::false_type {};
template <typename T>
struct has_fields<T, std::void_t<decltype(schema::fields(std::declval<int&>(), std::declval<const T&>()))>>
    : std::true_type {};

// The statistics of each device, under "stats" and by device number: PyTorch's memory_stats names.
void stats(json_out& j, const std::vector<device_summary>& devices) {
  j.key("stats");
  j.open('{');
  for (const device_summary& d : devices) {
    j.key(std::to_string(d.device).c_str());
    j.open('{');
    for (const auto& [name, value] : memory_stat_items(d.stats)) j.key(name.c_str()), j.value(value);
    j.close('}');
  }
  j.close('}');
}

void capture(json_out& j, const report& r) {
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
}

// A retained entry names its leak by the leak's own site, tags and frames (what the reader links it by).
template <typename Writer>
void retained(json_out& j, const report& r, Writer& w) {
  j.key("retained");
  j.open('[');
  for (const retained_summary& t : r.retained) {
    const site_summary& s = r.leaks[t.leak];
    j.open('{');
    w("site", s.site);
    w("bytes", t.bytes);
    w("blocks", t.blocks);
    j.key("born_after_mark");
    if (t.born_after < 0)
      j.null();
    else
      j.value(r.marks[static_cast<size_t>(t.born_after)].label);
    w("marks_survived", t.marks_survived);
    w("tags", s.tags);
    w.derived("title", site_title(s.frames));
    w("frames", s.frames);
    j.close('}');
  }
  j.close(']');
}

void timeline(json_out& j, const std::vector<device_timeline>& devices) {
  j.key("timeline");
  j.open('[');
  for (const device_timeline& t : devices) {
    j.open('{');
    j.key("device"), j.value(static_cast<int64_t>(t.device));
    j.key("points");
    j.open('[');
    for (const timeline_point& p : t.points) {
      j.open('[');
      j.value(static_cast<int64_t>(p.time_ns)), j.value(p.allocated_bytes), j.value(p.reserved_bytes);
      j.close(']');
    }
    j.close(']');
    j.close('}');
  }
  j.close(']');
}

// A leak's live blocks, [address, bytes] each, when the report was asked for them.
void addresses(json_out& j, const site_summary& s) {
  j.key("addresses");
  j.open('[');
  for (const auto& [address, bytes] : s.addresses) {
    j.open('[');
    j.value(static_cast<uint64_t>(address)), j.value(bytes);
    j.close(']');
  }
  j.close(']');
}

// Writes the fields schema::fields lists, as the schema's visitor (Note [One schema]).
struct json_writer {
  json_out& j;

  template <typename T>
  void operator()(const char* key, const T& value, bool /*required*/ = false) {
    j.key(key);
    put(value);
  }
  template <typename T>
  void unless(const char* key, const T& value, const T& unset) {
    if (!(value == unset)) (*this)(key, value);
  }
  // Null for `unset`, and for any negative figure where `unset` is negative (what no count can be).
  template <typename T>
  void nullable(const char* key, const T& value, const T& unset, bool /*required*/ = false) {
    j.key(key);
    bool none = value == unset;
    if constexpr (std::is_signed_v<T>) none = none || (unset < 0 && value < 0);
    if (none)
      j.null();
    else
      put(value);
  }
  template <typename T>
  void derived(const char* key, const T& value) {
    (*this)(key, value);
  }
  void own(const char* key, const report& r, bool /*required*/ = false) {
    const std::string_view part = key;
    if (part == "schema") {
      j.key(key), j.value(std::string(report_schema));
    } else if (part == "capture") {
      capture(j, r);
    } else if (part == "stats") {
      stats(j, r.devices);
    } else if (part == "retained") {
      retained(j, r, *this);
    } else if (part == "timeline") {
      timeline(j, r.timeline);
    } else if (part == "holder_search") {
      j.key(key);
      if (r.holders.made)
        put(r.holders);
      else
        j.null();
    } else if (part == "oom" && r.reason == "oom") {
      j.key(key);
      j.open('{');
      (*this)("device", r.oom_device);
      (*this)("requested_bytes", r.oom_requested);
      (*this)("message", r.oom_message);
      j.close('}');
    }
  }
  void processes(const device_summary& d) {
    j.key("processes");
    if (d.processes_listed)
      put(d.processes);
    else
      j.null();
  }

  template <typename T>
  void put(const T& value) {
    if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, double> || std::is_same_v<T, std::string>)
      j.value(value);
    else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T> && sizeof(T) == 8)
      j.value(static_cast<uint64_t>(value));
    else if constexpr (std::is_integral_v<T>)
      j.value(static_cast<int64_t>(value));
    else
      object(value);
  }
  template <typename T>
  void object(const T& item) {
    static_assert(has_fields<T>::value, "a report field of a type the writer does not know");
    j.open('{');
    schema::fields(*this, item);
    if constexpr (std::is_same_v<T, site_summary>)
      if (!item.addresses.empty()) addresses(j, item);
    j.close('}');
  }
  void put(const std::vector<frame_info>& frames) { write_frame_list(j, frames, frame_schema::tracepool); }
  template <typename T>
  void put(const std::vector<T>& items) {
    j.open('[');
    for (const T& item : items) put(item);
    j.close(']');
  }
};

}  // namespace

std::string to_json(const report& r) {
  json_out j;
  json_writer w{j};
  w.object(r);
  j.text += '\n';
  return j.text;
}

}  // namespace tracepool::core
