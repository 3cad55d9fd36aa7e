// backend/cuda/mma.cuh in the emulator (emu/ptx.h): ldmatrix and mma.sync follow
// the PTX fragment layouts (a wrong layout gives a wrong product, not a small
// error), tf32 rounds as cvt.rna does, and a cp.async lands at its wait in the
// forward run order and at a seeded earlier switch under the perturbed ones.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "emu/control.h"
#include "test/emu/ptx_kernels.h"

namespace gpt2 {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}
uint16_t bf16_bits(float f) {  // round to nearest even (finite inputs)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// cvt.rna.tf32.f32 written independently: the nearest multiple of 2^(e-10), ties away from zero.
float tf32(float x) {
  int e;
  std::frexp(x, &e);  // |x| in [2^(e-1), 2^e): 11 significant bits -> step 2^(e-11)
  const double step = std::ldexp(1.0, e - 11), q = std::fabs(x) / step;
  const double r = std::floor(q) + (q - std::floor(q) >= 0.5 ? 1.0 : 0.0);
  return static_cast<float>(std::copysign(r * step, x));
}

// Each element of C against the double-precision product; the products of
// bf16/tf32 inputs are exact in fp32, K of them summed in fp32: gamma(K) sum |t|.
void expect_product(const std::vector<float>& c, const std::vector<double>& a, const std::vector<double>& b, int K,
                    bool b_transposed) {
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n) {
      double ref = 0, mag = 0;
      for (int k = 0; k < K; ++k) {
        const double t = a[m * K + k] * (b_transposed ? b[n * K + k] : b[k * 16 + n]);
        ref += t, mag += std::fabs(t);
      }
      EXPECT_NEAR(c[m * 16 + n], ref, K * 0x1p-24 * mag) << "C[" << m << "][" << n << "]";
    }
}

TEST(EmuPtx, LdmatrixAndMmaBf16FollowTheFragmentLayouts) {
  constexpr int K = 32;
  for (bool bt : {false, true}) {
    std::vector<float> af = random_floats(16 * K, 1), bf = random_floats(K * 16, 2);
    std::vector<uint16_t> a(af.size()), b(bf.size());
    std::vector<double> ad(af.size()), bd(bf.size());
    for (size_t i = 0; i < a.size(); ++i) a[i] = bf16_bits(af[i]), ad[i] = from_bits(uint32_t(a[i]) << 16);
    for (size_t i = 0; i < b.size(); ++i) b[i] = bf16_bits(bf[i]), bd[i] = from_bits(uint32_t(b[i]) << 16);
    SCOPED_TRACE(bt ? "B^T by ldmatrix" : "B by ldmatrix.trans");
    expect_product(emu_test::ptx_gemm_bf16(a, b, bt), ad, bd, K, bt);
  }
}

TEST(EmuPtx, Tf32MmaRoundsItsInputsLikeCvtRna) {
  constexpr int K = 16;
  std::vector<float> a = random_floats(16 * K, 3), bt = random_floats(16 * K, 4);
  a[0] = from_bits(0x3f801000u);  // 1 + 2^-11: a tie, rounds away to 1 + 2^-10
  a[1] = from_bits(0xbf801000u);  // and its negative
  a[2] = from_bits(0x3f800fffu);  // just below the tie: down to 1
  std::vector<double> ad(a.size()), bd(bt.size());
  for (size_t i = 0; i < a.size(); ++i) ad[i] = tf32(a[i]);
  for (size_t i = 0; i < bt.size(); ++i) bd[i] = tf32(bt[i]);
  EXPECT_EQ(ad[0], 1.0 + 0x1p-10);
  EXPECT_EQ(ad[1], -1.0 - 0x1p-10);
  EXPECT_EQ(ad[2], 1.0);
  expect_product(emu_test::ptx_gemm_tf32(a, bt), ad, bd, K, true);
}

// 3xTF32 (flash attention's --tf32 off): mma_tf32x3 gives the bits of its three
// mma.sync one by one, and the product of the unrounded fp32 inputs to fp32's
// bound (where plain tf32 is ~2^-11 off).
TEST(EmuPtx, Tf32x3IsItsThreeMmaAndFp32Accurate) {
  constexpr int K = 16;
  const std::vector<float> a = random_floats(16 * K, 5), bt = random_floats(16 * K, 6);
  const std::vector<float> c = emu_test::ptx_gemm_3xtf32(a, bt);
  EXPECT_EQ(std::memcmp(c.data(), c.data() + 256, 256 * sizeof(float)), 0);
  std::vector<double> ad(a.begin(), a.end()), bd(bt.begin(), bt.end());
  expect_product(std::vector<float>(c.begin(), c.begin() + 256), ad, bd, K, true);
}

