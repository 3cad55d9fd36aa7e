// A training run's memory, worked out before anything is allocated.
//
// --dry-run W[,W...]: the per-rank memory table at several world sizes, built
// from the run plan and its parts (train/run_plan.h) exactly as training does,
// on a backend that allocates nothing (backend/sizing_backend.h). No GPU, data
// or MPI needed: a d48 plan for 64 GPUs runs on a laptop.
//
// --memory-check: that total against what this machine has left, so a run that
// cannot fit stops with an error naming both numbers instead of being killed
// by the OOM killer minutes later with no message.
//
// Host: /proc/meminfo's MemAvailable, lowered to the room under this process's
// cgroup limit (v2 memory.max, v1 memory.limit_in_bytes; usage minus the
// inactive page cache the kernel reclaims before it kills). Tests set
// GPT2_TEST_AVAILABLE_MEMORY=BYTES instead (read only by host_memory_budget).
//
// GPU: the backend's per-rank plan (one GPU each) against the device's free
// memory (cudaMemGetInfo; tests: GPT2_TEST_DEVICE_MEMORY, docs/emulator.md).
#ifndef TRAIN_MEMORY_PLAN_H
#define TRAIN_MEMORY_PLAN_H

#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/backend.h"
#include "distributed/context.h"
#include "train/options.h"
#include "train/run_plan.h"

namespace gpt2 {

// ---------------------------------------------------------------- --dry-run

// The table as printed (rank 0's view; other ranks differ by at most the
// shard padding). Throws std::runtime_error for an invalid configuration.
std::string memory_plan_table(const TrainOptions& o);

// The table row's total for the plan's world: the bytes rank 0 allocates on
// the backend of --device/--dtype, or on the CPU backend when `on_host` (the
// memory check's "needs").
size_t planned_rank_bytes(const RunPlan& plan, bool on_host = false);

// Prints memory_plan_table; returns 0, or 1 with the error on stderr.
int run_memory_plan(const TrainOptions& o);

// ---------------------------------------------------------------- --memory-check

struct MemoryBudget {
  uint64_t bytes = 0;
  std::string source;  // where the number comes from, for the message
};

// MemAvailable of /proc/meminfo's text, in bytes; false when it has none.
bool meminfo_available(const std::string& meminfo, uint64_t* bytes);
// limit - usage + the stat's `inactive_key` (inactive_file, v1:
// total_inactive_file), at least 0, from the cgroup files' texts; false when
// there is no limit ("max", or v1's ~2^63 "unlimited").
bool cgroup_room(const std::string& limit, const std::string& usage, const std::string& stat,
                 const std::string& inactive_key, uint64_t* bytes);

// Budget for new allocations (see the top of this file).
MemoryBudget host_memory_budget();

// "" when `per_rank` bytes for each of `ranks_on_node` ranks fit in `have`,
// else the sentence saying by how much they do not.
std::string memory_shortfall(uint64_t per_rank, int ranks_on_node, const MemoryBudget& have);

// CPU backend check (plan.opts.memory_check: on throws with the shortfall and
// the ways out, warn prints it on stderr once per node, off does nothing).
void check_host_memory(const RunPlan& plan, const DistContext& dist);

// "" when `per_rank` bytes fit in the free memory of `gpu`, else the sentence
// naming both numbers and the device.
std::string device_memory_shortfall(uint64_t per_rank, const DeviceMemory& gpu);

// GPU check of `per_rank` bytes against this rank's `gpu` (on throws, warn
// prints on stderr on every rank whose device is short, off does nothing).
void check_device_memory(const TrainOptions& o, const DistContext& dist, uint64_t per_rank, const DeviceMemory& gpu);

// Before the model allocates: check_host_memory for a backend of host memory,
// else check_device_memory with the --dry-run plan of the backend's kind at
// this world size against backend.device_memory().
void check_run_memory(const RunPlan& plan, const DistContext& dist, const Backend& backend);

}  // namespace gpt2

#endif  // TRAIN_MEMORY_PLAN_H
