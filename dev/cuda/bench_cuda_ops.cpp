// Per-op benchmark of the CUDA backend against the CPU backend on GPT-2 d12
// shapes (B=4, T=64, plus attention at T=1024): the op harness's perf cases
// (test/backend/cases.cpp), timed with the harness's time_case (median of
// repeated runs after warm-up, each followed by Backend::synchronize).
//
// Only the nvcc build (`make bench-cuda`, on a machine with a GPU) gives GPU
// numbers; the emulated build (build/dev/cuda/bench_cuda_ops_emu) exists to
// prove the program links and runs (`--smoke`: the first few cases, with a tiny
// time budget). Flags: --bf16 (bf16 storage; GB/s still counts 4-byte
// elements), --cublas (the plain cuBLAS path), --attention K[,K...] (the attention
// kernels, each of auto|cudnn|flash|classic, one CUDA backend and one row per kernel,
// named op[K]; default flash), --no-cpu (time the CUDA backend only),
// --budget S (seconds of timing per case and backend; default 0.5) and an op-name filter.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "test/backend/harness.h"

int main(int argc, char** argv) {
  using namespace gpt2;
  try {
    bool smoke = false;
    double budget = 0.5;  // seconds per case and backend
    CudaBackendOptions options;
    std::string filter;
    bool time_cpu = true;
    std::vector<CudaAttention> kinds = {CudaAttention::kFlash};
    for (int i = 1; i < argc; i++) {
      if (std::strcmp(argv[i], "--smoke") == 0) smoke = true;
      else if (std::strcmp(argv[i], "--bf16") == 0) options.bf16 = true;
      else if (std::strcmp(argv[i], "--cublas") == 0) options.use_cublaslt = false;
      else if (std::strcmp(argv[i], "--budget") == 0 && i + 1 < argc) budget = std::atof(argv[++i]);
      else if (std::strcmp(argv[i], "--no-cpu") == 0) time_cpu = false;
      else if (std::strcmp(argv[i], "--attention") == 0 && i + 1 < argc) {
        kinds.clear();
        std::stringstream list(argv[++i]);
        for (std::string k; std::getline(list, k, ',');) {
          kinds.push_back(CudaAttention::kFlash);
          if (!parse_cuda_attention(k, &kinds.back()))
            throw std::runtime_error("--attention " + k + ": expected auto, cudnn, flash or classic");
        }
      }
      else filter = argv[i];
    }
    auto cpu = make_cpu_backend(0);
    std::vector<std::unique_ptr<Backend>> cudas;
    for (CudaAttention k : kinds) {
      options.attention = k;
      cudas.push_back(make_cuda_backend(0, options));
    }
    if (smoke) budget = 0.0;
    std::printf("%-30s %-36s %12s %12s %8s %10s\n", "op", "shape", "cpu(us)", "cuda(us)", "speedup",
                "cuda GB/s");
    int done = 0;
    // --smoke proves it runs: the d12 rows at B=1, one head at T=64, 2^16 optimizer elements (the
    // full set's inputs, hundreds of MB of random numbers, took most of a smoke run to generate).
    const optest::PerfShape shape =
        smoke ? optest::PerfShape{1, 64, false, 1, 64, size_t(1) << 16} : optest::PerfShape{};
    for (auto& c : optest::perf_cases(1234, shape)) {
      if (!filter.empty() && c->op().find(filter) == std::string::npos) continue;
      if (smoke && c->bytes() > 4e6) continue;  // the emulator runs ~20 M threads/s
      // The harness allocates AdamW's moments as activations; bf16 needs fp32 ones.
      if (options.bf16 && c->op() == "adamw_update") continue;
      const double t_cpu = time_cpu ? optest::time_case(*c, *cpu, budget) : 0.0;
      for (size_t k = 0; k < kinds.size(); k++) {
        const bool named = kinds.size() > 1 && c->op().find("attention") != std::string::npos;
        if (k > 0 && !named) break;  // one row for an op the kernels do not change
        const std::string op = c->op() + (named ? std::string("[") + cuda_attention_name(kinds[k]) + "]" : "");
        const double t_cuda = optest::time_case(*c, *cudas[k], budget);
        std::printf("%-30s %-36s %12.1f %12.1f %8.2f %10.1f\n", op.c_str(), c->params().c_str(), t_cpu * 1e6,
                    t_cuda * 1e6, t_cpu / t_cuda, c->bytes() / t_cuda * 1e-9);
        std::fflush(stdout);
      }
      if (smoke && ++done >= 3) break;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
