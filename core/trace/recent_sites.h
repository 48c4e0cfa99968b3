// recent_sites.h: the call sites one thread interned lately, found again without walking its native
// stack, hashing it into the shared table or taking a lock (Note [Recent sites]).
//
// Note [Recent sites]
// Interning a capture costs a hash of every word of its stack (about 100 with Python frames), a
// shard's lock and a compare, and needs the native frames, which a recalled walk does not write
// (cfi_unwinder.h). A thread repeats a few hundred sites over and over, so it keeps the sites it got
// lately, keyed by what tells captures apart: the serial of its native walk (a remembered cfi walk
// names its frames, cfi_unwinder.h; 0 when no native frames were captured), its tag set, its number
// of script frames and a 64-bit hash of all their words (base/word_hash.h). A found site costs one
// or two cache lines of this table, and reads nothing of the shared one: in a PyTorch step the site
// records are cold, and the ones that the autograd thread also counts move between cores. Two
// captures that differ only in script words that hash alike would share a site, with probability
// about 2^-64 per capture. The table is per thread and per tracer, and is emptied when the code
// ranges that decide which native frames a site keeps change (script_frames.h:
// code_ranges_generation).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tracepool::core {

class recent_sites {
 public:
  struct key {
    uint64_t walk = 0;    // the native walk's serial, 0 without native frames
    uint64_t script = 0;  // word_hash of the script frames' words (0 frames: any constant)
    uint32_t tags = 0;
    uint32_t frames = 0;  // script frames
    bool operator==(const key& o) const {
      return walk == o.walk && script == o.script && tags == o.tags && frames == o.frames;
    }
  };

  // This thread's table for the tracer `owner` (a serial, never reused), emptied if it served another
  // tracer or an older generation of code ranges; nullptr while the thread is exiting.
  static recent_sites* of_this_thread(uint64_t owner, uint32_t generation);

  // The site remembered for `k`, or 0.
  uint32_t find(const key& k) const;
  // Remembers `site` for `k`.
  void add(const key& k, uint32_t site);

  static constexpr size_t sets = 256, ways = 4;

 private:
  struct slot {
    key k;
    uint32_t site = 0;  // 0 = empty
  };
  static size_t set_of(const key& k);
  void clear();

  slot slots_[sets][ways];
  uint8_t victim_[sets] = {};
  uint64_t owner_ = 0;
  uint32_t generation_ = 0;
};

}  // namespace tracepool::core
