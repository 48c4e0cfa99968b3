// report_reader.h: reading the fields of a saved report (report_reader.cpp), each checked for its type,
// keeping the first problem with the JSON path where it is: "leaks[3].bytes must be a non-negative
// integer, not -1". Only report_reader.cpp includes it.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "report/report.h"

namespace tracepool::core::saved_report {

// Ordered: "first problem" and the depth check follow the document's order, as a reader reads it.
using json = nlohmann::ordered_json;

// A value as a message shows it: JSON for scalars (ASCII, cut short), a word for the others.
inline std::string describe(const json& v) {
  if (v.is_object()) return "an object";
  if (v.is_array()) return "a list";
  const std::string text = v.dump(-1, ' ', true, json::error_handler_t::replace);
  return text.size() <= 40 ? text : text.substr(0, 36) + (v.is_string() ? "...\"" : "...");
}

inline std::string field_path(const std::string& path, const std::string& name) {
  return path.empty() ? name : path + "." + name;
}

inline std::string index_path(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

inline std::string key_path(const std::string& path, const std::string& key) {
  return path + "[" + json(key).dump(-1, ' ', true, json::error_handler_t::replace) + "]";
}

// Reads fields into a report, keeping the first problem found. Every read checks the value's type
// first; a field that is absent (or null, where null is allowed) leaves the destination as it is.
class report_reader {
 public:
  std::string problem;

  bool object(const json& v, const std::string& path, std::initializer_list<const char*> required = {}) {
    return object(v, path, required.begin(), required.end());
  }
  bool object(const json& v, const std::string& path, const std::vector<const char*>& required) {
    return object(v, path, required.data(), required.data() + required.size());
  }

  bool string(const json& obj, const std::string& path, const char* name, std::string* out, bool or_null = false) {
    const json* v = find(obj, name);
    if (v == nullptr || (or_null && v->is_null())) return true;
    if (!v->is_string()) return wrong(*v, field_path(path, name), "a string", or_null);
    *out = v->get<std::string>();
    return true;
  }

  bool flag(const json& obj, const std::string& path, const char* name, bool* out) {
    const json* v = find(obj, name);
    if (v == nullptr) return true;
    if (!v->is_boolean()) return wrong(*v, field_path(path, name), "true or false", false);
    *out = v->get<bool>();
    return true;
  }

  template <typename T>
  bool count(const json& obj, const std::string& path, const char* name, T* out, bool or_null = false) {
    const json* v = find(obj, name);
    if (v == nullptr || (or_null && v->is_null())) return true;
    return count_value(*v, field_path(path, name), out, or_null);
  }

  template <typename T>
  bool count_value(const json& v, const std::string& path, T* out, bool or_null = false) {
    // A bool is not a number here (nlohmann keeps them apart; Python's json does not).
    const bool non_negative = v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
    if (!non_negative) return wrong(v, path, "a non-negative integer", or_null);
    const uint64_t n = v.is_number_unsigned() ? v.get<uint64_t>() : static_cast<uint64_t>(v.get<int64_t>());
    const auto most = static_cast<uint64_t>(std::numeric_limits<T>::max());
    if (n > most) return fail(path + " must be at most " + std::to_string(most) + ", not " + describe(v));
    *out = static_cast<T>(n);
    return true;
  }

  // Reads each item of the list `name` with read(item, path of item, index); absent: nothing.
  template <typename Read>
  bool list(const json& obj, const std::string& path, const char* name, Read&& read) {
    const json* v = find(obj, name);
    if (v == nullptr) return true;
    const std::string where = field_path(path, name);
    if (!v->is_array()) return wrong(*v, where, "a list", false);
    for (size_t i = 0; i < v->size(); ++i)
      if (!read((*v)[i], index_path(where, i), i)) return false;
    return true;
  }

  bool counts(const json& obj, const std::string& path, const char* name, std::vector<int64_t>* out) {
    return list(obj, path, name, [&](const json& item, const std::string& where, size_t) {
      int64_t n = 0;
      if (!count_value(item, where, &n)) return false;
      out->push_back(n);
      return true;
    });
  }

  bool seconds(const json& obj, const std::string& path, const char* name, double* out) {
    const json* v = find(obj, name);
    if (v == nullptr) return true;
    if (!v->is_number() || !(v->get<double>() >= 0))
      return wrong(*v, field_path(path, name), "a non-negative number", false);
    *out = v->get<double>();
    return true;
  }

  bool strings(const json& obj, const std::string& path, const char* name, std::vector<std::string>* out) {
    return list(obj, path, name, [&](const json& item, const std::string& where, size_t) {
      if (!item.is_string()) return wrong(item, where, "a string", false);
      out->push_back(item.get<std::string>());
      return true;
    });
  }

  bool frames(const json& obj, const std::string& path, std::vector<frame_info>* out) {
    return list(obj, path, "frames", [&](const json& item, const std::string& where, size_t) {
      frame_info f;
      if (!read_frame(item, where, &f)) return false;
      out->push_back(std::move(f));
      return true;
    });
  }

  bool fail(std::string text) {
    if (problem.empty()) problem = std::move(text);
    return false;
  }

 private:
  bool object(const json& v, const std::string& path, const char* const* name, const char* const* end) {
    if (!v.is_object()) return fail(path + " must be an object, not " + describe(v));
    for (; name != end; ++name)
      if (!v.contains(*name)) return fail((path.empty() ? "the report" : path) + " has no \"" + *name + "\" field");
    return true;
  }

  static const json* find(const json& obj, const char* name) {
    const auto it = obj.find(name);
    return it == obj.end() ? nullptr : &*it;
  }

  bool wrong(const json& v, const std::string& path, const char* words, bool or_null) {
    return fail(path + " must be " + words + (or_null ? " or null" : "") + ", not " + describe(v));
  }

  // The writer says "??" for a function it could not name, as the symbolizer says "": the renderer
  // then names a native frame by its address, as it names the live one.
  bool read_frame(const json& v, const std::string& path, frame_info* f) {
    std::string kind, address;
    if (!object(v, path, {"kind", "function"}) || !string(v, path, "kind", &kind) ||
        !string(v, path, "function", &f->function) || !string(v, path, "file", &f->file, true) ||
        !count(v, path, "line", &f->line, true) || !string(v, path, "module", &f->module, true) ||
        !string(v, path, "address", &address) || !flag(v, path, "interpreter", &f->interpreter) ||
        !flag(v, path, "borrowed", &f->borrowed))
      return false;
    f->script = kind == "python";
    if (f->function == "??") f->function.clear();
    f->address = static_cast<uintptr_t>(std::strtoull(address.c_str(), nullptr, 16));  // "0x..."
    // Each kind keeps only its own fields, as the writer writes them (json_out.h: write_frames).
    if (f->script) {
      f->module.clear();
      f->address = 0;
      f->interpreter = false;
    } else {
      f->borrowed = false;
    }
    return true;
  }
};

}  // namespace tracepool::core::saved_report
