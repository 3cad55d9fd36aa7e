// Dropout in the model (embedding, residual projections and attention
// probabilities; util/philox.h's masks through Backend::dropout and the
// attention ops): rates of 0 are bitwise the model without
// dropout; training forwards drop, evaluation forwards do not; the backward
// is the forward's derivative with the same masks (a directional finite
// difference of the loss); masks follow the optimizer step and the global
// token, so one batch of 4 rows equals two of 2 rows at token0 = 0 and 2T;
// --recompute 1 and 2 keep the bits; rates outside [0, 1) are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "backend/backend.h"
#include "model/gpt2.h"
#include "test/model/train_helpers.h"
#include "test/tiny_config.h"
#include "util/rng.h"

namespace gpt2 {
namespace {

GPT2Config small_config() { return tiny_gpt2_config(2, 2, 32, 16, 301, 320); }

struct Batch {
  std::vector<int32_t> in, tg;
};
Batch batch(int B, int T, int vocab, uint64_t seed) {
  Rng rng(seed);
  Batch b{std::vector<int32_t>(B * T), std::vector<int32_t>(B * T)};
  for (auto& x : b.in) x = static_cast<int32_t>(rng.below(vocab));
  for (auto& x : b.tg) x = static_cast<int32_t>(rng.below(vocab));
  return b;
}

struct Step {
  float loss = 0;
  std::vector<float> losses, grads;
};
// One training forward + backward of `b` (B rows of T) with the given rates, mask position and recompute level.
Step train_step(const DropoutRates& rates, const Batch& b, int B, int T, uint32_t step = 3, uint64_t token0 = 0,
                int recompute = 0) {
  const GPT2Config cfg = small_config();
  auto be = make_cpu_backend(1);
  ModelOptions opts;
  opts.recompute = recompute;
  GPT2 model(*be, cfg, B, T, opts);
  model.init_random(7);
  model.set_dropout(rates, 2026);
  model.set_dropout_position(step, token0);
  FlatGrads grads(*be, model);
  Step r;
  model.train_forward_deferred_loss(b.in.data(), b.tg.data(), B, T, 1.0f / (B * T));
  r.losses = model.losses();
  r.loss = static_cast<float>(model.collect_train_losses().mean());
  model.backward(grads.tensor());
  r.grads = grads.download(model.num_parameters());
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

const DropoutRates kRates{0.1f, 0.3f, 0.2f};

TEST(ModelDropout, ZeroRatesAreBitwiseTheModelWithoutDropout) {
  const Batch b = batch(2, 16, 301, 1);
  const Step none = train_step(DropoutRates{}, b, 2, 16);
  const Step zero = train_step(DropoutRates{0.0f, 0.0f, 0.0f}, b, 2, 16, 99, 12345);
  EXPECT_EQ(none.loss, zero.loss);
  EXPECT_TRUE(same_bits(none.grads, zero.grads));
  const Step dropped = train_step(kRates, b, 2, 16);
  EXPECT_NE(dropped.loss, none.loss);  // training forwards drop
}

TEST(ModelDropout, EvaluationForwardsDoNotDrop) {
  const GPT2Config cfg = small_config();
  const Batch b = batch(2, 16, 301, 2);
  auto be = make_cpu_backend(1);
  GPT2 model(*be, cfg, 2, 16);
  model.init_random(7);
  const float plain = model.forward(b.in.data(), b.tg.data(), 2, 16);
  model.set_dropout(kRates, 2026);
  EXPECT_EQ(model.forward(b.in.data(), b.tg.data(), 2, 16), plain);
  model.train_forward_deferred_loss(b.in.data(), b.tg.data(), 2, 16, 1.0f / 32);
  EXPECT_NE(static_cast<float>(model.collect_train_losses().mean()), plain);
}

// d/de loss(theta + e d) at e = 0 against grad . d, the masks fixed by (step, token0).
TEST(ModelDropout, BackwardIsTheDerivativeWithTheSameMasks) {
  const GPT2Config cfg = small_config();
  const int B = 2, T = 16;
  const Batch b = batch(B, T, 301, 3);
  auto be = make_cpu_backend(1);
  GPT2 model(*be, cfg, B, T);
  model.init_random(7);
  model.set_dropout(DropoutRates{0.2f, 0.5f, 0.0f}, 2026);
  model.set_dropout_position(4, 64);
  const std::vector<float> theta = model.get_parameters();
  Rng rng(5);
  std::vector<float> dir(theta.size());
  for (auto& x : dir) x = static_cast<float>(rng.normal() * 0.01);
  std::vector<float> g;
  {
    FlatGrads grads(*be, model);
    train_forward_backward(model, b.in.data(), b.tg.data(), B, T, 1.0f / (B * T), grads);
    g = grads.download(model.num_parameters());
  }
  double gd = 0;
  for (size_t i = 0; i < g.size(); i++) gd += double(g[i]) * dir[i];
  auto loss_at = [&](double e) {
    std::vector<float> p(theta.size());
    for (size_t i = 0; i < p.size(); i++) p[i] = static_cast<float>(theta[i] + e * dir[i]);
    model.set_parameters(p);
    model.train_forward_deferred_loss(b.in.data(), b.tg.data(), B, T, 1.0f / (B * T));
    return double(static_cast<float>(model.collect_train_losses().mean()));
  };
  const double e = 0.05, fd = (loss_at(e) - loss_at(-e)) / (2 * e);
  EXPECT_NEAR(fd, gd, 2e-3 * std::fabs(gd) + 1e-5) << "finite difference " << fd << " vs grad.d " << gd;
  // the same check without the backward's masks would be far off: the masked gradient differs
  model.set_parameters(theta);
  model.set_dropout(DropoutRates{}, 2026);
  {
    FlatGrads grads(*be, model);
    train_forward_backward(model, b.in.data(), b.tg.data(), B, T, 1.0f / (B * T), grads);
    g = grads.download(model.num_parameters());
  }
  double gd_plain = 0;
  for (size_t i = 0; i < g.size(); i++) gd_plain += double(g[i]) * dir[i];
  EXPECT_GT(std::fabs(gd_plain - gd), 20 * (2e-3 * std::fabs(gd) + 1e-5));
}

// Rows 0-1 at token0 = 0 and rows 2-3 at token0 = 2T: the per-token losses of one
// batch of 4 rows (OpenBLAS may block the two shapes differently: 1e-6).
TEST(ModelDropout, MasksFollowTheGlobalToken) {
  const int T = 16;
  const Batch all = batch(4, T, 301, 4);
  Batch first{{all.in.begin(), all.in.begin() + 2 * T}, {all.tg.begin(), all.tg.begin() + 2 * T}};
  Batch second{{all.in.begin() + 2 * T, all.in.end()}, {all.tg.begin() + 2 * T, all.tg.end()}};
  const Step whole = train_step(kRates, all, 4, T);
  const Step a = train_step(kRates, first, 2, T, 3, 0), b = train_step(kRates, second, 2, T, 3, 2 * T);
  for (int i = 0; i < 2 * T; i++) {
    EXPECT_NEAR(a.losses[i], whole.losses[i], 1e-6 * std::fabs(whole.losses[i])) << i;
    EXPECT_NEAR(b.losses[i], whole.losses[2 * T + i], 1e-6 * std::fabs(whole.losses[2 * T + i])) << i;
  }
  const Step shifted = train_step(kRates, second, 2, T, 3, 0);  // rows 2-3 with rows 0-1's masks
  const Step next_step = train_step(kRates, second, 2, T, 4, 2 * T);
  EXPECT_NE(shifted.loss, b.loss);
  EXPECT_NE(next_step.loss, b.loss);
}

TEST(ModelDropout, RecomputeKeepsTheBits) {
  const Batch b = batch(2, 16, 301, 6);
  const Step keep = train_step(kRates, b, 2, 16, 3, 0, 0);
  for (int level : {1, 2}) {
    const Step r = train_step(kRates, b, 2, 16, 3, 0, level);
    EXPECT_EQ(r.loss, keep.loss) << level;
    EXPECT_TRUE(same_bits(r.grads, keep.grads)) << level;
  }
}

TEST(ModelDropout, RatesOutsideTheRangeAreRefused) {
  const GPT2Config cfg = small_config();
  auto be = make_cpu_backend(1);
  GPT2 model(*be, cfg, 1, 4);
  for (DropoutRates bad : {DropoutRates{1.0f, 0, 0}, DropoutRates{0, -0.1f, 0}, DropoutRates{0, NAN, 0}, DropoutRates{0, 0, 1.0f}})
    EXPECT_THROW(model.set_dropout(bad, 1), std::runtime_error);
}

}  // namespace
}  // namespace gpt2
