#include "trace/cfi_unwinder.h"

#include <pthread.h>

#include <atomic>
#include <cstring>

#include "base/word_hash.h"
#include "trace/cfi_rules.h"

#if defined(__x86_64__) && defined(__linux__)

namespace tracepool::core {

namespace {

// Note [Remembered walks]
// A thread allocates from a few hundred call paths over and over, and a walk here depends on little:
// where it starts (rsp, and rbp if a frame's CFA is rbp-based before any frame restored rbp from the
// stack) and the stack words it reads (each frame's return address, and each saved rbp that a later
// frame's CFA uses). The rules are functions of the return addresses, which are among those words;
// the stop predicate is a function of them too, given the caller's key (which names what the
// predicate tests). So a walk from the same rsp, with the same stop and key, that finds the same
// values in those words gives the same frames. Each walk is remembered as the offsets from rsp of the
// words it depended on and a 64-bit hash of their values; a capture from that rsp first re-reads
// those words and hashes them (about 1 ns a word, against ~30 ns a frame for a walk whose rules and
// stack lie outside the caches, as in PyTorch, where allocations are 25-40 frames deep). A match
// recalls the walk's serial number, which names its sequence of frames for the life of the process
// (serials are never reused, on any thread), and writes no frames: callers key their own caches by
// the serial (tracer.cpp) and walk again, without recalling, when they need the frames. Keeping
// hashes rather than values is what makes a walk small (a few cache lines to re-read, 2048 walks per
// thread in ~500 KB); the price is that two different stacks whose words hash alike would recall the
// same serial, with probability about 2^-64 per recall.
// As the rule cache does, it assumes that the code at an address does not change while the thread
// runs (no library unloaded and another loaded in its place).
struct remembered_walk {
  static constexpr size_t max_words = 96;        // longer walks are not remembered (depth 42 needs <= 84)
  uint64_t serial = 0;                           // 0: empty
  uint64_t key = 0;
  uint64_t hash = 0;                             // of the words' values (base/word_hash.h)
  bool (*stop)(uintptr_t) = nullptr;
  uintptr_t sp = 0, bp = 0;                      // bp is compared only when bp_used
  uint32_t max = 0;
  uint16_t words = 0;
  bool bp_used = false;
  uint16_t where[max_words];                     // (address - sp) / 8
};

// The words a walk in progress reads; a saved rbp is kept only once a later CFA uses it.
struct walk_record {
  bool overflow = false, bp_used = false;
  int bp_from = -1;  // the word rbp was last read from; -1: rbp is still the register's value
  uint16_t words = 0;
  uint16_t where[remembered_walk::max_words];
  uintptr_t value[remembered_walk::max_words];
  bool needed[remembered_walk::max_words];

  void read(uintptr_t sp, uintptr_t address, uintptr_t v, bool keep) {
    const uintptr_t offset = (address - sp) / 8;
    if (words == remembered_walk::max_words || offset > UINT16_MAX) {
      overflow = true;
      return;
    }
    where[words] = static_cast<uint16_t>(offset);
    value[words] = v;
    needed[words++] = keep;
  }
  void uses_rbp() {
    if (bp_from < 0) bp_used = true;
    else if (bp_from < words) needed[bp_from] = true;  // else overflowed: not remembered
  }
};

// Per-thread: the stack's extent, a cache of rules and the remembered walks. Rules are 4-way
// set-associative: a miss costs an interpretation (~1 us), so two return addresses of one stack that
// shared a slot would cost two on every capture, as they evicted each other; in a direct-mapped table
// of 4096 slots, a few hundred hot addresses (a Python host's allocation paths) make such pairs
// likely. Walks are 8-way, by rsp and key, replaced round robin: a PyTorch training step takes a few
// hundred distinct paths per thread (an op's path differs by the Python depth it is called at), and
// a set that holds fewer ways than the paths that land in it misses on every one of them in turn,
// each a walk whose rules and stack are cold (~5 us on an H200 host).
// What every capture reads comes first, on one line. A recall tries first the way of its set that
// the set's last recall found: paths that land in one set (one rsp, one key) tend to come in runs.
struct thread_cache {
  static constexpr size_t ways = 4, sets = 1024, walk_sets = 256, walk_ways = 8;
  uintptr_t stack_lo = 0, stack_hi = 0;
  uint64_t replayed = 0, walked = 0;  // not yet added to the process's counts
  struct walk_set_order {
    uint8_t victim = 0;  // the way the next new walk replaces (round robin)
    uint8_t last = 0;    // the way that the last recall found
  };
  walk_set_order walk_order[walk_sets];
  frame_rule rules[sets][ways];
  uint8_t victim[sets] = {};  // the way the next miss of each set replaces (round robin)
  remembered_walk walks[walk_sets][walk_ways];
};
thread_local thread_cache* tls_cache = nullptr;

std::atomic<uint64_t> slow_stacks{0};
std::atomic<uint64_t> last_slow{0};  // pc << 16 | why, of the most recent slow stack
std::atomic<uint64_t> walks_replayed{0}, walks_taken{0};
std::atomic<uint64_t> next_walk_serial{1};

void add_counts(thread_cache* c) {
  walks_replayed.fetch_add(c->replayed, std::memory_order_relaxed);
  walks_taken.fetch_add(c->walked, std::memory_order_relaxed);
  c->replayed = c->walked = 0;
}

struct cache_owner {
  ~cache_owner() {
    if (tls_cache != nullptr) add_counts(tls_cache);
    delete tls_cache;  // the thread is exiting; a capture after this point makes a new one
    tls_cache = nullptr;
  }
};
thread_local cache_owner tls_cache_owner;

thread_cache* cache() {
  if (tls_cache != nullptr) return tls_cache;
  (void)&tls_cache_owner;  // registers the thread-exit cleanup
  auto* c = new thread_cache();
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    void* addr = nullptr;
    size_t size = 0;
    if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
      c->stack_lo = reinterpret_cast<uintptr_t>(addr);
      c->stack_hi = c->stack_lo + size;
    }
    pthread_attr_destroy(&attr);
  }
  tls_cache = c;
  return c;
}

