#include "metrics/spike_guard.h"

#include <cmath>
#include <cstdio>
#include <limits>

namespace gpt2 {

double SpikeWindow::z(double x) const {
  if (values_.size() < capacity_) return std::numeric_limits<double>::quiet_NaN();
  double mean = 0.0;
  for (double v : values_) mean += v;
  mean /= static_cast<double>(values_.size());
  double var = 0.0;
  for (double v : values_) var += (v - mean) * (v - mean);
  const double sd = std::sqrt(var / static_cast<double>(values_.size()));
  return sd > 0.0 ? (x - mean) / sd : 0.0;
}

void SpikeWindow::push(double x) {
  values_.push_back(x);
  if (values_.size() > capacity_) values_.pop_front();
}

void SpikeWindow::assign(const std::vector<double>& v) {
  values_.clear();
  for (double x : v) push(x);
}

SpikeGuard::SpikeGuard(double loss_z, double grad_z, int window)
    : loss_limit_(loss_z), grad_limit_(grad_z), loss_(static_cast<size_t>(window)),
      grad_(static_cast<size_t>(window)) {}

SpikeVerdict SpikeGuard::observe(double loss, double grad_norm) {
  SpikeVerdict v;
  v.loss_z = loss_.z(loss);
  v.grad_z = grad_.z(grad_norm);
  // (NaN compares false: no skip during the warm-up)
  if (loss_limit_ > 0 && v.loss_z > loss_limit_) v.reason = "loss_z";
  else if (grad_limit_ > 0 && v.grad_z > grad_limit_) v.reason = "grad_z";
  v.skip = !v.reason.empty();
  skips_ += v.skip;
  loss_.push(loss);
  grad_.push(grad_norm);
  return v;
}

void SpikeGuard::restore(const SpikeState& s) {
  skips_ = s.skips;
  loss_.assign(s.loss);
  grad_.assign(s.grad_norm);
}

std::string SpikeGuard::describe(const SpikeVerdict& v) const {
  if (!v.skip) return "";
  const bool loss = v.reason == "loss_z";
  char b[96];
  std::snprintf(b, sizeof(b), " | SKIPPED (%s z %.2f > %g)", loss ? "loss" : "grad norm", loss ? v.loss_z : v.grad_z,
                loss ? loss_limit_ : grad_limit_);
  return b;
}

}  // namespace gpt2
