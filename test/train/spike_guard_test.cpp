// The spike guards: the window's z-score and warm-up, the
// verdicts on planted spikes, and a restored state deciding as the original.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "metrics/spike_guard.h"

namespace gpt2 {
namespace {

TEST(SpikeWindow, ZScoreAgainstTheFullWindowOnly) {
  SpikeWindow w(4);
  for (double x : {1.0, 2.0, 3.0}) {
    EXPECT_TRUE(std::isnan(w.z(10.0)));  // warm-up
    w.push(x);
  }
  w.push(4.0);  // mean 2.5, population deviation sqrt(1.25)
  EXPECT_DOUBLE_EQ(w.z(5.0), 2.5 / std::sqrt(1.25));
  w.push(5.0);  // the oldest leaves: 2 3 4 5
  EXPECT_EQ(w.values(), (std::vector<double>{2, 3, 4, 5}));
  EXPECT_DOUBLE_EQ(w.z(3.5), 0.0);
  SpikeWindow flat(2);
  flat.push(1.0);
  flat.push(1.0);
  EXPECT_EQ(flat.z(9.0), 0.0);  // no spread, no verdict
  flat.assign({1, 2, 3});       // a longer saved window: its newest values
  EXPECT_EQ(flat.values(), (std::vector<double>{2, 3}));
}

// A gently noisy loss with one planted spike, and a norm with another.
std::vector<double> series(int n, int spike_at, double base) {
  std::vector<double> v;
  for (int i = 0; i < n; i++) v.push_back(base + 0.01 * ((i * 7) % 5) + (i == spike_at ? 10.0 * base : 0.0));
  return v;
}

TEST(SpikeGuard, SkipsThePlantedSpikesOnlyAfterTheWarmUp) {
  const std::vector<double> loss = series(40, 25, 3.0), norm = series(40, 33, 0.5);
  SpikeGuard both(5.0, 5.0, 8), loss_only(5.0, 0.0, 8), early(5.0, 0.0, 30);
  std::vector<int> skipped, skipped_loss_only;
  for (int i = 0; i < 40; i++) {
    const SpikeVerdict v = both.observe(loss[i], norm[i]);
    if (v.skip) skipped.push_back(i);
    EXPECT_EQ(std::isnan(v.loss_z), i < 8) << i;
    if (i == 25) {
      EXPECT_EQ(v.reason, "loss_z");
    }
    if (i == 33) {
      EXPECT_EQ(v.reason, "grad_z");
    }
    if (loss_only.observe(loss[i], norm[i]).skip) skipped_loss_only.push_back(i);
    EXPECT_FALSE(early.observe(loss[i], norm[i]).skip) << "window of 30 still warming up at " << i;
  }
  EXPECT_EQ(skipped, (std::vector<int>{25, 33}));
  EXPECT_EQ(skipped_loss_only, (std::vector<int>{25}));
  EXPECT_EQ(both.skips(), 2u);
  EXPECT_EQ(both.state().loss.size(), 8u);
}

TEST(SpikeGuard, RestoredStateDecidesAsTheOriginal) {
  const std::vector<double> loss = series(40, 30, 3.0), norm = series(40, -1, 0.5);
  SpikeGuard a(4.0, 4.0, 6), b(4.0, 4.0, 6);
  for (int i = 0; i < 20; i++) a.observe(loss[i], norm[i]);
  b.restore(a.state());
  EXPECT_EQ(b.state(), a.state());
  for (int i = 20; i < 40; i++) {
    const SpikeVerdict va = a.observe(loss[i], norm[i]), vb = b.observe(loss[i], norm[i]);
    EXPECT_EQ(va.skip, vb.skip);
    EXPECT_EQ(va.loss_z, vb.loss_z);  // bit for bit
  }
  EXPECT_EQ(a.skips(), 1u);
  EXPECT_EQ(b.state(), a.state());
}

}  // namespace
}  // namespace gpt2
