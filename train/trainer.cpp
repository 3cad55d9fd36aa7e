#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "backend/backend.h"
#ifdef GPT2_WITH_CUDA
#include "kernels/cuda_backend.h"
#endif
#include "dataloader/dataloader.h"
#include "distributed/comm.h"
#include "distributed/preempt.h"
#include "model/gpt2.h"
#include "model/model_file.h"
#include "tokenizer/tokenizer.h"
#include "train/checkpoint.h"
#include "train/data_parallel.h"
#include "train/device_choice.h"
#include "train/logger.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"
#include "train/sampler.h"
#include "util/checked_io.h"
#include "util/rng.h"

namespace gpt2 {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// --device: cpu; cuda (an error without a GPU); auto = CUDA when this binary
// has the CUDA backend and a GPU is visible, else CPU. Each rank takes the GPU
// of its local rank; more ranks on a node than GPUs is refused, never wrapped.
std::unique_ptr<Backend> make_backend(const TrainOptions& o, const DistContext& dist) {
  if (o.device == "cpu") return make_cpu_backend(o.threads);
#ifdef GPT2_WITH_CUDA
  const int gpus = cuda_device_count();
  if (gpus > 0) {
    const int device = cuda_device_for_rank(dist, gpus, std::getenv("CUDA_VISIBLE_DEVICES"));
    if (dist.world > 1)
      throw std::runtime_error("multi-rank training on the CUDA backend needs the NCCL communicator, which is "
                               "not implemented yet (use --device cpu for multi-rank runs)");
    CudaBackendOptions co;
    co.bf16 = o.dtype == "bf16";
    return make_cuda_backend(device, co);
  }
  if (o.device == "cuda") throw std::runtime_error("--device cuda: no CUDA device is visible");
#else
  if (o.device == "cuda")
    throw std::runtime_error("--device cuda: this binary was built without the CUDA backend (nvcc not found at build time)");
#endif
  return make_cpu_backend(o.threads);
}

// The model config the options ask for (a preset plus overrides, or a file's header).
GPT2Config requested_config(const TrainOptions& o, bool* from_file) {
  *from_file = false;
  if (o.model.size() >= 2 && o.model[0] == 'd' && o.model.find('/') == std::string::npos &&
      !file_exists(o.model)) {
    GPT2Config cfg = config_from_depth_name(o.model);
    if (!o.config_overrides.empty()) apply_config_overrides(cfg, o.config_overrides);
    return cfg;
  }
  if (!o.config_overrides.empty())
    throw std::runtime_error("--config applies to dN presets, not to a model file (" + o.model + ")");
  *from_file = true;
  return read_model_config(o.model);
}

std::string join_tokens(const std::vector<int32_t>& ids) {
  std::ostringstream s;
  for (size_t i = 0; i < ids.size(); i++) s << (i ? " " : "") << ids[i];
  return s.str();
}

}  // namespace

