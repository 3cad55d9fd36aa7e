// MFU: llm.c's FLOP count, the GPU table's matching and peaks, the CPU's
// measured FMA peak and the ISA it is measured with.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"
#include "backend/cpu/ops.h"
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

TEST(Mfu, FmaIsaIsAvx512ExactlyWhereTheCpuAndTheGemmLibraryUseIt) {
  EXPECT_EQ(choose_fma_isa(true, nullptr, nullptr), FmaIsa::kAvx512);
  EXPECT_EQ(choose_fma_isa(false, nullptr, nullptr), FmaIsa::kAvx2);
  // OPENBLAS_CORETYPE naming a core without AVX-512 kernels, in any case, takes the peak to AVX2.
  for (const char* c : {"Haswell", "haswell", "Zen", "Sandybridge", "SANDYBRIDGE", "Excavator", "Nehalem"})
    EXPECT_EQ(choose_fma_isa(true, c, nullptr), FmaIsa::kAvx2) << c;
  for (const char* c : {"SkylakeX", "cooperlake", "SapphireRapids"})
    EXPECT_EQ(choose_fma_isa(true, c, nullptr), FmaIsa::kAvx512) << c;
  // OpenBLAS ignores a name it does not know, whole, and detects the CPU; so does the peak.
  for (const char* c : {"", "Haswellx", "Has", "AVX2"}) EXPECT_EQ(choose_fma_isa(true, c, nullptr), FmaIsa::kAvx512) << c;
  // ONEDNN_MAX_CPU_ISA naming an ISA below AVX-512, in any case, does the same for oneDNN.
  for (const char* c : {"AVX2", "avx2", "AVX", "SSE41", "AVX2_VNNI", "avx2_vnni_2"})
    EXPECT_EQ(choose_fma_isa(true, nullptr, c), FmaIsa::kAvx2) << c;
  for (const char* c : {"AVX512_CORE", "avx512_core_bf16", "ALL", "DEFAULT", "", "Haswell", "AVX2x"})
    EXPECT_EQ(choose_fma_isa(true, nullptr, c), FmaIsa::kAvx512) << c;
  // No core type or ISA name gives a CPU without avx512f an AVX-512 peak.
  EXPECT_EQ(choose_fma_isa(false, "SkylakeX", nullptr), FmaIsa::kAvx2);
  EXPECT_EQ(choose_fma_isa(false, nullptr, "AVX512_CORE"), FmaIsa::kAvx2);

#if defined(__x86_64__) || defined(__i386__)
  // This process: only the variable of the library running the GEMMs counts.
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const bool openblas = cpu::gemm_library_from_env() == cpu::GemmLibrary::kOpenBlas;
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  const char* onednn_isa = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (onednn_isa == nullptr) onednn_isa = std::getenv("DNNL_MAX_CPU_ISA");
  const bool narrower = openblas ? choose_fma_isa(true, coretype, nullptr) == FmaIsa::kAvx2
                                 : choose_fma_isa(true, nullptr, onednn_isa) == FmaIsa::kAvx2;
  EXPECT_EQ(cpu_fma_isa() == FmaIsa::kAvx512, avx512 && !narrower) << cpu::gemm_library_name(cpu::gemm_library_from_env());
  EXPECT_EQ(cpu_fma_isa() == FmaIsa::kAvx2, !avx512 || narrower);
  EXPECT_EQ(fma_isa_limit().empty(), !(avx512 && narrower)) << fma_isa_limit();
#else
  EXPECT_EQ(cpu_fma_isa(), FmaIsa::kGeneric);
#endif
}

// The other library's variable does not move the peak: under GPT2_CPU_GEMM=openblas
// ONEDNN_MAX_CPU_ISA is ignored, and with oneDNN OPENBLAS_CORETYPE is.
TEST(Mfu, OnlyTheGemmLibrarysVariableNarrowsThePeak) {
#if defined(__x86_64__) || defined(__i386__)
  // Without avx512f the peak is AVX2 whatever is set, with no variable named.
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const FmaIsa wide = avx512 ? FmaIsa::kAvx512 : FmaIsa::kAvx2;
  auto narrowed = [&](const char* limit) { return std::make_pair(FmaIsa::kAvx2, std::string(avx512 ? limit : "")); };
  struct Env {
    const char* name;
    const char* value;
  };
  auto isa_under = [](std::vector<Env> env) {
    const char* names[] = {"GPT2_CPU_GEMM", "OPENBLAS_CORETYPE", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"};
    std::vector<std::pair<const char*, std::string>> saved;
    for (const char* n : names) {
      if (const char* v = std::getenv(n)) saved.emplace_back(n, v);
      unsetenv(n);
    }
    for (const Env& e : env) setenv(e.name, e.value, 1);
    const FmaIsa isa = cpu_fma_isa();
    const std::string limit = fma_isa_limit();
    for (const char* n : names) unsetenv(n);
    for (const auto& [n, v] : saved) setenv(n, v.c_str(), 1);
    return std::make_pair(isa, limit);
  };
  EXPECT_EQ(isa_under({{"GPT2_CPU_GEMM", "openblas"}, {"OPENBLAS_CORETYPE", "Haswell"}}),
            narrowed("OPENBLAS_CORETYPE=Haswell"));
  EXPECT_EQ(isa_under({{"GPT2_CPU_GEMM", "openblas"}, {"ONEDNN_MAX_CPU_ISA", "AVX2"}}).first, wide);
  if (cpu::have_onednn()) {
    EXPECT_EQ(isa_under({{"GPT2_CPU_GEMM", "onednn"}, {"ONEDNN_MAX_CPU_ISA", "AVX2"}}),
              narrowed("ONEDNN_MAX_CPU_ISA=AVX2"));
    EXPECT_EQ(isa_under({{"GPT2_CPU_GEMM", "onednn"}, {"DNNL_MAX_CPU_ISA", "avx2"}}),
              narrowed("DNNL_MAX_CPU_ISA=avx2"));
    EXPECT_EQ(isa_under({{"GPT2_CPU_GEMM", "onednn"}, {"OPENBLAS_CORETYPE", "Haswell"}}).first, wide);
  }
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
  // under ONEDNN_MAX_CPU_ISA=AVX2 on an AVX-512 CPU "..., AVX2 as ONEDNN_MAX_CPU_ISA=AVX2, ...".
  std::string how = isa;
  if (!fma_isa_limit().empty()) how += " as " + fma_isa_limit();
  EXPECT_EQ(p.source, format_tflops(p.tflops) + " (fp32 FMA peak of this CPU, " + how +
                          ", 2 threads, measured at start-up)");
}

}  // namespace
}  // namespace gpt2
