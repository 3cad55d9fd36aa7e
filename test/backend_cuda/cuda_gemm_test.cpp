// TF32 GEMMs (CudaBackendOptions::tf32) and the packed bias-gradient column sums
// (backend/cuda/matmul.cuh).
//  * The emulated cuBLAS / cuBLASLt model TF32 (emulator only; the probe is a weak
//    symbol, absent from a GPU build, where these cases skip): FAST_TF32, or
//    COMPUTE_32F under the math mode CUBLAS_TF32_TENSOR_OP_MATH, gives exactly the
//    fp32 GEMM of the inputs rounded to TF32 (to nearest, ties away from zero), and
//    the rounding matches an independent one from frexp/ldexp.
//  * The backend (any device): tf32 off is the fp32 path bit for bit (the default
//    options) and within fp32 accumulation error of an fp64 reference; tf32 on
//    differs, by at most TF32's input rounding (2^-9 of sum |a b|, which also
//    covers a GPU that truncates instead of rounding) and by more than fp32 could;
//    bf16 storage ignores the switch. Both cuBLASLt and plain cuBLAS paths.
//  * dbias by the column-sum kernels (bf16 always, fp32 on plain cuBLAS): the
//    packed (128-bit) kernel on aligned rows and the scalar one on views one
//    element off give the same bits, and match an fp64 sum.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>
#include <cublasLt.h>
#include <cublas_v2.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "test/backend_cuda/random_data.h"

// emu/cublas.cpp's TF32 rounding; weak, so that the GPU build links and skips.
namespace gpt2 {
namespace emu {
__attribute__((weak)) float round_to_tf32(float x);
}  // namespace emu
}  // namespace gpt2

