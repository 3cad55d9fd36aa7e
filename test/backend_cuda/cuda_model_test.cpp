// One GPT-2 training step on a tiny config with the emulated CUDA backend
// versus the CPU backend: the model code (model/gpt2.h) is the same, only the
// backend is swapped. Checks the forward loss and per-token losses, the
// gradient of each of the 16 parameter tensors (also with embedding and residual
// dropout: the same masks on both), one AdamW step (per-tensor
// weight decay as the trainer applies it) and the loss after the step.
//
// Tolerances: the two backends round differently (cuBLAS vs OpenBLAS blocking,
// warp vs SIMD reductions, stored attention probabilities vs recomputed ones),
// so each fp32 result differs by a few ulps per op, amplified through the ~40
// ops of a 2-layer step. Gradients: max |cuda - cpu| <= 1e-4 * max |cpu| per
// tensor (1e-4 is ~800 fp32 ulps of the tensor's scale: fails for any indexing
// or formula bug, which gives O(1) relative errors). Loss: relative 1e-5
// (~170 fp32 ulps of the mean of 14 per-token losses). These are allowances for
// chained random-sign roundings, not worst cases: under the Haswell, SkylakeX and
// Zen sgemm kernels the gradients differ by <= 4.4e-7 of the scale (230x inside).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "model/gpt2.h"
#include "test/model/train_helpers.h"
#include "test/tiny_config.h"

namespace gpt2 {
namespace {

struct StepResult {
  float loss = 0, loss_after = 0;
  std::vector<float> losses, grads, params_after;
};

// Head size 12, C not a multiple of 8 or 32; V = 61 pads to 128: padded columns exist.
GPT2Config tiny_config() { return tiny_gpt2_config(2, 3, 36, 9, 61); }

constexpr int kB = 2, kT = 7;
constexpr float kLr = 1e-3f, kBeta1 = 0.9f, kBeta2 = 0.95f, kEps = 1e-8f, kWd = 0.1f;

StepResult train_step(Backend& be, const DropoutRates& dropout = DropoutRates{}) {
  const GPT2Config cfg = tiny_config();
  GPT2 model(be, cfg, kB, kT);
  model.init_random(1234);
  model.set_dropout(dropout, 99);
  model.set_dropout_position(2, 10);
  std::vector<int32_t> inputs(kB * kT), targets(kB * kT);
  for (int i = 0; i < kB * kT; i++) {
    inputs[i] = (i * 17 + 5) % cfg.vocab_size;
    targets[i] = (i * 29 + 3) % cfg.vocab_size;
  }
  inputs[3] = inputs[9];  // a repeated token: dwte rows accumulate
  StepResult r;
  FlatGrads grads(be, model);
  model.train_forward_deferred_loss(inputs.data(), targets.data(), kB, kT, 1.0f / (kB * kT));
  r.losses = model.losses();
  r.loss = static_cast<float>(model.collect_train_losses().mean());
  model.backward(grads.tensor());
  const ParamLayout& layout = model.layout();
  r.grads = grads.download(layout.total);
  // AdamW, per tensor with the trainer's weight-decay rule.
  Tensor m = be.alloc(layout.total, BufferRole::kOptimizer);
  Tensor v = be.alloc(layout.total, BufferRole::kOptimizer);
  be.zero(m);
  be.zero(v);
  for (int t = 0; t < kNumParamTensors; t++) {
    const size_t off = layout.offset[t], n = layout.numel[t];
    be.adamw_update({.params = model.params().slice(off, n), .grads = grads.tensor().slice(off, n),
                     .m = m.slice(off, n), .v = v.slice(off, n), .lr = kLr, .beta1 = kBeta1, .beta2 = kBeta2,
                     .eps = kEps, .weight_decay = ParamLayout::decays(t) ? kWd : 0.0f, .grad_scale = 1.0f, .t = 1});
  }
  be.free(m);
  be.free(v);
  r.params_after = model.get_parameters();
  r.loss_after = model.forward(inputs.data(), targets.data(), kB, kT);
  return r;
}

double max_abs(const float* x, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++) m = std::max(m, std::fabs(double(x[i])));
  return m;
}

// The forward's losses and every tensor's gradient, within the allowances above.
void expect_losses_and_gradients_match(const StepResult& got, const StepResult& want) {
  ASSERT_TRUE(std::isfinite(want.loss));
  EXPECT_NEAR(got.loss, want.loss, 1e-5 * std::fabs(want.loss));
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t i = 0; i < want.losses.size(); i++)
    EXPECT_NEAR(got.losses[i], want.losses[i], 1e-5 * std::fabs(want.losses[i])) << i;

