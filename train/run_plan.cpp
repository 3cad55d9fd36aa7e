#include "train/run_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "model_io/hf_checkpoint.h"
#include "train/checkpoint.h"
#include "train/device_link.h"
#include "train/test_hooks.h"
#include "util/checked_io.h"

namespace gpt2 {

namespace {

// The GPU's model in a DeviceMemory's "GPU 0 (NVIDIA H100 80GB HBM3)".
std::string gpu_model(const DeviceMemory& m) {
  const size_t open = m.device.find('('), close = m.device.rfind(')');
  return open != std::string::npos && close > open ? m.device.substr(open + 1, close - open - 1) : m.device;
}

void refuse_bf16_on(const std::string& backend, const TrainOptions& o) {
  if (o.dtype == Precision::kBf16 && backend == "cpu")
    throw std::runtime_error("--dtype bf16 needs the CUDA backend (the CPU backend is the fp32 reference)");
  if (o.attention != "auto" && backend == "cpu")
    throw UsageError("--attention " + o.attention + " chooses among the CUDA backend's kernels; the CPU backend has "
                     "one attention (leave --attention auto)");
}

// Before a backend exists: what --attention cudnn can never serve.
void refuse_attention(const TrainOptions& o) {
  if (o.attention == "cudnn" && o.dtype != Precision::kBf16)
    throw UsageError("--attention cudnn: cuDNN's fused attention runs with --dtype bf16 only; use --attention flash "
                     "(or auto) for fp32");
}

}  // namespace

bool tf32_on(const TrainOptions& o) { return o.tf32 == "on" || (o.tf32 == "auto" && gpu_tf32_default()); }

std::string describe_precision(const TrainOptions& o, const Backend& backend) {
  if (backend.name() != "cuda") return "fp32";
  if (o.dtype == Precision::kBf16) return "bf16 storage with fp32 master weights and moments";
  return std::string("fp32 with TF32 GEMMs ") + (tf32_on(o) ? "on" : "off") + (o.tf32 == "auto" ? " (--tf32 auto)" : "");
}

GPT2Config requested_config(const std::string& model, const std::string& overrides, bool* from_file) {
  *from_file = false;
  if (names_preset(model)) {
    GPT2Config cfg = config_from_depth_name(model);
    if (!overrides.empty()) apply_config_overrides(cfg, overrides);
    return cfg;
  }
  if (!overrides.empty()) throw std::runtime_error("--config applies to dN presets, not to a model file (" + model + ")");
  *from_file = true;
  return read_model_config(model);
}

std::unique_ptr<SizingBackend> make_sizing_backend(const TrainOptions& o, bool on_host) {
  refuse_attention(o);
  std::unique_ptr<SizingBackend> be;
  if (o.device != Device::kCpu && !on_host) be = make_gpu_sizing_backend(o);
  if (!be) be = std::make_unique<SizingBackend>(cpu_backend_sizes(o.threads));
  refuse_bf16_on(be->name(), o);
  return be;
}

std::string resolve_init_from(const std::string& path) {
  const CheckpointDir dir(path);
  const std::vector<uint64_t> steps = dir.complete_steps();
  if (steps.empty()) {
    if (file_exists(path) || file_exists(path + "/config.json")) return path;
    throw std::runtime_error("--init-from " + path +
                             ": not a model file, a Hugging Face GPT-2 directory (config.json) or a checkpoint "
                             "directory (no DONE_* marker)");
  }
  const std::string model = dir.model_path(steps.back());
  const std::vector<FileDigest> files = dir.read_marker(steps.back()).files;  // the model file first (none: old marker)
  if (!files.empty() && !(digest_file(model) == files.front()))
    throw std::runtime_error("--init-from " + path + ": " + model + " does not match the checksum in its marker");
  return model;
}

std::unique_ptr<Backend> make_run_backend(const TrainOptions& o, const DistContext& dist) {
  refuse_attention(o);
  std::unique_ptr<Backend> backend = o.device == Device::kCpu ? nullptr : make_gpu_backend(o, dist);
  if (!backend) backend = make_cpu_backend(o.threads);
  refuse_bf16_on(backend->name(), o);
  return backend;
}

bool names_preset(const std::string& model) {
  return model.size() >= 2 && model[0] == 'd' && model.find('/') == std::string::npos && !file_exists(model);
}

std::string weights_path(const TrainOptions& o, const std::string& mode) {
  if (!o.init_from.empty()) return resolve_init_from(o.init_from);
  if (names_preset(o.model))
    throw std::runtime_error(mode + " needs trained weights: --model FILE|HF_DIR or --init-from PATH (got the preset '" +
                             o.model + "', which would be a random init)");
  return o.model;
}

TrainedModel::TrainedModel(const TrainOptions& o, const DistContext& dist, const std::string& mode)
    : backend(make_run_backend(o, dist)), path(weights_path(o, mode)), weights(read_model_file(path)) {}

GPT2& TrainedModel::load(int B, int T) {
  model = std::make_unique<GPT2>(*backend, weights.config, B, T, ModelOptions{.forward_only = true});
  model->set_parameters(weights.params);
  weights.params = {};
  return *model;
}

int grad_accum_for(int64_t total_batch, int64_t tokens_per_micro) {
  const std::string flag = "--total-batch-tokens " + std::to_string(total_batch);
  if (total_batch <= 0) throw UsageError(flag + " is not positive");
  if (total_batch % tokens_per_micro != 0)
    throw UsageError(flag + " is not a multiple of B*T*world = " + std::to_string(tokens_per_micro));
  const int64_t accum = total_batch / tokens_per_micro;
  if (accum > kMaxGradAccum)  // the micro-step count is an int
    throw UsageError(flag + " needs " + std::to_string(accum) +
                     " micro-batches of B*T*world = " + std::to_string(tokens_per_micro) +
                     " tokens per step; at most " + std::to_string(kMaxGradAccum) + " (raise -B or the rank count)");
  return static_cast<int>(accum);
}

PeakFlops run_peak(const TrainOptions& o, const Backend& backend) {
  if (o.peak_tflops > 0) return {o.peak_tflops, format_tflops(o.peak_tflops) + " (--peak-tflops)"};
  if (backend.is_host_memory()) return cpu_fma_peak(o.threads);
  const std::string gpu = gpu_model(backend.device_memory());
  const PeakKind kind = o.dtype == Precision::kBf16 ? PeakKind::kBf16 : tf32_on(o) ? PeakKind::kTf32 : PeakKind::kFp32;
  PeakFlops p = gpu_peak(gpu, kind);
  if (p.tflops <= 0) p.source = "no peak known for " + gpu + ": no MFU printed (--peak-tflops X gives one)";
  return p;
}

std::optional<TrainState> peek_resume_state(const TrainOptions& o, std::string* path) {
  if (!o.resume || o.output_dir.empty()) return std::nullopt;
  const CheckpointRef ref =
      o.resume_from.empty() ? CheckpointRef{o.output_dir, -1} : parse_checkpoint_ref(o.resume_from);
  const CheckpointDir dir(ref.dir);
  const std::vector<uint64_t> steps =
      ref.step < 0 ? dir.complete_steps() : std::vector<uint64_t>{static_cast<uint64_t>(ref.step)};
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    try {
      TrainState st = read_state_file(dir.state_path(*it, 0), /*header_only=*/true);
      *path = dir.state_path(*it, 0);
      return st;
    } catch (const std::exception&) {
      // unreadable: the verification of --resume reports it (or falls back)
    }
  }
  return std::nullopt;
}