int run_training(const TrainOptions& opts, const DistContext& dist, Communicator& comm) {
  const bool main_rank = dist.is_main();
  TrainLogger log(main_rank, opts.log_jsonl);
  const int world = dist.world, rank = dist.rank;

  // ---- backend and model ----------------------------------------------------
  std::unique_ptr<Backend> backend = make_backend(opts, dist);
  if (opts.dtype == "bf16" && backend->name() == "cpu")
    throw std::runtime_error("--dtype bf16 needs the CUDA backend (the CPU backend is the fp32 reference)");
  bool from_file = false;
  const GPT2Config cfg = requested_config(opts, &from_file);
  const int B = opts.batch_size;
  const int T = std::min(opts.seq_len, cfg.max_seq_len);
  if (opts.seq_len > cfg.max_seq_len)
    log.info("note: --seq-len " + std::to_string(opts.seq_len) + " capped to the model's max_seq " +
             std::to_string(cfg.max_seq_len));
  const int64_t tokens_per_micro = static_cast<int64_t>(B) * T * world;
  const int64_t total_batch = opts.total_batch_tokens < 0 ? tokens_per_micro : opts.total_batch_tokens;
  if (total_batch % tokens_per_micro != 0)
    throw std::runtime_error("--total-batch-tokens " + std::to_string(total_batch) + " is not a multiple of B*T*world = " +
                             std::to_string(tokens_per_micro));
  const int grad_accum = static_cast<int>(total_batch / tokens_per_micro);

  const ParamLayout layout = ParamLayout::for_config(cfg);
  const size_t P = layout.total;
  DataParallel dp(*backend, comm, layout, opts.zero_stage);
  GPT2 model(*backend, cfg, B, T, dp.grad_mode(), dp.param_capacity());

  // ---- data -------------------------------------------------------------------
  DataLoaderOptions train_lo;
  train_lo.pattern = opts.train_data;
  train_lo.B = B;
  train_lo.T = T;
  train_lo.rank = rank;
  train_lo.world = world;
  train_lo.grad_accum = grad_accum;
  train_lo.shuffle = !opts.no_shuffle;
  train_lo.seed = opts.seed;
  train_lo.vocab_size = cfg.vocab_size;
  DataLoader train_loader(train_lo);
  std::unique_ptr<DataLoader> val_loader;
  if (opts.val_every > 0) {
    DataLoaderOptions vlo = train_lo;
    vlo.pattern = opts.val_data;
    vlo.grad_accum = 1;
    vlo.shuffle = false;
    val_loader = std::make_unique<DataLoader>(vlo);
  }
  const int64_t steps_per_epoch = static_cast<int64_t>(train_loader.samples_per_epoch()) / (world * grad_accum);
  const int total_steps = opts.max_steps > 0 ? opts.max_steps : static_cast<int>(steps_per_epoch);
  if (total_steps < 1) throw std::runtime_error(opts.train_data + ": not enough tokens for one optimizer step");

  // ---- optimizer: this rank's ZeRO shard (everything at stage 0) -------------
  AdamW optimizer(*backend, layout, dp.opt_begin(), dp.opt_end());
  AdamWHyper hyper;
  hyper.beta1 = opts.beta1;
  hyper.beta2 = opts.beta2;
  hyper.eps = opts.adam_eps;
  hyper.weight_decay = opts.weight_decay;
  LrSchedule schedule;
  schedule.kind = LrSchedule::parse_kind(opts.lr_schedule);
  schedule.max_lr = opts.lr;
  schedule.warmup_steps = opts.warmup_steps;
  schedule.total_steps = total_steps;
  schedule.final_frac = opts.final_lr_frac;
  schedule.wsd_decay_frac = opts.wsd_decay_frac;

  // ---- tokenizer (sampling only) -------------------------------------------
  std::unique_ptr<Tokenizer> tokenizer;
  try {
    tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_default_location());
  } catch (const std::exception& e) {
    if (!opts.prompt.empty()) throw std::runtime_error(std::string("--prompt needs the GPT-2 vocabulary: ") + e.what());
    log.info(std::string("note: no GPT-2 vocabulary (") + e.what() + "); samples print token ids");
  }
  std::vector<int32_t> sample_context{static_cast<int32_t>(Tokenizer::kEndOfText)};
  if (!opts.prompt.empty()) {
    sample_context.clear();
    for (uint32_t id : tokenizer->encode(opts.prompt)) sample_context.push_back(static_cast<int32_t>(id));
  }

  // ---- init or resume --------------------------------------------------------
  std::unique_ptr<CheckpointDir> ckpt;
  if (!opts.output_dir.empty()) {
    if (main_rank) make_directories(opts.output_dir);
    comm.barrier();
    ckpt = std::make_unique<CheckpointDir>(opts.output_dir);
  }
  int start_step = 0;
  uint64_t nan_skips = 0;
  Rng sample_rng(opts.seed ^ 0x5A4D504C45ULL);
  std::vector<uint64_t> done = ckpt && opts.resume ? ckpt->complete_steps() : std::vector<uint64_t>{};
  if (!done.empty()) {
    const uint64_t step = done.back();
    uint32_t old_world = 0, old_stage = 0;
    ckpt->read_marker(step, &old_world, &old_stage);
    ModelFile mf = read_model_file(ckpt->model_path(step));
    if (mf.config != cfg)
      throw std::runtime_error("--resume: " + ckpt->model_path(step) + " has config [" + mf.config.describe() +
                               "] but this run is configured as [" + cfg.describe() + "]");
    TrainState st = read_state_file(ckpt->state_path(step, 0));
    if (st.batch_size != B || st.seq_len != T || st.total_batch_tokens != total_batch)
      throw std::runtime_error("--resume: " + ckpt->state_path(step, 0) + " was written with B=" +
                               std::to_string(st.batch_size) + " T=" + std::to_string(st.seq_len) +
                               " total-batch-tokens=" + std::to_string(st.total_batch_tokens) +
                               "; this run has B=" + std::to_string(B) + " T=" + std::to_string(T) +
                               " total-batch-tokens=" + std::to_string(total_batch));
    model.set_parameters(mf.params);
    std::vector<float> m, v, master;
    load_resharded_moments(*ckpt, step, old_world, optimizer.begin(), optimizer.end(), &m, &v, &master);
    optimizer.attach_master(model.params());
    optimizer.set_state(m, v, master);
    train_loader.load_state(st.loader_state);
    sample_rng.set_state(st.sample_rng);
    nan_skips = st.nan_skips;
    start_step = static_cast<int>(step);
    log.info("resumed from " + ckpt->model_path(step) + " at step " + std::to_string(step) + " (written by " +
             std::to_string(old_world) + " rank(s))");
  } else {
    if (opts.resume) log.info("--resume: no complete checkpoint in " + opts.output_dir + "; starting fresh");
    if (from_file) {
      model.set_parameters(read_model_file(opts.model).params);
    } else {
      model.init_random(opts.seed);
    }
    optimizer.attach_master(model.params());
  }

  // ---- banner -----------------------------------------------------------------
  if (main_rank) {
    log.info("+----------------------------------------------------------------------");
    for (const auto& kv : describe_train_options(opts)) {
      char line[512];
      std::snprintf(line, sizeof(line), "| %-20s %s", kv.first.c_str(), kv.second.c_str());
      log.info(line);
    }
    log.info("+----------------------------------------------------------------------");
    log.info("| model        " + cfg.describe() + (from_file ? " from " + opts.model : std::string(" (random init)")));
    log.info("| parameters   " + std::to_string(P) + " (" + format_bytes(P * 4.0) + " fp32)");
    log.info("| backend      " + backend->name() + ", " + dist.describe());
    log.info("| batch        B=" + std::to_string(B) + " T=" + std::to_string(T) + " world=" + std::to_string(world) +
             " grad_accum=" + std::to_string(grad_accum) + " -> " + std::to_string(total_batch) + " tokens/step");
    log.info("| data         " + std::to_string(train_loader.num_shards()) + " train shard(s), " +
             std::to_string(train_loader.total_tokens()) + " tokens, " + std::to_string(steps_per_epoch) +
             " steps/epoch; training " + std::to_string(total_steps) + " steps");
    log.info("| zero         stage " + std::to_string(opts.zero_stage) + ", shard of rank 0: [" +
             std::to_string(dp.opt_begin()) + ", " + std::to_string(dp.opt_end()) + ") of " + std::to_string(P) +
             " (+" + std::to_string(dp.plan().padding()) + " padding)");
    log.info("| memory/rank  params " + format_bytes(model.params().bytes()) + ", grads " +
             format_bytes(static_cast<double>(dp.gradient_bytes(model))) + ", optimizer " +
             format_bytes(static_cast<double>(optimizer.state_bytes())) + ", activations " +
             format_bytes(static_cast<double>(model.activation_bytes())));
    log.info("+----------------------------------------------------------------------");
  }

  // ---- helpers of the loop ------------------------------------------------------
  const size_t NT = static_cast<size_t>(B) * T;
  std::vector<int32_t> inputs(NT), targets(NT);
  auto evaluate = [&]() {
    val_loader->reset();
    double sum = 0.0;
    for (int i = 0; i < opts.val_steps; i++) {
      val_loader->next_batch(inputs.data(), targets.data());
      sum += model.forward(inputs.data(), targets.data(), B, T);
    }
    double mean = sum / opts.val_steps;
    return all_reduce_value(comm, mean, ReduceOp::kAvg);
  };
  auto sample = [&](int step) {
    if (!main_rank) return;  // sampling is rank 0's progress report
    std::vector<int32_t> ids = generate(model, sample_context, opts.gen_tokens, opts.temperature, opts.top_k, sample_rng);
    std::string text;
    if (tokenizer) {
      std::vector<uint32_t> u(ids.begin(), ids.end());
      text = (opts.prompt.empty() ? "" : opts.prompt) + tokenizer->decode(u);
    } else {
      text = join_tokens(ids);
    }
    log.sample(step, text);
  };
  auto save_checkpoint = [&](int step) {
    if (!ckpt) return;
    // A device fault (asynchronous on a GPU) throws here, before any file of this
    // checkpoint exists: a faulted context never writes one.
    backend->synchronize();
    const auto t0 = Clock::now();
    std::vector<float> params = model.get_parameters();
    if (main_rank)
      write_model_file(ckpt->model_path(step), cfg, params,
                       opts.save_dtype == "bf16" ? kModelVersionBf16 : kModelVersionFp32);
    TrainState st;
    st.step = step;
    st.config = cfg;
    st.world = world;
    st.rank = rank;
    st.zero_stage = opts.zero_stage;
    st.shard_begin = optimizer.begin();
    st.shard_end = optimizer.end();
    st.num_params = P;
    st.batch_size = B;
    st.seq_len = T;
    st.total_batch_tokens = total_batch;
    st.seed = opts.seed;
    st.sample_rng = sample_rng.state();
    st.nan_skips = nan_skips;
    st.loader_state = train_loader.save_state();
    optimizer.get_state(&st.m, &st.v, &st.master);
    write_state_file(ckpt->state_path(step, rank), st);
    comm.barrier();  // every rank's files are durable before the marker
    if (main_rank) {
      ckpt->write_marker(step, world, opts.zero_stage);
      ckpt->prune(opts.keep_checkpoints);
    }
    comm.barrier();
    log.info("checkpoint step " + std::to_string(step) + " -> " + opts.output_dir + " (" +
             std::to_string(seconds_since(t0)).substr(0, 5) + " s)");
  };

  // ---- the loop -------------------------------------------------------------------
  const float dloss_scale = 1.0f / static_cast<float>(NT * grad_accum);
  const bool stop_on_nan = opts.on_nan == "stop";
  double time_sum = 0.0;
  int timed_steps = 0;
  int last_step_done = start_step;
  bool preempted = false;
  for (int step = start_step; step < total_steps; step++) {
    if (should_stop(comm)) {
      preempted = true;
      break;
    }
    if (val_loader && step % opts.val_every == 0) log.val(step, evaluate());
    if (opts.sample_every > 0 && step > start_step && step % opts.sample_every == 0) sample(step);

    const auto t0 = Clock::now();
    comm.reset_stats();
    dp.begin_step();
    model.zero_grad();
    const auto hook = dp.backward_hook(model);
    double loss = 0.0;
    for (int micro = 0; micro < grad_accum; micro++) {
      train_loader.next_batch(inputs.data(), targets.data());
      loss += model.forward(inputs.data(), targets.data(), B, T, true, dloss_scale);
      model.backward(hook);
    }
    loss = all_reduce_value(comm, loss / grad_accum, ReduceOp::kAvg);
    dp.reduce_gradients(model);
    const double norm = dp.grad_norm(model);
    const float lr = schedule.at(step);
    const bool finite = std::isfinite(loss) && std::isfinite(norm);
    if (!finite && stop_on_nan)
      throw std::runtime_error("non-finite " + std::string(std::isfinite(loss) ? "gradient norm" : "loss") +
                               " at step " + std::to_string(step + 1) +
                               " (weights not updated; last checkpoint kept; --on-nan skip to continue)");
    if (finite) {
      const float grad_scale = (opts.grad_clip > 0.0f && norm > opts.grad_clip) ? static_cast<float>(opts.grad_clip / norm) : 1.0f;
      optimizer.step(model.params(), dp.shard_grads(model), lr, grad_scale, step + 1, hyper);
      dp.gather_params(model);
    } else {
      nan_skips++;
    }
    backend->synchronize();
    const double dt = seconds_since(t0);
    if (step > start_step) {  // the first step warms caches and is not representative
      time_sum += dt;
      timed_steps++;
    }
    StepRecord rec;
    rec.step = step + 1;
    rec.total_steps = total_steps;
    rec.loss = loss;
    rec.grad_norm = norm;
    rec.lr = lr;
    rec.ms = dt * 1000.0;
    rec.tok_per_s = total_batch / dt;
    rec.eta_s = (timed_steps ? time_sum / timed_steps : dt) * (total_steps - step - 1);
    rec.skipped = !finite;
    for (const CommTraffic& t : comm.stats()) rec.comm_bytes += t.sent_bytes;
    log.step(rec);
    last_step_done = step + 1;
    if (opts.checkpoint_every > 0 && last_step_done % opts.checkpoint_every == 0 && last_step_done < total_steps)
      save_checkpoint(last_step_done);
  }

  if (preempted) {
    log.info("stop requested by signal " + std::to_string(local_stop_signal()) + "; checkpointing at step " +
             std::to_string(last_step_done));
    if (last_step_done > start_step || done.empty()) save_checkpoint(last_step_done);
    return kPreemptedExitCode;
  }
  if (val_loader) log.val(last_step_done, evaluate());
  if (opts.sample_every > 0) sample(last_step_done);
  if (ckpt) {
    save_checkpoint(last_step_done);
    if (main_rank) {
      write_model_file(ckpt->final_model_path(), cfg, model.get_parameters(),
                       opts.save_dtype == "bf16" ? kModelVersionBf16 : kModelVersionFp32);
      log.info("final model -> " + ckpt->final_model_path());
    }
  }
  if (nan_skips) log.info("skipped " + std::to_string(nan_skips) + " step(s) with a non-finite loss or gradient norm");
  return 0;
}

}  // namespace gpt2
