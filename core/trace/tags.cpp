#include "tags.h"

#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "base/fork_guard.h"
#include "base/utf8.h"

namespace tracepool::core {

namespace {

struct tag_node {
  uint32_t parent;
  uint32_t label;
  int depth;
};

struct tag_registry {
  std::mutex mutex;
  std::vector<std::string> labels;
  std::map<std::string, uint32_t> label_ids;
  std::vector<tag_node> nodes{tag_node{0, 0, 0}};  // node 0: no tag
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> node_ids;
};

// Leaked on purpose: tags are read by the report written at exit, after static destructors may run.
tag_registry& registry() {
  static tag_registry* r = [] {
    auto* made = new tag_registry();
    register_fork_lock(&made->mutex);
    return made;
  }();
  return *r;
}

[[maybe_unused]] const bool registered_at_load = (registry(), true);  // before fork() (Note [Fork])

thread_local uint32_t tls_tags = 0;

// This thread's last push. A host's allocation hook pushes and pops its runtime's tag around every
// allocation (tracepool.cupy's "cupy"): repeated, that push costs a compare of the label, and its pop
// none, instead of the registry's lock. Nodes never change once made, so reading one needs no lock.
struct last_push {
  uint32_t parent = 0;
  uint32_t node = 0;  // 0: none yet
  size_t length = 0;
  char label[max_label_bytes + 1] = {};
};
thread_local last_push tls_last;

}  // namespace

uint32_t current_tags() { return tls_tags; }

status check_name(const char* what, const char* noun, const char* text, size_t most) {
  if (text == nullptr) return fail(status::invalid_argument, "%s: %s is NULL", what, noun);
  const size_t n = strnlen(text, most + 1);
  if (n == 0) return fail(status::invalid_argument, "%s: %s is empty", what, noun);
  if (n > most) return fail(status::invalid_argument, "%s: %s is longer than %zu bytes", what, noun, most);
  for (size_t i = 0; i < n; ++i)
    if (static_cast<unsigned char>(text[i]) < 0x20)
      return fail(status::invalid_argument, "%s: %s contains a control character", what, noun);
  if (!is_utf8(text, n)) return fail(status::invalid_argument, "%s: %s is not valid UTF-8", what, noun);
  return status::ok;
}

status check_label(const char* what, const char* label) { return check_name(what, "label", label, max_label_bytes); }

status push_tag(const char* label) {
  last_push& last = tls_last;
  if (last.node != 0 && last.parent == tls_tags && label != nullptr) {
    const size_t n = strnlen(label, max_label_bytes + 1);
    if (n == last.length && std::memcmp(label, last.label, n) == 0) {  // checked when it was first pushed
      tls_tags = last.node;
      return status::ok;
    }
  }
  if (status s = check_label("tag_push", label); s != status::ok) return s;
  tag_registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const int depth = r.nodes[tls_tags].depth;
  if (depth >= max_tag_depth)
    return fail(status::invalid_argument, "tag_push('%s'): %d tags are already pushed on this thread", label,
                max_tag_depth);
  auto [lit, new_label] = r.label_ids.emplace(label, static_cast<uint32_t>(r.labels.size()));
  if (new_label) r.labels.emplace_back(label);
  const std::pair<uint32_t, uint32_t> key{tls_tags, lit->second};
  auto nit = r.node_ids.find(key);
  if (nit == r.node_ids.end()) {
    r.nodes.push_back(tag_node{tls_tags, lit->second, depth + 1});
    nit = r.node_ids.emplace(key, static_cast<uint32_t>(r.nodes.size() - 1)).first;
  }
  last.parent = tls_tags;
  last.node = nit->second;
  last.length = std::strlen(label);  // at most max_label_bytes: checked above
  std::memcpy(last.label, label, last.length);
  tls_tags = nit->second;
  return status::ok;
}

status pop_tag() {
  if (tls_tags == 0) return fail(status::invalid_argument, "tag_pop: no tag is pushed on this thread");
  if (tls_tags == tls_last.node) {  // the last push's node: its parent is known
    tls_tags = tls_last.parent;
    return status::ok;
  }
  tag_registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  tls_tags = r.nodes[tls_tags].parent;
  return status::ok;
}

std::vector<std::string> tag_labels(uint32_t tags) {
  tag_registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> out;
  for (uint32_t t = tags; t != 0 && t < r.nodes.size(); t = r.nodes[t].parent)
    out.push_back(r.labels[r.nodes[t].label]);
  return {out.rbegin(), out.rend()};
}

}  // namespace tracepool::core
