// Checkpoints: the model in llm.c format plus one state file per rank, made
// visible by a completion marker written last (after every rank's files are
// durable), so a crash never leaves a checkpoint that looks complete.
//
//   DIR/model_00000100.bin          llm.c model file (rank 0)
//   DIR/state_00000100_00000.bin    rank 0's optimizer shard, loader position, RNG
//   DIR/DONE_00000100               "step world zero_stage" — the marker
//   DIR/model.bin                   the final model, always written at the end
#ifndef TRAIN_CHECKPOINT_H
#define TRAIN_CHECKPOINT_H

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace gpt2 {

constexpr uint32_t kStateFileVersion = 1;

// Everything one rank needs, beyond the model file, to continue exactly.
struct TrainState {
  uint64_t step = 0;               // optimizer steps completed
  GPT2Config config;
  uint32_t world = 1, rank = 0, zero_stage = 0;
  uint64_t shard_begin = 0, shard_end = 0;  // this rank's optimizer range in the flat params
  uint64_t num_params = 0;
  int32_t batch_size = 0, seq_len = 0;
  int64_t total_batch_tokens = 0;
  uint64_t seed = 0;
  uint64_t sample_rng = 0;
  uint64_t nan_skips = 0;
  std::vector<uint8_t> loader_state;
  std::vector<float> m, v;          // AdamW moments of [shard_begin, shard_end)
  std::vector<float> master;        // fp32 master weights of the shard, empty for fp32 parameters
};

// Atomic, checksummed. Errors name the file.
void write_state_file(const std::string& path, const TrainState& s);
TrainState read_state_file(const std::string& path);

class CheckpointDir {
 public:
  explicit CheckpointDir(std::string dir);
  const std::string& dir() const { return dir_; }
  std::string model_path(uint64_t step) const;
  std::string state_path(uint64_t step, uint32_t rank) const;
  std::string done_path(uint64_t step) const;
  std::string final_model_path() const { return dir_ + "/model.bin"; }

  // Steps whose completion marker exists, ascending.
  std::vector<uint64_t> complete_steps() const;
  // The marker's contents; throws when missing or malformed.
  void read_marker(uint64_t step, uint32_t* world, uint32_t* zero_stage) const;
  void write_marker(uint64_t step, uint32_t world, uint32_t zero_stage) const;
  // Keeps the newest `keep` complete checkpoints (0 = all) and removes files of
  // incomplete checkpoints older than the newest complete one.
  void prune(int keep) const;

 private:
  std::string dir_;
};

// Gathers the AdamW moments of [begin, end) from the state files of a
// checkpoint written by `old_world` ranks (any ZeRO stage), so a run can
// resume with a different world size or stage.
// Master weights are gathered too when every state file has them (else `master` ends empty).
void load_resharded_moments(const CheckpointDir& ckpt, uint64_t step, uint32_t old_world, uint64_t begin,
                            uint64_t end, std::vector<float>* m, std::vector<float>* v, std::vector<float>* master);

}  // namespace gpt2

#endif  // TRAIN_CHECKPOINT_H
