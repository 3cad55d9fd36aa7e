// Model FLOPs utilisation, by llm.c's accounting: a token
// of training costs 6N + 6·L·C·T FLOPs (N parameters, L layers, C channels,
// context T: the matmuls' forward and backward, plus attention's), held
// against the dense peak of the device the step ran on.
#ifndef METRICS_MFU_H
#define METRICS_MFU_H

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

// The vector FMA a CPU peak is measured with: AVX-512 (16 fp32 lanes), AVX2 (8;
// the build's floor, x86-64-v3) or, off x86, whatever the compiler makes of a
// generic 4-lane vector.
enum class FmaIsa { kAvx512, kAvx2, kGeneric };

const char* fma_isa_name(FmaIsa isa);  // "AVX-512", "AVX2", "generic"

// The ISA whose FMA rate is the CPU's peak: AVX-512 when the CPU has avx512f,
// since the fp32 GEMM library (oneDNN or OpenBLAS, backend/cpu/blas.cpp) then
// picks AVX-512 kernels at run time, else AVX2. Each library can be held to a
// narrower ISA by its own variable: OpenBLAS by OPENBLAS_CORETYPE naming a core
// type it knows without AVX-512 (Haswell, Zen, Sandybridge, ...), oneDNN by
// ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA) naming an ISA below AVX-512 (SSE41,
// AVX, AVX2, AVX2_VNNI, AVX2_VNNI_2). The peak then follows the library that
// runs the GEMMs down to AVX2: the MFU is held against what they can reach.
// An unknown name is ignored, as the libraries ignore it. Pass the variable of
// the library in use, null for the other.
FmaIsa choose_fma_isa(bool cpu_has_avx512f, const char* openblas_coretype, const char* onednn_max_isa);
// This CPU, the GEMM library this process's CPU backend uses (GPT2_CPU_GEMM and
// the build) and that library's variable.
FmaIsa cpu_fma_isa();
// The library's variable that narrowed cpu_fma_isa(), as "NAME=value", or "".
std::string fma_isa_limit();

// The fp32 FMA rate in GFLOP/s on `threads` OpenMP threads (0: the default):
// rounds of `iters` x 12 independent FMA chains per thread, the best round in
// which no thread lost its core. Rounds run until `reps` such rounds and 20 ms,
// or 100 ms; with no such round, each thread's best rate over its own time on
// a core, summed. `isa` must be one this CPU executes. A default round is
// ~0.5 ms on a 3.5 GHz core with two full-width FMA pipes: ~20 ms in all on an
// idle machine.
double measure_cpu_fma_gflops(FmaIsa isa, int threads, long iters = 250000, int reps = 16);
// The same with cpu_fma_isa(): what `make bench` divides by (dev/train/fp32_peak).
double measure_cpu_fma_gflops(int threads, long iters = 250000, int reps = 16);

// The trainer's CPU peak, measured now with cpu_fma_isa(), and its banner text:
// "0.461 TFLOP/s (fp32 FMA peak of this CPU, AVX-512, 2 threads, measured at start-up)".
PeakFlops cpu_fma_peak(int threads);

// The MFU of a step: `tokens` (all ranks) in `seconds` against `world` devices of `peak`.
inline double mfu(double flops_per_tok, double tokens, double seconds, const PeakFlops& peak, int world) {
  if (peak.tflops <= 0 || seconds <= 0) return -1;
  return flops_per_tok * tokens / seconds / (peak.tflops * 1e12 * world);
}

}  // namespace gpt2

#endif  // METRICS_MFU_H