const frame_rule& rule_for(thread_cache* c, uintptr_t pc) {
  const size_t set = (pc * 0x9E3779B97F4A7C15ull) >> 54;  // Fibonacci hashing: the top 10 bits
  static_assert(thread_cache::sets == 1024);
  frame_rule* row = c->rules[set];
  for (size_t w = 0; w < thread_cache::ways; ++w)
    if (row[w].pc == pc) return row[w];
  frame_rule& slot = row[c->victim[set]];
  c->victim[set] = static_cast<uint8_t>((c->victim[set] + 1) % thread_cache::ways);
  slot = interpret_frame_rule(pc);
  return slot;
}

size_t walk_set(uintptr_t sp, uint64_t key) {
  static_assert(thread_cache::walk_sets == 256);
  return (((sp >> 3) ^ key) * 0x9E3779B97F4A7C15ull) >> 56;
}

// A word of the stack above this frame: the sanitizers' view of it is not ours (another frame's locals).
// A function of its own, since GCC does not carry recall()'s attribute into the lambda that reads them.
__attribute__((no_sanitize("address", "thread"))) uintptr_t stack_word(const uintptr_t* stack, size_t i) {
  return stack[i];
}

// The serial of a remembered walk from (sp, bp) whose words still hash to what they did, or 0.
__attribute__((no_sanitize("address", "thread"))) uint64_t recall(thread_cache* c, uintptr_t sp, uintptr_t bp, size_t max,
                                                                  bool (*stop)(uintptr_t), uint64_t key) {
  const auto* stack = reinterpret_cast<const uintptr_t*>(sp);
  const size_t set = walk_set(sp, key);
  uint8_t& last = c->walk_order[set].last;
  for (size_t i = 0; i < thread_cache::walk_ways; ++i) {
    const size_t way = (last + i) % thread_cache::walk_ways;
    const remembered_walk& w = c->walks[set][way];
    if (w.serial == 0 || w.sp != sp || w.key != key || w.stop != stop || w.max != max || (w.bp_used && w.bp != bp))
      continue;
    if (word_hash_of(w.words, [&](size_t j) { return stack_word(stack, w.where[j]); }) == w.hash) {
      if (i != 0) last = static_cast<uint8_t>(way);
      return w.serial;
    }
  }
  return 0;
}

uint64_t remember(thread_cache* c, uintptr_t sp, uintptr_t bp, size_t max, bool (*stop)(uintptr_t), uint64_t key,
                  const walk_record& r, size_t frames) {
  if (r.overflow || frames == 0) return 0;  // a recall writes no frames: 0 frames and a serial would be one
  const size_t set = walk_set(sp, key);
  uint8_t& victim = c->walk_order[set].victim;
  remembered_walk& w = c->walks[set][victim];
  c->walk_order[set].last = victim;  // a new walk is the likeliest next
  victim = static_cast<uint8_t>((victim + 1) % thread_cache::walk_ways);
  w.serial = next_walk_serial.fetch_add(1, std::memory_order_relaxed);
  w.key = key;
  w.stop = stop;
  w.sp = sp;
  w.bp = bp;
  w.bp_used = r.bp_used;
  w.max = static_cast<uint32_t>(max);
  w.words = 0;
  uintptr_t values[remembered_walk::max_words];
  for (size_t i = 0; i < r.words; ++i) {
    if (!r.needed[i]) continue;
    values[w.words] = r.value[i];
    w.where[w.words++] = r.where[i];
  }
  w.hash = word_hash(values, w.words);
  return w.serial;
}