int capped_seq_len(const TrainOptions& o, const GPT2Config& cfg, std::string* note) {
  note->clear();
  if (o.seq_len <= cfg.max_seq_len) return o.seq_len;
  *note = "note: --seq-len " + std::to_string(o.seq_len) + " capped to the model's max_seq " +
          std::to_string(cfg.max_seq_len);
  return cfg.max_seq_len;
}

void check_resumed_batch(const TrainState& st, const BatchShape& s, int world, const std::string& source) {
  const int64_t tokens_per_micro = static_cast<int64_t>(s.B) * s.T * world;
  const int64_t total = st.total_batch_tokens;
  if (total == s.total_batch && total % tokens_per_micro != 0)
    throw std::runtime_error("--resume: the checkpoint's global batch is " + std::to_string(total) +
                             " tokens per step, not a multiple of B*T*world = " + std::to_string(s.B) + "*" +
                             std::to_string(s.T) + "*" + std::to_string(world) + " = " +
                             std::to_string(tokens_per_micro) + " (" + source + " has B=" +
                             std::to_string(st.batch_size) + " T=" + std::to_string(st.seq_len) + " at world " +
                             std::to_string(st.world) + "; B and T must stay the same)");
  if (st.batch_size != s.B || st.seq_len != s.T || total != s.total_batch)
    throw std::runtime_error("--resume: " + source + " was written with B=" + std::to_string(st.batch_size) +
                             " T=" + std::to_string(st.seq_len) + " total-batch-tokens=" + std::to_string(total) +
                             "; this run has B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) +
                             " total-batch-tokens=" + std::to_string(s.total_batch));
}

