// Learning-rate schedules: linear warmup, then cosine / linear / constant /
// wsd (warmup-stable-decay: constant, then a linear cooldown over the final
// `decay_frac` of training), ending at max_lr * final_frac.
#ifndef TRAIN_LR_SCHEDULE_H
#define TRAIN_LR_SCHEDULE_H

#include <string>

namespace gpt2 {

enum class LrScheduleKind { kCosine, kLinear, kConstant, kWsd };

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::kCosine;
  float max_lr = 3e-4f;
  int warmup_steps = 0;
  int total_steps = 1;
  float final_frac = 0.1f;   // lr at the last step = max_lr * final_frac
  float wsd_decay_frac = 0.2f;

  static LrScheduleKind parse_kind(const std::string& name);  // throws on unknown names
  static const char* kind_name(LrScheduleKind k);
  // lr for 0-based optimizer step `step` (0 .. total_steps-1).
  float at(int step) const;
};

}  // namespace gpt2

#endif  // TRAIN_LR_SCHEDULE_H