size_t take_slow_path(uintptr_t pc, uint16_t why) {
  slow_stacks.fetch_add(1, std::memory_order_relaxed);
  last_slow.store((uint64_t{pc} << 16) | why, std::memory_order_relaxed);
  return 0;
}

}  // namespace

bool cfi_unwinder_supported() { return true; }
uint64_t cfi_slow_stacks() { return slow_stacks.load(std::memory_order_relaxed); }
uint64_t cfi_last_slow() { return last_slow.load(std::memory_order_relaxed); }

cfi_walk_counts cfi_walks() {
  if (tls_cache != nullptr) add_counts(tls_cache);  // this thread's, at least, are current
  return {walks_replayed.load(std::memory_order_relaxed), walks_taken.load(std::memory_order_relaxed)};
}

// Reads the saved registers of other frames on purpose: not for the sanitizers to instrument.
__attribute__((noinline, no_sanitize("address", "thread"))) size_t cfi_backtrace(uintptr_t* out, size_t max,
                                                                                 bool (*stop)(uintptr_t),
                                                                                 uint64_t key, uint64_t* walk) {
  if (walk != nullptr) *walk = 0;
  thread_cache* c = cache();
  if (c->stack_hi == 0) return take_slow_path(0, why_no_stack);
  uintptr_t rip, rsp, rbp;
  asm volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2" : "=r"(rip), "=r"(rsp), "=r"(rbp));
  if ((c->replayed + c->walked) % 4096 == 4095) add_counts(c);
  if (walk != nullptr && max != 0) {
    if (const uint64_t serial = recall(c, rsp, rbp, max, stop, key); serial != 0) {
      ++c->replayed;
      *walk = serial;
      return 0;
    }
  }
  ++c->walked;
  const uintptr_t sp0 = rsp, bp0 = rbp;
  walk_record record;
  bool first = true;
  size_t n = 0;
  while (n < max) {
    const frame_rule& rule = rule_for(c, first ? rip : rip - 1);  // a caller's pc: inside its call
    first = false;
    if (rule.outermost) break;
    // Anything this unwinder does not follow, or a step off this thread's stack: the slow path
    // takes the whole stack, so that a stack is never cut short here.
    if (rule.cfa_reg == 0) return take_slow_path(rip, rule.why);
    if (rule.cfa_reg == reg_rbp) record.uses_rbp();
    const uintptr_t cfa = (rule.cfa_reg == reg_rsp ? rsp : rbp) + static_cast<uintptr_t>(rule.cfa_offset);
    if (cfa <= rsp || cfa > c->stack_hi || cfa - 8 < c->stack_lo) return take_slow_path(rip, why_stack);
    const uintptr_t ra = *reinterpret_cast<const uintptr_t*>(cfa - 8);
    if (rule.rbp_saved) {
      const uintptr_t at = cfa + static_cast<uintptr_t>(static_cast<intptr_t>(rule.rbp_offset));
      if (at < rsp || at + 8 > c->stack_hi) return take_slow_path(rip, why_stack);
      rbp = *reinterpret_cast<const uintptr_t*>(at);
      record.bp_from = record.words;
      record.read(sp0, at, rbp, false);
    }
    record.read(sp0, cfa - 8, ra, true);
    if (ra == 0) break;
    out[n++] = ra;
    if (stop != nullptr && stop(ra)) break;
    rsp = cfa;
    rip = ra;
  }
  if (walk != nullptr) *walk = remember(c, sp0, bp0, max, stop, key, record, n);
  return n;
}

}  // namespace tracepool::core

#else  // not x86-64 Linux

namespace tracepool::core {
bool cfi_unwinder_supported() { return false; }
uint64_t cfi_slow_stacks() { return 0; }
uint64_t cfi_last_slow() { return 0; }
cfi_walk_counts cfi_walks() { return {}; }
size_t cfi_backtrace(uintptr_t*, size_t, bool (*)(uintptr_t), uint64_t, uint64_t* walk) {
  if (walk != nullptr) *walk = 0;
  return 0;
}
}  // namespace tracepool::core

#endif
