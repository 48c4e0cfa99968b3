// cfi_rules.cpp: DWARF call-frame information read into frame rules (cfi_rules.h).
#include "trace/cfi_rules.h"

#include <cstddef>
#include <cstring>

#if defined(__x86_64__) && defined(__linux__)

// libgcc_s exports it (GCC_3.0): the FDE covering pc, and the start of its function in bases->func.
struct dwarf_eh_bases {
  void* tbase;
  void* dbase;
  void* func;
};
extern "C" const void* _Unwind_Find_FDE(void* pc, dwarf_eh_bases* bases);

namespace tracepool::core {

namespace {

class reader {
 public:
  reader(const uint8_t* p, const uint8_t* end) : p_(p), end_(end) {}
  bool ok() const { return ok_ && p_ <= end_; }
  bool done() const { return p_ >= end_; }
  const uint8_t* at() const { return p_; }
  void seek(const uint8_t* p) { p_ = p; }
  uint8_t u8() { return p_ < end_ ? *p_++ : (ok_ = false, 0); }
  template <typename T>
  T fixed() {
    T v{};
    if (end_ - p_ < static_cast<ptrdiff_t>(sizeof v)) return ok_ = false, v;
    std::memcpy(&v, p_, sizeof v);
    p_ += sizeof v;
    return v;
  }
  uint64_t uleb() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      const uint8_t b = u8();
      v |= uint64_t{b & 0x7fu} << shift;
      if (!(b & 0x80)) return v;
    }
    ok_ = false;
    return v;
  }
  int64_t sleb() {
    int64_t v = 0;
    int shift = 0;
    uint8_t b = 0;
    do {
      b = u8();
      v |= int64_t{b & 0x7f} << shift;
      shift += 7;
    } while ((b & 0x80) && shift < 64);
    if (shift < 64 && (b & 0x40)) v |= -(int64_t{1} << shift);
    return v;
  }
  // The value of a pointer in DW_EH_PE `encoding`'s format (low four bits); false if unknown.
  bool read_format(uint8_t encoding, uint64_t* v) {
    switch (encoding & 0x0f) {
      case 0x00:  // absptr
      case 0x04:
        *v = fixed<uint64_t>();
        break;
      case 0x0c:
        *v = static_cast<uint64_t>(fixed<int64_t>());
        break;
      case 0x02:
        *v = fixed<uint16_t>();
        break;
      case 0x0a:
        *v = static_cast<uint64_t>(static_cast<int64_t>(fixed<int16_t>()));
        break;
      case 0x03:
        *v = fixed<uint32_t>();
        break;
      case 0x0b:
        *v = static_cast<uint64_t>(static_cast<int64_t>(fixed<int32_t>()));
        break;
      case 0x01:
        *v = uleb();
        break;
      case 0x09:
        *v = static_cast<uint64_t>(sleb());
        break;
      default:
        return false;
    }
    return ok();
  }
  // Reads a pointer of DW_EH_PE `encoding` (absolute, pc-relative or data-relative); false if another.
  bool read_encoded(uint8_t encoding, uintptr_t dbase, uintptr_t* out) {
    const uintptr_t field = reinterpret_cast<uintptr_t>(p_);
    uint64_t v = 0;
    if (!read_format(encoding, &v)) return false;
    switch (encoding & 0x70) {
      case 0x00:
        break;
      case 0x10:
        v += field;
        break;  // pcrel
      case 0x30:
        v += dbase;
        break;  // datarel
      default:
        return false;
    }
    *out = static_cast<uintptr_t>(v);
    return !(encoding & 0x80);  // indirect: not for code addresses
  }
  // Skips a pointer of DW_EH_PE `encoding`; false if the encoding is unknown.
  bool skip_encoded(uint8_t encoding) {
    uint64_t ignored = 0;
    return encoding == 0xff || read_format(encoding, &ignored);  // 0xff: omitted
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
  bool ok_ = true;
};

struct cfi_state {
  uint8_t cfa_reg = reg_rsp;
  int64_t cfa_offset = 8;
  enum { unchanged, offset, undefined, unknown } rbp = unchanged, ra = unknown;
  int64_t rbp_offset = 0, ra_offset = 0;
};

struct cie_info {
  uintptr_t dbase = 0;  // for data-relative pointers (from _Unwind_Find_FDE)
  uint64_t code_align = 1;
  int64_t data_align = 1;
  uint8_t fde_encoding = 0;
  bool has_z = false;
  bool signal_frame = false;
  const uint8_t* instructions = nullptr;
  const uint8_t* end = nullptr;
};

// Length field of a CIE or FDE record; sets *end to the end of the record.
bool record_extent(reader& r, const uint8_t** end) {
  uint64_t length = r.fixed<uint32_t>();
  if (length == 0xffffffff) length = r.fixed<uint64_t>();
  if (!r.ok() || length == 0) return false;
  *end = r.at() + length;
  return true;
}

bool parse_cie(const uint8_t* cie, cie_info* out) {
  reader r(cie, cie + (uint64_t{1} << 20));
  const uint8_t* end = nullptr;
  if (!record_extent(r, &end)) return false;
  r = reader(r.at(), end);
  if (r.fixed<uint32_t>() != 0) return false;  // CIE id
  const uint8_t version = r.u8();
  const char* aug = reinterpret_cast<const char*>(r.at());
  const size_t aug_len = strnlen(aug, static_cast<size_t>(end - r.at()));
  r.seek(r.at() + aug_len + 1);
  if (aug[0] != '\0' && aug[0] != 'z') return false;  // "eh" and other ancient forms
  out->code_align = r.uleb();
  out->data_align = r.sleb();
  const uint64_t ra_reg = version == 1 ? r.u8() : r.uleb();
  if (ra_reg != reg_ra) return false;
  const uint8_t* aug_end = nullptr;
  for (size_t i = 0; i < aug_len; ++i) {
    switch (aug[i]) {
      case 'z': {
        out->has_z = true;
        const uint64_t n = r.uleb();
        aug_end = r.at() + n;
        break;
      }
      case 'R':
        out->fde_encoding = r.u8();
        break;
      case 'L':
        r.u8();
        break;
      case 'P': {
        const uint8_t enc = r.u8();
        if (!r.skip_encoded(enc & 0x7f)) return false;
        break;
      }
      case 'S':
        out->signal_frame = true;
        break;
      case 'B':
        break;
      default:
        return false;  // unknown augmentation: its data cannot be skipped safely
    }
  }
  if (aug_end != nullptr) r.seek(aug_end);
  out->instructions = r.at();
  out->end = end;
  return r.ok();
}

// Runs CFA instructions until the row that covers `target` (loc starts at the function's start).
bool execute(reader r, const cie_info& cie, uintptr_t* loc, uintptr_t target, cfi_state* st, const cfi_state& initial,
             uint16_t* why) {
  cfi_state stack[8];
  int depth = 0;
  auto set_rule = [&](uint64_t reg, bool saved, int64_t off) {
    if (reg == reg_rbp) st->rbp = saved ? cfi_state::offset : cfi_state::undefined, st->rbp_offset = off;
    if (reg == reg_ra) st->ra = saved ? cfi_state::offset : cfi_state::undefined, st->ra_offset = off;
  };
  auto restore = [&](uint64_t reg) {
    if (reg == reg_rbp) st->rbp = initial.rbp, st->rbp_offset = initial.rbp_offset;
    if (reg == reg_ra) st->ra = initial.ra, st->ra_offset = initial.ra_offset;
  };
  auto advance = [&](uint64_t delta) {
    const uintptr_t next = *loc + delta * cie.code_align;
    if (next > target) return false;
    *loc = next;
    return true;
  };
  while (!r.done()) {
    const uint8_t op = r.u8();
    *why = op;
    const uint8_t low = op & 0x3f;
    switch (op >> 6) {
      case 1:
        if (!advance(low)) return true;
        continue;
      case 2:
        set_rule(low, true, static_cast<int64_t>(r.uleb()) * cie.data_align);
        continue;
      case 3:
        restore(low);
        continue;
      default:
        break;
    }
    switch (op) {
      case 0x00:
        break;      // nop
      case 0x01: {  // set_loc: an address in the FDE's pointer encoding
        uintptr_t next = 0;
        if (!r.read_encoded(cie.fde_encoding, cie.dbase, &next)) return false;
        if (next > target) return true;
        *loc = next;
        break;
      }
      case 0x02:
        if (!advance(r.u8())) return true;
        break;  // advance_loc1
      case 0x03:
        if (!advance(r.fixed<uint16_t>())) return true;
        break;  // advance_loc2
      case 0x04:
        if (!advance(r.fixed<uint32_t>())) return true;
        break;  // advance_loc4
      case 0x05: {
        const uint64_t reg = r.uleb();
        set_rule(reg, true, static_cast<int64_t>(r.uleb()) * cie.data_align);
        break;
      }
      case 0x06:
        restore(r.uleb());
        break;
      case 0x07:
        set_rule(r.uleb(), false, 0);
        break;  // undefined
      case 0x08: {
        const uint64_t reg = r.uleb();
        if (reg == reg_rbp)
          st->rbp = cfi_state::unchanged;
        else
          set_rule(reg, false, 0);
        break;
      }
      case 0x09: {
        const uint64_t reg = r.uleb();
        r.uleb();
        if (reg == reg_rbp || reg == reg_ra) return false;
        break;
      }
      case 0x0a:
        if (depth == 8) return false;
        stack[depth++] = *st;
        break;  // remember_state
      case 0x0b:
        if (depth == 0) return false;
        *st = stack[--depth];
        break;  // restore_state (CFA included)
      case 0x0c:
        st->cfa_reg = static_cast<uint8_t>(r.uleb());
        st->cfa_offset = static_cast<int64_t>(r.uleb());
        break;
      case 0x0d:
        st->cfa_reg = static_cast<uint8_t>(r.uleb());
        break;
      case 0x0e:
        st->cfa_offset = static_cast<int64_t>(r.uleb());
        break;
      case 0x0f:
        return false;  // def_cfa_expression
      case 0x10:
      case 0x16: {  // expression, val_expression: fine unless it is a register we need
        const uint64_t reg = r.uleb();
        const uint64_t n = r.uleb();
        if (reg == reg_rbp || reg == reg_ra) return false;
        r.seek(r.at() + n);
        break;
      }
      case 0x11: {
        const uint64_t reg = r.uleb();
        set_rule(reg, true, r.sleb() * cie.data_align);
        break;
      }
      case 0x12:
        st->cfa_reg = static_cast<uint8_t>(r.uleb());
        st->cfa_offset = r.sleb() * cie.data_align;
        break;
      case 0x13:
        st->cfa_offset = r.sleb() * cie.data_align;
        break;
      case 0x14:
      case 0x15: {
        const uint64_t reg = r.uleb();
        if (op == 0x14)
          r.uleb();
        else
          r.sleb();
        if (reg == reg_rbp || reg == reg_ra) return false;
        break;
      }
      case 0x2e:
        r.uleb();
        break;  // GNU_args_size
      case 0x2f: {
        const uint64_t reg = r.uleb();
        set_rule(reg, true, -static_cast<int64_t>(r.uleb()) * cie.data_align);
        break;
      }
      default:
        return false;
    }
    if (!r.ok()) return false;
  }
  return r.ok();
}

}  // namespace

