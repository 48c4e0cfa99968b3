#include "trace/cfi_unwinder.h"

#include <pthread.h>

#include <atomic>
#include <cstring>

#include "trace/cfi_rules.h"

#if defined(__x86_64__) && defined(__linux__)

namespace tracepool::core {

namespace {

// Per-thread: the stack's extent, and a cache of rules, 4-way set-associative. A miss costs an
// interpretation (_Unwind_Find_FDE walks the loaded modules under the loader's lock, ~1 us), so two
// return addresses of one stack that shared a slot would cost two on every capture, as they evicted
// each other: in a direct-mapped table of 4096 slots, a few hundred hot addresses (a Python host's
// allocation paths) make such pairs likely.
struct thread_cache {
  static constexpr size_t ways = 4, sets = 1024;
  uintptr_t stack_lo = 0, stack_hi = 0;
  frame_rule rules[sets][ways];
  uint8_t victim[sets] = {};  // the way the next miss of each set replaces (round robin)
};
thread_local thread_cache* tls_cache = nullptr;
struct cache_owner {
  ~cache_owner() {
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

std::atomic<uint64_t> slow_stacks{0};
std::atomic<uint64_t> last_slow{0};  // pc << 16 | why, of the most recent slow stack

size_t take_slow_path(uintptr_t pc, uint16_t why) {
  slow_stacks.fetch_add(1, std::memory_order_relaxed);
  last_slow.store((uint64_t{pc} << 16) | why, std::memory_order_relaxed);
  return 0;
}

}  // namespace

bool cfi_unwinder_supported() { return true; }
uint64_t cfi_slow_stacks() { return slow_stacks.load(std::memory_order_relaxed); }
uint64_t cfi_last_slow() { return last_slow.load(std::memory_order_relaxed); }

// Reads the saved registers of other frames on purpose: not for the sanitizers to instrument.
__attribute__((noinline, no_sanitize("address", "thread"))) size_t cfi_backtrace(uintptr_t* out, size_t max,
                                                                                 bool (*stop)(uintptr_t)) {
  thread_cache* c = cache();
  if (c->stack_hi == 0) return take_slow_path(0, why_no_stack);
  uintptr_t rip, rsp, rbp;
  asm volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2" : "=r"(rip), "=r"(rsp), "=r"(rbp));
  bool first = true;
  size_t n = 0;
  while (n < max) {
    const frame_rule& rule = rule_for(c, first ? rip : rip - 1);  // a caller's pc: inside its call
    first = false;
    if (rule.outermost) return n;
    // Anything this unwinder does not follow, or a step off this thread's stack: the slow path
    // takes the whole stack, so that a stack is never cut short here.
    if (rule.cfa_reg == 0) return take_slow_path(rip, rule.why);
    const uintptr_t cfa = (rule.cfa_reg == reg_rsp ? rsp : rbp) + static_cast<uintptr_t>(rule.cfa_offset);
    if (cfa <= rsp || cfa > c->stack_hi || cfa - 8 < c->stack_lo) return take_slow_path(rip, why_stack);
    const uintptr_t ra = *reinterpret_cast<const uintptr_t*>(cfa - 8);
    if (rule.rbp_saved) {
      const uintptr_t at = cfa + static_cast<uintptr_t>(static_cast<intptr_t>(rule.rbp_offset));
      if (at < rsp || at + 8 > c->stack_hi) return take_slow_path(rip, why_stack);
      rbp = *reinterpret_cast<const uintptr_t*>(at);
    }
    if (ra == 0) return n;
    out[n++] = ra;
    if (stop != nullptr && stop(ra)) return n;
    rsp = cfa;
    rip = ra;
  }
  return n;
}

}  // namespace tracepool::core

#else  // not x86-64 Linux

namespace tracepool::core {
bool cfi_unwinder_supported() { return false; }
uint64_t cfi_slow_stacks() { return 0; }
uint64_t cfi_last_slow() { return 0; }
size_t cfi_backtrace(uintptr_t*, size_t, bool (*)(uintptr_t)) { return 0; }
}  // namespace tracepool::core

#endif