TEST(EmuPtx, CpAsyncLandsAtItsWaitAndNotBefore) {
  std::vector<float> in(256);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i) + 0.5f;
  const std::vector<float> waited = emu_test::ptx_cp_async(in, 0);
  const std::vector<float> never = emu_test::ptx_cp_async(in, 1);
  const std::vector<float> zeros = emu_test::ptx_cp_async(in, 2);
  const std::vector<float> groups = emu_test::ptx_cp_async(in, 3);
  for (int i = 0; i < 128; ++i) {
    EXPECT_EQ(waited[i], in[i]) << i;
    EXPECT_EQ(never[i], -1.0f) << i << ": a copy without a wait must not land";
    EXPECT_EQ(zeros[i], 0.0f) << i << ": src_bytes 0 zero-fills";
    EXPECT_EQ(groups[i], in[i]) << i << ": wait_group 1 completes the older group";
    EXPECT_EQ(groups[128 + i], -1.0f) << i << ": ... and leaves the newest pending";
    EXPECT_EQ(groups[256 + i], in[128 + i]) << i << ": wait_group 0 completes it";
  }
}

// The pipeline's result in one run order: how many floats differ from the
// expected ones; each that differs must be tile kt+2's (a copy landed early).
int pipeline_mismatches(const std::vector<float>& in, int mode, emu::RunOrder order, uint64_t seed) {
  emu::ScopedRunOrder scoped(order, seed);
  const std::vector<float> out = emu_test::ptx_cp_async_pipeline(in, mode);
  const int tiles = static_cast<int>(in.size() / 256);
  int wrong = 0;
  for (int kt = 0; kt < tiles; ++kt)
    for (int j = 0; j < 64; ++j)
      for (int e = 0; e < 4; ++e) {
        const size_t at = size_t(kt) * 256 + 4 * j + e, from = size_t(kt) * 256 + 4 * ((j + 33) % 64) + e;
        if (out[at] == in[from]) continue;
        ++wrong;
        EXPECT_TRUE(kt + 2 < tiles && out[at] == in[from + 512]) << "mode " << mode << " out[" << at << "] " << out[at];
      }
  return wrong;
}

TEST(EmuPtx, CpAsyncLandsEarlyUnderPerturbedOrdersSoAMissingBarrierShows) {
  using emu::RunOrder;
  std::vector<float> in(8 * 256);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i) + 0.25f;
  constexpr int kSeeds = 8;
  // With its barriers the pipeline is right in every order and seed.
  for (int mode : {0, 2}) {
    EXPECT_EQ(pipeline_mismatches(in, mode, RunOrder::kForward, 1), 0) << "mode " << mode;
    for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
      EXPECT_EQ(pipeline_mismatches(in, mode, RunOrder::kReverse, seed), 0) << "mode " << mode << " seed " << seed;
      EXPECT_EQ(pipeline_mismatches(in, mode, RunOrder::kRandom, seed), 0) << "mode " << mode << " seed " << seed;
    }
  }
  // Without the barrier before re-staging: the forward order keeps each copy to
  // its wait, after the next barrier, so it cannot see the race.
  EXPECT_EQ(pipeline_mismatches(in, 1, RunOrder::kForward, 1), 0);
  EXPECT_EQ(pipeline_mismatches(in, 3, RunOrder::kForward, 1), 0);
  // Reverse: warp 1 stages tile kt+2 and its copies land at its barrier before
  // warp 0 reads that chunk of tile kt.
  int reverse_seeds = 0;
  for (uint64_t seed = 1; seed <= kSeeds; ++seed)
    reverse_seeds += pipeline_mismatches(in, 1, RunOrder::kReverse, seed) > 0;
  EXPECT_EQ(reverse_seeds, kSeeds);
  // With a warp operation after the reads, the reverse order keeps the two warps
  // in step: both have read before either re-stages, so it cannot see the race.
  EXPECT_EQ(pipeline_mismatches(in, 3, RunOrder::kReverse, 1), 0);
  // Random: warps drift apart, so a warp's early copy reaches the other warp's
  // reads with the warp operation too (7 of these 8 seeds; 14 of 16).
  int random_seeds[2] = {0, 0};
  for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
    random_seeds[0] += pipeline_mismatches(in, 1, RunOrder::kRandom, seed) > 0;
    random_seeds[1] += pipeline_mismatches(in, 3, RunOrder::kRandom, seed) > 0;
  }
  EXPECT_EQ(random_seeds[0], kSeeds);
  EXPECT_GE(random_seeds[1], kSeeds / 2);
  // Deterministic given the seed.
  emu::ScopedRunOrder scoped(RunOrder::kRandom, 5);
  const std::vector<float> a = emu_test::ptx_cp_async_pipeline(in, 3), b = emu_test::ptx_cp_async_pipeline(in, 3);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace gpt2