DataLoaderOptions train_loader_options(const TrainOptions& o, const BatchShape& s, const DistContext& dist,
                                       int vocab_size) {
  return {.pattern = o.train_data,
          .B = s.B,
          .T = s.T,
          .rank = dist.rank,
          .world = dist.world,
          .grad_accum = s.grad_accum,
          .shuffle = !o.no_shuffle,
          .seed = o.seed,
          .vocab_size = static_cast<uint32_t>(vocab_size)};
}

RunDropout run_dropout(const TrainOptions& o, const std::string& model) {
  const bool hf = !names_preset(model) && is_hf_checkpoint_dir(model);
  // a rate --dropout sets is not read from config.json (so not judged there either)
  const DropoutRates given{o.dropout_embd, o.dropout_resid, o.dropout_attn};
  const DropoutRates from_model = hf ? read_hf_dropout(model, given) : DropoutRates{};
  const char* const names[3] = {"embd", "resid", "attn"};
  const float flags[3] = {given.embd, given.resid, given.attn};
  const float models[3] = {from_model.embd, from_model.resid, from_model.attn};
  RunDropout d;
  float* const rates[3] = {&d.rates.embd, &d.rates.resid, &d.rates.attn};
  std::string text, flagged, modelled;
  for (int i = 0; i < 3; i++) {
    *rates[i] = flags[i] >= 0.0f ? flags[i] : models[i];
    text += std::string(i ? ", " : "") + names[i] + " " + format_number(*rates[i]);
    std::string& list = flags[i] >= 0.0f ? flagged : modelled;
    list += (list.empty() ? "" : ", ") + std::string(names[i]);
  }
  // where the rates --dropout does not set come from
  const std::string source = hf                    ? "from " + model + "/config.json"
                             : names_preset(model) ? "none in a random init"
                                                   : "none in an llm.c model file";
  if (modelled.empty()) d.described = text + " (--dropout)";
  else if (flagged.empty()) d.described = text + " (" + source + (hf ? "" : "; --dropout sets them") + ")";
  else d.described = text + " (" + flagged + ": --dropout; " + modelled + ": " + source + ")";
  return d;
}

size_t count_nonfinite(const std::vector<float>& v, size_t* first) {
  size_t bad = 0;
  for (size_t i = 0; i < v.size(); i++)
    if (!std::isfinite(v[i]) && bad++ == 0 && first) *first = i;
  return bad;
}

void require_finite(const std::vector<float>& v, const std::string& what) {
  size_t first = 0;
  if (const size_t bad = count_nonfinite(v, &first))
    throw std::runtime_error(what + ": " + std::to_string(bad) + " non-finite value(s), the first at index " +
                             std::to_string(first));
}

