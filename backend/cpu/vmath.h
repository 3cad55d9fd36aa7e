// exp that the compiler can vectorise, for the hot loops of softmax and GELU.
//
// glibc only exposes its SIMD expf to -ffast-math builds, and a scalar libm
// call per element would dominate the classifier (B*T*Vp exps per step) and
// GELU. vexp(float) is Cody-Waite range reduction (x = k ln2 + r, |r| <= ln2/2)
// plus a degree-7 Taylor polynomial (truncation < 6e-9 relative) and an
// exponent-bit scale: about 2 ulp on [-87.3, 88], all plain arithmetic and
// integer bit moves, so `#pragma omp simd` loops around it become AVX-512.
// Outside that range it saturates: below -87.3 it returns exactly 0 (softmax
// terms that small vanish against a row sum >= 1), above 88 it returns
// exp(88) ~ 1.65e38 (only reached by GELU's exp(-2u) for x < -30, where the
// result is 0 either way). NaN propagates.
//
// vexp(double) is std::exp: the double instantiation exists for gradient
// checks, where the reference precision matters and speed does not.
#ifndef BACKEND_CPU_VMATH_H
#define BACKEND_CPU_VMATH_H

#include <cmath>
#include <cstdint>
#include <cstring>

namespace gpt2 {
namespace cpu {

#pragma omp declare simd notinbranch
inline float vexp(float x) {
  const float kHi = 88.0f, kLo = -87.33654f;
  float xc = x > kHi ? kHi : x;  // comparisons are false for NaN: it flows through
  xc = xc < kLo ? kLo : xc;
  // k = round(x / ln2) via the 1.5*2^23 trick: the integer lands in the low mantissa bits.
  const float kShift = 12582912.0f;
  const float t = xc * 1.44269504088896341f + kShift;
  const float k = t - kShift;
  // r = x - k ln2 with ln2 split in a part exact in float and a remainder.
  float r = xc - k * 0.693145751953125f;
  r = r - k * 1.428606765330187e-06f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t tbits;
  std::memcpy(&tbits, &t, sizeof tbits);
  const uint32_t scale_bits = static_cast<uint32_t>(tbits - 0x4B400000 + 127) << 23;
  float scale;
  std::memcpy(&scale, &scale_bits, sizeof scale);
  const float y = p * scale;
  return x < kLo ? 0.0f : y;
}

inline double vexp(double x) { return std::exp(x); }

// The loops around vexp are compute-bound (about 20 vector ops per exp), so on
// x86-64 their functions are compiled twice, for the build's ISA and for
// x86-64-v4 (AVX-512: twice the lanes), and the CPU's features pick one at
// load time. Callers keep each element's arithmetic and every sum's order
// independent of the vector width, so both versions give the same bits.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#define VMATH_CLONES __attribute__((target_clones("arch=x86-64-v4", "default")))
#else
#define VMATH_CLONES
#endif

}  // namespace cpu
}  // namespace gpt2

#endif  // BACKEND_CPU_VMATH_H
