// run_training, and TrainingRun's set-up, banner, loop and step
// (train/training_run.h); checkpoints are in train/run_checkpoints.cpp.
#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

#include "distributed/preempt.h"
#include "train/device_link.h"
#include "train/generation.h"
#include "train/memory_plan.h"
#include "train/run_plan.h"
#include "train/test_hooks.h"
#include "train/training_run.h"

namespace gpt2 {

std::unique_ptr<Communicator> make_buffer_communicator(Backend& backend, Communicator& host, const RunPlan& plan) {
  if (backend.is_host_memory() || !plan.buffers_travel()) return nullptr;
  return make_gpu_buffer_communicator(backend, host);
}
TrainingRun::TrainingRun(const RunPlan& plan, const DistContext& dist, Communicator& host, TrainLogger& log,
                         std::unique_ptr<Backend> backend)
    : plan_(plan),
      dist_(dist),
      main_rank_(dist.is_main()),
      log_(log),
      backend_(std::move(backend)),
      dropout_(run_dropout(plan.opts, plan.model)),
      comms_{host, make_buffer_communicator(*backend_, host, plan)},
      parts_(*backend_, comms_.buffers(), plan, plan.opts.offload_optimizer ? make_cpu_backend(plan.opts.threads) : nullptr),
      train_loader_(train_loader_options(plan.opts, plan_.shape, dist, plan_.cfg.vocab_size)),
      spikes_(plan.opts.skip_loss_z, plan.opts.skip_grad_z, plan.opts.spike_window),
      sample_rng_(plan.opts.seed ^ 0x5A4D504C45ULL) {
  if (plan_.opts.val_every > 0) {
    DataLoaderOptions vlo = train_loader_options(plan_.opts, plan_.shape, dist, plan_.cfg.vocab_size);
    vlo.pattern = plan_.opts.val_data;
    vlo.grad_accum = 1;
    vlo.shuffle = false;
    val_loader_ = std::make_unique<DataLoader>(vlo);
  }
  steps_per_epoch_ = static_cast<int64_t>(train_loader_.samples_per_epoch()) / (dist.world * plan_.shape.grad_accum);
  if (steps_per_epoch_ < 1 && plan_.opts.max_steps <= 0)
    throw std::runtime_error(plan_.opts.train_data + ": not enough tokens for one optimizer step");
  const RunLength length = run_length(plan_.opts.max_steps, plan_.opts.epochs, steps_per_epoch_);
  total_steps_ = length.steps;
  length_why_ = length.why;
  schedule_ = plan_.opts.schedule;
  schedule_.total_steps = total_steps_;
  tokenizer_ = sample_tokenizer(plan_.opts.prompt, [this](const std::string& line) { log_.info(line); });
  if (plan_.opts.sample_every > 0)
    sample_context_ = prompt_context(plan_.opts.prompt, tokenizer_.get(), plan_.cfg.vocab_size);
  // One optimizer step's micro-batches (read before the first forward: see load_step_batches).
  const size_t NT = static_cast<size_t>(plan_.shape.B) * plan_.shape.T;
  inputs_.resize(NT * plan_.shape.grad_accum);
  targets_.resize(NT * plan_.shape.grad_accum);
  parts_.model.set_dropout(dropout_.rates, plan_.opts.seed ^ kDropoutSeedSalt);
  attention_ = gpu_attention_line(*backend_, plan_.opts, plan_.shape.B, plan_.shape.T, plan_.cfg.channels,
                                  plan_.cfg.num_heads, dropout_.rates.attn > 0.0f);
  if (!plan_.opts.eval_hellaswag.empty()) hellaswag_ = read_hellaswag_for(plan_.opts);
}

void TrainingRun::log_banner() {
  if (!main_rank_) return;
  const size_t P = plan_.layout.total;
  log_.info("+----------------------------------------------------------------------");
  for (const auto& kv : describe_train_options(plan_.opts)) {
    char line[512];
    std::snprintf(line, sizeof(line), "| %-20s %s", kv.first.c_str(), kv.second.c_str());
    log_.info(line);
  }
  log_.info("+----------------------------------------------------------------------");
  log_.info("| model        " + plan_.cfg.describe() +
            (plan_.cfg_from_file ? " from " + plan_.model : std::string(" (random init)")));
  log_.info("| parameters   " + std::to_string(P) + " (" + format_bytes(P * 4.0) + " fp32)");
  log_.info("| backend      " + backend_->name() + ", " + describe_precision(plan_.opts, *backend_) + ", " +
            dist_.describe());
  log_.info("| comm         " + comms_.describe());
  log_.info("| batch        B=" + std::to_string(plan_.shape.B) + " T=" + std::to_string(plan_.shape.T) +
            " world=" + std::to_string(dist_.world) + " grad_accum=" + std::to_string(plan_.shape.grad_accum) + " -> " +
            std::to_string(plan_.shape.total_batch) + " tokens/step");
  log_.info("| data         " + std::to_string(train_loader_.num_shards()) + " train shard(s), " +
            std::to_string(train_loader_.total_tokens()) + " tokens, " + std::to_string(steps_per_epoch_) +
            " steps/epoch; training " + std::to_string(total_steps_) + " steps: " + length_why_);
  log_.info("| dropout      " + dropout_.described + ", in training forwards only");
  if (!attention_.empty()) log_.info("| attention    " + attention_);
  log_.info("| mfu          " + std::to_string(static_cast<int64_t>(flops_per_token(plan_.cfg, plan_.shape.T, P))) +
            " FLOP/token (6N + 6LCT)" + (peak_.tflops > 0 ? " against " : "; ") + peak_.source);
  log_.info("| lr schedule  " + schedule_.describe() + " (" + schedule_source_ + ")");
  log_.info("| zero         stage " + std::to_string(plan_.opts.zero_stage) + ", shard of rank 0: [" +
            std::to_string(parts_.dp.opt_begin()) + ", " + std::to_string(parts_.dp.opt_end()) + ") of " +
            std::to_string(P) + " (+" + std::to_string(parts_.dp.plan().padding()) + " padding)");
  log_.info("| memory/rank  params " + format_bytes(static_cast<double>(parts_.dp.parameter_bytes(parts_.model))) +
            ", grads " +
            format_bytes(static_cast<double>(parts_.dp.gradient_bytes())) + ", optimizer " +
            format_bytes(static_cast<double>(parts_.optimizer.state_bytes())) + ", activations " +
            format_bytes(static_cast<double>(parts_.model.activation_bytes())) +
            (parts_.optimizer.offloaded()
                 ? "; optimizer on the host " + format_bytes(static_cast<double>(parts_.optimizer.host_bytes()))
                 : std::string()));
  log_.info("+----------------------------------------------------------------------");
}

// Mean loss over the supervised targets (mask 1; all for plain shards) of
// --val-steps batches on every rank.
double TrainingRun::evaluate() {
  val_loader_->reset();
  double sums[2] = {0.0, 0.0};  // loss sum, supervised targets
  for (int i = 0; i < plan_.opts.val_steps; i++) {
    // a stop signal is honoured between batches, not after --val-steps of them
    throw_if_stop_requested(comms_.host);
    val_loader_->next_batch(inputs_.data(), targets_.data());
    parts_.model.forward(inputs_.data(), targets_.data(), plan_.shape.B, plan_.shape.T);
    sums[0] += parts_.model.loss_sum();
    sums[1] += static_cast<double>(parts_.model.loss_count());
  }
  all_reduce(comms_.host, sums, 2, ReduceOp::kSum);
  if (sums[1] == 0.0)
    throw std::runtime_error(plan_.opts.val_data + ": the validation batches hold no supervised token");
  // Rank 0's value on every rank, bit for bit (MPI does not promise one
  // all-reduce result everywhere): --keep-best and early stopping decide on it.
  double loss = sums[0] / sums[1];
  comms_.host.broadcast(&loss, sizeof(loss), 0);
  return loss;
}

// Logs, records and (--keep-best, not at_end: the final checkpoint is that
// one) checkpoints a new best. True when --early-stopping-patience ends the
// run; the same on every rank (the loss is rank 0's).
bool TrainingRun::validate(int step, bool at_end) {
  const double loss = evaluate();
  log_.val(step, loss);
  if (!hellaswag_.empty()) {
    const HellaSwagResult h = evaluate_hellaswag(
        parts_.model, plan_.shape.B, plan_.shape.T, hellaswag_, dist_.rank, dist_.world,
        [this](std::vector<double>& v) { all_reduce(comms_.host, v.data(), v.size(), ReduceOp::kSum); },
        // a stop signal is honoured between rounds, as between validation batches
        [this] { throw_if_stop_requested(comms_.host); });
    log_.hellaswag(step, h.n, h.acc(), h.acc_norm());
  }
  evaluated_at_ = step;
  const EvalVerdict v = observe_eval(&history_, step, loss, plan_.opts.early_stopping_threshold);
  if (v.new_best && plan_.opts.keep_best && !at_end && !checkpoint_on_disk(step)) save_checkpoint(step);
  if (!patience_exhausted(history_, plan_.opts.early_stopping_patience)) return false;
  std::ostringstream why;
  why << "early stopping at step " << step << ": " << history_.bad_evals
      << " evaluation(s) in a row without beating the best by more than " << plan_.opts.early_stopping_threshold
      << " (--early-stopping-patience " << plan_.opts.early_stopping_patience << "); best: " << describe_best(history_);
  log_.info(why.str());
  return true;
}

void TrainingRun::sample(int step) {
  // Sampling is rank 0's progress report; with parameters gathered per
  // forward every rank runs the same forwards (the same logits: the same tokens).
  if (!main_rank_ && !parts_.model.forward_is_collective()) return;
  std::vector<int32_t> ids = generate(parts_.model, sample_context_, plan_.opts.gen_tokens, plan_.opts.temperature,
                                      plan_.opts.top_k, sample_rng_, plan_.opts.top_p);
  log_.sample(step, sample_text(tokenizer_.get(), plan_.opts.prompt, ids));
}

// Reads this rank's micro-batches of the step into inputs_/targets_; returns
// the supervised targets of the whole step over all ranks: the loss is
// normalised by it (HF Trainer's num_items_in_batch), so with SFT masks it must
// be known before the first backward. Plain shards: B*T*grad_accum*world.
uint64_t TrainingRun::load_step_batches() {
  const size_t NT = static_cast<size_t>(plan_.shape.B) * plan_.shape.T;
  if (plan_.opts.overfit_batch) train_loader_.reset();  // the first batch again, resumed runs included
  for (int micro = 0; micro < plan_.shape.grad_accum; micro++)
    train_loader_.next_batch(inputs_.data() + micro * NT, targets_.data() + micro * NT);
  if (!train_loader_.has_loss_mask()) return static_cast<uint64_t>(plan_.shape.total_batch);
  double local = 0.0;
  for (int32_t t : targets_) local += t != kIgnoreTarget;
  return static_cast<uint64_t>(all_reduce_value(comms_.host, local, ReduceOp::kSum));  // exact below 2^53
}

// The step-global token index of row 0 of micro-batch `micro` (the dropout
// masks' position): rank r's k-th micro-batch is window k*world + r of B*T
// tokens (dataloader.h), so N ranks and N micro-batches number tokens alike.
uint64_t TrainingRun::micro_token0(int micro) const {
  const uint64_t window = static_cast<uint64_t>(micro) * static_cast<uint64_t>(dist_.world) +
                          static_cast<uint64_t>(dist_.rank);
  return window * static_cast<uint64_t>(plan_.shape.B) * static_cast<uint64_t>(plan_.shape.T);
}

// --profile-steps A:B: the profiler's capture starts before step A and stops after step B.
void TrainingRun::profile_window(int step, bool before) {
  if (step + 1 != (before ? plan_.opts.profile_first : plan_.opts.profile_last)) return;
  backend_->synchronize();  // the window holds this step's work only
  backend_->profiler_capture(before);
  log_.info(std::string("--profile-steps: profiler capture ") + (before ? "started before" : "stopped after") +
            " step " + std::to_string(step + 1) +
            (backend_->is_host_memory() ? " (no effect on the CPU backend)" : ""));
}

// One optimizer step in llm.c's order, with one host wait. Host scalars
// (loss, norm) travel over the host communicator, buffers over the buffer one.
void TrainingRun::train_step(int step) {
  test_fault_hook(dist_, step);  // tests only: this rank hangs or exits here
  const auto t0 = Clock::now();
  const ProfileRange step_range(*backend_, "step " + std::to_string(step + 1));
  uint64_t supervised = 0;
  {
    const ProfileRange range(*backend_, "data");
    supervised = load_step_batches();
  }
  comms_.reset_stats();
  accumulate_gradients(step, loss_scale(step, supervised));
  reduce_gradients(supervised != 0);
  // The step's host wait. Device collectives return once enqueued, so
  // wait_device() polls the compute stream against --comm-timeout: a hung peer
  // ends the job here instead of blocking the loss copy forever. Without a
  // device communicator the loss copy is the wait.
  if (comms_.device) comms_.device->wait_device();
  const double loss_sum = parts_.model.collect_train_losses().sum;
  if (supervised == 0) {  // every target masked: nothing to learn from, nothing to update
    log_.info("step " + std::to_string(step + 1) + ": no supervised token in the batch; weights not updated");
    return;
  }
  // The norm was copied behind the clip scale: the wait above covered it.
  double loss_norm[2] = {all_reduce_value(comms_.host, loss_sum, ReduceOp::kSum) / static_cast<double>(supervised),
                         parts_.dp.grad_norm()};
  // Rank 0's on every rank, bit for bit (as in evaluate()): the spike guards decide alike and keep equal windows.
  if (spikes_.enabled()) comms_.host.broadcast(loss_norm, sizeof loss_norm, 0);
  const double loss = loss_norm[0], norm = loss_norm[1];
  const StepVerdict verdict = judge_step(step, loss, norm);
  if (verdict.apply()) apply_update(step);
  // dt runs to the end of the step, the update included: on the CPU backend,
  // and with the optimizer offloaded, AdamW runs here on the host. On a GPU the
  // update is only enqueued here and the next step's wait covers it, so dt is
  // the steady-state step period either way (evaluation, checkpoints and
  // samples between steps are outside every dt).
  log_step(step, loss, norm, seconds_since(t0), supervised, verdict);
}

// The dloss factor: gradients are averaged over ranks, so each rank scales by
// world / supervised. Plain shards: 1/(B*T*grad_accum), the same float as ever.
float TrainingRun::loss_scale(int step, uint64_t supervised) const {
  const float scale =
      !train_loader_.has_loss_mask()
          ? 1.0f / static_cast<float>(static_cast<size_t>(plan_.shape.B) * plan_.shape.T * plan_.shape.grad_accum)
      : supervised ? static_cast<float>(static_cast<double>(dist_.world) / static_cast<double>(supervised))
                   : 0.0f;
  return test_gradient_scale(step) * scale;
}

// The losses stay on the device (no host wait until the norm). Stages 0/1
// reduce in buckets during the last micro-step's backward (device buffers);
// ZeRO-2 exchanges units during the backward.
void TrainingRun::accumulate_gradients(int step, float dloss_scale) {
  const size_t NT = static_cast<size_t>(plan_.shape.B) * plan_.shape.T;
  parts_.dp.begin_step();
  for (int micro = 0; micro < plan_.shape.grad_accum; micro++) {
    parts_.model.set_dropout_position(static_cast<uint32_t>(step), micro_token0(micro));
    parts_.model.train_forward_deferred_loss(inputs_.data() + micro * NT, targets_.data() + micro * NT, plan_.shape.B,
                                             plan_.shape.T, dloss_scale);
    parts_.dp.backward(parts_.model, micro + 1 == plan_.shape.grad_accum);
  }
}

// The norm and clip scale are queued where the gradients are (when there is
// something to clip); the host reads the norm after the step's wait.
void TrainingRun::reduce_gradients(bool clip) {
  {
    const ProfileRange range(*backend_, "gradient reduce (collective)");
    parts_.dp.reduce_gradients();
  }
  if (clip) parts_.dp.queue_grad_clip(plan_.opts.grad_clip);
}

// No update with a non-finite loss or norm (--on-nan stop throws; skip counts
// it, up to --max-nan-skips in a row, alike on every rank as loss and norm are
// all-reduced) nor with a spike (--skip-loss-z, --skip-grad-z).
TrainingRun::StepVerdict TrainingRun::judge_step(int step, double loss, double norm) {
  StepVerdict v;
  v.finite = std::isfinite(loss) && std::isfinite(norm);
  const std::string what = std::isfinite(loss) ? "gradient norm" : "loss";
  if (!v.finite && plan_.opts.on_nan == "stop")
    throw std::runtime_error("non-finite " + what + " at step " + std::to_string(step + 1) +
                             " (weights not updated; last checkpoint kept; --on-nan skip to continue)");
  if (!v.finite) {
    nan_skips_++;
    if (++nan_run_ >= plan_.opts.max_nan_skips)
      throw std::runtime_error("non-finite " + what + " in " + std::to_string(nan_run_) +
                               " consecutive steps, the last step " + std::to_string(step + 1) +
                               " (--on-nan skip, --max-nan-skips " + std::to_string(plan_.opts.max_nan_skips) +
                               "; last checkpoint kept)");
  } else if (spikes_.enabled()) {
    v.spike = spikes_.observe(loss, norm);
  }
  if (v.apply()) nan_run_ = 0;
  return v;
}

// AdamW on this rank's shard (the clip scale is read on the device), then the
// parameters gathered. AdamW's step count t is the updates applied: a spike
// is not one (non-finite skips count, as they always have).
void TrainingRun::apply_update(int step) {
  const int t = step + 1 - static_cast<int>(spikes_.skips());
  {
    const ProfileRange range(*backend_, "optimizer");
    parts_.optimizer.step(parts_.dp.shard_params(parts_.model), parts_.dp.shard_grads(), schedule_.at(step),
                          parts_.dp.clip_state(), t, plan_.opts.adamw);
  }
  const ProfileRange range(*backend_, "parameter gather (collective)");
  parts_.dp.gather_params(parts_.model);
}

void TrainingRun::log_step(int step, double loss, double norm, double dt, uint64_t supervised,
                           const StepVerdict& verdict) {
  if (step > start_step_) {  // the first step warms caches and is not representative
    time_sum_ += dt;
    timed_steps_++;
  }
  StepRecord rec;
  rec.step = step + 1;
  rec.total_steps = total_steps_;
  rec.loss = loss;
  rec.grad_norm = norm;
  rec.lr = schedule_.at(step);
  rec.ms = dt * 1000.0;
  rec.tok_per_s = plan_.shape.total_batch / dt;
  rec.mfu = mfu(flops_per_token(plan_.cfg, plan_.shape.T, plan_.layout.total),
                static_cast<double>(plan_.shape.total_batch), dt, peak_, dist_.world);
  rec.eta_s = (timed_steps_ ? time_sum_ / timed_steps_ : dt) * (total_steps_ - step - 1);
  rec.skipped = !verdict.apply();
  rec.skip_note = verdict.finite ? spikes_.describe(verdict.spike) : " | SKIPPED (non-finite)";
  rec.skip_reason = verdict.finite ? verdict.spike.reason : "non-finite";
  if (spikes_.enabled()) {
    rec.loss_z = verdict.spike.loss_z;
    rec.grad_z = verdict.spike.grad_z;
    rec.spike_skips = static_cast<int64_t>(spikes_.skips());
  }
  rec.supervised_tokens = train_loader_.has_loss_mask() ? static_cast<int64_t>(supervised) : -1;
  rec.comm_bytes = comms_.sent_bytes();
  log_.step(rec);
  if (step == start_step_) log_device_memory(step + 1);  // workspaces have grown to their size by now
}

// A device backend's memory after the first step, against the --dry-run total
// (the backend's alloc() bytes): train/device_link.h's gpu_memory_line.
void TrainingRun::log_device_memory(int step) {
  const std::string line = gpu_memory_line(*backend_);
  if (!line.empty()) log_.info("| device mem   after step " + std::to_string(step) + ": " + line);
}

int TrainingRun::run() {
  init_or_resume();
  peak_ = run_peak(plan_.opts, *backend_);
  log_banner();
  last_step_done_ = start_step_;
  try {
    for (int step = start_step_; step < total_steps_; step++) {
      if (should_stop(comms_.host)) return stop();
      if (val_loader_ && step % plan_.opts.val_every == 0 && validate(step, /*at_end=*/false)) break;  // early stopping
      if (plan_.opts.sample_every > 0 && step > start_step_ && step % plan_.opts.sample_every == 0) {
        sample(step);
        if (should_stop(comms_.host)) return stop();  // a signal during the sample: no further step
      }
      profile_window(step, true);
      train_step(step);
      profile_window(step, false);
      last_step_done_ = step + 1;
      const bool periodic = plan_.opts.checkpoint_every > 0 && last_step_done_ % plan_.opts.checkpoint_every == 0;
      if ((periodic || is_milestone_step(last_step_done_)) && last_step_done_ < total_steps_)
        save_checkpoint(last_step_done_);
    }
    return finish();
  } catch (const StopRequested&) {  // a signal during validation
    return stop();
  }
}

int run_training(const TrainOptions& opts, const DistContext& dist, Communicator& comm) {
  TrainLogger log(dist.is_main(), opts.log_jsonl);
  const RunPlan plan = plan_training_run(opts, dist.world, log);
  std::unique_ptr<Backend> backend = make_run_backend(plan.opts, dist);
  // Before the model allocates: a run that cannot fit (host or GPU memory) is an
  // error now, not the OOM killer's silent SIGKILL or a cudaMalloc failure later.
  check_run_memory(plan, dist, *backend);
  TrainingRun run(plan, dist, comm, log, std::move(backend));
  return run.run();
}

}  // namespace gpt2
