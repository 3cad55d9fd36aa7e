// Helpers of the checkpoint tests: a communicator standing in for one rank of
// a job, the message of a call's exception, a sample state, and older state
// file versions made from the current one.
#ifndef TEST_TRAIN_CHECKPOINT_FAKES_H
#define TEST_TRAIN_CHECKPOINT_FAKES_H

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "distributed/comm.h"
#include "train/state_file.h"
#include "util/checked_io.h"

namespace gpt2 {

// rank 0 (or `rank`) of a `world`-rank job; the other ranks' all-gather blocks are `peers`.
class FakeComm final : public Communicator {
 public:
  FakeComm(int rank, int world) : rank_(rank), world_(world) {}
  std::vector<uint64_t> peer_block = {0, 0};
  int64_t broadcast_value = -7;  // what rank 0 "sends" to a non-zero rank
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  bool is_device_memory() const override { return false; }
  std::string name() const override { return "fake"; }

 protected:
  void do_all_reduce(const void*, void*, size_t, DataType, ReduceOp) override { ADD_FAILURE(); }
  void do_reduce_scatter(const void*, void*, size_t, DataType, ReduceOp) override { ADD_FAILURE(); }
  void do_reduce_scatter_v(const void*, void*, const std::vector<size_t>&, DataType, ReduceOp) override {
    ADD_FAILURE();
  }
  void do_all_gather(const void* send, void* recv, size_t count, DataType type) override {
    const size_t block = count * data_type_bytes(type);
    ASSERT_EQ(block, 16u);
    for (int r = 0; r < world_; r++)
      std::memcpy(static_cast<char*>(recv) + r * block, r == rank_ ? send : peer_block.data(), block);
  }
  void do_broadcast(void* buf, size_t bytes, int root) override {
    ASSERT_EQ(bytes, 8u);
    if (rank_ != root) std::memcpy(buf, &broadcast_value, 8);
  }
  void do_barrier() override {}
  std::string error_prefix() const override { return "fake: "; }

 private:
  int rank_, world_;
};

// The message of the exception f throws ("(no error)" if none).
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

// Rank `rank` of `world` at step 42, its shard [begin, end) with m = i and v = i / 2.
inline TrainState sample_state(uint64_t begin, uint64_t end, uint32_t rank, uint32_t world) {
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

// `bytes`, a state file of the current version holding the moments of `n`
// parameters (no master weights), made an older `version` by cutting the
// `cut` bytes at `at` (the fields that version lacks), with its checksum redone.
inline std::string older_state_file(const std::string& bytes, size_t at, size_t cut, uint32_t version, size_t n) {
  std::string old = bytes.substr(0, at) + bytes.substr(at + cut, bytes.size() - 8 - at - cut);
  std::memcpy(&old[8], &version, 4);
  const size_t moments = n * 4 * 2, header = old.size() - moments;
  const char* m = old.data() + header;
  const uint64_t sum =
      fnv1a64(old.data(), header, fnv1a64(m, moments / 2, fnv1a64(m + moments / 2, moments / 2, fnv1a64(nullptr, 0))));
  old.append(reinterpret_cast<const char*>(&sum), 8);
  return old;
}

}  // namespace gpt2

#endif  // TEST_TRAIN_CHECKPOINT_FAKES_H
