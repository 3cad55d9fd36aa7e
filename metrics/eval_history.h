// Decisions driven by the validation loss, as HF Trainer makes them with
// metric_for_best_model="eval_loss" (greater_is_better=False):
//   * the best checkpoint (load_best_model_at_end, --keep-best): the step with
//     the lowest validation loss so far, any strict improvement;
//   * early stopping (EarlyStoppingCallback(patience, threshold),
//     --early-stopping-patience/--early-stopping-threshold): evaluations since
//     the last one that beat the best so far by more than the threshold.
// The history is in every checkpoint's state file (train/state_file.h), so
// --resume continues both exactly.
#ifndef METRICS_EVAL_HISTORY_H
#define METRICS_EVAL_HISTORY_H

#include <cstdint>
#include <string>

namespace gpt2 {

struct EvalHistory {
  double best_loss = 0.0;   // the lowest validation loss so far (when best_step >= 0)
  int64_t best_step = -1;   // the step whose weights gave it; -1: no evaluation yet
  int64_t last_step = -1;   // the step of the newest evaluation counted; -1: none
  uint32_t bad_evals = 0;   // evaluations since the last improvement of more than the threshold
  bool operator==(const EvalHistory& o) const {
    return best_loss == o.best_loss && best_step == o.best_step && last_step == o.last_step &&
           bad_evals == o.bad_evals;
  }
};

struct EvalVerdict {
  bool counted = false;   // false: this step was counted before (a resumed run re-evaluates it)
  bool new_best = false;  // the loss is below every earlier one (the first evaluation always is)
};

// Counts the validation loss after `step` optimizer steps. A non-finite loss
// never improves. A step at or before the last one counted changes nothing
// (the evaluation a resumed run repeats at its first step).
EvalVerdict observe_eval(EvalHistory* h, int64_t step, double loss, double threshold);

// True once `patience` evaluations in a row brought no improvement beyond the
// threshold (0: never).
bool patience_exhausted(const EvalHistory& h, int patience);

// "val loss 4.123456 at step 40" ("no evaluation yet").
std::string describe_best(const EvalHistory& h);

}  // namespace gpt2

#endif  // METRICS_EVAL_HISTORY_H
