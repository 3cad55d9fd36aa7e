// TrainingRun's checkpoints (train/training_run.h): init or resume, the
// checkpoints it writes, the final model, the checkpoint on a stop signal.
#include "train/trainer.h"

#include <chrono>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <vector>

#include "distributed/preempt.h"
#include "model_io/hf_checkpoint.h"
#include "model_io/model_file.h"
#include "train/checkpoint.h"
#include "train/training_run.h"
#include "util/checked_io.h"

namespace gpt2 {

// Parameters and optimizer state: from the newest complete checkpoint with
// --resume, else from --model (a file) or a random init.
void TrainingRun::init_or_resume() {
  const Notify info = [this](const std::string& line) { log_.info(line); };
  // The final export's directory is checked now, not after the training.
  if (main_rank_) check_output_path("--save-hf", plan_.opts.save_hf, true);
  if (!plan_.opts.output_dir.empty()) {
    // Rank 0 locks the directory (a second run on it fails here). A fresh run, or
    // one resumed from another directory, refuses another run's checkpoints or,
    // with --overwrite-output-dir, replaces them (a refusal's error exit aborts
    // the ranks waiting in the barrier).
    if (main_rank_) {
      ckpt_ = std::make_unique<CheckpointDir>(plan_.opts.output_dir, /*lock=*/true, info);
      const bool elsewhere = !plan_.opts.resume_from.empty() &&
                             !same_directory(parse_checkpoint_ref(plan_.opts.resume_from).dir, plan_.opts.output_dir);
      if (!plan_.opts.resume || elsewhere) claim_output_dir();
    }
    comms_.host.barrier();
    if (!main_rank_) ckpt_ = std::make_unique<CheckpointDir>(plan_.opts.output_dir);
  }
  const int64_t resume_step = pick_resume_step(info);
  if (resume_step > total_steps_)  // nothing left to train is an error, not a silent exit 0
    throw std::runtime_error(std::string("--resume: the ") +
                             (plan_.opts.resume_from.empty() ? "newest complete checkpoint" : "checkpoint") + " in " +
                             resume_dir().dir() + " is at step " +
                             std::to_string(resume_step) + ", past the " + std::to_string(total_steps_) +
                             " steps this run trains (" + length_why_ + "): nothing to train (a --max-steps above " +
                             std::to_string(resume_step) + " continues it)");
  if (resume_step >= 0) {
    resumed_here_ = !source_;
    if (!plan_.opts.init_from.empty())
      log_.info("--init-from " + plan_.opts.init_from + " not used: --resume continues the run in " +
                plan_.opts.output_dir);
    resume_from(static_cast<uint64_t>(resume_step));
    return abandon_later_checkpoints(static_cast<uint64_t>(resume_step));
  }
  if (plan_.opts.resume) log_.info("--resume: no complete checkpoint in " + plan_.opts.output_dir + "; starting fresh");
  if (plan_.cfg_from_file) {
    ModelFile mf = read_model_file(plan_.model);
    require_finite(mf.params, plan_.model + ": the initial weights");
    parts_.model.set_parameters(mf.params);
  } else {
    parts_.model.init_random(plan_.opts.seed);
  }
  parts_.optimizer.attach_master(parts_.dp.shard_params(parts_.model));
}

// A fresh run owns its output directory: another run's checkpoints there would
// be pruned as "older" or "newer" than this run's, or resumed by mistake.
void TrainingRun::claim_output_dir() {
  const std::vector<uint64_t> steps = ckpt_->complete_steps();
  if (steps.empty()) return;
  std::string list;
  for (size_t i = 0; i < steps.size() && i < 4; i++) list += (i ? ", " : "") + std::to_string(steps[i]);
  if (steps.size() > 4) list += ", ... " + std::to_string(steps.back());
  if (!plan_.opts.overwrite_output_dir)
    throw std::runtime_error("--output-dir " + plan_.opts.output_dir + " holds " + std::to_string(steps.size()) +
                             " checkpoint(s) of another run (steps " + list +
                             "): --resume continues that run, --overwrite-output-dir deletes them and starts "
                             "anew, or give another --output-dir");
  ckpt_->remove_all();
  log_.info("--overwrite-output-dir: removed the checkpoints of steps " + list + " from " + plan_.opts.output_dir);
}

// The checkpoint --resume continues (-1: none, a fresh start). Plain --resume:
// the newest complete one in --output-dir whose files match their checksums;
// --resume-from: the one it names, verified the same way (rank 0 verifies).
int64_t TrainingRun::pick_resume_step(const Notify& info) {
  if (!ckpt_ || !plan_.opts.resume) return -1;
  if (plan_.opts.resume_from.empty()) return ckpt_->select_resume_step(comms_.host, plan_.opts.resume_fallback, info);
  const CheckpointRef ref = parse_checkpoint_ref(plan_.opts.resume_from);
  if (!same_directory(ref.dir, plan_.opts.output_dir)) source_ = std::make_unique<CheckpointDir>(ref.dir);
  return static_cast<int64_t>(select_named_checkpoint(comms_.host, resume_dir(), ref, info));
}

// Rank 0, once an older checkpoint of --output-dir has been loaded (a refused
// one changes nothing): the later checkpoints there are another future of the
// run, which plain --resume and pruning must no longer count.
void TrainingRun::abandon_later_checkpoints(uint64_t step) {
  if (plan_.opts.resume_from.empty() || source_ || !main_rank_) return;
  std::string list;
  for (uint64_t s : abandon_checkpoints_after(*ckpt_, step)) list += (list.empty() ? "" : ", ") + std::to_string(s);
  if (!list.empty())
    log_.info("--resume-from step " + std::to_string(step) + ": the later checkpoint(s) of steps " + list + " in " +
              plan_.opts.output_dir + " are abandoned (markers renamed DONE_N.abandoned)");
}

void TrainingRun::resume_from(uint64_t step) {
  const CheckpointDir& src = resume_dir();
  const uint32_t old_world = src.read_marker(step).world;
  ModelFile mf = read_model_file(src.model_path(step));
  if (mf.config != plan_.cfg)
    throw std::runtime_error("--resume: " + src.model_path(step) + " has config [" + mf.config.describe() +
                             "] but this run is configured as [" + plan_.cfg.describe() + "]");
  TrainState st = read_state_file(src.state_path(step, 0));
  check_resumed_batch(st, plan_.shape, plan_.world, src.state_path(step, 0));
  require_finite(mf.params, src.model_path(step));
  parts_.model.set_parameters(mf.params);
  std::vector<float> m, v, master;
  load_resharded_moments(src, step, old_world, parts_.optimizer.begin(), parts_.optimizer.end(), &m, &v, &master);
  parts_.optimizer.attach_master(parts_.dp.shard_params(parts_.model));
  parts_.optimizer.set_state(m, v, master);
  schedule_ = resume_schedule(schedule_, st.has_schedule ? &st.schedule : nullptr, plan_.opts.reset_schedule,
                              &schedule_source_);
  train_loader_.load_state(st.loader_state);
  sample_rng_.set_state(st.sample_rng);
  nan_skips_ = st.nan_skips;
  spikes_.restore(st.spikes);
  history_ = st.eval;
  start_step_ = static_cast<int>(step);
  // Every rank has read the old shards before any rank may write: a run resumed
  // with nothing left to train (a re-cut to another rank count) re-writes this
  // very step's files at once, with no collective in between.
  comms_.host.barrier();
  log_.info("resumed from " + src.model_path(step) + " at step " + std::to_string(step) + " (written by " +
            std::to_string(old_world) + " rank(s))" +
            (history_.best_step >= 0 ? "; best so far: " + describe_best(history_) + ", patience count " +
                                           std::to_string(history_.bad_evals)
                                     : std::string()));
}

void TrainingRun::save_checkpoint(int step) {
  if (!ckpt_) return;
  // A device fault (asynchronous on a GPU) throws here, before any file of this
  // checkpoint exists: a faulted context never writes one.
  backend_->synchronize();
  const auto t0 = Clock::now();
  std::vector<float> params = parts_.model.get_parameters();
  TrainState st;
  st.step = step;
  st.config = plan_.cfg;
  st.world = dist_.world;
  st.rank = dist_.rank;
  st.zero_stage = plan_.opts.zero_stage;
  st.shard_begin = parts_.optimizer.begin();
  st.shard_end = parts_.optimizer.end();
  st.num_params = plan_.layout.total;
  st.batch_size = plan_.shape.B;
  st.seq_len = plan_.shape.T;
  st.total_batch_tokens = plan_.shape.total_batch;
  st.seed = plan_.opts.seed;
  st.sample_rng = sample_rng_.state();
  st.nan_skips = nan_skips_;
  st.spikes = spikes_.state();
  st.has_schedule = true;
  st.schedule = schedule_;
  st.eval = history_;
  st.loader_state = train_loader_.save_state();
  parts_.optimizer.get_state(&st.m, &st.v, &st.master);
  // Only finite weights and moments become a checkpoint (every rank checks its
  // shard; all agree before any file exists): the last good one stays newest.
  const size_t bad = count_nonfinite(params) + count_nonfinite(st.m) + count_nonfinite(st.v) +
                     count_nonfinite(st.master);
  const double bad_all = all_reduce_value(comms_.host, static_cast<double>(bad), ReduceOp::kSum);
  if (bad_all > 0)
    throw std::runtime_error("checkpoint step " + std::to_string(step) + " not written: the weights or optimizer "
                             "moments hold " + std::to_string(static_cast<uint64_t>(bad_all)) +
                             " non-finite value(s); the last complete checkpoint in " + plan_.opts.output_dir +
                             " is kept");
  if (main_rank_)
    write_model_file(ckpt_->model_path(step), plan_.cfg, params,
                     plan_.opts.save_dtype == Precision::kBf16 ? kModelVersionBf16 : kModelVersionFp32);
  const FileDigest state_digest = write_state_file(ckpt_->state_path(step, dist_.rank), st);
  // Waits for every rank's files; rank 0 writes the marker with all their checksums.
  ckpt_->complete_checkpoint(comms_.host, step, plan_.opts.zero_stage, state_digest);
  saved_step_ = step;
  if (main_rank_ && is_milestone_step(step))
    ckpt_->mark_milestone(static_cast<uint64_t>(step), plan_.opts.milestone_every);
  if (main_rank_)
    ckpt_->prune(plan_.opts.keep_checkpoints, static_cast<uint64_t>(step),
                 plan_.opts.keep_best ? history_.best_step : -1);
  comms_.host.barrier();
  log_.info("checkpoint step " + std::to_string(step) + " -> " + plan_.opts.output_dir + " (" +
            std::to_string(seconds_since(t0)).substr(0, 5) + " s)");
}

// After the loop (its end, or early stopping): validation unless this step's
// just ran, a sample, the last checkpoint and the final model.
int TrainingRun::finish() {
  if (val_loader_ && evaluated_at_ != last_step_done_) validate(last_step_done_, /*at_end=*/true);
  if (plan_.opts.sample_every > 0) sample(last_step_done_);
  // (again at the step it resumed from: at this run's rank count)
  if (ckpt_ && saved_step_ != last_step_done_) save_checkpoint(last_step_done_);
  const int save_version = plan_.opts.save_dtype == Precision::kBf16 ? kModelVersionBf16 : kModelVersionFp32;
  // The last step's weights, on every rank when they are gathered from every rank (ZeRO-3).
  const bool write = ckpt_ || !plan_.opts.save_hf.empty();
  std::vector<float> last;
  if (write && (main_rank_ || parts_.model.forward_is_collective())) last = parts_.model.get_parameters();
  if (main_rank_ && write) {
    const std::vector<float> weights = final_weights(std::move(last));
    if (ckpt_) {
      write_model_file(ckpt_->final_model_path(), plan_.cfg, weights, save_version);
      log_.info("final model -> " + ckpt_->final_model_path());
    }
    if (!plan_.opts.save_hf.empty()) {
      require_finite(weights, "--save-hf " + plan_.opts.save_hf + ": the final weights");
      write_hf_checkpoint(plan_.opts.save_hf, plan_.cfg, weights,
                          plan_.opts.save_dtype == Precision::kBf16 ? HfDtype::kBF16 : HfDtype::kF32);
      log_.info("Hugging Face model -> " + plan_.opts.save_hf);
    }
  }
  if (nan_skips_)
    log_.info("skipped " + std::to_string(nan_skips_) + " step(s) with a non-finite loss or gradient norm");
  if (spikes_.skips())
    log_.info("skipped " + std::to_string(spikes_.skips()) + " step(s) as loss or gradient-norm spikes");
  return 0;
}

// Rank 0: the weights for DIR/model.bin and --save-hf: `last` (the last step's), or with
// --keep-best the best checkpoint's (HF's load_best_model_at_end) once its
// checksums verify, from --output-dir or else the --resume-from directory; the
// log says which.
std::vector<float> TrainingRun::final_weights(std::vector<float> last) {
  if (!plan_.opts.keep_best || history_.best_step < 0) return last;
  const uint64_t best = static_cast<uint64_t>(history_.best_step);
  if (history_.best_step == last_step_done_) {
    log_.info("best checkpoint: the last one, " + describe_best(history_));
    return last;
  }
  std::string why = "not in " + plan_.opts.output_dir;
  for (const CheckpointDir* dir : {ckpt_.get(), source_.get()}) {
    if (!dir || !file_exists(dir->done_path(best))) continue;
    why = dir->verify(best);
    if (!why.empty()) break;
    log_.info("best checkpoint: " + dir->model_path(best) + ", " + describe_best(history_) +
              "; the final model files hold its weights");
    return read_model_file(dir->model_path(best)).params;
  }
  log_.info("WARNING: --keep-best: the best checkpoint (" + describe_best(history_) + ") is unusable (" + why +
            "): the final model files hold the last step's weights");
  return last;
}

// A stop signal (every rank agreed): checkpoint the last completed step and exit
// kPreemptedExitCode, so a requeued job continues; without --output-dir nothing
// can continue: 128 + the signal.
int TrainingRun::stop() {
  const int sig = local_stop_signal();
  if (!ckpt_) {
    log_.info("stop requested by signal " + std::to_string(sig) + " after step " + std::to_string(last_step_done_) +
              "; no --output-dir: nothing saved (exit " + std::to_string(stopped_exit_code(sig)) + ")");
    return stopped_exit_code(sig);
  }
  log_.info("stop requested by signal " + std::to_string(sig) + "; checkpointing at step " +
            std::to_string(last_step_done_));
  if (!checkpoint_on_disk(last_step_done_)) save_checkpoint(last_step_done_);
  return kPreemptedExitCode;
}

}  // namespace gpt2
