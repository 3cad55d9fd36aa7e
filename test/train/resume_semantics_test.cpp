// Resume semantics and --init-from: the state file keeps the run's lr schedule
// (version 2; version 1 files still load without one), a resumed run keeps that
// schedule unless --reset-schedule, and the options that define these behaviours.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

#include "test/temp_dir.h"
#include "test/train/checkpoint_fakes.h"
#include "train/lr_schedule.h"
#include "train/run_plan.h"
#include "train/state_file.h"
#include "util/checked_io.h"

namespace gpt2 {
namespace {

LrSchedule schedule(LrScheduleKind k, float lr, int warmup, int total, float final_frac = 0.1f,
                    float wsd = 0.2f) {
  LrSchedule s;
  s.kind = k;
  s.max_lr = lr;
  s.warmup_steps = warmup;
  s.total_steps = total;
  s.final_frac = final_frac;
  s.wsd_decay_frac = wsd;
  return s;
}

TrainState small_state() {
  TrainState s;
  s.step = 20;
  s.config.num_layers = 2;
  s.num_params = 8;
  s.shard_end = 8;
  s.batch_size = 4;
  s.seq_len = 32;
  s.total_batch_tokens = 256;
  s.loader_state = {9, 8, 7};
  s.m.assign(8, 0.5f);
  s.v.assign(8, 0.25f);
  s.has_schedule = true;
  s.schedule = schedule(LrScheduleKind::kWsd, 1e-3f, 3, 20, 0.05f, 0.3f);
  return s;
}

TEST(StateFileV2, ScheduleAndGlobalBatchRoundTrip) {
  const std::string d = temp_dir("state_v2");
  const TrainState s = small_state();
  write_state_file(d + "/s.bin", s);
  for (bool header_only : {false, true}) {
    TrainState r = read_state_file(d + "/s.bin", header_only);
    EXPECT_TRUE(r.has_schedule);
    EXPECT_EQ(r.schedule, s.schedule) << r.schedule.describe();
    EXPECT_EQ(r.total_batch_tokens, 256);
    EXPECT_EQ(r.step, 20u);
    if (header_only) {
      EXPECT_TRUE(r.m.empty());
    } else {
      EXPECT_EQ(r.m, s.m);
      EXPECT_EQ(r.loader_state, s.loader_state);
    }
  }
}

// A version 1 file: the version 3 layout without the 24 schedule bytes that
// follow nan_skips (offset 8 magic + 4 version + 8 step + 24 config + 12 world,
// rank, stage + 24 shard, params + 8 B, T + 32 total, seed, rng, skips = 120)
// and the 28 bytes of evaluation history and version 4's 16 of spike windows after them.
TEST(StateFileV2, ReadsVersionOneWithoutSchedule) {
  const std::string d = temp_dir("state_v1");
  const TrainState s = small_state();
  write_state_file(d + "/s.bin", s);
  std::string v1 = older_state_file(read_text_file(d + "/s.bin"), 120, 24 + 28 + 16, 1, 8);
  std::ofstream(d + "/s1.bin", std::ios::binary).write(v1.data(), v1.size());
  TrainState r = read_state_file(d + "/s1.bin");
  EXPECT_FALSE(r.has_schedule);
  EXPECT_EQ(r.total_batch_tokens, 256);
  EXPECT_EQ(r.loader_state, s.loader_state);
  EXPECT_EQ(r.m, s.m);
  EXPECT_EQ(r.v, s.v);
  // an unknown version is still refused
  const uint32_t nine = 9;
  std::memcpy(&v1[8], &nine, 4);
  std::ofstream(d + "/s9.bin", std::ios::binary).write(v1.data(), v1.size());
  EXPECT_THROW(read_state_file(d + "/s9.bin"), std::runtime_error);
}

TEST(ResumeSchedule, StoredScheduleWinsAndHoldsItsFinalLr) {
  const LrSchedule original = schedule(LrScheduleKind::kCosine, 1e-3f, 2, 20);
  const LrSchedule longer = schedule(LrScheduleKind::kCosine, 1e-3f, 2, 40);
  std::string why;
  const LrSchedule used = resume_schedule(longer, &original, false, &why);
  EXPECT_EQ(used, original);
  EXPECT_NE(why.find("from the checkpoint"), std::string::npos) << why;
  EXPECT_NE(why.find("--reset-schedule"), std::string::npos) << why;
  // step 21 (index 20) continues at the original's final lr instead of jumping back up
  EXPECT_FLOAT_EQ(used.at(20), used.at(19));
  // 1e-3f * 0.1f in double, rounded once to float: within ~1e-11 of 1e-4 (1e-9 is 100x)
  EXPECT_NEAR(used.at(20), 1e-4, 1e-9);
  EXPECT_NEAR(used.at(39), 1e-4, 1e-9);
  EXPECT_GT(longer.at(20), 4e-4f);  // the flags' schedule would jump back up here
  // --reset-schedule: the flags' schedule
  EXPECT_EQ(resume_schedule(longer, &original, true, &why), longer);
  EXPECT_NE(why.find("--reset-schedule"), std::string::npos) << why;
  // a version 1 checkpoint carries none: the flags'
  EXPECT_EQ(resume_schedule(longer, nullptr, false, &why), longer);
  EXPECT_NE(why.find("predates"), std::string::npos) << why;
  // unchanged flags: the same schedule either way
  EXPECT_EQ(resume_schedule(original, &original, false, &why), original);
  EXPECT_NE(why.find("same as the flags"), std::string::npos) << why;
}

TEST(ResumeSchedule, EveryKindHoldsPastItsEnd) {
  for (LrScheduleKind k : {LrScheduleKind::kCosine, LrScheduleKind::kLinear, LrScheduleKind::kWsd}) {
    const LrSchedule s = schedule(k, 1.0f, 1, 10, 0.2f);
    // one float rounding of 0.2 (<= 1.5e-8) plus 0.2f's own 3e-9: 1e-6 holds with room
    EXPECT_NEAR(s.at(9), 0.2, 1e-6) << LrSchedule::kind_name(k);
    EXPECT_FLOAT_EQ(s.at(10), s.at(9)) << LrSchedule::kind_name(k);
    EXPECT_FLOAT_EQ(s.at(1000), s.at(9)) << LrSchedule::kind_name(k);
  }
  EXPECT_FLOAT_EQ(schedule(LrScheduleKind::kConstant, 1.0f, 0, 10).at(50), 1.0f);
}

// The one check of a resumed batch (train/run_plan.h), on the planned and
// on the loaded checkpoint alike: B, T and tokens per step kept, and the
// global batch re-cut only into whole micro-batches of the new world.
TEST(ResumedBatch, KeepsBAndTAndTheGlobalBatch) {
  TrainState st;
  st.batch_size = 4;
  st.seq_len = 32;
  st.world = 2;
  st.total_batch_tokens = 256;  // 4*32*2: grad_accum 1 at world 2
  BatchShape s;
  s.B = 4;
  s.T = 32;
  s.total_batch = 256;
  EXPECT_NO_THROW(check_resumed_batch(st, s, 1, "ckpt"));  // world 1: grad_accum 2
  EXPECT_NO_THROW(check_resumed_batch(st, s, 2, "ckpt"));
  try {
    check_resumed_batch(st, s, 4, "ckpt");  // 4*32*4 = 512 does not divide 256
    ADD_FAILURE() << "world 4 accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("global batch is 256 tokens per step, not a multiple of B*T*world = "
                                         "4*32*4 = 512 (ckpt has B=4 T=32 at world 2"), std::string::npos) << e.what();
  }
  for (auto change : {+[](BatchShape& b) { b.B = 2; }, +[](BatchShape& b) { b.T = 16; },
                      +[](BatchShape& b) { b.total_batch = 512; }}) {
    BatchShape other = s;
    change(other);
    try {
      check_resumed_batch(st, other, 1, "ckpt/state");
      ADD_FAILURE() << "B=" << other.B << " T=" << other.T << " total=" << other.total_batch << " accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("--resume: ckpt/state was written with B=4 T=32 total-batch-tokens=256"),
                std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace gpt2
