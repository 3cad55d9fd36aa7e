#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <unistd.h>

#include "train/checkpoint.h"
#include "util/checked_io.h"

namespace gpt2 {
namespace {

std::string temp_dir(const char* name) {
  std::string d = "build/test/train/" + std::string(name) + "." + std::to_string(getpid());
  std::system(("rm -rf " + d).c_str());
  make_directories(d);
  return d;
}

TrainState sample_state(uint64_t begin, uint64_t end, uint32_t rank, uint32_t world) {
  TrainState s;
  s.step = 42;
  s.config.num_layers = 3;
  s.world = world;
  s.rank = rank;
  s.zero_stage = 1;
  s.shard_begin = begin;
  s.shard_end = end;
  s.num_params = 100;
  s.batch_size = 4;
  s.seq_len = 64;
  s.total_batch_tokens = 512;
  s.seed = 7;
  s.sample_rng = 0xabcdef;
  s.nan_skips = 2;
  s.loader_state = {1, 2, 3, 4, 5};
  for (uint64_t i = begin; i < end; i++) {
    s.m.push_back(static_cast<float>(i));
    s.v.push_back(static_cast<float>(i) * 0.5f);
  }
  return s;
}

TEST(StateFile, RoundTrip) {
  const std::string d = temp_dir("state");
  TrainState s = sample_state(10, 60, 1, 2);
  write_state_file(d + "/s.bin", s);
  TrainState r = read_state_file(d + "/s.bin");
  EXPECT_EQ(r.step, 42u);
  EXPECT_EQ(r.config, s.config);
  EXPECT_EQ(r.rank, 1u);
  EXPECT_EQ(r.world, 2u);
  EXPECT_EQ(r.shard_begin, 10u);
  EXPECT_EQ(r.shard_end, 60u);
  EXPECT_EQ(r.sample_rng, 0xabcdefu);
  EXPECT_EQ(r.nan_skips, 2u);
  EXPECT_EQ(r.loader_state, s.loader_state);
  EXPECT_EQ(r.m, s.m);
  EXPECT_EQ(r.v, s.v);
}

TEST(StateFile, MasterWeightsRoundTrip) {
  const std::string d = temp_dir("master");
  TrainState s = sample_state(0, 20, 0, 1);
  for (int i = 0; i < 20; i++) s.master.push_back(0.25f * i);
  write_state_file(d + "/s.bin", s);
  TrainState r = read_state_file(d + "/s.bin");
  EXPECT_EQ(r.master, s.master);
  EXPECT_EQ(r.m, s.m);
}

TEST(StateFile, CorruptionIsDetected) {
  const std::string d = temp_dir("corrupt");
  const std::string path = d + "/s.bin";
  write_state_file(path, sample_state(0, 50, 0, 1));
  std::string good = read_text_file(path);
  auto expect_error = [&](const std::string& bytes, const char* what) {
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
    try {
      read_state_file(path);
      ADD_FAILURE() << "no error for " << what;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  std::string flipped = good;
  flipped[good.size() - 20] ^= 0x01;  // a bit of v
  expect_error(flipped, "checksum");
  expect_error(good.substr(0, good.size() - 9), "truncated");
  expect_error("NOTSTATE" + good.substr(8), "bad magic");
  expect_error(good.substr(0, 10), "truncated");
}

TEST(CheckpointDir, MarkersPruneAndReshard) {
  const std::string d = temp_dir("ckdir");
  CheckpointDir ck(d);
  EXPECT_TRUE(ck.complete_steps().empty());
  // Steps 5, 10, 15 complete with 2 ranks (shards [0,50) and [50,100)); step 20 incomplete.
  for (uint64_t step : {5, 10, 15, 20}) {
    write_text_file_atomic(ck.model_path(step), "model");
    for (uint32_t r = 0; r < 2; r++) {
      TrainState s = sample_state(r * 50, (r + 1) * 50, r, 2);
      s.step = step;
      write_state_file(ck.state_path(step, r), s);
    }
    if (step != 20) ck.write_marker(step, 2, 1);
  }
  EXPECT_EQ(ck.complete_steps(), (std::vector<uint64_t>{5, 10, 15}));
  uint32_t world = 0, stage = 0;
  ck.read_marker(15, &world, &stage);
  EXPECT_EQ(world, 2u);
  EXPECT_EQ(stage, 1u);

  // Re-shard for 3 ranks: rank 1 of 3 owns [34, 68).
  std::vector<float> m, v;
  std::vector<float> master;
  load_resharded_moments(ck, 15, 2, 34, 68, &m, &v, &master);
  EXPECT_TRUE(master.empty());  // fp32 run: no master weights
  ASSERT_EQ(m.size(), 34u);
  for (size_t i = 0; i < m.size(); i++) {
    EXPECT_EQ(m[i], static_cast<float>(34 + i));
    EXPECT_EQ(v[i], 0.5f * static_cast<float>(34 + i));
  }
  // Losing a rank's file is an error, not silent zeros.
  std::remove(ck.state_path(10, 1).c_str());
  EXPECT_THROW(load_resharded_moments(ck, 10, 2, 0, 100, &m, &v, &master), std::runtime_error);

  ck.prune(2);
  EXPECT_EQ(ck.complete_steps(), (std::vector<uint64_t>{10, 15}));
  EXPECT_FALSE(file_exists(ck.model_path(5)));
  EXPECT_FALSE(file_exists(ck.state_path(5, 0)));
  EXPECT_TRUE(file_exists(ck.model_path(15)));
  // The incomplete step 20 is newer than the newest complete one: kept (it may be in progress).
  EXPECT_TRUE(file_exists(ck.model_path(20)));
}

}  // namespace
}  // namespace gpt2
