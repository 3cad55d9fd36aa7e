// Execution-model tests of the CUDA emulator: real kernels (test/emu/kernels.cu)
// checked against host references under every run order, races that the run-order
// switch must expose, and rule violations that must be reported.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "emu/control.h"
#include "test/emu/kernels.h"

namespace gpt2 {
namespace {

using emu::RunOrder;

std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

uint16_t to_bf16_bits(float f) {
  __nv_bfloat16 b = __float2bfloat16(f);
  uint16_t bits;
  std::memcpy(&bits, &b, 2);
  return bits;
}

float from_bf16_bits(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Expects `call` to throw std::runtime_error whose message contains every fragment.
template <class F>
void expect_failure(F call, const std::vector<std::string>& fragments) {
  try {
    call();
    ADD_FAILURE() << "expected the launch to fail";
  } catch (const std::runtime_error& e) {
    std::string what = e.what();
    for (const std::string& f : fragments) EXPECT_NE(what.find(f), std::string::npos) << "missing '" << f << "' in: " << what;
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // the failure was consumed by the launch check
}

class RunOrderTest : public ::testing::TestWithParam<RunOrder> {
 protected:
  void SetUp() override { emu::set_run_order(GetParam(), 7); }
  void TearDown() override { emu::set_run_order(RunOrder::kForward); }
};

TEST_P(RunOrderTest, BlockReductionMatchesHostSums) {
  std::vector<float> in = random_floats(1000, 1);
  std::vector<float> sums = emu_test::block_sums(in, 256);
  ASSERT_EQ(sums.size(), 4u);
  for (int b = 0; b < 4; ++b) {
    double ref = 0, mag = 0;
    for (int i = b * 256; i < std::min(1000, (b + 1) * 256); ++i) ref += in[i], mag += std::fabs(in[i]);
    // A shared-memory tree of depth log2(256) = 8: gamma(8) sum |x|, whatever the run order.
    EXPECT_NEAR(sums[b], ref, 8 * 0x1p-24 * mag) << "block " << b;
  }
}

TEST_P(RunOrderTest, WarpShuffleReductionMatchesHostSums) {
  std::vector<float> in = random_floats(3 * 256, 2);
  std::vector<float> sums = emu_test::warp_shuffle_block_sums(in, 256);
  for (int b = 0; b < 3; ++b) {
    double ref = 0, mag = 0;
    for (int i = b * 256; i < (b + 1) * 256; ++i) ref += in[i], mag += std::fabs(in[i]);
    // 5 shuffle levels, then 8 warp sums one after another: depth 13, gamma(13) sum |x|.
    EXPECT_NEAR(sums[b], ref, 13 * 0x1p-24 * mag) << "block " << b;
  }
}

TEST_P(RunOrderTest, WarpLayernormMatchesHost) {
  const int rows = 10, C = 72;  // 10 rows: the last block has two idle warps
  std::vector<float> in = random_floats(rows * C, 3, -2.0f, 3.0f), out, mean, rstd;
  emu_test::warp_layernorm(in, rows, C, out, mean, rstd);
  for (int r = 0; r < rows; ++r) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += in[r * C + c];
    m /= C;
    for (int c = 0; c < C; ++c) v += (in[r * C + c] - m) * (in[r * C + c] - m);
    double s = 1.0 / std::sqrt(v / C + 1e-5);
    // 72 values in [-2, 3] reduced over a warp (<= 3 per lane, 5 shuffle levels): the
    // mean is within gamma(8) 3 ~ 1.4e-6 and rstd a few u of s; out = (x - mean) rstd
    // with |out| <= ~3: ~10 u ~ 2e-6. The bounds are 5-50x above: a lane or shuffle bug is O(1).
    EXPECT_NEAR(mean[r], m, 1e-5);
    EXPECT_NEAR(rstd[r], s, 1e-4 * s);
    for (int c = 0; c < C; ++c) EXPECT_NEAR(out[r * C + c], (in[r * C + c] - m) * s, 1e-4) << r << "," << c;
  }
}

TEST_P(RunOrderTest, BlockSoftmaxMatchesHost) {
  const int rows = 5, cols = 300, block = 128;
  std::vector<float> x = random_floats(rows * cols, 4, -4.0f, 4.0f);
  std::vector<uint16_t> bits(x.size());
  for (size_t i = 0; i < x.size(); ++i) bits[i] = to_bf16_bits(x[i]);
  std::vector<float> out = emu_test::block_softmax(bits, rows, cols, block);
  for (int r = 0; r < rows; ++r) {
    double mx = -1e30, sum = 0;
    for (int c = 0; c < cols; ++c) mx = std::max(mx, static_cast<double>(from_bf16_bits(bits[r * cols + c])));
    for (int c = 0; c < cols; ++c) sum += std::exp(from_bf16_bits(bits[r * cols + c]) - mx);
    for (int c = 0; c < cols; ++c) {
      double ref = std::exp(from_bf16_bits(bits[r * cols + c]) - mx) / sum;
      // exp of exact bf16 inputs (a few ulp), a 300-term sum of positives (3 per thread
      // + a 128-thread tree: depth < 10) and a divide: < 20 u = 1.2e-6 relative.
      EXPECT_NEAR(out[r * cols + c], ref, 1e-6 + 1e-5 * ref);
    }
  }
}

TEST_P(RunOrderTest, CooperativeGroupsProbe) {
  const int block = 64;
  std::vector<int> p = emu_test::cg_probe(block);
  for (int t = 0; t < block; ++t) {
    const int* o = &p[t * 9];
    EXPECT_EQ(o[0], t % 32);
    EXPECT_EQ(o[1], t / 32);
    EXPECT_EQ(o[2], 2);
    EXPECT_EQ(o[3], 31 * 32 / 2);
    int mx = 0;
    for (int u = t / 32 * 32; u < t / 32 * 32 + 32; ++u) mx = std::max(mx, u * 7 % 61);
    EXPECT_EQ(o[4], mx);
    EXPECT_EQ(o[5], t);
    EXPECT_EQ(o[6], t % 8);
    EXPECT_EQ(o[7], t / 8);
    int base = t / 8 * 8;
    EXPECT_EQ(o[8], 8 * base + 28);
  }
}

TEST_P(RunOrderTest, AtomicsMatchHostCounts) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> dist(-50, 50);
  std::vector<int> values(1000);
  for (int& v : values) v = dist(rng);
  const int bins = 7;
  const unsigned limit = 37;
  emu_test::AtomicResults r = emu_test::atomics(values, bins, limit);
  std::vector<int> hist(bins, 0);
  double total = 0;
  for (int v : values) {
    hist[((v % bins) + bins) % bins]++;
    total += 0.5 * v;
  }
  EXPECT_EQ(r.histogram, hist);
  EXPECT_EQ(r.total, static_cast<float>(total));  // halves of small ints: exact in fp32
  EXPECT_EQ(r.max_value, *std::max_element(values.begin(), values.end()));
  EXPECT_EQ(r.min_value, *std::min_element(values.begin(), values.end()));
  EXPECT_EQ(r.cas_counter, 1000u);
  EXPECT_EQ(r.inc_counter, 1000u % (limit + 1));  // atomicInc wraps to 0 after reaching the limit
}

INSTANTIATE_TEST_SUITE_P(Orders, RunOrderTest,
                         ::testing::Values(RunOrder::kForward, RunOrder::kReverse, RunOrder::kRandom));

TEST(WarpIntrinsics, ShuffleBallotVoteSemantics) {
  std::vector<int> p = emu_test::warp_probe(64);
  for (int t = 0; t < 64; ++t) {
    int lane = t % 32;
    const int* o = &p[t * 13];
    EXPECT_EQ(o[0], 30) << "lane " << lane;
    EXPECT_EQ(o[1], ((lane & ~7) + ((lane + 1) & 7)) * 10) << "lane " << lane;
    EXPECT_EQ(o[2], lane % 16 >= 3 ? lane - 3 : lane) << "lane " << lane;
    EXPECT_EQ(o[3], lane + 5 < 32 ? lane + 5 : lane) << "lane " << lane;
    EXPECT_EQ(o[4], lane ^ 6) << "lane " << lane;
    EXPECT_EQ(static_cast<unsigned>(o[5]), 0x49249249u) << "lane " << lane;  // lanes 0,3,6,...
    EXPECT_EQ(o[6], 1);
    EXPECT_EQ(o[7], 0);
    EXPECT_EQ(o[8], lane < 16 ? 15 - lane : 32) << "lane " << lane;
    EXPECT_EQ(static_cast<unsigned>(o[9]), 0xffffffffu);
    EXPECT_EQ(o[10], 496);
    EXPECT_EQ(o[11], lane + 1 < 32 ? lane + 1 : lane) << "lane " << lane;
    EXPECT_EQ(o[12], lane ^ 1) << "lane " << lane;
  }
}

TEST(Indices, ThreeDimensionalGridAndBlock) {
  const int gx = 3, gy = 2, gz = 2, bx = 4, by = 3, bz = 2;
  std::vector<int> p = emu_test::index_probe(gx, gy, gz, bx, by, bz);
  int id = 0;
  for (int z = 0; z < gz; ++z)
    for (int y = 0; y < gy; ++y)
      for (int x = 0; x < gx; ++x)
        for (int tz = 0; tz < bz; ++tz)
          for (int ty = 0; ty < by; ++ty)
            for (int tx = 0; tx < bx; ++tx, ++id) {
              const int* o = &p[id * 7];
              EXPECT_EQ(o[0], tx);
              EXPECT_EQ(o[1], ty);
              EXPECT_EQ(o[2], tz);
              EXPECT_EQ(o[3], x);
              EXPECT_EQ(o[4], y);
              EXPECT_EQ(o[5], z);
              EXPECT_EQ(o[6], id);
            }
}

uint16_t to_half_bits(float f) {
  __half h = __float2half(f);
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}

float from_half_bits(uint16_t bits) {
  __half h;
  std::memcpy(static_cast<void*>(&h), &bits, 2);
  return __half2float(h);
}

class WmmaTest : public ::testing::TestWithParam<bool> {};

TEST_P(WmmaTest, GemmMatchesHost) {
  const bool half = GetParam();
  const int M = 32, N = 48, K = 64;
  auto to_bits = half ? to_half_bits : to_bf16_bits;
  auto from_bits = half ? from_half_bits : from_bf16_bits;
  std::vector<float> af = random_floats(M * K, 8), bf = random_floats(K * N, 9);
  std::vector<uint16_t> a(af.size()), b_row(bf.size()), b_col(bf.size());
  for (size_t i = 0; i < af.size(); ++i) a[i] = to_bits(af[i]);
  for (int k = 0; k < K; ++k)
    for (int n = 0; n < N; ++n) {
      b_row[k * N + n] = to_bits(bf[k * N + n]);
      b_col[n * K + k] = b_row[k * N + n];
    }
  std::vector<float> c_row = emu_test::wmma_gemm(a, b_row, M, N, K, false, half);
  std::vector<float> c_col = emu_test::wmma_gemm(a, b_col, M, N, K, true, half);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double ref = 0, mag = 0;
      for (int k = 0; k < K; ++k) {
        const double t = double(from_bits(a[m * K + k])) * from_bits(b_row[k * N + n]);
        ref += t, mag += std::fabs(t);
      }
      // 16-bit products are exact in fp32; K of them summed in any order: gamma(K) sum |t|.
      EXPECT_NEAR(c_row[m * N + n], ref, K * 0x1p-24 * mag) << m << "," << n;
      EXPECT_NEAR(c_col[m * N + n], ref, K * 0x1p-24 * mag) << m << "," << n;
    }
}

INSTANTIATE_TEST_SUITE_P(Bf16AndHalf, WmmaTest, ::testing::Values(false, true));

TEST(MemoryHints, VectorLoadsAndStores) {
  std::vector<float> in = random_floats(256, 10);
  std::vector<float> out = emu_test::vector_hints(in);
  for (size_t i = 0; i < in.size(); ++i) EXPECT_EQ(out[i], in[i] * 2.0f + 1.0f) << i;
}

TEST(MathIntrinsics, MatchLibm) {
  std::vector<float> in = random_floats(100, 11, -3.0f, 3.0f);
  in[0] = 2.5f;  // ties round to even in __float2int_rn
  in[1] = -0.5f;
  std::vector<float> out = emu_test::math_probe(in);
  for (size_t i = 0; i < in.size(); ++i) {
    float x = in[i];
    const float* o = &out[i * 8];
    // CUDA's documented maxima for |x| <= 3: __expf 2 + 1.16|x| ulp (<= 6 ulp = 7e-7),
    // rsqrtf and tanhf 2 ulp, __fdividef 2 ulp, of results <= 1 (2.4e-7).
    EXPECT_NEAR(o[0], std::exp(x), 2e-6f * std::exp(x));
    EXPECT_NEAR(o[1], 1.0f / std::sqrt(std::fabs(x) + 1.0f), 1e-6f);
    EXPECT_EQ(o[2], x);
    EXPECT_EQ(o[3], std::fma(x, 2.0f, 1.0f));
    EXPECT_NEAR(o[4], std::tanh(x), 1e-6f);
    EXPECT_NEAR(o[5], x / 3.0f, 1e-6f);
    EXPECT_EQ(o[6], std::min(1.0f, std::max(0.0f, x)));
    EXPECT_EQ(o[7], std::nearbyint(x));
  }
  EXPECT_EQ(out[0 * 8 + 7], 2.0f);
  EXPECT_EQ(out[1 * 8 + 7], -0.0f);
}

TEST(SharedMemory, DynamicBeyond48KiBNeedsOptIn) {
  const int bytes = 64 * 1024, count = bytes / 4;
  double ref = 0;
  for (int i = 0; i < count; ++i) ref += i % 1000;
  expect_failure([&] { emu_test::big_shared_sum(bytes, false); }, {"dynamic shared memory", "cudaFuncSetAttribute"});
  EXPECT_EQ(emu_test::big_shared_sum(bytes, true), static_cast<float>(ref));
}

TEST(SharedMemory, DynamicSharedIsNaNPoisoned) { EXPECT_TRUE(std::isnan(emu_test::read_uninitialised_shared())); }

// ---- races the run-order switch must expose ---------------------------------------------------
TEST(RaceDetection, MissingBarrierInReductionGivesWrongSums) {
  std::vector<float> in = random_floats(512, 12, 0.5f, 1.5f);
  std::vector<float> ref = emu_test::block_sums(in, 256);
  emu::set_run_order(RunOrder::kForward);
  std::vector<float> forward = emu_test::block_sums_missing_sync(in, 256);
  emu::set_run_order(RunOrder::kRandom, 3);
  std::vector<float> random = emu_test::block_sums_missing_sync(in, 256);
  emu::set_run_order(RunOrder::kForward);
  // Thread 0 runs its whole loop before the others add their partial sums.
  for (int b = 0; b < 2; ++b) {
    EXPECT_GT(std::fabs(forward[b] - ref[b]), 1.0f) << "block " << b;
    EXPECT_GT(std::fabs(random[b] - ref[b]), 1.0f) << "block " << b;
  }
}

TEST(RaceDetection, MissingBarrierReadsPoisonedSharedMemory) {
  std::vector<float> in = random_floats(64, 13);
  emu::set_run_order(RunOrder::kForward);
  std::vector<float> forward = emu_test::rotate_missing_sync(in);
  emu::set_run_order(RunOrder::kReverse);
  std::vector<float> reverse = emu_test::rotate_missing_sync(in);
  emu::set_run_order(RunOrder::kForward);
  // forward: every thread but the last reads a slot its neighbour has not written yet
  for (int t = 0; t < 63; ++t) EXPECT_TRUE(std::isnan(forward[t])) << t;
  EXPECT_EQ(forward[63], in[0]);
  // reverse: only the last thread reads early (slot 0 is written last)
  for (int t = 0; t < 63; ++t) EXPECT_EQ(reverse[t], in[t + 1]) << t;
  EXPECT_TRUE(std::isnan(reverse[63]));
}

// ---- rule violations that must be reported --------------------------------------------------------
TEST(RuleViolations, ThreadsAtDifferentBarriers) {
  expect_failure(emu_test::launch_divergent_barrier,
                 {"divergent_barrier_kernel", "different __syncthreads", "kernels.cu:"});
}

TEST(RuleViolations, EarlyExitBeforeBarrier) {
  for (RunOrder order : {RunOrder::kForward, RunOrder::kReverse, RunOrder::kRandom}) {
    emu::set_run_order(order, 5);
    expect_failure(emu_test::launch_early_exit_before_barrier, {"early_exit_kernel", "exited", "__syncthreads"});
  }
  emu::set_run_order(RunOrder::kForward);
}

TEST(RuleViolations, ShuffleNamingAnExitedLane) {
  for (RunOrder order : {RunOrder::kForward, RunOrder::kReverse}) {
    emu::set_run_order(order);
    expect_failure(emu_test::launch_shuffle_with_exited_lane, {"shuffle_exited_lane_kernel", "exited", "__shfl*_sync"});
  }
  emu::set_run_order(RunOrder::kForward);
}

TEST(RuleViolations, LanesAtDifferentWarpOperations) {
  expect_failure(emu_test::launch_mismatched_warp_ops, {"different warp operations", "__ballot_sync"});
}

TEST(RuleViolations, DeviceAssert) {
  expect_failure([] { emu_test::launch_device_assert(200); },
                 {"device-side assert triggered", "values[i] < limit", "kernels.cu:", "block (1,0,0)"});
}

TEST(RuleViolations, LaunchOutsideAKernelIsFineAfterAFault) {
  // A failed launch must not poison the next one.
  expect_failure(emu_test::launch_divergent_barrier, {"different __syncthreads"});
  std::vector<float> in = random_floats(256, 14);
  std::vector<float> sums = emu_test::block_sums(in, 256);
  double ref = 0, mag = 0;
  for (float x : in) ref += x, mag += std::fabs(x);
  EXPECT_NEAR(sums[0], ref, 8 * 0x1p-24 * mag);  // the depth-8 tree, as above
}

TEST(Workers, ManyBlocksOnSeveralThreadsGiveTheSameResult) {
  std::vector<float> in = random_floats(64 * 256, 15);
  emu::set_worker_threads(1);
  std::vector<float> one = emu_test::block_sums(in, 256);
  emu::set_worker_threads(4);
  std::vector<float> four = emu_test::block_sums(in, 256);
  emu::set_worker_threads(2);
  EXPECT_EQ(one, four);
}


// ---- hardware rules the emulator enforces like a GPU -----------------------------------

TEST(LaunchBounds, BlockWithinTheBoundRuns) {
  EXPECT_EQ(emu_test::run_bounded_kernel(256, 256), 256);
  EXPECT_EQ(emu_test::run_bounded_kernel(256, 64), 64);
  EXPECT_EQ(emu_test::run_bounded_kernel(128, 128), 3 * 128);
}

TEST(LaunchBounds, BlockOverTheBoundIsRefusedNamingTheKernel) {
  for (auto [bound, block, name] : {std::tuple<int, int, const char*>{256, 512, "bounded_256_kernel"},
                                    {256, 288, "bounded_256_kernel"},
                                    {128, 160, "bounded_128_kernel"}}) {
    try {
      emu_test::run_bounded_kernel(bound, block);
      ADD_FAILURE() << name << " ran with " << block << " threads over __launch_bounds__(" << bound << ")";
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(name), std::string::npos) << what;
      EXPECT_NE(what.find("too many resources requested for launch"), std::string::npos) << what;
      EXPECT_NE(what.find("exceeds the kernel's __launch_bounds__(" + std::to_string(bound) + ")"),
                std::string::npos) << what;
    }
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // check_launch consumed the error
  }
}