namespace gpt2 {
namespace {

bool emulated() { return &emu::round_to_tf32 != nullptr; }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// TF32 rounding from the definition: 11 significant bits, half away from zero.
float tf32_reference(float x) {
  if (!std::isfinite(x) || x == 0.0f) return x;
  int e = 0;
  const double m = std::frexp(static_cast<double>(x), &e);  // |m| in [0.5, 1)
  return static_cast<float>(std::ldexp(std::round(std::ldexp(m, 11)), e - 11));
}

TEST(EmuTf32, RoundingMatchesTheDefinition) {
  if (!emulated()) GTEST_SKIP() << "the emulator's TF32 model only";
  std::vector<float> xs = randn(4096, 7, 100.0f);
  for (float base : {1.0f, -3.0f, 1e-30f, 6e4f}) {  // ties: exactly half a TF32 ulp above
    const float ulp = std::ldexp(1.0f, std::ilogb(base) - 10);
    xs.push_back(base + ulp / 2);
    xs.push_back(base + ulp * 1.5f);
    xs.push_back(base + ulp / 4);
  }
  for (float x : xs) EXPECT_EQ(emu::round_to_tf32(x), tf32_reference(x)) << x;
  EXPECT_EQ(emu::round_to_tf32(1.0f + std::ldexp(1.0f, -11)), 1.0f + std::ldexp(1.0f, -10));  // tie away
  EXPECT_TRUE(std::isinf(emu::round_to_tf32(INFINITY)));
  EXPECT_TRUE(std::isnan(emu::round_to_tf32(NAN)));
}

// Device copies of host arrays, freed at the end.
struct DeviceArrays {
  std::vector<void*> ptrs;
  ~DeviceArrays() {
    for (void* p : ptrs) cudaFree(p);
  }
  float* put(const std::vector<float>& host) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, host.size() * sizeof(float)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    ptrs.push_back(p);
    return static_cast<float*>(p);
  }
};

std::vector<float> get(const float* d, size_t n) {
  std::vector<float> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

std::vector<float> tf32_of(std::vector<float> v) {
  for (auto& x : v) x = tf32_reference(x);
  return v;
}

// C[m,n] = A[m,k] B[k,n], column-major, through cublasGemmEx and cublasLtMatmul.
TEST(EmuTf32, GemmIsTheFp32GemmOfRoundedInputs) {
  if (!emulated()) GTEST_SKIP() << "the emulator's TF32 model only";
  const int m = 24, n = 16, k = 40;
  const auto a = randn(size_t(m) * k, 1), b = randn(size_t(k) * n, 2);
  DeviceArrays d;
  float *A = d.put(a), *B = d.put(b), *Ar = d.put(tf32_of(a)), *Br = d.put(tf32_of(b));
  float* C = d.put(std::vector<float>(size_t(m) * n));
  cublasHandle_t h = nullptr;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  const float one = 1.0f, zero = 0.0f;
  auto gemm = [&](const float* x, const float* y, cublasComputeType_t compute) {
    EXPECT_EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, x, CUDA_R_32F, m, y, CUDA_R_32F, k, &zero, C,
                           CUDA_R_32F, m, compute, CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS);
    return get(C, size_t(m) * n);
  };
  const auto exact = gemm(A, B, CUBLAS_COMPUTE_32F), rounded = gemm(Ar, Br, CUBLAS_COMPUTE_32F);
  EXPECT_FALSE(same_bits(exact, rounded));
  EXPECT_TRUE(same_bits(gemm(A, B, CUBLAS_COMPUTE_32F_FAST_TF32), rounded));
  ASSERT_EQ(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH), CUBLAS_STATUS_SUCCESS);
  EXPECT_TRUE(same_bits(gemm(A, B, CUBLAS_COMPUTE_32F), rounded)) << "math mode TF32 with COMPUTE_32F";
  EXPECT_TRUE(same_bits(gemm(A, B, CUBLAS_COMPUTE_32F_PEDANTIC), exact)) << "PEDANTIC never rounds";
  ASSERT_EQ(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), CUBLAS_STATUS_SUCCESS);
  EXPECT_TRUE(same_bits(gemm(A, B, CUBLAS_COMPUTE_32F), exact));
  cublasDestroy(h);

  cublasLtHandle_t lt = nullptr;
  ASSERT_EQ(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
  auto lt_gemm = [&](cublasComputeType_t compute) {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    EXPECT_EQ(cublasLtMatmulDescCreate(&op, compute, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, m, k, m), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, k, n, k), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, m, n, m), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmul(lt, op, &one, A, la, B, lb, &zero, C, lc, C, lc, nullptr, nullptr, 0, nullptr),
              CUBLAS_STATUS_SUCCESS);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatmulDescDestroy(op);
    return get(C, size_t(m) * n);
  };
  EXPECT_TRUE(same_bits(lt_gemm(CUBLAS_COMPUTE_32F_FAST_TF32), rounded));
  EXPECT_TRUE(same_bits(lt_gemm(CUBLAS_COMPUTE_32F), exact));
  cublasLtDestroy(lt);
}

// ---- the backend --------------------------------------------------------------------------
struct LinearResult {
  std::vector<float> out, dinp, dw, dbias;
};

