// Deferred losses (GPT2::train_forward_deferred_loss / collect_train_losses):
// the trainer's micro-steps keep their per-token losses on the device and
// download them once per optimizer step. Collected once, the sum is bitwise the
// sum of collecting after every forward (same fp64 additions, same order), the
// count includes every non-ignored target, and more forwards than reserved
// are refused.
#include <gtest/gtest.h>

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

GPT2Config tiny() { return tiny_gpt2_config(2, 2, 16, 8, 29, 32); }

struct LossRun {
  double loss_sum = 0;
  size_t count = 0;
  std::vector<float> grads;
};

LossRun three_micro_steps(bool collect_once) {
  auto be = make_cpu_backend(1);
  GPT2 model(*be, tiny(), 2, 8);
  model.init_random(3);
  FlatGrads grads(*be, model);
  Rng rng(5);
  std::vector<int32_t> in(16), tg(16);
  LossRun r;
  if (collect_once) model.reserve_train_losses(3);
  for (int micro = 0; micro < 3; micro++) {
    for (auto& x : in) x = static_cast<int32_t>(rng.below(29));
    for (auto& x : tg) x = static_cast<int32_t>(rng.below(29));
    tg[micro] = kIgnoreTarget;  // a masked target per micro-step
    model.train_forward_deferred_loss(in.data(), tg.data(), 2, 8, 1.0f / 45);
    if (!collect_once) {
      const LossSum each = model.collect_train_losses();
      EXPECT_GT(each.sum, 0.0);
      r.loss_sum += each.sum;
      r.count += each.count;
    }
    model.backward(grads.tensor());
  }
  if (collect_once) {
    const LossSum all = model.collect_train_losses();
    r.loss_sum = all.sum;
    r.count = all.count;
  }
  r.grads = grads.download(model.num_parameters());
  return r;
}

TEST(DeferredLosses, CollectedSumIsBitwiseThePerForwardSums) {
  const LossRun each = three_micro_steps(false), once = three_micro_steps(true);
  EXPECT_EQ(std::memcmp(&each.loss_sum, &once.loss_sum, sizeof(double)), 0)
      << each.loss_sum << " vs " << once.loss_sum;
  EXPECT_EQ(each.count, 45u);
  EXPECT_EQ(once.count, 45u);
  ASSERT_EQ(each.grads.size(), once.grads.size());
  EXPECT_EQ(std::memcmp(each.grads.data(), once.grads.data(), each.grads.size() * sizeof(float)), 0);
}

TEST(DeferredLosses, MoreForwardsThanReservedAreRefused) {
  auto be = make_cpu_backend(1);
  GPT2 model(*be, tiny(), 2, 8);
  model.init_random(3);
  std::vector<int32_t> in(16, 1), tg(16, 2);
  EXPECT_EQ(model.collect_train_losses().count, 0u);  // nothing to collect
  EXPECT_THROW(model.reserve_train_losses(0), std::runtime_error);
  model.train_forward_deferred_loss(in.data(), tg.data(), 2, 8, 1.0f / 16);  // one slot by default
  EXPECT_THROW(model.train_forward_deferred_loss(in.data(), tg.data(), 2, 8, 1.0f / 16), std::runtime_error);
  EXPECT_THROW(model.reserve_train_losses(2), std::runtime_error);  // not while losses wait
  const float eval = model.forward(in.data(), tg.data(), 2, 8);  // evaluation forwards take no slot
  const LossSum first = model.collect_train_losses();
  EXPECT_EQ(first.count, 16u);
  EXPECT_EQ(static_cast<float>(first.mean()), eval);  // no dropout: the same loss
  model.train_forward_deferred_loss(in.data(), tg.data(), 2, 8, 1.0f / 16);  // collected: the slot is free
  EXPECT_EQ(model.collect_train_losses().sum, first.sum);
}

}  // namespace
}  // namespace gpt2
