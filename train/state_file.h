// The trainer state file, one per rank and checkpoint (state_SSSSSSSS_RRRRR.bin,
// train/checkpoint.h): everything that rank needs beyond the model file to
// continue exactly. Format (docs/formats.md): magic GPT2STAT, uint32 version,
// the fixed fields, the loader state, the moments (and master weights), then an
// FNV-1a 64 checksum of everything before it.
#ifndef TRAIN_STATE_FILE_H
#define TRAIN_STATE_FILE_H

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "metrics/eval_history.h"
#include "train/lr_schedule.h"
#include "metrics/spike_guard.h"

namespace gpt2 {

// One file of a checkpoint as its completion marker records it.
struct FileDigest {
  std::string name;   // file name inside the checkpoint directory
  uint64_t size = 0;  // bytes
  uint64_t xxh64 = 0; // XXH64 (seed 0) of the whole file, util/checksum.h
  bool operator==(const FileDigest& o) const { return name == o.name && size == o.size && xxh64 == o.xxh64; }
};
// Hashes a file on disk; `name` is its base name.
FileDigest digest_file(const std::string& path);

// Version 2 added the LR schedule, 3 the evaluation history, 4 the spike guards'
// windows. Versions 1-3 still load (no schedule: the resuming run's flags define
// it; no history: it starts at the next evaluation; no windows: a new warm-up).
constexpr uint32_t kStateFileVersion = 4;

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
  // The schedule the run that wrote the file used (the original run's, kept
  // across resumes that extend --max-steps). false: a version 1 file.
  bool has_schedule = false;
  LrSchedule schedule;
  // Best validation loss and early-stopping count (version 3; empty before).
  EvalHistory eval;
  // Spike guards' skip count and windows (version 4; empty before).
  SpikeState spikes;
  std::vector<uint8_t> loader_state;
  std::vector<float> m, v;          // AdamW moments of [shard_begin, shard_end)
  std::vector<float> master;        // fp32 master weights of the shard, empty for fp32 parameters
};

// Atomic, checksummed; errors name the file. The digest is hashed while writing.
FileDigest write_state_file(const std::string& path, const TrainState& s);
// header_only: only the fixed fields through the schedule (no loader state,
// moments or checksum check), reading the file's first few hundred bytes.
TrainState read_state_file(const std::string& path, bool header_only = false);

}  // namespace gpt2

#endif  // TRAIN_STATE_FILE_H
