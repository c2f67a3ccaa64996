// The sampler's random stream: xoshiro256** (Blackman & Vigna), state filled from a 64-bit
// seed with splitmix64. Fully specified integer arithmetic, so a seed gives the same stream on
// every compiler and standard library (std::*_distribution does not). 32 bytes of state.
#pragma once

#include <cstdint>

namespace sluice {

// splitmix64 step: advances `state` and returns the next output. Used to expand a seed.
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class Xoshiro256 {
 public:
  explicit Xoshiro256(uint64_t seed) {
    uint64_t sm = seed;
    for (uint64_t& w : s_) w = splitmix64(sm);  // never all zero: splitmix64 is a bijection
  }

  // A generator with the raw state (not all zero), for reference vectors.
  static Xoshiro256 from_state(uint64_t s0, uint64_t s1, uint64_t s2, uint64_t s3) {
    Xoshiro256 g(0);
    g.s_[0] = s0;
    g.s_[1] = s1;
    g.s_[2] = s2;
    g.s_[3] = s3;
    return g;
  }

  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1) with 53 random bits (every value a multiple of 2^-53).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

  uint64_t s_[4];
};

}  // namespace sluice
