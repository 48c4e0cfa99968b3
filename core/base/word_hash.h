// word_hash.h: a 64-bit hash of a sequence of machine words, for caches that recognise a repeated
// stack by hashing it instead of comparing it (cfi_unwinder.cpp, recent_sites.cpp).
//
// Words go in pairs: each word of the pair is mixed with a secret of the pair's position, and the two
// multiplied and the product folded to 64 bits, as XXH3 does with 8-byte lanes; the terms are
// independent, so a loop over them is about a cycle a word with no chain of multiplies, and their
// sum is finished with a murmur-style avalanche. Distinct sequences of the same length collide with
// probability about 2^-64; not meant to resist chosen inputs.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tracepool::core {

namespace word_hash_detail {
inline constexpr size_t positions = 128;  // pair positions past this reuse secrets, with the position mixed in
struct secrets {
  uint64_t a[positions], b[positions];
  constexpr secrets() : a(), b() {
    uint64_t x = 0x243F6A8885A308D3ull;  // splitmix64, seeded with the digits of pi
    for (size_t i = 0; i < positions; ++i) {
      a[i] = next(x);
      b[i] = next(x);
    }
  }
  static constexpr uint64_t next(uint64_t& x) {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};
inline constexpr secrets table;
}  // namespace word_hash_detail

// The term of words (x, y) at pair position `i`; a sequence's hash is finish_word_hash(sum of the
// terms of its pairs (an odd last word paired with 0), length in words).
inline uint64_t word_pair_term(uint64_t x, uint64_t y, size_t i) {
  using namespace word_hash_detail;
  if (i >= positions) x ^= i * 0x9E3779B97F4A7C15ull;
  const size_t p = i % positions;
  const unsigned __int128 m = static_cast<unsigned __int128>(x ^ table.a[p]) * (y ^ table.b[p]);
  return static_cast<uint64_t>(m) ^ static_cast<uint64_t>(m >> 64);
}

inline uint64_t finish_word_hash(uint64_t sum, size_t length) {
  uint64_t h = sum ^ (length * 0x9E3779B97F4A7C15ull);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 33);
}

// The hash of the n words word(0) .. word(n - 1), wherever they lie (cfi_unwinder.cpp gathers them
// from the stack).
template <typename Word>
uint64_t word_hash_of(size_t n, Word&& word) {
  uint64_t sum = 0;
  size_t i = 0;
  for (; i + 1 < n; i += 2) sum += word_pair_term(word(i), word(i + 1), i / 2);
  if (i < n) sum += word_pair_term(word(i), 0, i / 2);
  return finish_word_hash(sum, n);
}

inline uint64_t word_hash(const uintptr_t* words, size_t n) {
  return word_hash_of(n, [words](size_t i) { return words[i]; });
}

}  // namespace tracepool::core