RunLength run_length(int max_steps, double epochs, int64_t steps_per_epoch) {
  std::ostringstream why;
  if (max_steps > 0) {
    why << "--max-steps " << max_steps;
    if (epochs > 0) why << " (overrides --epochs " << epochs << ", as HF's max_steps overrides num_train_epochs)";
    return {max_steps, why.str()};
  }
  if (epochs <= 0)
    return {static_cast<int>(std::min<int64_t>(steps_per_epoch, INT32_MAX)), "one epoch (--max-steps -1)"};
  // A product that rounding put a hair above a whole number is that number
  // (0.3 x 10 must be 3 steps, not 4).
  const double exact = epochs * static_cast<double>(steps_per_epoch);
  const double steps = std::ceil(exact - 1e-9 * exact);
  why << "--epochs " << epochs << " = ceil(" << epochs << " x " << steps_per_epoch << " steps/epoch)";
  if (steps < 1)
    throw std::runtime_error(why.str() + " is no step: the training data holds " + std::to_string(steps_per_epoch) +
                             " steps per epoch at this global batch");
  if (steps > static_cast<double>(1 << 30))
    throw std::runtime_error(why.str() + " is more than 2^30 steps");
  return {static_cast<int>(steps), why.str()};
}

RunPlan plan_training_run(const TrainOptions& o, int world, TrainLogger& log) {
  RunPlan p(o);
  // --init-from resolved: the run loads weights only from it, exactly like --model FILE|HF_DIR
  p.model = o.init_from.empty() ? o.model : resolve_init_from(o.init_from);
  p.cfg = requested_config(p.model, o.config_overrides, &p.cfg_from_file);
  p.layout = ParamLayout::for_config(p.cfg, test_wte_chunk_rows());
  p.resume_state = peek_resume_state(o, &p.resume_state_path);
  return p.at_world(world, log);
}

RunPlan RunPlan::at_world(int w, TrainLogger& log) const {
  RunPlan p = *this;
  p.world = w;
  BatchShape& s = p.shape;
  s.B = opts.batch_size;
  std::string cap_note;
  s.T = capped_seq_len(opts, cfg, &cap_note);
  if (!cap_note.empty()) log.info(cap_note);
  const int64_t tokens_per_micro = static_cast<int64_t>(s.B) * s.T * w;
  s.total_batch = opts.total_batch_tokens < 0 ? tokens_per_micro : opts.total_batch_tokens;
  if (resume_state) {
    const bool adopted = opts.total_batch_tokens < 0 && resume_state->total_batch_tokens > 0;
    if (adopted) s.total_batch = resume_state->total_batch_tokens;
    check_resumed_batch(*resume_state, s, w, resume_state_path);
    if (adopted && s.total_batch != tokens_per_micro)
      log.info("--resume: " + std::to_string(s.total_batch) + " tokens per step, as in the checkpoint (grad_accum " +
               std::to_string(s.total_batch / tokens_per_micro) + " at world " + std::to_string(w) + ")");
  }
  s.grad_accum = grad_accum_for(s.total_batch, tokens_per_micro);
  return p;
}

// The CPU backend's optimizer is on the host already: offloading it means nothing.
static std::unique_ptr<Backend> checked_offload(const Backend& backend, std::unique_ptr<Backend> host, bool offload) {
  if (offload && backend.is_host_memory())
    throw UsageError("--offload-optimizer cpu moves the optimizer off the GPU; the " + backend.name() +
                     " backend's is on the CPU already");
  if (offload && !host) throw std::logic_error("--offload-optimizer cpu without a host backend");
  return offload ? std::move(host) : nullptr;
}

RunAssembly::RunAssembly(Backend& backend, Communicator& buffers, const RunPlan& plan,
                         std::unique_ptr<Backend> host)
    : offload_host(checked_offload(backend, std::move(host), plan.opts.offload_optimizer)),
      dp(backend, buffers, plan.layout, plan.opts.zero_stage),
      model(backend, plan.cfg, plan.shape.B, plan.shape.T, dp.model_options(plan.opts.recompute)),
      optimizer(backend, plan.layout, dp.opt_begin(), dp.opt_end(), offload_host.get()) {
  optimizer.reserve_master(dp.shard_params(model));
  model.reserve_train_losses(plan.shape.grad_accum);
}

}  // namespace gpt2