frame_rule interpret_frame_rule(uintptr_t pc) {
  frame_rule rule;
  rule.pc = pc;
  dwarf_eh_bases bases{};
  const auto* fde = static_cast<const uint8_t*>(_Unwind_Find_FDE(reinterpret_cast<void*>(pc), &bases));
  if (fde == nullptr) {
    rule.outermost = true;  // as for _Unwind_Backtrace: no unwind information ends the stack
    return rule;
  }
  reader r(fde, fde + (uint64_t{1} << 20));
  const uint8_t* end = nullptr;
  rule.why = why_record;
  if (!record_extent(r, &end)) return rule;
  r = reader(r.at(), end);
  const uint8_t* cie_pointer_at = r.at();
  const uint32_t cie_offset = r.fixed<uint32_t>();
  cie_info cie;
  rule.why = why_cie;
  if (cie_offset == 0 || !parse_cie(cie_pointer_at - cie_offset, &cie) || cie.signal_frame) return rule;
  rule.why = why_encoding;
  if (!r.skip_encoded(cie.fde_encoding) || !r.skip_encoded(cie.fde_encoding & 0x0f)) return rule;  // begin, range
  cie.dbase = reinterpret_cast<uintptr_t>(bases.dbase);
  if (cie.has_z) {
    const uint64_t augmentation_bytes = r.uleb();
    r.seek(r.at() + augmentation_bytes);
  }
  if (!r.ok()) return rule;
  cfi_state st;
  uintptr_t loc = reinterpret_cast<uintptr_t>(bases.func);
  if (!execute(reader(cie.instructions, cie.end), cie, &loc, pc, &st, cfi_state{}, &rule.why)) return rule;
  const cfi_state initial = st;
  loc = reinterpret_cast<uintptr_t>(bases.func);
  if (!execute(reader(r.at(), end), cie, &loc, pc, &st, initial, &rule.why)) return rule;
  rule.why = why_rule;
  if (st.ra == cfi_state::undefined) {
    rule.outermost = true;  // _start, a thread's start routine
    return rule;
  }
  const bool rbp_known = st.rbp == cfi_state::unchanged ||
                         (st.rbp == cfi_state::offset && st.rbp_offset < 0 && st.rbp_offset > -(1 << 30));
  const bool simple = (st.cfa_reg == reg_rsp || st.cfa_reg == reg_rbp) && st.cfa_offset > 0 &&
                      st.cfa_offset < (1 << 30) && st.ra == cfi_state::offset && st.ra_offset == -8 && rbp_known;
  if (!simple) return rule;
  rule.why = 0;
  rule.cfa_reg = st.cfa_reg;
  rule.cfa_offset = static_cast<int32_t>(st.cfa_offset);
  rule.rbp_saved = st.rbp == cfi_state::offset;
  rule.rbp_offset = static_cast<int32_t>(st.rbp_offset);
  return rule;
}

// Per-thread: the stack's extent, and a cache of rules, 4-way set-associative. A miss costs an
// interpretation (_Unwind_Find_FDE walks the loaded modules under the loader's lock, ~1 us), so two
// return addresses of one stack that shared a slot would cost two on every capture, as they evicted
// each other: in a direct-mapped table of 4096 slots, a few hundred hot addresses (a Python host's

}  // namespace tracepool::core

#endif
