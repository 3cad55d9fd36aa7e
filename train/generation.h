// --generate: samples text from trained weights (rank 0; other ranks exit 0).
#ifndef TRAIN_GENERATION_H
#define TRAIN_GENERATION_H

#include "distributed/context.h"
#include "train/options.h"

namespace gpt2 {

// --generate on this rank. Returns the exit code.
int run_generation(const TrainOptions& opts, const DistContext& dist);

}  // namespace gpt2

#endif  // TRAIN_GENERATION_H
