// Model FLOPs utilisation (issue 24, item 3), by llm.c's accounting: a token
// of training costs 6N + 6·L·C·T FLOPs (N parameters, L layers, C channels,
// context T: the matmuls' forward and backward, plus attention's), held
// against the dense peak of the device the step ran on.
#ifndef TRAIN_MFU_H
#define TRAIN_MFU_H

#include <cstddef>
#include <string>

#include "model/config.h"

namespace gpt2 {

double flops_per_token(const GPT2Config& cfg, int T, size_t num_params);

// The GEMMs' units: bf16 tensor cores, TF32 tensor cores, or fp32 CUDA cores.
enum class PeakKind { kBf16, kTf32, kFp32 };

// One device's dense peak in TFLOP/s (0: unknown) and where it comes from,
// for the banner: "989.4 TFLOP/s (bf16 dense, NVIDIA H100 SXM datasheet)".
struct PeakFlops {
  double tflops = 0;
  std::string source;
};

std::string format_tflops(double tflops);  // "989.4 TFLOP/s"

// Datasheet peak by cudaGetDeviceProperties name ("NVIDIA H100 80GB HBM3",
// "NVIDIA A100-SXM4-80GB", ...); tflops 0 for a GPU not in the table (the emulator's too).
PeakFlops gpu_peak(const std::string& device_name, PeakKind kind);

// This process's fp32 FMA peak on `threads` OpenMP threads (0: the default),
// measured with independent AVX2/AVX-512 FMA chains for about 0.1 s: what
// `make bench` divides by (dev/train/fp32_peak).
double measure_cpu_fma_gflops(int threads, long iters = 2000000, int reps = 3);

// The MFU of a step: `tokens` (all ranks) in `seconds` against `world` devices of `peak`.
inline double mfu(double flops_per_tok, double tokens, double seconds, const PeakFlops& peak, int world) {
  if (peak.tflops <= 0 || seconds <= 0) return -1;
  return flops_per_tok * tokens / seconds / (peak.tflops * 1e12 * world);
}

}  // namespace gpt2

#endif  // TRAIN_MFU_H
