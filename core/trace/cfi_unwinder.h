// cfi_unwinder.h: a caching DWARF call-frame unwinder for x86-64 Linux, for hosts without libunwind.
//
// libgcc's _Unwind_Backtrace (Boost's path) finds and interprets each frame's CFI on every capture:
// ~100-200 ns a frame. Here the rule of each return address (where the CFA is, where the caller's
// rbp was saved) is interpreted once, from the FDE that libgcc's _Unwind_Find_FDE returns, and kept
// in a per-thread cache; a capture is then a few loads per frame. Only the rules compilers emit for
// ordinary frames are understood (CFA = rsp or rbp + offset, rbp saved at CFA + offset, return
// address at CFA - 8); anything else (signal frames, CFA expressions, another CFA register) makes
// the capture fall back to _Unwind_Backtrace, so a stack is either exact or taken the slow way.
// Every read stays inside the thread's stack, between the current stack pointer and its top.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tracepool::core {

// Whether this build and machine can use it (x86-64 with libgcc's _Unwind_Find_FDE).
bool cfi_unwinder_supported();
// Up to `max` return addresses, innermost first, starting inside the caller of cfi_backtrace; with
// `stop`, ends after the first address for which stop() is true. Returns 0 if the stack needs the
// slow path (the caller then uses _Unwind_Backtrace).
//
// With `walk`, a capture whose stack would repeat a remembered walk is recognised by re-reading the
// stack words that walk depended on (Note [Remembered walks] in cfi_unwinder.cpp): it returns 0, writes
// no frames and sets *walk to that walk's serial number (equal serials: equal frames, for the life of
// the process). Otherwise it walks, remembers the walk and sets *walk to its serial, or to 0 if the
// walk could not be remembered. `key` must differ whenever stop() could answer differently for some
// address (what it tests has changed); callers may fold more into it to spread their walks.
size_t cfi_backtrace(uintptr_t* out, size_t max, bool (*stop)(uintptr_t) = nullptr, uint64_t key = 0,
                     uint64_t* walk = nullptr);
// Captures that re-read a remembered walk, and captures that walked, since the process started (all
// threads; other threads' latest few thousand may not be counted yet).
struct cfi_walk_counts {
  uint64_t replayed = 0, walked = 0;
};
cfi_walk_counts cfi_walks();
// Captures that needed the slow path, since the process started (all threads).
uint64_t cfi_slow_stacks();
// The most recent of them, as (pc << 16) | reason (below 0x100: the CFA opcode not followed;
// 0x101 CIE, 0x102 pointer encoding, 0x103 register rules, 0x104 left the stack); 0 if none.
uint64_t cfi_last_slow();

}  // namespace tracepool::core
