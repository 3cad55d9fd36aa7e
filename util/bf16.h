// bfloat16 <-> float on the host, bit-exact with NVIDIA's __float2bfloat16
// (round to nearest even; NaN stays a quiet NaN).
#ifndef UTIL_BF16_H
#define UTIL_BF16_H

#include <cstdint>
#include <cstring>

namespace gpt2 {

inline float bf16_bits_to_float(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

inline uint16_t float_to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(u >> 16);
}

}  // namespace gpt2

#endif  // UTIL_BF16_H
