// --recompute 1: the GELU output is kept for one layer only and recomputed in
// the backward; --recompute 2: also the layernorm outputs (one buffer for ln1
// and ln2 of every layer). Both ops are deterministic, so the recomputed values
// are the forward's bits: losses and every gradient are bitwise those of the
// model that keeps all activations, and the activation memory shrinks by
// exactly (L-1)*B*T*4C elements, and (2L-1)*B*T*C more at level 2. The
// vocabulary (320 rows for C=32) is large enough that the backward scratch
// lives in the logits buffer: the level-0 model checks that too.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "model/gpt2.h"
#include "test/model/train_helpers.h"
#include "test/tiny_config.h"
#include "util/rng.h"

namespace gpt2 {
namespace {

GPT2Config small_config() { return tiny_gpt2_config(3, 2, 32, 16, 301, 320); }

struct StepResult {
  float loss = 0;
  std::vector<float> grads;
  size_t activation_bytes = 0;
};

StepResult two_micro_steps(int recompute) {
  const GPT2Config cfg = small_config();
  const int B = 2, T = 16;
  auto be = make_cpu_backend(1);
  ModelOptions opts;
  opts.recompute = recompute;
  GPT2 model(*be, cfg, B, T, opts);
  model.init_random(7);
  FlatGrads grads(*be, model);
  Rng rng(11);
  std::vector<int32_t> in(B * T), tg(B * T);
  StepResult r;
  for (int micro = 0; micro < 2; micro++) {  // the shared GELU buffer is rewritten between micro-steps
    for (auto& x : in) x = static_cast<int32_t>(rng.below(cfg.vocab_size));
    for (auto& x : tg) x = static_cast<int32_t>(rng.below(cfg.vocab_size));
    r.loss += train_forward_backward(model, in.data(), tg.data(), B, T, 1.0f / (2 * B * T), grads);
  }
  r.grads = grads.download(model.num_parameters());
  r.activation_bytes = model.activation_bytes();
  return r;
}

TEST(Recompute, GeluRecomputeGivesBitwiseTheSameGradients) {
  const StepResult keep = two_micro_steps(0), recompute = two_micro_steps(1);
  EXPECT_EQ(keep.loss, recompute.loss);
  ASSERT_EQ(keep.grads.size(), recompute.grads.size());
  EXPECT_EQ(std::memcmp(keep.grads.data(), recompute.grads.data(), keep.grads.size() * sizeof(float)), 0);
  bool nonzero = false;
  for (float g : keep.grads) nonzero |= g != 0.0f;
  EXPECT_TRUE(nonzero);
  const GPT2Config cfg = small_config();
  const size_t saved = static_cast<size_t>(cfg.num_layers - 1) * 2 * 16 * 4 * cfg.channels * sizeof(float);
  EXPECT_EQ(keep.activation_bytes - recompute.activation_bytes, saved);
}

TEST(Recompute, LayernormRecomputeGivesBitwiseTheSameGradients) {
  const StepResult keep = two_micro_steps(0), level2 = two_micro_steps(2);
  EXPECT_EQ(keep.loss, level2.loss);
  ASSERT_EQ(keep.grads.size(), level2.grads.size());
  EXPECT_EQ(std::memcmp(keep.grads.data(), level2.grads.data(), keep.grads.size() * sizeof(float)), 0);
  const GPT2Config cfg = small_config();
  const size_t L = cfg.num_layers, BTC = 2 * 16 * cfg.channels;
  EXPECT_EQ(keep.activation_bytes - level2.activation_bytes, ((L - 1) * 4 * BTC + (2 * L - 1) * BTC) * sizeof(float));
}

TEST(Recompute, RefusesUnknownLevels) {
  auto be = make_cpu_backend(1);
  for (int level : {3, -1}) {
    ModelOptions opts;
    opts.recompute = level;
    EXPECT_THROW(GPT2(*be, small_config(), 1, 8, opts), std::runtime_error);
  }
}

}  // namespace
}  // namespace gpt2
