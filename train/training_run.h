// The training run of one rank (train/trainer.h's run_training), private to
// the trainer's two files: train/trainer.cpp holds its set-up, the loop and
// the step; train/run_checkpoints.cpp what touches checkpoints (init or
// resume, save, the final model, the stop on a signal).
#ifndef TRAIN_TRAINING_RUN_H
#define TRAIN_TRAINING_RUN_H

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "dataloader/dataloader.h"
#include "distributed/comm.h"
#include "distributed/context.h"
#include "model/gpt2.h"
#include "tokenizer/tokenizer.h"
#include "train/checkpoint.h"
#include "train/data_parallel.h"
#include "metrics/eval_history.h"
#include "train/evaluation.h"
#include "metrics/logger.h"
#include "train/lr_schedule.h"
#include "metrics/mfu.h"
#include "train/optimizer.h"
#include "train/run_plan.h"
#include "metrics/spike_guard.h"
#include "util/rng.h"

namespace gpt2 {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The buffers' communicator when the host one (MPI) cannot move them: a device
// backend whose buffers travel (DataParallel::buffers_travel). Else nullptr.
std::unique_ptr<Communicator> make_buffer_communicator(Backend& backend, Communicator& host, const RunPlan& plan);

// The host communicator (MPI: loss, gradient norm, stop check, barriers) and
// the one for the backend's buffers (NCCL for device memory; else the host one).
struct Communicators {
  Communicator& host;
  std::unique_ptr<Communicator> device;

  Communicator& buffers() { return device ? *device : host; }
  void reset_stats() {
    host.reset_stats();
    if (device) device->reset_stats();
  }
  uint64_t sent_bytes() const {
    uint64_t sum = 0;
    for (const CommTraffic& t : host.stats()) sum += t.sent_bytes;
    if (device)
      for (const CommTraffic& t : device->stats()) sum += t.sent_bytes;
    return sum;
  }
  std::string describe() const {
    return device ? device->name() + " (buffers), " + host.name() + " (host scalars)" : host.name();
  }
};

// One training job on this rank, phase by phase: set-up (constructor), init
// or resume, banner, the loop, the end (checkpoint, final model).
class TrainingRun {
 public:
  TrainingRun(const RunPlan& plan, const DistContext& dist, Communicator& host, TrainLogger& log,
              std::unique_ptr<Backend> backend);
  int run();

 private:
  void init_or_resume();
  void claim_output_dir();
  int64_t pick_resume_step(const Notify& info);
  void abandon_later_checkpoints(uint64_t step);
  const CheckpointDir& resume_dir() const { return source_ ? *source_ : *ckpt_; }
  void resume_from(uint64_t step);
  void log_banner();
  void log_device_memory(int step);
  // A step's outcome: whether its loss and norm are finite, and the spike guards' verdict.
  struct StepVerdict {
    bool finite = true;
    SpikeVerdict spike;
    bool apply() const { return finite && !spike.skip; }
  };
  void train_step(int step);
  float loss_scale(int step, uint64_t supervised) const;
  void accumulate_gradients(int step, float dloss_scale);
  void reduce_gradients(bool clip);
  StepVerdict judge_step(int step, double loss, double norm);
  void apply_update(int step);
  void log_step(int step, double loss, double norm, double dt, uint64_t supervised, const StepVerdict& verdict);
  uint64_t load_step_batches();
  uint64_t micro_token0(int micro) const;
  void profile_window(int step, bool before);
  double evaluate();
  bool validate(int step, bool at_end);
  bool checkpoint_on_disk(int step) const {
    return saved_step_ == step || (resumed_here_ && step == start_step_);
  }
  void sample(int step);
  bool is_milestone_step(int step) const {
    return plan_.opts.milestone_every > 0 && step % plan_.opts.milestone_every == 0;
  }
  void save_checkpoint(int step);
  int finish();
  std::vector<float> final_weights(std::vector<float> last);
  int stop();

  const RunPlan& plan_;
  const DistContext& dist_;
  const bool main_rank_;
  TrainLogger& log_;
  std::unique_ptr<Backend> backend_;
  const RunDropout dropout_;   // the rates in effect and where they come from
  Communicators comms_;
  RunAssembly parts_;          // DataParallel, the model, AdamW
  DataLoader train_loader_;
  std::unique_ptr<DataLoader> val_loader_;
  int64_t steps_per_epoch_ = 0;
  int total_steps_ = 0;
  std::string length_why_;  // what total_steps_ comes from (--max-steps, --epochs)
  std::string attention_;   // the banner's attention kernel and why ("" on the CPU)
  LrSchedule schedule_;
  std::string schedule_source_ = "from the flags";
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<int32_t> sample_context_;  // the prompt's tokens, or <|endoftext|> (--sample-every > 0)
  std::unique_ptr<CheckpointDir> ckpt_;
  std::unique_ptr<CheckpointDir> source_;  // --resume-from's directory when it is not --output-dir
  int saved_step_ = -1;      // the step of the checkpoint this process wrote last
  bool resumed_here_ = false;  // resumed from a checkpoint of --output-dir (at start_step_)
  EvalHistory history_;      // best validation loss, early-stopping count (in every checkpoint)
  int evaluated_at_ = -1;    // the step of this process's latest validation
  int start_step_ = 0;
  int last_step_done_ = 0;
  uint64_t nan_skips_ = 0;
  int nan_run_ = 0;  // consecutive skipped steps
  SpikeGuard spikes_;  // --skip-loss-z, --skip-grad-z (in every checkpoint)
  PeakFlops peak_;     // the MFU's denominator, per device
  std::vector<HellaSwagExample> hellaswag_;  // --eval-hellaswag, scored at every validation
  Rng sample_rng_;
  std::vector<int32_t> inputs_, targets_;
  double time_sum_ = 0.0;
  int timed_steps_ = 0;
};

}  // namespace gpt2

#endif  // TRAIN_TRAINING_RUN_H