// One forward and backward of a linear layer on a fresh backend.
LinearResult run_linear(const CudaBackendOptions& options, int N, int C, int OC, const std::vector<float>& inp,
                        const std::vector<float>& w, const std::vector<float>& bias, const std::vector<float>& dout,
                        size_t offset = 0) {
  auto be = make_cuda_backend(0, options);
  std::vector<Tensor> owned;
  auto add = [&](const std::vector<float>& host, BufferRole role) {
    Tensor full = be->alloc(host.size() + offset, role);
    owned.push_back(full);
    Tensor view = full.slice(offset, host.size());
    be->upload(view, host.data());
    return view;
  };
  auto fetch = [&](Tensor t) {
    std::vector<float> v(t.numel);
    be->download(v.data(), t);
    return v;
  };
  Tensor x = add(inp, BufferRole::kActivations), wt = add(w, BufferRole::kParams);
  Tensor b = add(bias, BufferRole::kParams), dy = add(dout, BufferRole::kActivations);
  Tensor y = add(std::vector<float>(size_t(N) * OC), BufferRole::kActivations);
  Tensor dx = add(std::vector<float>(size_t(N) * C), BufferRole::kActivations);
  Tensor dwt = add(std::vector<float>(w.size(), 0.5f), BufferRole::kGrads);
  Tensor db = add(std::vector<float>(bias.size(), 0.25f), BufferRole::kGrads);
  be->matmul_forward({.out = y, .inp = x, .w = wt, .bias = b, .N = N, .C = C, .OC = OC});
  be->matmul_backward({.dinp = dx, .dw = dwt, .dbias = db, .dout = dy, .inp = x, .w = wt, .N = N, .C = C, .OC = OC});
  LinearResult r{fetch(y), fetch(dx), fetch(dwt), fetch(db)};
  for (Tensor t : owned) be->free(t);
  return r;
}

// Worst |got - want| / sum |terms| over a product, from fp64 references.
struct Errors {
  double worst = 0.0;  // relative to sum |a b| (+ |added|)
};
void account(Errors& e, double got, double want, double magnitude) {
  e.worst = std::max(e.worst, std::fabs(got - want) / magnitude);
}

Errors linear_errors(const LinearResult& r, int N, int C, int OC, const std::vector<float>& inp,
                     const std::vector<float>& w, const std::vector<float>& bias, const std::vector<float>& dout) {
  Errors e;
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      double s = bias[o], mag = std::fabs(bias[o]);
      for (int c = 0; c < C; c++) {
        s += double(inp[size_t(n) * C + c]) * w[size_t(o) * C + c];
        mag += std::fabs(double(inp[size_t(n) * C + c]) * w[size_t(o) * C + c]);
      }
      account(e, r.out[size_t(n) * OC + o], s, mag);
    }
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) {
      double s = 0, mag = 0;
      for (int o = 0; o < OC; o++) {
        s += double(dout[size_t(n) * OC + o]) * w[size_t(o) * C + c];
        mag += std::fabs(double(dout[size_t(n) * OC + o]) * w[size_t(o) * C + c]);
      }
      account(e, r.dinp[size_t(n) * C + c], s, mag);
    }
  for (int o = 0; o < OC; o++)
    for (int c = 0; c < C; c++) {
      double s = 0.5, mag = 0.5;
      for (int n = 0; n < N; n++) {
        s += double(dout[size_t(n) * OC + o]) * inp[size_t(n) * C + c];
        mag += std::fabs(double(dout[size_t(n) * OC + o]) * inp[size_t(n) * C + c]);
      }
      account(e, r.dw[size_t(o) * C + c], s, mag);
    }
  return e;
}

