#include "train/run_setup.h"

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "train/checkpoint.h"
#include "train/device_link.h"
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
}

}  // namespace

bool tf32_on(const TrainOptions& o) { return o.tf32 == "on" || (o.tf32 == "auto" && gpu_tf32_default()); }

std::string describe_precision(const TrainOptions& o, const Backend& backend) {
  if (backend.name() != "cuda") return "fp32";
  if (o.dtype == Precision::kBf16) return "bf16 storage with fp32 master weights and moments";
  return std::string("fp32 with TF32 GEMMs ") + (tf32_on(o) ? "on" : "off") + (o.tf32 == "auto" ? " (--tf32 auto)" : "");
}

GPT2Config requested_config(const TrainOptions& o, bool* from_file) {
  *from_file = false;
  if (names_preset(o.model)) {
    GPT2Config cfg = config_from_depth_name(o.model);
    if (!o.config_overrides.empty()) apply_config_overrides(cfg, o.config_overrides);
    return cfg;
  }
  if (!o.config_overrides.empty())
    throw std::runtime_error("--config applies to dN presets, not to a model file (" + o.model + ")");
  *from_file = true;
  return read_model_config(o.model);
}

std::unique_ptr<SizingBackend> make_sizing_backend(const TrainOptions& o) {
  std::unique_ptr<SizingBackend> be;
  if (o.device != Device::kCpu) be = make_gpu_sizing_backend(o);
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
  const uint64_t step = steps.back();
  const std::string model = dir.model_path(step);
  const std::string base = base_name(model);
  for (const FileDigest& want : dir.read_marker(step).files)
    if (want.name == base && !(digest_file(model) == want))
      throw std::runtime_error("--init-from " + path + ": " + model + " does not match the checksum in its marker");
  return model;
}

std::unique_ptr<Backend> make_run_backend(const TrainOptions& o, const DistContext& dist) {
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
  if (!o.config_overrides.empty()) throw std::runtime_error("--config applies to dN presets, not to " + mode);
  return o.model;
}

int grad_accum_for(int64_t total_batch, int64_t tokens_per_micro) {
  if (total_batch <= 0) throw UsageError("--total-batch-tokens " + std::to_string(total_batch) + " is not positive");
  if (total_batch % tokens_per_micro != 0)
    throw UsageError("--total-batch-tokens " + std::to_string(total_batch) +
                     " is not a multiple of B*T*world = " + std::to_string(tokens_per_micro));
  const int64_t accum = total_batch / tokens_per_micro;
  if (accum > kMaxGradAccum)  // (was: cast to int, 2^32 + 1 micro-batches ran as 1)
    throw UsageError("--total-batch-tokens " + std::to_string(total_batch) + " needs " +
                     std::to_string(accum) + " micro-batches of B*T*world = " +
                     std::to_string(tokens_per_micro) + " tokens per step; at most " +
                     std::to_string(kMaxGradAccum) + " (raise -B or the rank count)");
  return static_cast<int>(accum);
}

PeakFlops run_peak(const TrainOptions& o, const Backend& backend) {
  if (o.peak_tflops > 0) return {o.peak_tflops, format_tflops(o.peak_tflops) + " (--peak-tflops)"};
  if (backend.is_host_memory()) {
    const double gflops = measure_cpu_fma_gflops(o.threads);
    return {gflops / 1000.0, format_tflops(gflops / 1000.0) + " (fp32 FMA peak of this CPU, measured at start-up)"};
  }
  const std::string gpu = gpu_model(backend.device_memory());
  const PeakKind kind = o.dtype == Precision::kBf16 ? PeakKind::kBf16 : tf32_on(o) ? PeakKind::kTf32 : PeakKind::kFp32;
  PeakFlops p = gpu_peak(gpu, kind);
  if (p.tflops <= 0) p.source = "no peak known for " + gpu + ": no MFU printed (--peak-tflops X gives one)";
  return p;
}

}  // namespace gpt2
