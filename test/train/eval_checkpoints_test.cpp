// Evaluation-driven checkpoints and stopping, epochs and named checkpoints:
// HF's EarlyStoppingCallback rule, the history in the state file (version 3;
// version 2 files still load), --keep-best's protection from pruning, --epochs'
// step count, and --resume-from's parsing and refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "distributed/comm.h"
#include "test/temp_dir.h"
#include "test/train/checkpoint_fakes.h"
#include "train/checkpoint.h"
#include "metrics/eval_history.h"
#include "train/run_plan.h"
#include "train/state_file.h"
#include "util/checked_io.h"
#include "util/checksum.h"

namespace gpt2 {
namespace {

// ---- the history -------------------------------------------------------------------

TEST(EvalHistory, FollowsHfEarlyStoppingRule) {
  EvalHistory h;
  // step: loss -> (new best, patience count) with threshold 0.1
  struct Case { int64_t step; double loss; bool best; uint32_t bad; };
  const Case cases[] = {
      {0, 10.0, true, 0},   // the first evaluation sets the best
      {5, 9.0, true, 0},    // better by 1.0 > 0.1
      {10, 8.95, true, 1},  // a new best, but only 0.05 better: the count grows (HF)
      {15, 8.9, true, 2},   // measured from the best so far (8.95), not from 9.0
      {20, 9.5, false, 3},  // worse
      {25, 8.7, true, 0},   // 0.2 below 8.9: the count restarts
  };
  for (const Case& c : cases) {
    const EvalVerdict v = observe_eval(&h, c.step, c.loss, 0.1);
    EXPECT_TRUE(v.counted) << c.step;
    EXPECT_EQ(v.new_best, c.best) << c.step;
    EXPECT_EQ(h.bad_evals, c.bad) << c.step;
  }
  EXPECT_EQ(h.best_step, 25);
  EXPECT_EQ(h.best_loss, 8.7);
  EXPECT_EQ(h.last_step, 25);
  EXPECT_EQ(describe_best(h), "val loss 8.700000 at step 25");
}

TEST(EvalHistory, RepeatedStepIsNotCountedAgainAndNanNeverImproves) {
  EvalHistory h;
  observe_eval(&h, 0, 5.0, 0.0);
  observe_eval(&h, 10, 6.0, 0.0);
  const EvalHistory before = h;
  // A resumed run re-evaluates the step it resumed from: nothing changes.
  EvalVerdict v = observe_eval(&h, 10, 6.0, 0.0);
  EXPECT_FALSE(v.counted);
  EXPECT_FALSE(v.new_best);
  EXPECT_EQ(h, before);
  EXPECT_FALSE(observe_eval(&h, 5, 1.0, 0.0).counted);  // older than the last one counted
  EXPECT_EQ(h, before);
  v = observe_eval(&h, 20, std::numeric_limits<double>::quiet_NaN(), 0.0);
  EXPECT_TRUE(v.counted);
  EXPECT_FALSE(v.new_best);
  EXPECT_EQ(h.bad_evals, 2u);
  EXPECT_EQ(h.best_step, 0);
  // Equal is no improvement (HF: strictly better).
  observe_eval(&h, 30, 5.0, 0.0);
  EXPECT_EQ(h.bad_evals, 3u);
  EXPECT_EQ(h.best_step, 0);
}

TEST(EvalHistory, PatienceExhausted) {
  EvalHistory h;
  h.bad_evals = 2;
  EXPECT_FALSE(patience_exhausted(h, 0));  // 0: never
  EXPECT_FALSE(patience_exhausted(h, 3));
  EXPECT_TRUE(patience_exhausted(h, 2));
  EXPECT_TRUE(patience_exhausted(h, 1));
  EXPECT_EQ(describe_best(EvalHistory{}), "no evaluation yet");
}

// ---- the state file ------------------------------------------------------------------

TrainState small_state() {
  TrainState s;
  s.step = 30;
  s.num_params = 4;
  s.shard_end = 4;
  s.batch_size = 2;
  s.seq_len = 8;
  s.total_batch_tokens = 16;
  s.loader_state = {1, 2};
  s.m.assign(4, 0.5f);
  s.v.assign(4, 0.25f);
  s.has_schedule = true;
  s.eval.best_loss = 4.123456789012345;
  s.eval.best_step = 20;
  s.eval.last_step = 30;
  s.eval.bad_evals = 2;
  return s;
}

TEST(StateFileV3, EvalHistoryRoundTrips) {
  const std::string d = temp_dir("state_v3");
  write_state_file(d + "/s.bin", small_state());
  for (bool header_only : {false, true}) {
    const TrainState r = read_state_file(d + "/s.bin", header_only);
    EXPECT_EQ(r.eval, small_state().eval) << header_only;
    EXPECT_EQ(r.eval.best_loss, 4.123456789012345);  // all 64 bits
  }
}

// A version 2 file is version 3 without the 28 history bytes after the
// schedule (offset 120 + 24 = 144): it loads with an empty history.
TEST(StateFileV3, ReadsVersionTwoWithoutHistory) {
  const std::string d = temp_dir("state_v2_read");
  write_state_file(d + "/s.bin", small_state());
  // (and without version 4's 16 bytes of empty spike windows after it)
  const std::string v2 = older_state_file(read_text_file(d + "/s.bin"), 144, 28 + 16, 2, 4);
  std::ofstream(d + "/s2.bin", std::ios::binary).write(v2.data(), static_cast<std::streamsize>(v2.size()));
  const TrainState r = read_state_file(d + "/s2.bin");
  EXPECT_EQ(r.eval, EvalHistory{});
  EXPECT_TRUE(r.has_schedule);
  EXPECT_EQ(r.loader_state, small_state().loader_state);
  EXPECT_EQ(r.m, small_state().m);
}

// Version 4 keeps the spike guards' windows and skip count, every bit; a
// version 3 file (without the block at offset 172) loads with none.
TEST(StateFileV4, SpikeWindowsRoundTripAndVersionThreeLoads) {
  const std::string d = temp_dir("state_v4");
  TrainState s = small_state();
  s.spikes = {3, {2.5, 2.25, 0.1 + 0.2}, {1.0, 7.5}};
  write_state_file(d + "/s.bin", s);
  EXPECT_EQ(read_state_file(d + "/s.bin").spikes, s.spikes);
  EXPECT_EQ(read_state_file(d + "/s.bin").m, s.m);
  write_state_file(d + "/e.bin", small_state());
  const std::string v3 = older_state_file(read_text_file(d + "/e.bin"), 172, 16, 3, 4);
  std::ofstream(d + "/s3.bin", std::ios::binary).write(v3.data(), static_cast<std::streamsize>(v3.size()));
  const TrainState r = read_state_file(d + "/s3.bin");
  EXPECT_EQ(r.spikes, SpikeState{});
  EXPECT_EQ(r.eval, small_state().eval);
  EXPECT_EQ(r.m, small_state().m);
}

// ---- --keep-best's protection, named checkpoints --------------------------------------

void write_checkpoint(const CheckpointDir& ck, uint64_t step) {
  write_text_file_atomic(ck.model_path(step), "weights of step " + std::to_string(step));
  TrainState s = small_state();
  s.step = step;
  FakeComm comm(0, 1);
  ck.complete_checkpoint(comm, step, 0, write_state_file(ck.state_path(step, 0), s));
}

TEST(KeepBest, PruneNeverRemovesTheProtectedCheckpoint) {
  const std::string d = temp_dir("keep_best");
  CheckpointDir ck(d);
  for (uint64_t step : {0, 10, 20, 30}) write_checkpoint(ck, step);
  ck.prune(1, 30, /*protect=*/10);
  EXPECT_EQ(ck.complete_steps(), (std::vector<uint64_t>{10, 30}));
  EXPECT_TRUE(file_exists(ck.model_path(10)));
  EXPECT_FALSE(file_exists(ck.model_path(0)));
  EXPECT_FALSE(file_exists(ck.state_path(20, 0)));
  write_checkpoint(ck, 40);
  ck.prune(1, 40, /*protect=*/40);  // the best moved to the newest: the old best goes
  EXPECT_EQ(ck.complete_steps(), (std::vector<uint64_t>{40}));
  write_checkpoint(ck, 50);
  ck.prune(2, 50);  // without protection: the newest 2
  EXPECT_EQ(ck.complete_steps(), (std::vector<uint64_t>{40, 50}));
}

// --milestone-every: a tagged checkpoint outlives --keep-checkpoints, even when
// its marker is gone (abandoned or found corrupt); remove_all removes the tag.
TEST(Milestones, PruneNeverRemovesAMilestone) {
  const std::string d = temp_dir("milestones");
  CheckpointDir ck(d);
  for (uint64_t step : {10, 20, 30, 40}) write_checkpoint(ck, step);
  ck.mark_milestone(20, 20);
  EXPECT_TRUE(ck.is_milestone(20));
  EXPECT_FALSE(ck.is_milestone(40));
  ck.prune(1, 40);
  EXPECT_EQ(ck.complete_steps(), (std::vector<uint64_t>{20, 40}));
  std::rename(ck.done_path(20).c_str(), (ck.done_path(20) + ".abandoned").c_str());
  write_checkpoint(ck, 50);
  ck.prune(1, 50);
  EXPECT_EQ(ck.complete_steps(), (std::vector<uint64_t>{50}));
  EXPECT_TRUE(file_exists(ck.model_path(20)) && file_exists(ck.state_path(20, 0)));
  ck.remove_all();
  EXPECT_FALSE(file_exists(ck.milestone_path(20)));
}

TEST(ResumeFrom, ParsesCheckpointPaths) {
  const std::string d = temp_dir("ref");
  CheckpointRef r = parse_checkpoint_ref(d + "/DONE_00000020");
  EXPECT_EQ(r.dir, d);
  EXPECT_EQ(r.step, 20);
  r = parse_checkpoint_ref(d + "/model_00000040.bin");
  EXPECT_EQ(r.step, 40);
  r = parse_checkpoint_ref(d + "/state_00000007_00003.bin");
  EXPECT_EQ(r.step, 7);
  r = parse_checkpoint_ref("DONE_5");
  EXPECT_EQ(r.dir, ".");
  EXPECT_EQ(r.step, 5);
  r = parse_checkpoint_ref(d);  // a directory: its newest
  EXPECT_EQ(r.dir, d);
  EXPECT_EQ(r.step, -1);
  for (const char* bad : {"/model.bin", "/DONE_00000020.corrupt", "/model_20.bin.tmp", "/state_00000020.bin",
                          "/DONE_", "/DONE_-3", "/notes.txt"}) {
    const std::string e = error_of([&] { parse_checkpoint_ref(d + bad); });
    EXPECT_EQ(e, "--resume-from " + d + bad + ": not a checkpoint (give a checkpoint directory, its completion "
                 "marker DONE_N or one of its files model_N.bin, state_N_R.bin)") << bad;
  }
}

TEST(ResumeFrom, SelectsOnlyCompleteVerifiedCheckpoints) {
  const std::string d = temp_dir("named");
  CheckpointDir ck(d);
  FakeComm comm(0, 1);
  std::vector<std::string> notes;
  const Notify note = [&](const std::string& s) { notes.push_back(s); };
  EXPECT_EQ(error_of([&] { select_named_checkpoint(comm, ck, CheckpointRef{d, -1}, note); }),
            "--resume-from " + d + ": no complete checkpoint in the directory");
  for (uint64_t step : {10, 20, 30}) write_checkpoint(ck, step);
  EXPECT_EQ(select_named_checkpoint(comm, ck, CheckpointRef{d, 20}, note), 20u);
  EXPECT_EQ(notes.back(), "checkpoint step 20 in " + d + ": checksums verified");
  EXPECT_EQ(select_named_checkpoint(comm, ck, CheckpointRef{d, -1}, note), 30u);

  std::remove(ck.done_path(30).c_str());  // a save cut short before its marker
  EXPECT_EQ(error_of([&] { select_named_checkpoint(comm, ck, CheckpointRef{d, 30}, note); }),
            "checkpoint step 30 in " + d + " is incomplete: it has no completion marker " + ck.done_path(30) +
                " (its writing was interrupted)");
  EXPECT_EQ(error_of([&] { select_named_checkpoint(comm, ck, CheckpointRef{d, 25}, note); }),
            "checkpoint step 25 in " + d + " does not exist (no " + ck.done_path(25) + ")");
  std::string bytes = read_text_file(ck.state_path(10, 0));
  bytes[50] ^= 1;
  std::ofstream(ck.state_path(10, 0), std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
  const std::string e = error_of([&] { select_named_checkpoint(comm, ck, CheckpointRef{d, 10}, note); });
  EXPECT_EQ(e.rfind("checkpoint step 10 in " + d + " is corrupt: state_00000010_00000.bin checksum mismatch", 0), 0u)
      << e;
  std::rename(ck.done_path(10).c_str(), (ck.done_path(10) + ".corrupt").c_str());
  EXPECT_NE(error_of([&] { select_named_checkpoint(comm, ck, CheckpointRef{d, 10}, note); })
                .find("is corrupt: --resume-fallback found it so"),
            std::string::npos);
}

TEST(ResumeFrom, AbandonsTheLaterCheckpointsOfItsDirectory) {
  const std::string d = temp_dir("abandon");
  CheckpointDir ck(d);
  for (uint64_t step : {10, 20, 30, 40}) write_checkpoint(ck, step);
  EXPECT_EQ(abandon_checkpoints_after(ck, 20), (std::vector<uint64_t>{30, 40}));
  EXPECT_EQ(ck.complete_steps(), (std::vector<uint64_t>{10, 20}));
  EXPECT_TRUE(file_exists(ck.done_path(40) + ".abandoned"));
  EXPECT_TRUE(file_exists(ck.model_path(40)));  // files stay
  FakeComm comm(0, 1);
  EXPECT_NE(error_of([&] { select_named_checkpoint(comm, ck, CheckpointRef{d, 40}, {}); }).find("was abandoned"),
            std::string::npos);
  EXPECT_TRUE(same_directory(d, d + "/."));
  EXPECT_FALSE(same_directory(d, d + "/nonexistent"));
}

// ---- --epochs ----------------------------------------------------------------------------

TEST(RunLength, EpochsMaxStepsAndOneEpoch) {
  RunLength r = run_length(-1, 2.5, 120);
  EXPECT_EQ(r.steps, 300);
  EXPECT_EQ(r.why, "--epochs 2.5 = ceil(2.5 x 120 steps/epoch)");
  // 1.1 x 100 is 110.00000000000001 in doubles: 110 steps, not 111 (where HF's math.ceil overshoots)
  EXPECT_EQ(run_length(-1, 1.1, 100).steps, 110);
  EXPECT_EQ(run_length(-1, 2.2, 700).steps, 1540);
  EXPECT_EQ(run_length(-1, 0.1, 1000).steps, 100);
  EXPECT_EQ(run_length(-1, 0.25, 10).steps, 3);     // rounded up, as HF's math.ceil
  EXPECT_EQ(run_length(-1, 0.001, 10).steps, 1);
  r = run_length(-1, 0, 37);
  EXPECT_EQ(r.steps, 37);
  EXPECT_EQ(r.why, "one epoch (--max-steps -1)");
  r = run_length(50, 3, 37);  // HF: max_steps > 0 overrides num_train_epochs
  EXPECT_EQ(r.steps, 50);
  EXPECT_EQ(r.why, "--max-steps 50 (overrides --epochs 3, as HF's max_steps overrides num_train_epochs)");
  EXPECT_EQ(run_length(50, 0, 37).why, "--max-steps 50");
  EXPECT_EQ(error_of([] { run_length(-1, 2, 0); }),
            "--epochs 2 = ceil(2 x 0 steps/epoch) is no step: the training data holds 0 steps per epoch at this "
            "global batch");
  EXPECT_NE(error_of([] { run_length(-1, 1e6, 1 << 20); }).find("more than 2^30 steps"), std::string::npos);
}

}  // namespace
}  // namespace gpt2
