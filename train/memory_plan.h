// --dry-run W[,W...]: the per-rank memory table of a training configuration at
// several world sizes, computed by building the model, the ZeRO plan and the
// optimizer exactly as training does, on a backend that allocates nothing
// (backend/sizing_backend.h). No GPU, data or MPI needed: a d48 plan for 64
// GPUs runs on a laptop.
#ifndef TRAIN_MEMORY_PLAN_H
#define TRAIN_MEMORY_PLAN_H

#include <string>

#include "train/options.h"

namespace gpt2 {

// The table as printed (rank 0's view; other ranks differ by at most the
// shard padding). Throws std::runtime_error for an invalid configuration.
std::string memory_plan_table(const TrainOptions& o);

// Prints memory_plan_table to stdout; returns the exit status (0, or 1 with
// the error on stderr).
int run_memory_plan(const TrainOptions& o);

}  // namespace gpt2

#endif  // TRAIN_MEMORY_PLAN_H
