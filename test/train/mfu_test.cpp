// MFU: llm.c's FLOP count, the GPU table's matching and peaks, the CPU's
// measured FMA peak and the ISA it is measured with.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "model/config.h"
#include "metrics/mfu.h"

namespace gpt2 {
namespace {

TEST(Mfu, FlopsPerTokenIsLlmcs) {
  GPT2Config cfg = config_from_depth_name("d12");
  // 6N + 6·L·C·T with N = 124M (llm.c's d12 with the padded vocabulary: 124,475,904)
  EXPECT_EQ(flops_per_token(cfg, 1024, 124475904), 6.0 * 124475904 + 6.0 * 12 * 768 * 1024);
  PeakFlops peak{100.0, "test"};
  // 1e12 FLOP of work in 0.1 s on 2 devices of 100 TFLOP/s: 5%
  EXPECT_NEAR(mfu(1e6, 1e6, 0.1, peak, 2), 0.05, 1e-12);
  EXPECT_LT(mfu(1e6, 1e6, 0.1, PeakFlops{}, 1), 0);  // no peak, no MFU
}

TEST(Mfu, GpuTableMatchesCudaNamesWholeWords) {
  struct Case { const char* name; PeakKind kind; double tflops; };
  const Case cases[] = {
      {"NVIDIA A100-SXM4-80GB", PeakKind::kBf16, 312.0},
      {"NVIDIA A100 80GB PCIe", PeakKind::kTf32, 156.0},
      {"NVIDIA H100 80GB HBM3", PeakKind::kBf16, 989.4},
      {"NVIDIA H100 PCIe", PeakKind::kBf16, 756.5},
      {"NVIDIA H100 NVL", PeakKind::kTf32, 417.5},
      {"NVIDIA H200", PeakKind::kFp32, 66.9},
      {"NVIDIA H200 NVL", PeakKind::kBf16, 835.5},
      {"NVIDIA L40S", PeakKind::kBf16, 362.05},
      {"NVIDIA L40", PeakKind::kBf16, 181.05},
      {"NVIDIA L4", PeakKind::kTf32, 60.0},
      {"NVIDIA A10", PeakKind::kBf16, 125.0},
      {"NVIDIA GeForce RTX 4090", PeakKind::kBf16, 165.2},
      {"NVIDIA A10G", PeakKind::kBf16, 0},                    // not the A10's numbers
      {"GPT2 emulated GPU (A100-like)", PeakKind::kBf16, 0},  // the emulator has no peak
      {"NVIDIA GeForce RTX 2080", PeakKind::kBf16, 0},
  };
  for (const Case& c : cases) EXPECT_EQ(gpu_peak(c.name, c.kind).tflops, c.tflops) << c.name;
  EXPECT_EQ(gpu_peak("NVIDIA H100 80GB HBM3", PeakKind::kBf16).source,
            "989.4 TFLOP/s (bf16 dense, NVIDIA H100 SXM datasheet)");
}

TEST(Mfu, CpuFmaPeakIsMeasured) {
  const double gflops = measure_cpu_fma_gflops(1, 200000, 2);
  EXPECT_GT(gflops, 1.0);     // any x86-64-v3 core does several GFLOP/s
  EXPECT_LT(gflops, 1000.0);  // one core
}

TEST(Mfu, FmaIsaIsAvx512ExactlyWhereTheCpuAndOpenBlasUseIt) {
  EXPECT_EQ(choose_fma_isa(true, nullptr), FmaIsa::kAvx512);
  EXPECT_EQ(choose_fma_isa(false, nullptr), FmaIsa::kAvx2);
  // OPENBLAS_CORETYPE naming a core without AVX-512 kernels, in any case, takes the peak to AVX2.
  for (const char* c : {"Haswell", "haswell", "Zen", "Sandybridge", "SANDYBRIDGE", "Excavator", "Nehalem"})
    EXPECT_EQ(choose_fma_isa(true, c), FmaIsa::kAvx2) << c;
  for (const char* c : {"SkylakeX", "cooperlake", "SapphireRapids"})
    EXPECT_EQ(choose_fma_isa(true, c), FmaIsa::kAvx512) << c;
  // OpenBLAS ignores a name it does not know, whole, and detects the CPU; so does the peak.
  for (const char* c : {"", "Haswellx", "Has", "AVX2"}) EXPECT_EQ(choose_fma_isa(true, c), FmaIsa::kAvx512) << c;
  // No core type gives a CPU without avx512f an AVX-512 peak.
  EXPECT_EQ(choose_fma_isa(false, "SkylakeX"), FmaIsa::kAvx2);

#if defined(__x86_64__) || defined(__i386__)
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  const std::string ct = coretype ? coretype : "";
  const bool narrower = choose_fma_isa(true, coretype) == FmaIsa::kAvx2;  // as checked above
  EXPECT_EQ(cpu_fma_isa() == FmaIsa::kAvx512, avx512 && !narrower) << "OPENBLAS_CORETYPE=" << ct;
  EXPECT_EQ(cpu_fma_isa() == FmaIsa::kAvx2, !avx512 || narrower);
#else
  EXPECT_EQ(cpu_fma_isa(), FmaIsa::kGeneric);
#endif
}

#if defined(__x86_64__) || defined(__i386__)
// On a CPU with two full-width 512-bit FMA pipes (this project's machines: Zen 5,
// Xeon Gold and Platinum) a zmm FMA does twice a ymm one's work at the same
// rate. (A CPU that splits zmm into two halves, Zen 4, or has one 512-bit
// pipe, Xeon Silver, gives 1x and fails here.) One thread: on the shared
// 2-core machine it finds a free core more often than two threads find two.
// Each loop runs and counts FLOPs (their ratio is the hardware's, a benchmark's matter:
// 2.0x on one Zen 5 core, 1x where AVX-512 has one FMA pipe).
TEST(Mfu, EachIsasLoopMeasuresItsPeak) {
  EXPECT_GT(measure_cpu_fma_gflops(FmaIsa::kAvx2, 1), 1.0);
  if (__builtin_cpu_supports("avx512f"))
    EXPECT_GT(measure_cpu_fma_gflops(FmaIsa::kAvx512, 1), 1.0);
  else
    EXPECT_EQ(cpu_fma_isa(), FmaIsa::kAvx2);  // the AVX2 loop is then the whole peak
}
#endif

TEST(Mfu, CpuPeakBannerNamesTheIsaAndThreads) {
  const PeakFlops p = cpu_fma_peak(2);
  EXPECT_GT(p.tflops, 0.002);
  const std::string isa = fma_isa_name(cpu_fma_isa());
  // "0.461 TFLOP/s (fp32 FMA peak of this CPU, AVX-512, 2 threads, measured at start-up)", and
  // under OPENBLAS_CORETYPE=Haswell on an AVX-512 CPU "..., AVX2 as OPENBLAS_CORETYPE=Haswell, ...".
  std::string how = isa;
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
#if defined(__x86_64__) || defined(__i386__)
  if (cpu_fma_isa() == FmaIsa::kAvx2 && __builtin_cpu_supports("avx512f"))
    how += std::string(" as OPENBLAS_CORETYPE=") + coretype;
#endif
  EXPECT_EQ(p.source, format_tflops(p.tflops) + " (fp32 FMA peak of this CPU, " + how +
                          ", 2 threads, measured at start-up)");
}

}  // namespace
}  // namespace gpt2