TEST(CudaTf32, OnChangesFp32GemmsWithinTf32ErrorOffIsTheFp32Path) {
  const int N = 48, C = 64, OC = 40;
  const auto inp = randn(size_t(N) * C, 11), w = randn(size_t(OC) * C, 12, 0.2f);
  const auto bias = randn(OC, 13), dout = randn(size_t(N) * OC, 14);
  for (bool lt : {true, false}) {
    CudaBackendOptions base;
    base.use_cublaslt = lt;
    CudaBackendOptions off = base, on = base;
    off.tf32 = false;
    on.tf32 = true;
    const LinearResult r_default = run_linear(base, N, C, OC, inp, w, bias, dout);
    const LinearResult r_off = run_linear(off, N, C, OC, inp, w, bias, dout);
    const LinearResult r_on = run_linear(on, N, C, OC, inp, w, bias, dout);
    const char* path = lt ? "cuBLASLt" : "cuBLAS";
    EXPECT_TRUE(same_bits(r_default.out, r_off.out) && same_bits(r_default.dinp, r_off.dinp) &&
                same_bits(r_default.dw, r_off.dw) && same_bits(r_default.dbias, r_off.dbias))
        << path << ": tf32 off is not the default fp32 path";
    const Errors e_off = linear_errors(r_off, N, C, OC, inp, w, bias, dout);
    const Errors e_on = linear_errors(r_on, N, C, OC, inp, w, bias, dout);
    // fp32: k + 2 roundings of at most 2^-24 each (k = N for dw)
    EXPECT_LE(e_off.worst, (N + 2) * std::ldexp(1.0, -24)) << path;
    // TF32: two inputs rounded by <= 2^-11 (2^-10 if truncated) each, plus fp32 accumulation
    EXPECT_LE(e_on.worst, std::ldexp(1.0, -9) + (N + 2) * std::ldexp(1.0, -24)) << path;
    EXPECT_GT(e_on.worst, 8 * (N + 2) * std::ldexp(1.0, -24)) << path << ": tf32 on looks like fp32";
    EXPECT_FALSE(same_bits(r_on.out, r_off.out)) << path;
    // dbias is a column sum, not a GEMM product: TF32 leaves it alone on the column-sum path
    if (!lt) {
      EXPECT_TRUE(same_bits(r_on.dbias, r_off.dbias));
    }
    std::printf("%s: worst error / sum|ab|: tf32 off %.2e, on %.2e\n", path, e_off.worst, e_on.worst);
  }
}

TEST(CudaTf32, Bf16IgnoresTheSwitch) {
  const int N = 32, C = 64, OC = 48;
  const auto inp = randn(size_t(N) * C, 21), w = randn(size_t(OC) * C, 22, 0.2f);
  const auto bias = randn(OC, 23), dout = randn(size_t(N) * OC, 24);
  CudaBackendOptions off, on;
  off.bf16 = on.bf16 = true;
  on.tf32 = true;
  const LinearResult a = run_linear(off, N, C, OC, inp, w, bias, dout), b = run_linear(on, N, C, OC, inp, w, bias, dout);
  EXPECT_TRUE(same_bits(a.out, b.out) && same_bits(a.dinp, b.dinp) && same_bits(a.dw, b.dw) &&
              same_bits(a.dbias, b.dbias));
}

// dbias from the column-sum kernels: packed (aligned rows, OC % pack == 0) vs scalar
// (the same data one element off), fp32 (plain cuBLAS) and bf16 (always).
TEST(CudaColumnSums, PackedAndScalarGiveTheSameBits) {
  const int N = 200, C = 16, OC = 96;  // N: several row chunks, rows of a chunk not a multiple of 8
  const auto inp = randn(size_t(N) * C, 31), w = randn(size_t(OC) * C, 32, 0.2f);
  const auto bias = randn(OC, 33), dout = randn(size_t(N) * OC, 34);
  for (bool bf16 : {false, true}) {
    CudaBackendOptions o;
    o.bf16 = bf16;
    o.use_cublaslt = bf16;  // fp32 on cuBLASLt would take BGRADB
    const LinearResult packed = run_linear(o, N, C, OC, inp, w, bias, dout, 0);
    const LinearResult scalar = run_linear(o, N, C, OC, inp, w, bias, dout, 1);
    EXPECT_TRUE(same_bits(packed.dbias, scalar.dbias)) << (bf16 ? "bf16" : "fp32");
    if (bf16) continue;  // the bf16 path is checked per element by cuda_bf16_test's reference
    for (int o = 0; o < OC; o++) {
      double s = 0.25, mag = 0.25;
      for (int n = 0; n < N; n++) s += dout[size_t(n) * OC + o], mag += std::fabs(dout[size_t(n) * OC + o]);
      EXPECT_NEAR(packed.dbias[o], s, (N + 2) * std::ldexp(1.0, -24) * mag) << "column " << o;
    }
  }
}

}  // namespace
}  // namespace gpt2
