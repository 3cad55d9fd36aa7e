// How many optimizer steps a training run takes: --max-steps N, or --epochs E
// (HF's num_train_epochs, fractional), or one epoch. As in HF's Trainer, a
// positive --max-steps overrides --epochs.
#ifndef TRAIN_RUN_LENGTH_H
#define TRAIN_RUN_LENGTH_H

#include <cstdint>
#include <string>

namespace gpt2 {

struct RunLength {
  int steps = 0;
  std::string why;  // for the banner: "--epochs 2.5 = ceil(2.5 x 120 steps/epoch)"
};

// max_steps: the flag (-1: not given); epochs: the flag (0: not given);
// steps_per_epoch: optimizer steps in one pass over the training data at this
// global batch. --epochs E takes ceil(E x steps_per_epoch) steps (HF's
// math.ceil(num_train_epochs * num_update_steps_per_epoch)). An error when
// that is under one step or over 2^30.
RunLength run_length(int max_steps, double epochs, int64_t steps_per_epoch);

}  // namespace gpt2

#endif  // TRAIN_RUN_LENGTH_H
