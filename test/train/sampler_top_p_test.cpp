// Nucleus (top-p) sampling, its combination with top-k and temperature, and
// the stop token of generate().
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <vector>

#include "backend/backend.h"
#include "test/tiny_config.h"
#include "train/generation.h"

namespace gpt2 {
namespace {

std::vector<float> log_probs(const std::vector<double>& p) {
  std::vector<float> l;
  for (double x : p) l.push_back(static_cast<float>(std::log(x)));
  return l;
}

std::vector<int> histogram(const std::vector<float>& logits, float temperature, int top_k, float top_p, int n,
                           uint64_t seed) {
  Rng rng(seed);
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < n; i++) counts[sample_token(logits, temperature, top_k, rng, top_p)]++;
  return counts;
}

TEST(SamplerTopP, KeepsExactlyTheNucleusInProportion) {
  const std::vector<float> logits = log_probs({0.5, 0.3, 0.15, 0.05});
  const int n = 200000;
  // p = 0.8: 0.5 + 0.3 reaches it; only those two, 5:3.
  std::vector<int> c = histogram(logits, 1.0f, 0, 0.8f, n, 1);
  EXPECT_EQ(c[2], 0);
  EXPECT_EQ(c[3], 0);
  EXPECT_EQ(c[0] + c[1], n);
  // c0 ~ Binomial(n, 5/8): sigma(c0) = sqrt(n 5/8 3/8) = 216, and d(c0/c1)/dc0 = n / c1^2,
  // so sigma of the ratio is 216 * 2e5 / 75000^2 = 7.7e-3: 0.04 is 5.2 sigma.
  EXPECT_NEAR(static_cast<double>(c[0]) / c[1], 5.0 / 3.0, 0.04);
  // p = 0.81: the third is needed too, never the fourth; renormalised over 0.95.
  c = histogram(logits, 1.0f, 0, 0.81f, n, 2);
  EXPECT_EQ(c[3], 0);
  // frequencies: sigma = sqrt(p (1 - p) / n) <= sqrt(0.25 / 2e5) = 1.1e-3, 0.006 is >= 5.4 sigma
  EXPECT_NEAR(c[0] / double(n), 0.5 / 0.95, 0.006);
  EXPECT_NEAR(c[1] / double(n), 0.3 / 0.95, 0.006);
  EXPECT_NEAR(c[2] / double(n), 0.15 / 0.95, 0.006);
  // p = 0.4: the single most probable token.
  c = histogram(logits, 1.0f, 0, 0.4f, 1000, 3);
  EXPECT_EQ(c[0], 1000);
}

TEST(SamplerTopP, AppliesAfterTopKAndTemperature) {
  const std::vector<float> logits = log_probs({0.3, 0.25, 0.2, 0.15, 0.06, 0.04});
  // Alone, p = 0.7 needs 0.3 + 0.25 + 0.2 = 0.75: three tokens.
  std::vector<int> c = histogram(logits, 1.0f, 0, 0.7f, 20000, 4);
  EXPECT_GT(c[2], 0);
  EXPECT_EQ(c[3] + c[4] + c[5], 0);
  // After top-k = 3 the probabilities are 0.4, 0.333, 0.267: two reach 0.7.
  c = histogram(logits, 1.0f, 3, 0.7f, 20000, 5);
  EXPECT_GT(c[0], 0);
  EXPECT_GT(c[1], 0);
  EXPECT_EQ(c[2] + c[3] + c[4] + c[5], 0);
  // Temperature 2 flattens the distribution (sqrt of the probabilities, normalised:
  // 0.235, 0.215, 0.192, ...): p = 0.5 now needs three tokens.
  c = histogram(logits, 2.0f, 0, 0.5f, 20000, 6);
  EXPECT_GT(c[2], 0);
  EXPECT_EQ(c[3] + c[4] + c[5], 0);
}

TEST(SamplerTopP, TinyTemperatureIsArgmaxAndPOneIsTheOldSampler) {
  std::vector<float> logits(50);
  for (int i = 0; i < 50; i++) logits[i] = std::sin(0.7f * i);  // max at i = 20 (sin 14 = 0.9906)
  int argmax = 0;
  for (int i = 1; i < 50; i++)
    if (logits[i] > logits[argmax]) argmax = i;
  Rng rng(7);
  for (int i = 0; i < 200; i++) EXPECT_EQ(sample_token(logits, 1e-6f, 0, rng, 0.9f), argmax);
  for (int i = 0; i < 200; i++) EXPECT_EQ(sample_token(logits, 1e-6f, 0, rng), argmax);
  Rng a(8), b(8);
  for (int i = 0; i < 500; i++) EXPECT_EQ(sample_token(logits, 0.8f, 10, a), sample_token(logits, 0.8f, 10, b, 1.0f));
  EXPECT_THROW(sample_token(logits, 1.0f, 0, rng, 0.0f), std::runtime_error);
  EXPECT_THROW(sample_token(logits, 1.0f, 0, rng, 1.5f), std::runtime_error);
}

// A model whose logits ignore the input: final layernorm weight 0 and bias
// e_0, so logit v = wte[v][0]; tokens 3 and 5 share all the probability.
struct ConstantModel {
  std::unique_ptr<Backend> be = make_cpu_backend(1);
  GPT2Config cfg = tiny_gpt2_config(1, 2, 16, 16, 64, 64);
  std::unique_ptr<GPT2> model;
  ConstantModel() {
    model = std::make_unique<GPT2>(*be, cfg, 1, 16);
    model->init_random(1);
    std::vector<float> p = model->get_parameters();
    const ParamLayout& L = model->layout();
    for (int v = 0; v < 64; v++) p[L.offset[kWte] + v * 16] = (v == 3 || v == 5) ? 30.0f : 0.0f;
    for (int c = 0; c < 16; c++) {
      p[L.offset[kLnfw] + c] = 0.0f;
      p[L.offset[kLnfb] + c] = c == 0 ? 1.0f : 0.0f;
    }
    model->set_parameters(p);
  }
};

TEST(SamplerGenerate, StopsAtTheStopTokenWithoutReturningIt) {
  ConstantModel m;
  Rng rng(11);
  const std::vector<int32_t> with_stop = generate(*m.model, {1}, 40, 1.0f, 0, rng, 1.0f, 5);
  EXPECT_LT(with_stop.size(), 40u);  // 40 threes in a row: probability 2^-40
  for (int32_t t : with_stop) EXPECT_EQ(t, 3);
  Rng rng2(11);
  const std::vector<int32_t> no_stop = generate(*m.model, {1}, 40, 1.0f, 0, rng2);
  ASSERT_EQ(no_stop.size(), 40u);
  // Same seed: the same draws up to the stop token, which comes next.
  for (size_t i = 0; i < with_stop.size(); i++) EXPECT_EQ(no_stop[i], with_stop[i]);
  EXPECT_EQ(no_stop[with_stop.size()], 5);
  int fives = 0;
  for (int32_t t : no_stop) {
    EXPECT_TRUE(t == 3 || t == 5);
    fives += t == 5;
  }
  EXPECT_GT(fives, 5);
  // A context longer than max_seq slides; top-k = 1 breaks the tie by id (3) and never stops.
  Rng rng3(12);
  const std::vector<int32_t> greedy = generate(*m.model, std::vector<int32_t>(20, 7), 10, 1.0f, 1, rng3, 1.0f, 5);
  EXPECT_EQ(greedy, std::vector<int32_t>(10, 3));
}

}  // namespace
}  // namespace gpt2
