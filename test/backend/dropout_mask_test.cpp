// util/philox.h: Philox4x32-10 against the published known-answer vectors
// (Random123's kat_vectors, the generator cuRAND and PyTorch's CUDA dropout use),
// and the dropout mask built on it: the kept fraction of 10^6 draws within
// binomial bounds, masks independent across steps, layers, sites, seeds and
// tokens, and the same mask however the tokens are split into calls.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "util/philox.h"

namespace gpt2 {
namespace {

TEST(Philox, KnownAnswers) {
  const struct {
    Philox4 counter;
    uint32_t k0, k1;
    Philox4 want;
  } kat[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}},
      {{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
       0xffffffffu,
       0xffffffffu,
       {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}},
      {{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
       0xa4093822u,
       0x299f31d0u,
       {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}},
  };
  for (const auto& k : kat) {
    const Philox4 got = philox4x32_10(k.counter, k.k0, k.k1);
    for (int i = 0; i < 4; i++) EXPECT_EQ(got.v[i], k.want.v[i]) << "word " << i;
  }
}

DropoutMask mask(float p, uint64_t seed = 1234, uint32_t step = 5, uint32_t stream = 17) {
  DropoutMask m;
  m.seed = seed, m.step = step, m.stream = stream, m.p = p;
  return m;
}

// 10^6 draws (1000 tokens x 1000 columns): the kept count within 5 standard
// deviations of n (1 - p) (a false alarm about once in 3.5 million runs; the
// seeds are fixed, so it either passes always or never).
TEST(DropoutMask, KeptFractionWithinBinomialBounds) {
  for (float p : {0.1f, 0.5f}) {
    const DropoutMask m = mask(p);
    const double n = 1e6;
    long kept = 0;
    for (uint64_t token = 0; token < 1000; token++)
      for (uint32_t c = 0; c < 1000; c++) kept += m.keep(token, c);
    const double sigma = std::sqrt(n * p * (1.0 - p));
    EXPECT_LE(std::fabs(kept - n * (1.0 - p)), 5 * sigma) << "p=" << p << " kept " << kept;
  }
}

// Two masks that should be independent agree on about p^2 + (1-p)^2 of the
// elements (p = 0.5: half); identical masks on all of them.
double agreement(const DropoutMask& a, const DropoutMask& b, uint64_t token_shift = 0) {
  long same = 0;
  for (uint64_t token = 0; token < 200; token++)
    for (uint32_t c = 0; c < 500; c++) same += a.keep(token, c) == b.keep(token + token_shift, c);
  return same / 1e5;
}

TEST(DropoutMask, DiffersAcrossStepsLayersSitesSeedsAndTokens) {
  const DropoutMask base = mask(0.5f, 99, 3, DropoutMask::stream_of(2, DropoutMask::kAttentionProj));
  EXPECT_EQ(agreement(base, base), 1.0);
  DropoutMask step = base, layer = base, site = base, seed = base;
  step.step = 4;
  layer.stream = DropoutMask::stream_of(3, DropoutMask::kAttentionProj);
  site.stream = DropoutMask::stream_of(2, DropoutMask::kMlpProj);
  seed.seed = 100;
  // sigma of the agreement of 10^5 independent fair bits: 0.0016; 5 sigma
  for (const DropoutMask* other : {&step, &layer, &site, &seed})
    EXPECT_NEAR(agreement(base, *other), 0.5, 0.008);
  EXPECT_NEAR(agreement(base, base, 1), 0.5, 0.008);  // the next token's mask
  EXPECT_NEAR(agreement(base, base, uint64_t{1} << 32), 0.5, 0.008);  // tokens 2^32 apart (bits 32-39)
}

// A mask is a function of the global token, so rows split over calls (ranks,
// micro-batches) with token0 set to their first token give the same bits.
TEST(DropoutMask, SameMaskWhateverTheSplit) {
  const DropoutMask whole = mask(0.1f);
  for (uint64_t first : {0ull, 37ull, 1000ull}) {
    DropoutMask part = whole;
    part.token0 = first;
    for (uint64_t r = 0; r < 50; r++)
      for (uint32_t c = 0; c < 70; c++) ASSERT_EQ(part.keep(part.token0 + r, c), whole.keep(first + r, c));
  }
  EXPECT_EQ(mask(0.0f).threshold(), 0u);  // p = 0 keeps every element
  EXPECT_FLOAT_EQ(mask(0.1f).keep_scale(), 1.0f / 0.9f);
}

// Attention-probability dropout draws 2x2 blocks {q, q+8} x {j, j+8} per call:
// 10^6 elements (1000 queries x 1000 keys of one head) keep within 5 sigma of
// n (1 - p), and the four words of a call, other heads, layers, steps and batch
// rows are independent masks (agreement ~1/2 at p = 0.5).
TEST(DropoutMask, AttentionMaskKeptFractionWithinBinomialBounds) {
  for (float p : {0.1f, 0.5f}) {
    const DropoutMask m = mask(p, 7, 2, DropoutMask::stream_of(1, DropoutMask::kAttentionProbs));
    const double n = 1e6;
    long kept = 0;
    for (int q = 0; q < 1000; q++)
      for (int j = 0; j < 1000; j++) kept += m.keep_attention(5000, 1000, 3, q, j);
    const double sigma = std::sqrt(n * p * (1.0 - p));
    EXPECT_LE(std::fabs(kept - n * (1.0 - p)), 5 * sigma) << "p=" << p << " kept " << kept;
  }
}

TEST(DropoutMask, AttentionMasksDifferAcrossWordsHeadsLayersStepsAndRows) {
  const int T = 200;
  const DropoutMask base = mask(0.5f, 99, 3, DropoutMask::stream_of(2, DropoutMask::kAttentionProbs));
  DropoutMask layer = base, step = base;
  layer.stream = DropoutMask::stream_of(3, DropoutMask::kAttentionProbs);
  step.step = 4;
  // agreement of (q, j) under `a` with (q + dq, j + dj) under `b`, head h vs hb, row token r vs rb
  auto agreement = [&](const DropoutMask& a, const DropoutMask& b, int dq, int dj, int hb, uint64_t rb) {
    long same = 0, n = 0;
    for (int q = 0; q + dq < T; q++)
      for (int j = 0; j + dj < T; j++, n++)
        same += a.keep_attention(0, T, 1, q, j) == b.keep_attention(rb, T, hb, q + dq, j + dj);
    return double(same) / n;
  };
  EXPECT_EQ(agreement(base, base, 0, 0, 1, 0), 1.0);
  // ~4*10^4 pairs: sigma 0.0025, 5 sigma 0.0125
  EXPECT_NEAR(agreement(base, base, 8, 0, 1, 0), 0.5, 0.0125);  // the other row word of a call
  EXPECT_NEAR(agreement(base, base, 0, 8, 1, 0), 0.5, 0.0125);  // the other column word
  EXPECT_NEAR(agreement(base, base, 0, 0, 2, 0), 0.5, 0.0125);  // another head
  EXPECT_NEAR(agreement(base, base, 0, 0, 1, T), 0.5, 0.0125);  // the next batch row
  EXPECT_NEAR(agreement(base, layer, 0, 0, 1, 0), 0.5, 0.0125);
  EXPECT_NEAR(agreement(base, step, 0, 0, 1, 0), 0.5, 0.0125);
}

}  // namespace
}  // namespace gpt2
