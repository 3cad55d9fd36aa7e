#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "train/generation.h"

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

// The text around the samples, shared by training and --generate: without a
// vocabulary the ids, space-separated; an empty prompt starts from
// <|endoftext|>, which a small test vocabulary lacks (an error at start-up,
// not at the first sample).
TEST(Sampler, SampleTextAndPromptContextWithoutAVocabulary) {
  EXPECT_EQ(sample_text(nullptr, "ignored without a vocabulary", {5, 0, 17}), "5 0 17");
  EXPECT_EQ(sample_text(nullptr, "", {}), "");
  EXPECT_EQ(prompt_context("", nullptr, 50257), std::vector<int32_t>{50256});
  try {
    prompt_context("", nullptr, 256);
    ADD_FAILURE() << "<|endoftext|> passed as a token of a 256-token vocabulary";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "prompt token 50256 (<|endoftext|>, the empty prompt) is outside the model's vocabulary of 256");
  }
}

}  // namespace
}  // namespace gpt2
