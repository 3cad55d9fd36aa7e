#include "train/run_length.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <stdexcept>

namespace gpt2 {

RunLength run_length(int max_steps, double epochs, int64_t steps_per_epoch) {
  RunLength r;
  std::ostringstream why;
  if (max_steps > 0) {
    r.steps = max_steps;
    why << "--max-steps " << max_steps;
    if (epochs > 0) why << " (overrides --epochs " << epochs << ", as HF's max_steps overrides num_train_epochs)";
    r.why = why.str();
    return r;
  }
  if (epochs <= 0) {
    r.steps = static_cast<int>(std::min<int64_t>(steps_per_epoch, INT32_MAX));
    r.why = "one epoch (--max-steps -1)";
    return r;
  }
  // A product that rounding put a hair above a whole number is that number
  // (0.3 x 10 must be 3 steps, not 4).
  const double exact = epochs * static_cast<double>(steps_per_epoch);
  const double steps = std::ceil(exact - 1e-9 * exact);
  why << "--epochs " << epochs << " = ceil(" << epochs << " x " << steps_per_epoch << " steps/epoch)";
  if (steps < 1)
    throw std::runtime_error(why.str() + " is no step: the training data holds " + std::to_string(steps_per_epoch) +
                             " steps per epoch at this global batch");
  if (steps > static_cast<double>(1 << 30))
    throw std::runtime_error(why.str() + " is more than 2^30 steps");
  r.steps = static_cast<int>(steps);
  r.why = why.str();
  return r;
}

}  // namespace gpt2
