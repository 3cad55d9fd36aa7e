// Where a CPU training step's time goes: runs train_gpt2cu's step (training
// forward, backward into flat gradients, the losses, the gradient norm and
// clip scale, AdamW; the work of dev/train/bench_train_step.cpp) on the CPU
// backend behind dev/cpu/timing_backend.h, and prints the median step's per-op
// table (dev/cpu/step_profile.h) against the CPU's fp32 FMA peak (metrics/mfu.h,
// what the trainer's banner measures) and a measured memory bandwidth
// (dev/cpu/memory_bandwidth.h).
//   profile_cpu_step --model d12 [--config K=V,..] -B 4 -T 64 [--threads N] [--steps 5] [--warmup 2]
// `make profile-cpu` runs d12 B=4 T=64 and the quick start's model.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/ops.h"
#include "dev/cpu/memory_bandwidth.h"
#include "dev/cpu/step_profile.h"
#include "dev/cpu/timing_backend.h"
#include "model/config.h"
#include "model/gpt2.h"
#include "metrics/mfu.h"
#include "train/optimizer.h"
#include "util/rng.h"

namespace {

using namespace gpt2;

struct Options {
  std::string model = "d12", overrides;
  int B = 4, T = 64, steps = 5, warmup = 2, threads = 0;
};

const char* kUsage =
    "usage: profile_cpu_step [--model dN] [--config K=V,..] [-B 4] [-T 64] [--threads N] [--steps 5] "
    "[--warmup 2]\n";

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--model") o.model = next();
    else if (a == "--config") o.overrides = next();
    else if (a == "-B") o.B = std::atoi(next());
    else if (a == "-T") o.T = std::atoi(next());
    else if (a == "--steps") o.steps = std::atoi(next());
    else if (a == "--warmup") o.warmup = std::atoi(next());
    else if (a == "--threads") o.threads = std::atoi(next());
    else if (a == "-h" || a == "--help") { std::fputs(kUsage, stdout); std::exit(0); }
    else throw std::runtime_error("unknown option '" + a + "'\n" + kUsage);
  }
  if (o.B < 1 || o.T < 1 || o.steps < 1 || o.warmup < 0)
    throw std::runtime_error("-B, -T and --steps must be >= 1, --warmup >= 0");
  return o;
}

struct Run {
  size_t params = 0;
  std::vector<cpuprof::Step> steps;  // the measured ones, each with the ops it called
};

// Runs warmup + steps training steps.
Run run_steps(const Options& o, const GPT2Config& cfg, int threads) {
  auto cpu = make_cpu_backend(threads);
  cpuprof::TimingBackend be(*cpu);
  GPT2 m(be, cfg, o.B, o.T);
  m.init_random(1);
  Tensor grads = be.alloc(m.param_capacity(), BufferRole::kGrads);
  Tensor clip = be.alloc(2, BufferRole::kScalar64);  // the norm and the clip scale, as the trainer keeps them
  AdamW opt(be, m.layout(), 0, m.num_parameters());
  const AdamWHyper h;
  std::vector<int32_t> x(static_cast<size_t>(o.B) * o.T), y(x.size());
  Rng rng(5);
  for (auto& t : x) t = static_cast<int32_t>(rng.next_u64() % cfg.vocab_size);
  for (auto& t : y) t = static_cast<int32_t>(rng.next_u64() % cfg.vocab_size);
  const double model_flops = flops_per_token(cfg, o.T, m.num_parameters()) * o.B * o.T;
  Run run{m.num_parameters(), {}};
  for (int s = 0; s < o.warmup + o.steps; s++) {
    be.reset();
    const auto t0 = std::chrono::steady_clock::now();
    be.zero(grads);
    m.train_forward_deferred_loss(x.data(), y.data(), o.B, o.T, 1.0f / (o.B * o.T));
    m.backward(grads);
    m.collect_train_losses();
    be.sum_squares_into(clip, grads);
    be.clip_scale(clip, 1.0f);
    opt.step(m.params(), grads, 1e-4f, clip, s + 1, h);
    be.synchronize();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s >= o.warmup) run.steps.push_back({be.totals(), dt, model_flops});
  }
  be.free(clip);
  be.free(grads);
  return run;
}

void print_report(const Options& o, const GPT2Config& cfg, int threads, Run run, const PeakFlops& peak,
                  const cpuprof::Bandwidth& bw) {
  std::vector<cpuprof::Step>& steps = run.steps;
  std::sort(steps.begin(), steps.end(), [](const auto& a, const auto& b) { return a.seconds < b.seconds; });
  const cpuprof::Step& median = steps[(steps.size() - 1) / 2];
  const double tok_s = o.B * o.T / median.seconds;
  const double mfu_pct = 100 * median.model_flops / median.seconds / (peak.tflops * 1e12);
  const std::string limit = fma_isa_limit();
  std::printf("CPU training step: --model %s%s%s, %.2fM parameters, -B %d -T %d, %d thread%s, GEMMs on %s%s%s\n",
              o.model.c_str(), o.overrides.empty() ? "" : " --config ", o.overrides.c_str(), run.params / 1e6, o.B, o.T,
              threads, threads == 1 ? "" : "s", cpu::gemm_library_name(cpu::gemm_library_from_env()),
              limit.empty() ? "" : " under ", limit.c_str());
  std::printf("  %s\n", cfg.describe().c_str());
  std::printf("peak:      %s\n", peak.source.c_str());
  std::printf("bandwidth: %.1f GB/s (%s)\n", bw.gbps, bw.source.c_str());
  std::printf("step:      %.1f ms (median of %zu after %d warm-up; fastest %.1f ms), %.0f tok/s, MFU %.1f%%\n\n",
              median.seconds * 1e3, steps.size(), o.warmup, steps.front().seconds * 1e3, tok_s, mfu_pct);
  std::fputs(cpuprof::profile_table(median, {peak.tflops * 1e3, bw.gbps}).c_str(), stdout);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    GPT2Config cfg = config_from_depth_name(o.model);
    if (!o.overrides.empty()) apply_config_overrides(cfg, o.overrides);
    cfg.validate("profile_cpu_step");
    const int threads = o.threads > 0 ? o.threads : omp_get_max_threads();
    const PeakFlops peak = cpu_fma_peak(threads);
    const cpuprof::Bandwidth bw = cpuprof::measure_triad_bandwidth(threads);
    print_report(o, cfg, threads, run_steps(o, cfg, threads), peak, bw);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
