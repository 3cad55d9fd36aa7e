#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

namespace gpt2 {

const char* LrSchedule::kind_name(LrScheduleKind k) {
  for (const auto& [name, kind] : kLrScheduleKinds)
    if (kind == k) return name;
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

std::string LrSchedule::describe() const {
  std::ostringstream s;
  s << kind_name(kind) << ", peak lr " << max_lr << ", warmup " << warmup_steps << ", " << total_steps << " steps";
  if (kind != LrScheduleKind::kConstant) s << ", final " << final_frac << " x peak";
  if (kind == LrScheduleKind::kWsd) s << ", cooldown " << wsd_decay_frac;
  return s.str();
}

bool LrSchedule::operator==(const LrSchedule& o) const {
  return kind == o.kind && max_lr == o.max_lr && warmup_steps == o.warmup_steps && total_steps == o.total_steps &&
         final_frac == o.final_frac && wsd_decay_frac == o.wsd_decay_frac;
}

LrSchedule resume_schedule(const LrSchedule& from_flags, const LrSchedule* stored, bool reset,
                           std::string* source) {
  if (!stored || reset) {
    *source = !stored ? "from the flags (the checkpoint predates stored schedules)"
                      : "from the flags (--reset-schedule; the checkpoint's: " + stored->describe() + ")";
    return from_flags;
  }
  if (*stored == from_flags) {
    *source = "from the checkpoint (same as the flags)";
  } else {
    *source = "from the checkpoint";
    if (stored->total_steps < from_flags.total_steps)
      *source += "; held at its final lr after step " + std::to_string(stored->total_steps);
    *source += "; --reset-schedule to use the flags' (" + from_flags.describe() + ")";
  }
  return *stored;
}

}  // namespace gpt2