TEST(LaunchBounds, FuncAttributesReportTheBound) {
  EXPECT_EQ(emu_test::bounded_kernel_max_threads(256), 256);
  EXPECT_EQ(emu_test::bounded_kernel_max_threads(128), 128);
}

TEST(Alignment, AlignedPacksSumRawAndThroughTheHelper) {
  std::vector<float> in = random_floats(4 * 70 + 4, 21);
  for (int offset : {0, 4}) {
    for (bool helper : {false, true}) {
      std::vector<float> out = emu_test::pack_sums(in, offset, helper);
      ASSERT_EQ(out.size(), (in.size() - offset) / 4);
      for (size_t i = 0; i < out.size(); i++) {
        const float* p = &in[offset + 4 * i];
        EXPECT_EQ(out[i], ((p[0] + p[1]) + p[2]) + p[3]) << "offset " << offset << " pack " << i;
      }
    }
  }
}

TEST(Alignment, MisalignedHelperLoadIsALaunchErrorNamingKernelAndAddress) {
  std::vector<float> in = random_floats(4 * 70 + 4, 22);
  for (int offset : {1, 2, 3}) {  // 4, 8, 12 bytes past a 16-byte boundary
    try {
      emu_test::pack_sums(in, offset, true);
      ADD_FAILURE() << "a load128 " << 4 * offset << " bytes past a 16-byte boundary ran";
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("pack_sums_kernel"), std::string::npos) << what;
      EXPECT_NE(what.find("misaligned address 0x"), std::string::npos) << what;
      EXPECT_NE(what.find("load128 needs 16-byte alignment (the address is " + std::to_string(4 * offset) +
                          " bytes past a boundary)"), std::string::npos) << what;
    }
  }
}


