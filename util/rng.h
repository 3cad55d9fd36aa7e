// A tiny deterministic RNG (splitmix64) whose whole state is one uint64, so a
// checkpoint stores it exactly and results never depend on the standard
// library's implementation-defined distributions.
#ifndef UTIL_RNG_H
#define UTIL_RNG_H

#include <cmath>
#include <cstdint>

namespace gpt2 {

// splitmix64's increment (2^64 / golden ratio) and finalizer: a bijective
// avalanche of one uint64. The one copy: Rng's stream, the data order's stream
// seeds (dataloader) and the tokenizer's hash keys all use it.
constexpr uint64_t kSplitMix64Gamma = 0x9E3779B97F4A7C15ULL;
inline uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) : state_(seed) {}
  uint64_t next_u64() { return splitmix64_mix(state_ += kSplitMix64Gamma); }
  // Uniform in [0, n), n > 0, unbiased (Lemire's multiply-shift with rejection).
  uint64_t below(uint64_t n) {
    unsigned __int128 m = static_cast<unsigned __int128>(next_u64()) * n;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < n) {
      const uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(next_u64()) * n;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }
  // Uniform in [0, 1) with 53 bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0); }
  // Standard normal (Box-Muller; one draw per call keeps the state simple).
  double normal() {
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  uint64_t state() const { return state_; }
  void set_state(uint64_t s) { state_ = s; }

 private:
  uint64_t state_;
};

}  // namespace gpt2

#endif  // UTIL_RNG_H
