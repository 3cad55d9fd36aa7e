// Loss and gradient-norm spike guards (llm.c's -sl / -sg): a step whose value
// lies more than Z standard deviations above the mean of the last W steps'
// values is not applied. The windows are part of every checkpoint, so a
// resumed run takes the decisions the uninterrupted one takes.
#ifndef METRICS_SPIKE_GUARD_H
#define METRICS_SPIKE_GUARD_H

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace gpt2 {

// What a checkpoint keeps (state file version 4): the skip count and both
// windows, oldest value first.
struct SpikeState {
  uint64_t skips = 0;
  std::vector<double> loss, grad_norm;
  bool operator==(const SpikeState& o) const {
    return skips == o.skips && loss == o.loss && grad_norm == o.grad_norm;
  }
};

// The last `capacity` values of one quantity.
class SpikeWindow {
 public:
  explicit SpikeWindow(size_t capacity) : capacity_(capacity) {}
  // (x - mean) / standard deviation of the window (population); NaN until the
  // window is full (the warm-up), 0 when its values are all equal.
  double z(double x) const;
  void push(double x);
  std::vector<double> values() const { return {values_.begin(), values_.end()}; }
  // The newest `capacity` of `v` (a checkpoint of another --spike-window).
  void assign(const std::vector<double>& v);

 private:
  size_t capacity_;
  std::deque<double> values_;
};

struct SpikeVerdict {
  double loss_z = 0, grad_z = 0;  // NaN during the warm-up
  bool skip = false;
  std::string reason;             // "loss_z" or "grad_z" when skipped
};

class SpikeGuard {
 public:
  // z thresholds (0 = that guard off) and the window length.
  SpikeGuard(double loss_z, double grad_z, int window);
  bool enabled() const { return loss_limit_ > 0 || grad_limit_ > 0; }
  // The verdict on a step's finite loss and gradient norm; both values then
  // enter their windows, a skipped step's too (as in llm.c: a lasting change
  // of level stops counting as a spike once the window has seen it).
  SpikeVerdict observe(double loss, double grad_norm);
  uint64_t skips() const { return skips_; }
  SpikeState state() const { return {skips_, loss_.values(), grad_.values()}; }
  void restore(const SpikeState& s);
  // " | SKIPPED (loss z 12.3 > 6)" style text of a skipped step.
  std::string describe(const SpikeVerdict& v) const;

 private:
  double loss_limit_, grad_limit_;
  SpikeWindow loss_, grad_;
  uint64_t skips_ = 0;
};

}  // namespace gpt2

#endif  // METRICS_SPIKE_GUARD_H
