// The trainer state file (train/state_file.h): round trips and the errors
// that name a damaged file.
#include <gtest/gtest.h>

#include <fstream>
#include <stdexcept>
#include <string>

#include "test/train/checkpoint_fakes.h"
#include "test/temp_dir.h"
#include "train/state_file.h"
#include "util/checked_io.h"

namespace gpt2 {
namespace {

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
}  // namespace
}  // namespace gpt2
