// One training step's per-op profile as a markdown table: each op's calls, time
// and share of the step, and its rate against the roof that bounds it (compute
// ops: GFLOP/s against the CPU's FMA peak; memory-bound ops: GB/s against the
// measured bandwidth), sorted by time; then the time between ops (the model's
// host code) and the whole step at its model FLOPs (6N + 6LCT per token: the
// step row's % of peak is the MFU).
#ifndef DEV_CPU_STEP_PROFILE_H
#define DEV_CPU_STEP_PROFILE_H

#include <string>

#include "dev/cpu/timing_backend.h"

namespace gpt2 {
namespace cpuprof {

struct Roofs {
  double peak_gflops = 0;     // fp32 FMA peak on the run's threads
  double bandwidth_gbps = 0;  // measured memory bandwidth
};

struct Step {
  OpTable ops;             // the backend ops of this one step
  double seconds = 0;      // the whole step, ops and the host code between them
  double model_flops = 0;  // the step's model FLOPs (flops_per_token x tokens)
};

std::string profile_table(const Step& step, const Roofs& roofs);

}  // namespace cpuprof
}  // namespace gpt2

#endif  // DEV_CPU_STEP_PROFILE_H
