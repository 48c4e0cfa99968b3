// cfi_rules.h: how to step from a frame to its caller on x86-64 Linux, read from the DWARF call-frame
// information (.eh_frame) that libgcc's _Unwind_Find_FDE finds for a return address. Only the rules
// compilers emit for ordinary frames are understood (CFA = rsp or rbp + offset, rbp saved at CFA +
// offset, return address at CFA - 8); for anything else (signal frames, CFA expressions, another CFA
// register) the rule's cfa_reg is 0 and `why` says what was not followed. cfi_unwinder.cpp
// interprets each return address once per thread and keeps the rule.
#pragma once

#include <cstdint>

namespace tracepool::core {

enum : uint8_t { reg_rbp = 6, reg_rsp = 7, reg_ra = 16 };
// Why a stack went to the slow path (diagnostics in reports); below 0x100: the CFA opcode.
enum : uint16_t { why_record = 0x100, why_cie, why_encoding, why_rule, why_stack, why_no_stack };

// How to step from a frame to its caller.
struct frame_rule {
  uintptr_t pc = 0;        // the address it was interpreted for (cache key); 0 = empty slot
  uint8_t cfa_reg = 0;     // reg_rsp or reg_rbp; 0 = not understood: take the slow path
  bool outermost = false;  // no caller: the return address is undefined, or no FDE covers pc
  uint16_t why = 0;        // when not understood: the CFA opcode, or one of the why_* codes
  bool rbp_saved = false;
  int32_t cfa_offset = 0;
  int32_t rbp_offset = 0;  // caller's rbp is at CFA + rbp_offset when rbp_saved
};

// The rule for pc (already adjusted to lie inside the call instruction for caller frames). Costs a
// search of the loaded modules under the loader's lock (about 1 us) and the interpretation of one FDE.
// x86-64 Linux only (cfi_unwinder_supported()).
frame_rule interpret_frame_rule(uintptr_t pc);

}  // namespace tracepool::core
