// --dry-run W[,W...]: the per-rank memory table of a training configuration at
// several world sizes, computed by building the run plan and its parts
// (train/run_plan.h) exactly as training does, on a backend that allocates nothing
// (backend/sizing_backend.h). No GPU, data or MPI needed: a d48 plan for 64
// GPUs runs on a laptop.
#ifndef TRAIN_MEMORY_PLAN_H
#define TRAIN_MEMORY_PLAN_H

#include <cstddef>
#include <string>

#include "train/options.h"
#include "train/run_plan.h"

namespace gpt2 {

// The table as printed (rank 0's view; other ranks differ by at most the
// shard padding). Throws std::runtime_error for an invalid configuration.
std::string memory_plan_table(const TrainOptions& o);

// The total of the table's row for the plan's world: the bytes rank 0 of a
// training run of `plan` allocates on the backend of --device/--dtype (the
// memory check's "needs").
size_t planned_rank_bytes(const RunPlan& plan);

// Prints memory_plan_table to stdout; returns the exit status (0, or 1 with
// the error on stderr).
int run_memory_plan(const TrainOptions& o);

}  // namespace gpt2

#endif  // TRAIN_MEMORY_PLAN_H
