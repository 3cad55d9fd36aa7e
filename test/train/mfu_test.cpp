// MFU (issue 24, item 3): llm.c's FLOP count, the GPU table's matching and
// peaks, the CPU's measured FMA peak.
#include <gtest/gtest.h>

#include <string>

#include "model/config.h"
#include "train/mfu.h"

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

}  // namespace
}  // namespace gpt2
