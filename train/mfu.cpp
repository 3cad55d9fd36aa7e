#include "train/mfu.h"

#include <immintrin.h>
#include <omp.h>

#include <chrono>
#include <cstring>
#include <iomanip>
#include <sstream>
#include <vector>

namespace gpt2 {

double flops_per_token(const GPT2Config& cfg, int T, size_t num_params) {
  return 6.0 * static_cast<double>(num_params) +
         6.0 * cfg.num_layers * static_cast<double>(cfg.channels) * static_cast<double>(T);
}

namespace {

// Dense (no 2:4 sparsity) peaks in TFLOP/s from NVIDIA's datasheets and
// architecture whitepapers; where a sheet quotes the sparse number only, half
// of it. bf16 is with fp32 accumulation (the GeForce cards' slower rate).
struct GpuPeaks {
  const char* model;    // the name's model, after "NVIDIA " (a prefix of the rest)
  const char* variant;  // a word the name must also hold ("" = any)
  const char* sheet;    // what the numbers come from
  double bf16, tf32, fp32;
};

constexpr GpuPeaks kGpuTable[] = {
    {"H100", "PCIe", "NVIDIA H100 PCIe datasheet", 756.5, 378.0, 51.2},
    {"H100", "NVL", "NVIDIA H100 NVL datasheet", 835.5, 417.5, 60.0},
    {"H100", "", "NVIDIA H100 SXM datasheet", 989.4, 494.7, 66.9},
    {"H200", "NVL", "NVIDIA H200 NVL datasheet", 835.5, 417.5, 60.0},
    {"H200", "", "NVIDIA H200 SXM datasheet", 989.4, 494.7, 66.9},
    {"GH200", "", "NVIDIA GH200 datasheet (the H100 SXM rates)", 989.4, 494.7, 66.9},
    {"A100", "", "NVIDIA A100 datasheet (SXM and PCIe)", 312.0, 156.0, 19.5},
    {"A10", "", "NVIDIA A10 datasheet", 125.0, 62.5, 31.2},
    {"A40", "", "NVIDIA A40 datasheet", 149.7, 74.8, 37.4},
    {"L40S", "", "NVIDIA L40S datasheet", 362.05, 183.0, 91.6},
    {"L40", "", "NVIDIA L40 datasheet", 181.05, 90.5, 90.5},
    {"L4", "", "NVIDIA L4 datasheet", 121.0, 60.0, 30.3},
    {"GeForce RTX 4090", "", "NVIDIA Ada GPU architecture whitepaper", 165.2, 82.6, 82.6},
    {"GeForce RTX 3090", "", "NVIDIA Ampere GA102 GPU architecture whitepaper", 71.0, 35.6, 35.6},
};

std::vector<std::string> words(const std::string& s) {
  std::vector<std::string> out;
  std::string w;
  for (char c : s + " ") {
    if (c == ' ' || c == '-' || c == '_') {
      if (!w.empty()) out.push_back(w);
      w.clear();
    } else {
      w += c;
    }
  }
  return out;
}

// `name` without "NVIDIA " begins with the model's words, whole ("A10" is
// not "A100" nor "A10G"), and holds the variant's word when one is named.
bool matches(const std::string& name, const GpuPeaks& g) {
  std::vector<std::string> have = words(name), want = words(g.model);
  if (!have.empty() && have[0] == "NVIDIA") have.erase(have.begin());
  if (have.size() < want.size()) return false;
  for (size_t i = 0; i < want.size(); i++)
    if (have[i] != want[i]) return false;
  if (!*g.variant) return true;
  for (const std::string& w : have)
    if (w == g.variant) return true;
  return false;
}

}  // namespace

std::string format_tflops(double tflops) {
  std::ostringstream s;
  s << (tflops >= 10 ? std::fixed : std::defaultfloat) << std::setprecision(tflops >= 10 ? 1 : 3) << tflops
    << " TFLOP/s";
  return s.str();
}

PeakFlops gpu_peak(const std::string& device_name, PeakKind kind) {
  for (const GpuPeaks& g : kGpuTable) {
    if (!matches(device_name, g)) continue;
    const double t = kind == PeakKind::kBf16 ? g.bf16 : kind == PeakKind::kTf32 ? g.tf32 : g.fp32;
    std::ostringstream s;
    s << format_tflops(t) << " (" << (kind == PeakKind::kBf16 ? "bf16" : kind == PeakKind::kTf32 ? "tf32" : "fp32")
      << " dense, " << g.sheet << ")";
    return {t, s.str()};
  }
  return {};
}

// The widest FMA vector of the build: AVX-512 with NATIVE=1 on such a CPU, else AVX2.
#if defined(__AVX512F__)
using FmaVec = __m512;
constexpr int kFmaLanes = 16;
inline FmaVec fma_set1(float x) { return _mm512_set1_ps(x); }
inline FmaVec fma_madd(FmaVec r, FmaVec a, FmaVec b) { return _mm512_fmadd_ps(r, a, b); }
#else
using FmaVec = __m256;
constexpr int kFmaLanes = 8;
inline FmaVec fma_set1(float x) { return _mm256_set1_ps(x); }
inline FmaVec fma_madd(FmaVec r, FmaVec a, FmaVec b) { return _mm256_fmadd_ps(r, a, b); }
#endif

double measure_cpu_fma_gflops(int threads, long iters, int reps) {
  const int n = threads > 0 ? threads : omp_get_max_threads();
  double best = 0;
  for (int rep = 0; rep < reps; rep++) {
    float sink = 0;
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(n) reduction(+ : sink)
    {
      // 12 independent chains hide the 4-cycle FMA latency on 2 ports.
      FmaVec acc[12];
      const FmaVec a = fma_set1(0.999999f), b = fma_set1(1e-7f);
      for (auto& r : acc) r = fma_set1(1.0f);
      for (long i = 0; i < iters; i++)
        for (auto& r : acc) r = fma_madd(r, a, b);
      float lanes[kFmaLanes];
      for (auto& r : acc) {
        std::memcpy(lanes, &r, sizeof(lanes));
        for (float x : lanes) sink += x;
      }
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double gflops = n * static_cast<double>(iters) * 12.0 * kFmaLanes * 2.0 / s / 1e9;
    if (gflops > best && sink != 12345.0f) best = gflops;  // (sink keeps the work alive)
  }
  return best;
}

}  // namespace gpt2
