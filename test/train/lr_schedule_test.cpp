#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "train/lr_schedule.h"

namespace gpt2 {
namespace {

LrSchedule make(LrScheduleKind k, int warmup, int total, float final_frac = 0.1f) {
  LrSchedule s;
  s.kind = k;
  s.max_lr = 1.0f;
  s.warmup_steps = warmup;
  s.total_steps = total;
  s.final_frac = final_frac;
  return s;
}

TEST(LrSchedule, WarmupIsLinearFromOneStep) {
  LrSchedule s = make(LrScheduleKind::kCosine, 4, 20);
  EXPECT_FLOAT_EQ(s.at(0), 0.25f);
  EXPECT_FLOAT_EQ(s.at(1), 0.5f);
  EXPECT_FLOAT_EQ(s.at(3), 1.0f);
}

TEST(LrSchedule, CosineEndpointsAndMidpoint) {
  LrSchedule s = make(LrScheduleKind::kCosine, 0, 11);
  // at() computes in double and rounds once to float (<= 2^-24 of a value <= 1), and
  // final_frac 0.1f is 1.5e-9 off 0.1: the NEARs' 1e-6 is 16x that.
  EXPECT_FLOAT_EQ(s.at(0), 1.0f);
  EXPECT_NEAR(s.at(5), 0.1 + 0.5 * 0.9, 1e-6);
  EXPECT_NEAR(s.at(10), 0.1, 1e-6);
  for (int i = 1; i < 11; i++) EXPECT_LE(s.at(i), s.at(i - 1));
}

TEST(LrSchedule, LinearAndConstant) {
  LrSchedule lin = make(LrScheduleKind::kLinear, 2, 13, 0.0f);
  EXPECT_FLOAT_EQ(lin.at(2), 1.0f);
  EXPECT_NEAR(lin.at(7), 0.5, 1e-6);
  EXPECT_NEAR(lin.at(12), 0.0, 1e-6);
  LrSchedule c = make(LrScheduleKind::kConstant, 2, 12);
  EXPECT_FLOAT_EQ(c.at(0), 0.5f);
  EXPECT_FLOAT_EQ(c.at(11), 1.0f);
}

TEST(LrSchedule, WsdHoldsThenCoolsDown) {
  LrSchedule s = make(LrScheduleKind::kWsd, 0, 101, 0.0f);
  s.wsd_decay_frac = 0.2f;
  EXPECT_FLOAT_EQ(s.at(0), 1.0f);
  EXPECT_FLOAT_EQ(s.at(80), 1.0f);
  EXPECT_NEAR(s.at(90), 0.5, 1e-6);
  EXPECT_NEAR(s.at(100), 0.0, 1e-6);
}

TEST(LrSchedule, NamesEachKind) {
  EXPECT_STREQ(LrSchedule::kind_name(LrScheduleKind::kWsd), "wsd");
  for (const auto& [name, kind] : kLrScheduleKinds) EXPECT_STREQ(LrSchedule::kind_name(kind), name);
}

}  // namespace
}  // namespace gpt2
