// The training run: options -> backend -> model -> data -> the loop.
#ifndef TRAIN_TRAINER_H
#define TRAIN_TRAINER_H

#include "distributed/comm.h"
#include "distributed/context.h"
#include "train/options.h"

namespace gpt2 {

// Runs a whole training job on this rank (every rank calls it); returns the
// exit code. User-facing errors throw std::runtime_error (main prints, exits 1).
// `comm`, the host (MPI) communicator, carries host scalars (loss, gradient
// norm, stop check, checkpoint barriers) and a host backend's buffers; a CUDA
// backend on several ranks (or at ZeRO-2) gets an NCCL communicator for its
// buffers, bootstrapped through `comm`.
int run_training(const TrainOptions& opts, const DistContext& dist, Communicator& comm);

}  // namespace gpt2

#endif  // TRAIN_TRAINER_H
