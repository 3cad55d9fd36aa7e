// The run plan: what a training run is, worked out once from its options and
// the world size, before anything is allocated: the model config, the batch
// shape (the T cap, the global batch a resumed checkpoint carries, the
// micro-batches per step), and the checkpoint --resume is expected to pick.
// Training, --dry-run and the memory check before training build the same
// plan, and on it the same parts (RunAssembly): what --dry-run prints is what
// training allocates.
#ifndef TRAIN_RUN_PLAN_H
#define TRAIN_RUN_PLAN_H

#include <string>

#include "backend/backend.h"
#include "distributed/comm.h"
#include "model/config.h"
#include "model/gpt2.h"
#include "train/data_parallel.h"
#include "train/logger.h"
#include "train/optimizer.h"
#include "train/options.h"
#include "train/run_config.h"

namespace gpt2 {

struct RunPlan {
  TrainOptions opts;         // as given, with --init-from resolved into --model
  GPT2Config cfg;            // a dN preset with --config, or the --model file's header
  bool cfg_from_file = false;
  ParamLayout layout;
  int world = 1;
  BatchShape shape;          // B, T (capped to max_seq), tokens per step, micro-batches per step
  bool has_resume_state = false;
  TrainState resume_state;   // header of the checkpoint --resume is expected to pick
  std::string resume_state_path;  // its rank-0 state file

  // Whether the backend's buffers go through a communicator at all.
  bool buffers_travel() const { return DataParallel::buffers_travel(world, opts.zero_stage); }
  // The same run at world size w: only the batch shape is worked out again
  // (a resumed global batch splits differently); nothing is read again.
  RunPlan at_world(int w, TrainLogger& log) const;
};

// Notes on what the plan changed (the --seq-len cap, the resumed global batch)
// go to `log`. Throws for an invalid combination (UsageError for flags).
RunPlan plan_training_run(const TrainOptions& o, int world, TrainLogger& log);

// The parts a run of `plan` builds on `backend`, in the one order every run
// uses: the ZeRO plan and the placement of gradients (DataParallel), the model
// (allocated as DataParallel says), AdamW on this rank's shard with its fp32
// master weights reserved (bf16), and one deferred-loss slot per micro-batch.
// `buffers` moves the backend's memory (DataParallel); --dry-run passes a
// communicator that only knows its world.
struct RunAssembly {
  RunAssembly(Backend& backend, Communicator& buffers, const RunPlan& plan);
  DataParallel dp;
  GPT2 model;
  AdamW optimizer;
};

}  // namespace gpt2

#endif  // TRAIN_RUN_PLAN_H
