#include "metrics/eval_history.h"

#include <cmath>
#include <cstdio>

namespace gpt2 {

EvalVerdict observe_eval(EvalHistory* h, int64_t step, double loss, double threshold) {
  EvalVerdict v;
  if (step <= h->last_step) return v;
  v.counted = true;
  h->last_step = step;
  const bool first = h->best_step < 0;
  const bool finite = std::isfinite(loss);
  // As HF: the threshold is measured from the best so far, before it moves.
  const bool improved_enough = finite && (first || (loss < h->best_loss && h->best_loss - loss > threshold));
  h->bad_evals = improved_enough ? 0 : h->bad_evals + 1;
  v.new_best = finite && (first || loss < h->best_loss);
  if (v.new_best) {
    h->best_loss = loss;
    h->best_step = step;
  }
  return v;
}

bool patience_exhausted(const EvalHistory& h, int patience) {
  return patience > 0 && h.bad_evals >= static_cast<uint32_t>(patience);
}

std::string describe_best(const EvalHistory& h) {
  if (h.best_step < 0) return "no evaluation yet";
  char buf[96];
  std::snprintf(buf, sizeof(buf), "val loss %.6f at step %lld", h.best_loss, static_cast<long long>(h.best_step));
  return buf;
}

}  // namespace gpt2
