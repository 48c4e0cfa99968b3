// recent_sites.h: the call sites one thread interned lately, found again without hashing its stack or
// taking a lock (Note [Recent sites]).
//
// Note [Recent sites]
// Interning a capture costs a hash of every word of its stack (about 100 with Python frames), a
// shard's lock and a compare: about 60 ns, on every allocation. A thread repeats a few sites over
// and over, so it keeps the sites it got lately, keyed by what tells captures apart cheaply: the
// serial of its native walk (a remembered cfi walk names its frames exactly, cfi_unwinder.h; 0 when
// no native frames were captured), its tag set, its number of script frames and its innermost script
// frame. A key holds up to `candidates` sites, the latest first. A site is taken only if its script
// frames equal the captured ones word for word, so the cache can miss but never answer wrong. The
// table is per thread and per tracer, and is emptied when the code ranges that decide which native
// frames a site keeps change (script_frames.h: code_ranges_generation). Sites never move or change
// once interned (call_site_table.h), so reading one needs no lock.
#pragma once

#include <cstddef>
#include <cstdint>

#include "call_site_table.h"

namespace tracepool::core {

class recent_sites {
 public:
  struct key {
    uint64_t walk = 0;           // the native walk's serial, 0 without native frames
    uintptr_t innermost[2] = {};  // the innermost script frame's two words (0, 0 without)
    uint32_t tags = 0;
    uint32_t script = 0;          // script frames
    bool operator==(const key& o) const {
      return walk == o.walk && innermost[0] == o.innermost[0] && innermost[1] == o.innermost[1] && tags == o.tags &&
             script == o.script;
    }
  };

  // This thread's table for the tracer `owner` (a serial, never reused), emptied if it served another
  // tracer or an older generation of code ranges; nullptr while the thread is exiting.
  static recent_sites* of_this_thread(uint64_t owner, uint32_t generation);

  // The site of `k` whose script frames are `words` (k.script frames of two words each), or 0.
  uint32_t find(const key& k, const uintptr_t* words, call_site_table& table);
  // Remembers `site`, interned for `k`, as its key's latest.
  void add(const key& k, uint32_t site);

  static constexpr size_t sets = 128, ways = 4, candidates = 6;

 private:
  struct slot {
    key k;
    uint32_t site[candidates] = {};  // latest first; 0 = none
  };
  static size_t set_of(const key& k);
  void clear();

  slot slots_[sets][ways];
  uint8_t victim_[sets] = {};
  uint64_t owner_ = 0;
  uint32_t generation_ = 0;
};

}  // namespace tracepool::core
