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
  static_assert(sets == 256);
  uint64_t h = k.walk * 0x9E3779B97F4A7C15ull ^ k.script;
  h ^= (uint64_t{k.tags} << 32 | k.frames) * 0xff51afd7ed558ccdull;
  h ^= h >> 29;
  return static_cast<size_t>(h * 0xc4ceb9fe1a85ec53ull >> 56);
}

uint32_t recent_sites::find(const key& k) const {
  for (const slot& s : slots_[set_of(k)])
    if (s.site != 0 && s.k == k) return s.site;
  return 0;
}

void recent_sites::add(const key& k, uint32_t site) {
  const size_t set = set_of(k);
  for (slot& way : slots_[set])
    if (way.site != 0 && way.k == k) {
      way.site = site;
      return;
    }
  slot& s = slots_[set][victim_[set]];
  victim_[set] = static_cast<uint8_t>((victim_[set] + 1) % ways);
  s.k = k;
  s.site = site;
}

}  // namespace tracepool::core
