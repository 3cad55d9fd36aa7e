// Learning-rate schedules: linear warmup, then cosine / linear / constant /
// wsd (warmup-stable-decay: constant, then a linear cooldown over the final
// `decay_frac` of training), ending at max_lr * final_frac.
#ifndef TRAIN_LR_SCHEDULE_H
#define TRAIN_LR_SCHEDULE_H

#include <string>
#include <utility>

namespace gpt2 {

enum class LrScheduleKind { kCosine, kLinear, kConstant, kWsd };

// Each schedule's name, as --lr-schedule takes it and the banner prints it.
inline constexpr std::pair<const char*, LrScheduleKind> kLrScheduleKinds[] = {{"cosine", LrScheduleKind::kCosine},
                                                                              {"linear", LrScheduleKind::kLinear},
                                                                              {"constant", LrScheduleKind::kConstant},
                                                                              {"wsd", LrScheduleKind::kWsd}};

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::kCosine;
  float max_lr = 3e-4f;
  int warmup_steps = 0;
  int total_steps = 1;
  float final_frac = 0.1f;   // lr at the last step = max_lr * final_frac
  float wsd_decay_frac = 0.2f;

  static const char* kind_name(LrScheduleKind k);
  // lr for 0-based optimizer step `step` (0 .. total_steps-1). Past the last
  // step (a resumed run that extends --max-steps but keeps this schedule) the
  // lr stays at its final value: max_lr * final_frac (constant: max_lr).
  float at(int step) const;
  // "cosine, peak lr 0.0003, warmup 10, 200 steps, final 0.1 x peak".
  std::string describe() const;
  bool operator==(const LrSchedule& o) const;
};

// The schedule a resumed run uses, and in *source why (for the log line):
// `stored` (the original run's, from the state file; nullptr if the file
// predates stored schedules) wins over `from_flags` (over this run's
// --max-steps) unless missing or `reset` (--reset-schedule), so extending
// --max-steps on resume continues the original schedule, not a longer new one.
LrSchedule resume_schedule(const LrSchedule& from_flags, const LrSchedule* stored, bool reset,
                           std::string* source);

}  // namespace gpt2

#endif  // TRAIN_LR_SCHEDULE_H