// Throws unless `call` throws a std::runtime_error whose text holds every `parts`.
template <class F>
void expect_error(F&& call, std::initializer_list<const char*> parts) {
  try {
    call();
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    for (const char* part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(Faults, InjectedFaultIsAsynchronousAndStickyUntilDeviceReset) {
  std::vector<float> in = random_floats(64, 23);
  emu::inject_fault("pack_sums_kernel@2");
  EXPECT_EQ(emu_test::pack_sums(in, 0, true).size(), 16u);  // the first launch runs
  // The faulting launch itself succeeds, as on a GPU; the copy of its result finds the fault.
  expect_error([&] { emu_test::pack_sums(in, 0, true); }, {"cudaMemcpy", "an illegal memory access was encountered"});
  // The context is now unusable: other kernels and synchronisation fail too, naming the first fault.
  expect_error([] { emu_test::run_bounded_kernel(256, 64); },
               {"bounded_256_kernel not run", "earlier device fault", "pack_sums_kernel: injected fault"});
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress);  // not cleared by reading it
  EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
  emu::set_sticky_faults(false);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(emu_test::run_bounded_kernel(256, 64), 64);
}

TEST(Faults, AliasedKernelsAreNamedBySymbol) {
  // bounded_128_kernel<3> is launched through `auto* kernel = ...`: the message names both.
  expect_error([] { emu_test::run_bounded_kernel(128, 160); },
               {"launch of kernel failed", "kernel (gpt2::emu_test::bounded_128_kernel<3>)"});
}

TEST(Faults, StickyModeKeepsARealFaultButNotAConfigurationError) {
  emu::set_sticky_faults(true);
  expect_error([] { emu_test::run_bounded_kernel(256, 512); }, {"too many resources requested for launch"});
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // a refused launch leaves the context usable
  expect_error([] { emu_test::launch_device_assert(7); }, {"device-side assert triggered"});
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorAssert);
  EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
  emu::set_sticky_faults(false);
  EXPECT_EQ(emu_test::run_bounded_kernel(256, 64), 64);
}

}  // namespace
}  // namespace gpt2
