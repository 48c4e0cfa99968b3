// json_in.h: JSON text parsed into an ordered document in time linear in its size, for the reader of
// saved reports (report_reader.cpp). Only report_reader.cpp includes it.
//
// The document is what nlohmann's own parser builds (ordered_json::parse: the same values, a repeated
// key keeping its first place and its last value, the same exceptions and messages), built through
// its SAX interface for one reason: ordered_json's objects look each new key up by a scan of the keys
// before it, so that an object of n keys costs n²/2 comparisons (200,000 keys, a text of 3 MB, took
// minutes). Here an object past a few keys gets an ordered index of them while it is read (ordered,
// not hashed: no choice of keys can make it slow).
#pragma once

#include <cstddef>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tracepool::core::saved_report {

class json_builder {
 public:
  using json = nlohmann::ordered_json;

  explicit json_builder(json* root) : root_(root) {}

  bool null() { return value(nullptr); }
  bool boolean(bool v) { return value(v); }
  bool number_integer(json::number_integer_t v) { return value(v); }
  bool number_unsigned(json::number_unsigned_t v) { return value(v); }
  bool number_float(json::number_float_t v, const json::string_t&) { return value(v); }
  bool string(json::string_t& v) { return value(std::move(v)); }
  bool binary(json::binary_t& v) { return value(std::move(v)); }
  bool start_object(size_t) { return open(json::value_t::object); }
  bool start_array(size_t) { return open(json::value_t::array); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(json::string_t& k) {
    open_value& o = open_.back();
    json::object_t::Container& members = o.value->get_ref<json::object_t&>();  // its (key, value) in order
    size_t at = members.size();
    if (members.size() < index_from) {
      for (size_t i = 0; i < members.size() && at == members.size(); ++i)
        if (members[i].first == k) at = i;
    } else {
      if (o.keys.empty())
        for (size_t i = 0; i < members.size(); ++i) o.keys.emplace(members[i].first, i);
      at = o.keys.emplace(k, members.size()).first->second;
    }
    if (at == members.size()) members.emplace_back(std::move(k), nullptr);
    member_ = &members[at].second;
    return true;
  }

  // The parser's own exception, as ordered_json::parse throws it.
  template <class Exception>
  bool parse_error(size_t, const std::string&, const Exception& e) {
    throw e;
  }

 private:
  static constexpr size_t index_from = 16;  // keys; fewer are looked up by a scan, as cheap

  struct open_value {
    json* value;
    std::map<std::string, size_t> keys;  // key -> place, once the object has index_from keys
  };

  // Puts v where the parser is: the root, the next item of an open list, or the member just named.
  json* place(json&& v) {
    if (open_.empty()) return &(*root_ = std::move(v));
    json& parent = *open_.back().value;
    if (parent.is_array()) {
      parent.get_ref<json::array_t&>().push_back(std::move(v));
      return &parent.back();
    }
    return &(*member_ = std::move(v));
  }

  template <typename V>
  bool value(V&& v) {
    place(json(std::forward<V>(v)));
    return true;
  }

  // An open object or list keeps its place: nothing is added to its parent until it is closed.
  bool open(json::value_t type) {
    open_.push_back({place(json(type)), {}});
    return true;
  }

  bool close() {
    open_.pop_back();
    return true;
  }

  json* root_;
  json* member_ = nullptr;
  std::vector<open_value> open_;
};

// `text` parsed as ordered_json::parse(text) would, throwing what it throws on a text that is not JSON.
inline nlohmann::ordered_json parse_json(std::string_view text) {
  nlohmann::ordered_json doc;
  json_builder builder(&doc);
  nlohmann::ordered_json::sax_parse(text.begin(), text.end(), &builder);
  return doc;
}

}  // namespace tracepool::core::saved_report
