#include "recent_sites.h"

#include <cstring>
#include <new>

namespace tracepool::core {

namespace {

thread_local recent_sites* tls_table = nullptr;
thread_local bool tls_exiting = false;
struct table_owner {
  ~table_owner() {
    delete tls_table;
    tls_table = nullptr;
    tls_exiting = true;  // a capture from a later thread-exit destructor interns the slow way
  }
};
thread_local table_owner tls_table_owner;

}  // namespace

recent_sites* recent_sites::of_this_thread(uint64_t owner, uint32_t generation) {
  recent_sites* t = tls_table;
  if (t == nullptr) {
    if (tls_exiting) return nullptr;
    (void)&tls_table_owner;  // registers the thread-exit cleanup
    t = tls_table = new (std::nothrow) recent_sites();
    if (t == nullptr) return nullptr;
  }
  if (t->owner_ != owner || t->generation_ != generation) {
    t->clear();
    t->owner_ = owner;
    t->generation_ = generation;
  }
  return t;
}

void recent_sites::clear() {
  for (auto& set : slots_)
    for (slot& s : set) s = slot{};
  std::memset(victim_, 0, sizeof victim_);
}

size_t recent_sites::set_of(const key& k) {
  uint64_t h = k.walk * 0x9E3779B97F4A7C15ull;
  h ^= (k.innermost[0] + k.innermost[1] * 31 + (uint64_t{k.tags} << 32 | k.script)) * 0xff51afd7ed558ccdull;
  h ^= h >> 29;
  return static_cast<size_t>(h * 0xc4ceb9fe1a85ec53ull >> 57);
}

uint32_t recent_sites::find(const key& k, const uintptr_t* words, call_site_table& table) {
  static_assert(sets == 128);
  for (slot& s : slots_[set_of(k)]) {
    if (s.site[0] == 0 || !(s.k == k)) continue;
    for (size_t i = 0; i < candidates && s.site[i] != 0; ++i) {
      const uint32_t id = s.site[i];
      const site_record& r = table.at(id);
      if (r.script_depth != k.script ||
          std::memcmp(r.frames.get() + r.depth, words, size_t{k.script} * words_per_script_frame * sizeof(uintptr_t)) !=
              0)
        continue;
      std::memmove(&s.site[1], &s.site[0], i * sizeof s.site[0]);  // the latest first
      s.site[0] = id;
      return id;
    }
    return 0;
  }
  return 0;
}

void recent_sites::add(const key& k, uint32_t site) {
  const size_t set = set_of(k);
  slot* s = nullptr;
  for (slot& way : slots_[set])
    if (way.k == k && way.site[0] != 0) s = &way;
  if (s == nullptr) {
    s = &slots_[set][victim_[set]];
    victim_[set] = static_cast<uint8_t>((victim_[set] + 1) % ways);
    *s = slot{};
    s->k = k;
  }
  std::memmove(&s->site[1], &s->site[0], (candidates - 1) * sizeof s->site[0]);
  s->site[0] = site;
}

}  // namespace tracepool::core
