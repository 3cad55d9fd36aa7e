// Deferred losses (GPT2::begin_deferred_losses / collect_deferred_losses): the
// trainer's micro-steps keep their per-token losses on the device and download
// them once per optimizer step. The collected sum is bitwise the sum of what
// the per-forward loss_sum() calls give (same fp64 additions, same order), the
// count includes every non-ignored target, gradients are unchanged, and misuse
// is refused.
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <vector>

#include "backend/backend.h"
#include "model/gpt2.h"
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

LossRun three_micro_steps(bool deferred) {
  auto be = make_cpu_backend(1);
  GPT2 model(*be, tiny(), 2, 8);
  model.init_random(3);
  Rng rng(5);
  std::vector<int32_t> in(16), tg(16);
  LossRun r;
  model.zero_grad();
  if (deferred) model.begin_deferred_losses(3);
  for (int micro = 0; micro < 3; micro++) {
    for (auto& x : in) x = static_cast<int32_t>(rng.below(29));
    for (auto& x : tg) x = static_cast<int32_t>(rng.below(29));
    tg[micro] = kIgnoreTarget;  // a masked target per micro-step
    const float mean = model.forward(in.data(), tg.data(), 2, 8, true, 1.0f / 45);
    if (!deferred) {
      EXPECT_GT(mean, 0.0f);
      r.loss_sum += model.loss_sum();
      r.count += model.loss_count();
    } else {
      EXPECT_EQ(mean, 0.0f);  // not known until collected
    }
    model.backward(2, 8);
  }
  if (deferred) {
    r.loss_sum = model.collect_deferred_losses();
    EXPECT_EQ(model.loss_sum(), r.loss_sum);
    r.count = model.loss_count();
  }
  r.grads.resize(model.num_parameters());
  be->download(r.grads.data(), model.grads().slice(0, model.num_parameters()));
  return r;
}

TEST(DeferredLosses, CollectedSumIsBitwiseThePerForwardSums) {
  const LossRun each = three_micro_steps(false), deferred = three_micro_steps(true);
  EXPECT_EQ(std::memcmp(&each.loss_sum, &deferred.loss_sum, sizeof(double)), 0)
      << each.loss_sum << " vs " << deferred.loss_sum;
  EXPECT_EQ(each.count, 45u);
  EXPECT_EQ(deferred.count, 45u);
  ASSERT_EQ(each.grads.size(), deferred.grads.size());
  EXPECT_EQ(std::memcmp(each.grads.data(), deferred.grads.data(), each.grads.size() * sizeof(float)), 0);
}

TEST(DeferredLosses, MisuseIsRefused) {
  auto be = make_cpu_backend(1);
  GPT2 model(*be, tiny(), 2, 8);
  model.init_random(3);
  std::vector<int32_t> in(16, 1), tg(16, 2);
  EXPECT_THROW(model.collect_deferred_losses(), std::runtime_error);  // nothing begun
  EXPECT_THROW(model.begin_deferred_losses(0), std::runtime_error);
  model.begin_deferred_losses(1);
  model.forward(in.data(), tg.data(), 2, 8);
  EXPECT_THROW(model.forward(in.data(), tg.data(), 2, 8), std::runtime_error);  // one more than announced
  EXPECT_GT(model.collect_deferred_losses(), 0.0);
  // Collected: forwards report their own loss again.
  EXPECT_GT(model.forward(in.data(), tg.data(), 2, 8), 0.0f);
}

}  // namespace
}  // namespace gpt2
