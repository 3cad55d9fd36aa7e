// ModelOptions::forward_only, the model --eval-only and --generate build: the
// same forward, bit for bit, as a training model's, with no backward scratch,
// and every gradient path refused instead of running on buffers that do not
// exist. A training model's backward runs only on its last training forward.
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "backend/backend.h"
#include "model/gpt2.h"
#include "test/model/train_helpers.h"
#include "test/tiny_config.h"
#include "util/rng.h"

namespace gpt2 {
namespace {

TEST(ForwardOnlyModel, SameForwardWithoutBackwardScratch) {
  // Vp = 64 < the backward scratch's 9C per token: the scratch cannot all live
  // in the logits buffer, so a training model allocates some of it.
  const GPT2Config cfg = tiny_gpt2_config(2, 2, 32, 16, 60, 64);
  const int B = 2, T = 16;
  auto be = make_cpu_backend(1);
  GPT2 train(*be, cfg, B, T);
  ModelOptions forward_only;
  forward_only.forward_only = true;
  GPT2 eval(*be, cfg, B, T, forward_only);
  train.init_random(5);
  eval.set_parameters(train.get_parameters());
  Rng rng(3);
  std::vector<int32_t> in(B * T), tg(B * T);
  for (auto& x : in) x = static_cast<int32_t>(rng.below(cfg.vocab_size));
  for (auto& x : tg) x = static_cast<int32_t>(rng.below(cfg.vocab_size));
  const float want = train.forward(in.data(), tg.data(), B, T);
  EXPECT_EQ(eval.forward(in.data(), tg.data(), B, T), want);
  EXPECT_EQ(eval.logits_at(1, T - 1), train.logits_at(1, T - 1));
  EXPECT_LT(eval.activation_bytes(), train.activation_bytes());
  EXPECT_THROW(eval.train_forward_deferred_loss(in.data(), tg.data(), B, T, 1.0f), std::runtime_error);
  EXPECT_THROW(eval.backward_head(eval.param_views(0), ParamTensors{}), std::runtime_error);
  EXPECT_THROW(eval.wte_grad_chunk(0, Tensor{}), std::runtime_error);
}

TEST(TrainingModel, BackwardOnlyOfItsTrainingForward) {
  const GPT2Config cfg = tiny_gpt2_config(2, 2, 32, 16, 60, 64);
  const int B = 2, T = 16;
  auto be = make_cpu_backend(1);
  GPT2 model(*be, cfg, B, T);
  model.init_random(5);
  FlatGrads grads(*be, model);
  std::vector<int32_t> in(B * T, 1), tg(B * T, 2);
  EXPECT_THROW(model.backward(grads.tensor()), std::runtime_error);  // no forward yet
  model.forward(in.data(), tg.data(), B, T);
  EXPECT_THROW(model.backward(grads.tensor()), std::runtime_error);  // an evaluation forward
  model.train_forward_deferred_loss(in.data(), nullptr, B, T, 1.0f);
  EXPECT_THROW(model.backward(grads.tensor()), std::runtime_error);  // no targets: no dlogits
  model.train_forward_deferred_loss(in.data(), tg.data(), B, T, 1.0f / (B * T));
  EXPECT_NO_THROW(model.backward(grads.tensor()));
  EXPECT_THROW(model.backward(grads.tensor()), std::runtime_error);  // its dlogits are spent
  model.collect_train_losses();
  // Without keep_dlogits the backward's scratch overwrites dlogits: the tied
  // gradient must be made in the backward, not left for wte_grad_chunk.
  model.train_forward_deferred_loss(in.data(), tg.data(), B, T, 1.0f / (B * T));
  ParamTensors no_wte = model.layout().views(grads.tensor(), 0);
  no_wte[kWte] = Tensor{};
  EXPECT_THROW(model.backward_head(model.param_views(0), no_wte), std::runtime_error);
  EXPECT_NO_THROW(model.backward(grads.tensor()));  // the refused call spent nothing
  EXPECT_THROW(model.wte_grad_chunk(0, Tensor{}), std::runtime_error);  // not a keep_dlogits model
  // A training forward beyond the reserved loss slots is refused before it
  // runs: the last one's backward is still there to run.
  model.collect_train_losses();
  model.train_forward_deferred_loss(in.data(), tg.data(), B, T, 1.0f / (B * T));
  EXPECT_THROW(model.train_forward_deferred_loss(in.data(), tg.data(), B, T, 1.0f / (B * T)), std::runtime_error);
  EXPECT_NO_THROW(model.backward(grads.tensor()));
  EXPECT_EQ(model.collect_train_losses().count, static_cast<size_t>(B * T));
}

}  // namespace
}  // namespace gpt2
