#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace gpt2 {

LrScheduleKind LrSchedule::parse_kind(const std::string& name) {
  if (name == "cosine") return LrScheduleKind::kCosine;
  if (name == "linear") return LrScheduleKind::kLinear;
  if (name == "constant") return LrScheduleKind::kConstant;
  if (name == "wsd") return LrScheduleKind::kWsd;
  throw std::runtime_error("--lr-schedule: unknown schedule '" + name +
                           "' (expected cosine, linear, constant or wsd)");
}

const char* LrSchedule::kind_name(LrScheduleKind k) {
  switch (k) {
    case LrScheduleKind::kCosine: return "cosine";
    case LrScheduleKind::kLinear: return "linear";
    case LrScheduleKind::kConstant: return "constant";
    case LrScheduleKind::kWsd: return "wsd";
  }
  return "?";
}

float LrSchedule::at(int step) const {
  const double min_lr = static_cast<double>(max_lr) * final_frac;
  if (step < warmup_steps) return static_cast<float>(max_lr * (step + 1.0) / warmup_steps);
  if (kind == LrScheduleKind::kConstant) return max_lr;
  // Progress through the post-warmup part, 0 at its first step, 1 at the last.
  const int decay_steps = std::max(1, total_steps - 1 - warmup_steps);
  const double progress = std::min(1.0, std::max(0.0, double(step - warmup_steps) / decay_steps));
  switch (kind) {
    case LrScheduleKind::kCosine:
      return static_cast<float>(min_lr + 0.5 * (1.0 + std::cos(M_PI * progress)) * (max_lr - min_lr));
    case LrScheduleKind::kLinear:
      return static_cast<float>(max_lr - progress * (max_lr - min_lr));
    case LrScheduleKind::kWsd: {
      const double stable = 1.0 - wsd_decay_frac;
      if (progress <= stable || wsd_decay_frac <= 0.0f) return max_lr;
      const double cool = (progress - stable) / wsd_decay_frac;
      return static_cast<float>(max_lr - cool * (max_lr - min_lr));
    }
    case LrScheduleKind::kConstant: break;
  }
  return max_lr;
}

}  // namespace gpt2
