#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "train/sampler.h"

namespace gpt2 {
namespace {

TEST(Sampler, TopOneIsArgmaxAndDistributionFollowsSoftmax) {
  std::vector<float> logits = {0.0f, 2.0f, 1.0f, -1.0f};
  Rng rng(3);
  for (int i = 0; i < 50; i++) EXPECT_EQ(sample_token(logits, 1.0f, 1, rng), 1);
  // Frequencies over many draws follow softmax(logits / temperature).
  std::vector<int> counts(4, 0);
  const int n = 200000;
  for (int i = 0; i < n; i++) counts[sample_token(logits, 1.0f, 0, rng)]++;
  double z = 0;
  for (float l : logits) z += std::exp(l);
  // A frequency of n draws has sigma = sqrt(p (1 - p) / n) <= sqrt(0.25 / 2e5) = 1.1e-3:
  // 0.005 is >= 4.4 sigma (the seed is fixed, so this either always passes or never).
  for (int k = 0; k < 4; k++) EXPECT_NEAR(counts[k] / double(n), std::exp(logits[k]) / z, 0.005) << k;
  // top-k = 2 never returns the others.
  for (int i = 0; i < 1000; i++) {
    int t = sample_token(logits, 1.0f, 2, rng);
    EXPECT_TRUE(t == 1 || t == 2);
  }
}

TEST(Sampler, DeterministicInTheRngState) {
  std::vector<float> logits(100);
  for (int i = 0; i < 100; i++) logits[i] = 0.01f * i;
  Rng a(11), b(11);
  for (int i = 0; i < 100; i++) EXPECT_EQ(sample_token(logits, 0.7f, 10, a), sample_token(logits, 0.7f, 10, b));
}

}  // namespace
}  // namespace gpt2
