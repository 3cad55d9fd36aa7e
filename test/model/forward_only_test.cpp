// GradMode::kNone, the model --eval-only and --generate build: the same
// forward, bit for bit, as a training model's, with no gradient memory and no
// backward scratch, and every gradient path refused instead of running on
// buffers that do not exist.
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "backend/backend.h"
#include "model/gpt2.h"
#include "test/tiny_config.h"
#include "util/rng.h"

namespace gpt2 {
namespace {

TEST(ForwardOnlyModel, SameForwardWithoutGradientMemory) {
  // Vp = 64 < the backward scratch's 9C per token: the scratch cannot all live
  // in the logits buffer, so a training model allocates some of it.
  const GPT2Config cfg = tiny_gpt2_config(2, 2, 32, 16, 60, 64);
  const int B = 2, T = 16;
  auto be = make_cpu_backend(1);
  GPT2 train(*be, cfg, B, T);
  GPT2 eval(*be, cfg, B, T, GradMode::kNone);
  train.init_random(5);
  eval.set_parameters(train.get_parameters());
  Rng rng(3);
  std::vector<int32_t> in(B * T), tg(B * T);
  for (auto& x : in) x = static_cast<int32_t>(rng.below(cfg.vocab_size));
  for (auto& x : tg) x = static_cast<int32_t>(rng.below(cfg.vocab_size));
  const float want = train.forward(in.data(), tg.data(), B, T);
  EXPECT_EQ(eval.forward(in.data(), tg.data(), B, T), want);
  EXPECT_EQ(eval.logits_at(1, T - 1), train.logits_at(1, T - 1));
  EXPECT_GT(train.gradient_bytes(), 0u);
  EXPECT_EQ(eval.gradient_bytes(), 0u);
  EXPECT_LT(eval.activation_bytes(), train.activation_bytes());
  EXPECT_THROW(eval.forward(in.data(), tg.data(), B, T, true, 1.0f), std::runtime_error);
  EXPECT_THROW(eval.backward(B, T), std::runtime_error);
  EXPECT_THROW(eval.grads(), std::runtime_error);
  EXPECT_THROW(eval.wte_grad_chunk(0, Tensor{}), std::runtime_error);
}

// backward(B, T) is the backward of the training forward of that batch, just
// run: not of an evaluation forward, another shape, or twice.
TEST(TrainingModel, BackwardOnlyOfItsTrainingForward) {
  const GPT2Config cfg = tiny_gpt2_config(2, 2, 32, 16, 60, 64);
  const int B = 2, T = 16;
  auto be = make_cpu_backend(1);
  GPT2 model(*be, cfg, B, T);
  model.init_random(5);
  std::vector<int32_t> in(B * T, 1), tg(B * T, 2);
  EXPECT_THROW(model.backward(B, T), std::runtime_error);  // no forward yet
  model.forward(in.data(), tg.data(), B, T);
  EXPECT_THROW(model.backward(B, T), std::runtime_error);  // an evaluation forward
  model.forward(in.data(), tg.data(), B, T, true, 1.0f / (B * T));
  EXPECT_THROW(model.backward(B, T - 1), std::runtime_error);
  EXPECT_THROW(model.backward(1, T), std::runtime_error);
  EXPECT_NO_THROW(model.backward(B, T));
  EXPECT_THROW(model.backward(B, T), std::runtime_error);  // its dlogits are spent
  // A kFull model makes the tied gradient itself: a sink that leaves it out is refused.
  struct NoWte : GradientSink {
    Tensor flat;
    const ParamLayout* layout = nullptr;
    Tensor grad(int t, int l) override { return t == kWte ? Tensor{} : layout->view(flat, t, l); }
  } sink;
  sink.flat = model.grads();
  sink.layout = &model.layout();
  model.forward(in.data(), tg.data(), B, T, true, 1.0f / (B * T));
  EXPECT_THROW(model.backward(B, T, &sink), std::runtime_error);
  EXPECT_NO_THROW(model.backward(B, T));  // the refused call spent nothing
  // A training forward that throws half way leaves nothing to run a backward on.
  model.begin_deferred_losses(1);
  model.forward(in.data(), tg.data(), B, T, true, 1.0f / (B * T));
  EXPECT_THROW(model.forward(in.data(), tg.data(), B, T, true, 1.0f / (B * T)), std::runtime_error);  // 2 of 1
  EXPECT_THROW(model.backward(B, T), std::runtime_error);
  model.collect_deferred_losses();
}

}  // namespace
}  // namespace gpt2