  const ParamLayout layout = ParamLayout::for_config(tiny_config());
  ASSERT_EQ(got.grads.size(), layout.total);
  for (int t = 0; t < kNumParamTensors; t++) {
    const size_t off = layout.offset[t], n = layout.numel[t];
    const double scale = max_abs(&want.grads[off], n);
    ASSERT_GT(scale, 0.0) << ParamLayout::name(t) << ": zero gradient, the check would be empty";
    double worst = 0;
    for (size_t i = off; i < off + n; i++)
      worst = std::max(worst, std::fabs(double(got.grads[i]) - want.grads[i]));
    EXPECT_LE(worst, 1e-4 * scale) << ParamLayout::name(t) << " gradient (scale " << scale << ")";
  }
}

TEST(CudaModel, TrainingStepMatchesCpuBackend) {
  auto cpu = make_cpu_backend(0);
  auto cuda = make_cuda_backend(0);
  const StepResult want = train_step(*cpu);
  const StepResult got = train_step(*cuda);
  expect_losses_and_gradients_match(got, want);
  const ParamLayout layout = ParamLayout::for_config(tiny_config());

  // AdamW at t = 1 moves each parameter by lr * (g / (|g| + eps) + wd * p): a
  // gradient difference dg changes the step by at most lr * |sgn-like term|
  // difference, computed here from both backends' own gradients (up to 2 lr where
  // a gradient near 0 flips sign: then |d| sits right at that term). Beyond it,
  // each side rounds its update: u |p'| for p - step, and ~7 roundings of the
  // step (mhat, vhat, sqrt, + eps, /, + wd p, * lr), 7 u lr <= 4.2e-10 with
  // |step| <= 1: twice that is 1.2e-7 |p| + 8.4e-10 <= 1e-6 |p| + 1e-9.
  for (int t = 0; t < kNumParamTensors; t++) {
    const size_t off = layout.offset[t], n = layout.numel[t];
    for (size_t i = off; i < off + n; i++) {
      const double g1 = got.grads[i], g2 = want.grads[i];
      const double explained = kLr * std::fabs(g1 / (std::fabs(g1) + kEps) - g2 / (std::fabs(g2) + kEps));
      const double tol = explained + 1e-6 * std::fabs(double(want.params_after[i])) + 1e-9;
      if (std::fabs(double(got.params_after[i]) - want.params_after[i]) > tol) {
        ADD_FAILURE() << ParamLayout::name(t) << "[" << i - off << "]: params after AdamW "
                      << got.params_after[i] << " vs " << want.params_after[i];
        break;
      }
    }
  }
  EXPECT_LT(want.loss_after, want.loss);  // the step helped, on the reference
  // After the step the parameters differ by the explained sign-like terms above
  // (<= 2 lr, only where |g| is within the gradient error of 0, so their effect on
  // the loss is ~ 2 lr |g| each): the forward's 1e-5 plus that, allowed 1e-4.
  EXPECT_NEAR(got.loss_after, want.loss_after, 1e-4 * std::fabs(want.loss_after));
}

// Embedding, residual and attention-probability dropout (flash kernels): the
// backends draw the same masks (util/philox.h), so the step matches as without
// dropout; and it is a different step.
TEST(CudaModel, TrainingStepWithDropoutMatchesCpuBackend) {
  auto cpu = make_cpu_backend(0);
  auto cuda = make_cuda_backend(0);
  const DropoutRates rates{0.1f, 0.3f, 0.2f};
  const StepResult want = train_step(*cpu, rates);
  expect_losses_and_gradients_match(train_step(*cuda, rates), want);
  EXPECT_NE(want.loss, train_step(*cpu).loss);
}

}  // namespace
}  // namespace gpt2
