// The emulator takes __nv_bfloat16/__half and their conversions from the CUDA
// toolkit's host implementation (cuda_bf16.h / cuda_fp16.h compiled by g++). These
// tests pin that implementation to NVIDIA's device rounding, checked against
// independent references: round-to-nearest-even by bit manipulation for bf16 and
// the compiler's IEEE binary16 (_Float16) for half. Every 16-bit pattern is checked
// both ways; fp32 -> 16-bit is checked on every upper-half pattern combined with
// the rounding-relevant lower halves, plus a strided sweep of all 2^32 floats.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace gpt2 {
namespace {

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t bf16_bits(__nv_bfloat16 b) {
  uint16_t u;
  std::memcpy(&u, &b, 2);
  return u;
}
__nv_bfloat16 make_bf16(uint16_t u) {
  __nv_bfloat16 b;
  std::memcpy(static_cast<void*>(&b), &u, 2);
  return b;
}
uint16_t half_bits(__half h) {
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
__half make_half(uint16_t u) {
  __half h;
  std::memcpy(static_cast<void*>(&h), &u, 2);
  return h;
}

// fp32 -> bf16, round to nearest even; NaN becomes the canonical 0x7FFF as
// cvt.rn.bf16.f32 produces it.
uint16_t reference_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
  uint32_t lsb = (u >> 16) & 1u;
  return static_cast<uint16_t>((u + 0x7fffu + lsb) >> 16);
}

uint16_t reference_half(float f) {
  _Float16 h = static_cast<_Float16>(f);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}

// Upper 16 bits x these lower halves cover every rounding case: exact, just
// below/at/above the tie, and the extremes.
const uint16_t kLowHalves[] = {0x0000, 0x0001, 0x00ff, 0x1000, 0x3fff, 0x7ffe, 0x7fff, 0x8000,
                               0x8001, 0x8002, 0xbfff, 0xc000, 0xfffe, 0xffff, 0x5555, 0xaaaa,
                               0x0fff, 0x1001, 0x2000, 0x3000, 0xe000, 0xf000};

bool same_half_result(uint16_t got, uint16_t want) {
  bool got_nan = (got & 0x7c00) == 0x7c00 && (got & 0x03ff) != 0;
  bool want_nan = (want & 0x7c00) == 0x7c00 && (want & 0x03ff) != 0;
  return got_nan || want_nan ? got_nan && want_nan : got == want;
}

TEST(Bf16, EveryBf16ValueWidensExactlyAndRoundTrips) {
  for (uint32_t u = 0; u < 65536; ++u) {
    float f = __bfloat162float(make_bf16(static_cast<uint16_t>(u)));
    ASSERT_EQ(float_bits(f), u << 16) << std::hex << u;
    uint16_t back = bf16_bits(__float2bfloat16(f));
    if (std::isnan(f)) ASSERT_EQ(back, 0x7fff) << std::hex << u;
    else ASSERT_EQ(back, u) << std::hex << u;
  }
}

TEST(Bf16, RoundingOfFloatsAtEveryBoundary) {
  for (uint32_t hi = 0; hi < 65536; ++hi) {
    for (uint16_t lo : kLowHalves) {
      float f = bits_float(hi << 16 | lo);
      ASSERT_EQ(bf16_bits(__float2bfloat16(f)), reference_bf16(f)) << std::hex << float_bits(f);
      ASSERT_EQ(bf16_bits(__float2bfloat16_rn(f)), reference_bf16(f)) << std::hex << float_bits(f);
    }
  }
}

TEST(Bf16, StridedSweepOfAllFloats) {
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 251) {
    float f = bits_float(static_cast<uint32_t>(u));
    ASSERT_EQ(bf16_bits(__float2bfloat16(f)), reference_bf16(f)) << std::hex << u;
  }
}

TEST(Bf16, SpecialValues) {
  EXPECT_EQ(bf16_bits(__float2bfloat16(INFINITY)), 0x7f80);
  EXPECT_EQ(bf16_bits(__float2bfloat16(-INFINITY)), 0xff80);
  EXPECT_EQ(bf16_bits(__float2bfloat16(3.4028235e38f)), 0x7f80);  // rounds up to inf
  EXPECT_EQ(bf16_bits(__float2bfloat16(-0.0f)), 0x8000);
  EXPECT_EQ(bf16_bits(__float2bfloat16(bits_float(0x00000001))), 0x0000);  // smallest denormal rounds to 0
  EXPECT_EQ(bf16_bits(__float2bfloat16(bits_float(0x00018000))), 0x0002);  // denormal tie rounds to even
  EXPECT_EQ(bf16_bits(__float2bfloat16(bits_float(0x00008000))), 0x0000);
  EXPECT_EQ(bf16_bits(__float2bfloat16(bits_float(0x00008001))), 0x0001);
}

TEST(Bf16, PairsAndArithmeticRoundOnce) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-100.0f, 100.0f);
  for (int i = 0; i < 100000; ++i) {
    float x = dist(rng), y = dist(rng);
    __nv_bfloat162 p = __floats2bfloat162_rn(x, y);
    ASSERT_EQ(bf16_bits(p.x), reference_bf16(x));
    ASSERT_EQ(bf16_bits(p.y), reference_bf16(y));
    float2 back = __bfloat1622float2(p);
    ASSERT_EQ(back.x, __bfloat162float(p.x));
    __nv_bfloat16 a = __float2bfloat16(x), b = __float2bfloat16(y);
    // sm_80 bf16 add/mul: exact fp32 result of the operands, rounded once
    ASSERT_EQ(bf16_bits(__hadd(a, b)), reference_bf16(__bfloat162float(a) + __bfloat162float(b)));
    ASSERT_EQ(bf16_bits(__hmul(a, b)), reference_bf16(__bfloat162float(a) * __bfloat162float(b)));
  }
}

TEST(Half, EveryHalfValueWidensExactlyAndRoundTrips) {
  for (uint32_t u = 0; u < 65536; ++u) {
    uint16_t bits = static_cast<uint16_t>(u);
    _Float16 ref;
    std::memcpy(&ref, &bits, 2);
    float f = __half2float(make_half(bits));
    if (std::isnan(static_cast<float>(ref))) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << u;
      continue;
    }
    ASSERT_EQ(float_bits(f), float_bits(static_cast<float>(ref))) << std::hex << u;
    ASSERT_EQ(half_bits(__float2half(f)), bits) << std::hex << u;
  }
}

TEST(Half, RoundingOfFloatsAtEveryBoundaryIncludingDenormalsAndOverflow) {
  for (uint32_t hi = 0; hi < 65536; ++hi) {
    for (uint16_t lo : kLowHalves) {
      float f = bits_float(hi << 16 | lo);
      ASSERT_TRUE(same_half_result(half_bits(__float2half(f)), reference_half(f))) << std::hex << float_bits(f);
      ASSERT_TRUE(same_half_result(half_bits(__float2half_rn(f)), reference_half(f))) << std::hex << float_bits(f);
    }
  }
  // the mantissa bits below the bf16 cut matter for half: sweep those too
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 509) {
    float f = bits_float(static_cast<uint32_t>(u));
    ASSERT_TRUE(same_half_result(half_bits(__float2half(f)), reference_half(f))) << std::hex << u;
  }
}

}  // namespace
}  // namespace gpt2
