// Training-step throughput of the CPU backend: forward + backward + AdamW on
// random tokens, the same work as one train_gpt2cu step (no data loading).
// Prints one machine-readable line: "RESULT name=... tok_per_s=... ms=...".
//   bench_train_step --model d12 [--config K=V,..] -B 4 -T 64 --steps 5 --threads N
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/ops.h"
#include "model/config.h"
#include "model/gpt2.h"
#include "train/optimizer.h"
#include "util/rng.h"

int main(int argc, char** argv) {
  using namespace gpt2;
  std::string model = "d12", overrides;
  int B = 4, T = 64, steps = 5, warmup = 2, threads = 0;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) { std::fprintf(stderr, "error: %s needs a value\n", a.c_str()); std::exit(2); }
      return argv[++i];
    };
    if (a == "--model") model = next();
    else if (a == "--config") overrides = next();
    else if (a == "-B") B = std::atoi(next());
    else if (a == "-T") T = std::atoi(next());
    else if (a == "--steps") steps = std::atoi(next());
    else if (a == "--warmup") warmup = std::atoi(next());
    else if (a == "--threads") threads = std::atoi(next());
    else { std::fprintf(stderr, "error: unknown option '%s'\n", a.c_str()); return 2; }
  }
  try {
    GPT2Config cfg = config_from_depth_name(model);
    if (!overrides.empty()) apply_config_overrides(cfg, overrides);
    auto be = make_cpu_backend(threads);
    GPT2 m(*be, cfg, B, T);
    m.init_random(1);
    Tensor grads = be->alloc(m.param_capacity(), BufferRole::kGrads);
    AdamW opt(*be, m.layout(), 0, m.num_parameters());
    AdamWHyper h;
    std::vector<int32_t> x(B * T), y(B * T);
    Rng rng(5);
    for (auto& t : x) t = static_cast<int32_t>(rng.next_u64() % cfg.vocab_size);
    for (auto& t : y) t = static_cast<int32_t>(rng.next_u64() % cfg.vocab_size);
    Tensor clip = be->alloc(2, BufferRole::kScalar64);  // the norm and the clip scale, as the trainer keeps them
    std::vector<double> times;
    for (int s = 0; s < warmup + steps; s++) {
      auto t0 = std::chrono::steady_clock::now();
      be->zero(grads);
      m.train_forward_deferred_loss(x.data(), y.data(), B, T, 1.0f / (B * T));
      m.backward(grads);
      m.collect_train_losses();
      be->sum_squares_into(clip, grads);  // the trainer's step: clip to norm 1 on the backend
      be->clip_scale(clip, 1.0f);
      opt.step(m.params(), grads, 1e-4f, clip, s + 1, h);
      be->synchronize();
      double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (s >= warmup) times.push_back(dt);
    }
    std::sort(times.begin(), times.end());
    const double med = times[times.size() / 2];
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    std::printf("RESULT impl=ours gemm=%s params=%zu ms=%.2f tok_per_s=%.1f peak_rss_mb=%.1f\n",
                cpu::gemm_library_name(cpu::gemm_library_from_env()), m.num_parameters(),
                med * 1e3, B * T / med, ru.ru_maxrss / 1024.0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
