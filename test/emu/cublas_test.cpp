// cuBLAS / cuBLASLt emulation against a naive double-precision reference:
// every transpose combination, padded leading dimensions, strided batches, fp32
// and bf16, every supported cuBLASLt epilogue, and the documented error codes;
// cuBLASLt's documented restrictions (alignment promises, 16-byte bias, bias type)
// each shown by a planted violation that is refused and its twin that is accepted,
// and the switch that makes the heuristic refuse everything.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include "emu/control.h"

namespace gpt2 {
namespace {

// A column-major matrix of `rows x cols` with leading dimension ld per batch entry,
// held on the host as fp32 values already representable in `type`.
struct HostMatrix {
  int rows = 0, cols = 0, ld = 0, batch = 1;
  long long stride = 0;
  cudaDataType type = CUDA_R_32F;
  std::vector<float> v;
  float at(int b, int r, int c) const { return v[static_cast<size_t>(b * stride + r + c * ld)]; }
};

float round_to(cudaDataType t, float x) { return t == CUDA_R_16BF ? __bfloat162float(__float2bfloat16(x)) : x; }

// Batches are not packed: stride_pad elements between them (and after the last).
HostMatrix random_matrix(int rows, int cols, int pad, int batch, cudaDataType type, uint32_t seed,
                         int stride_pad = 5) {
  HostMatrix m;
  m.rows = rows, m.cols = cols, m.ld = rows + pad, m.batch = batch, m.type = type;
  m.stride = static_cast<long long>(m.ld) * cols + stride_pad;
  m.v.assign(static_cast<size_t>(m.stride * batch), 0.0f);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& x : m.v) x = round_to(type, dist(rng));
  return m;
}

// Device copy in the matrix's storage type.
struct DeviceMatrix {
  void* ptr = nullptr;
  size_t n = 0;
  cudaDataType type;
  explicit DeviceMatrix(const HostMatrix& h) : n(h.v.size()), type(h.type) { upload(h.v); }
  DeviceMatrix(size_t count, cudaDataType t) : n(count), type(t) {
    EXPECT_EQ(cudaMalloc(&ptr, count * (t == CUDA_R_32F ? 4 : 2)), cudaSuccess);
  }
  ~DeviceMatrix() { cudaFree(ptr); }
  void upload(const std::vector<float>& v) {
    if (ptr == nullptr) {
      EXPECT_EQ(cudaMalloc(&ptr, n * (type == CUDA_R_32F ? 4 : 2)), cudaSuccess);
    }
    if (type == CUDA_R_32F) {  // NOLINT
      cudaMemcpy(ptr, v.data(), n * 4, cudaMemcpyHostToDevice);
    } else {
      std::vector<__nv_bfloat16> b(n);
      for (size_t i = 0; i < n; ++i) b[i] = __float2bfloat16(v[i]);
      cudaMemcpy(ptr, b.data(), n * 2, cudaMemcpyHostToDevice);
    }
  }
  std::vector<float> download() const {
    std::vector<float> v(n);
    if (type == CUDA_R_32F) {
      cudaMemcpy(v.data(), ptr, n * 4, cudaMemcpyDeviceToHost);
    } else {
      std::vector<__nv_bfloat16> b(n);
      cudaMemcpy(b.data(), ptr, n * 2, cudaMemcpyDeviceToHost);
      for (size_t i = 0; i < n; ++i) v[i] = __bfloat162float(b[i]);
    }
    return v;
  }
};

double op_at(const HostMatrix& m, int b, bool trans, int r, int c) { return trans ? m.at(b, c, r) : m.at(b, r, c); }

// alpha * op(A) op(B) + beta * C for one batch entry, in double.
double reference(const HostMatrix& a, bool ta, const HostMatrix& b, bool tb, const HostMatrix* c, int batch, int i,
                 int j, int k, double alpha, double beta) {
  double s = 0;
  for (int p = 0; p < k; ++p) s += op_at(a, batch, ta, i, p) * op_at(b, batch, tb, p, j);
  s *= alpha;
  if (beta != 0.0) s += beta * c->at(batch, i, j);
  return s;
}

// fp32-accumulated results compared with a double reference; bf16 outputs
// additionally carry one rounding (2^-9 relative, doubled for a tie at a boundary).
// The fp32 part, worst case in any order: k <= 11 products of entries in [-1, 1]
// times |alpha| <= 1.5, plus |beta c| <= 2 and a bias <= 1: gamma(k+3) (1.5 k + 3)
// < 14 2^-24 19.5 = 1.6e-5; through a GELU epilogue (slope <= 1.13, its own few
// ulp of |x| <= 20) < 4e-5. 1e-4 holds them with room.
double tolerance(cudaDataType out, double ref) { return (out == CUDA_R_16BF ? std::ldexp(std::fabs(ref), -8) : 0.0) + 1e-4; }

class GemmExTest : public ::testing::TestWithParam<std::tuple<cublasOperation_t, cublasOperation_t, cudaDataType, cudaDataType>> {};

TEST_P(GemmExTest, StridedBatchedMatchesReference) {
  auto [op_a, op_b, in_type, out_type] = GetParam();
  const int m = 5, n = 7, k = 9, batch = 3;
  bool ta = op_a == CUBLAS_OP_T, tb = op_b == CUBLAS_OP_T;
  HostMatrix a = random_matrix(ta ? k : m, ta ? m : k, 3, batch, in_type, 1);
  HostMatrix b = random_matrix(tb ? n : k, tb ? k : n, 2, batch, in_type, 2);
  HostMatrix c = random_matrix(m, n, 1, batch, out_type, 3);
  DeviceMatrix da(a), db(b), dc(c);
  cublasHandle_t handle;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  const float alpha = 1.5f, beta = 0.5f;
  if (in_type == CUDA_R_32F && out_type == CUDA_R_16BF) {  // not among cuBLAS's type combinations
    EXPECT_EQ(cublasGemmStridedBatchedEx(handle, op_a, op_b, m, n, k, &alpha, da.ptr, in_type, a.ld, a.stride, db.ptr,
                                         in_type, b.ld, b.stride, &beta, dc.ptr, out_type, c.ld, c.stride, batch,
                                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_NOT_SUPPORTED);
    cublasDestroy(handle);
    return;
  }
  ASSERT_EQ(cublasGemmStridedBatchedEx(handle, op_a, op_b, m, n, k, &alpha, da.ptr, in_type, a.ld, a.stride, db.ptr,
                                       in_type, b.ld, b.stride, &beta, dc.ptr, out_type, c.ld, c.stride, batch,
                                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  std::vector<float> got = dc.download();
  for (int bt = 0; bt < batch; ++bt)
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double ref = reference(a, ta, b, tb, &c, bt, i, j, k, alpha, beta);
        EXPECT_NEAR(got[bt * c.stride + i + j * c.ld], ref, tolerance(out_type, ref)) << bt << "," << i << "," << j;
      }
  // padding between columns and batches is untouched
  EXPECT_EQ(got[c.ld - 1], c.v[c.ld - 1]);
  EXPECT_EQ(got[c.stride - 1], c.v[c.stride - 1]);

  // single GEMM with beta = 0: C is poisoned with NaN and must not be read
  DeviceMatrix dc0(c.v.size(), out_type);
  const float zero = 0.0f;
  ASSERT_EQ(cublasGemmEx(handle, op_a, op_b, m, n, k, &alpha, da.ptr, in_type, a.ld, db.ptr, in_type, b.ld, &zero,
                         dc0.ptr, out_type, c.ld, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  std::vector<float> got0 = dc0.download();
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double ref = reference(a, ta, b, tb, nullptr, 0, i, j, k, alpha, 0.0);
      EXPECT_NEAR(got0[i + j * c.ld], ref, tolerance(out_type, ref));
    }
  ASSERT_EQ(cublasDestroy(handle), CUBLAS_STATUS_SUCCESS);
}

INSTANTIATE_TEST_SUITE_P(
    AllOps, GemmExTest,
    ::testing::Combine(::testing::Values(CUBLAS_OP_N, CUBLAS_OP_T), ::testing::Values(CUBLAS_OP_N, CUBLAS_OP_T),
                       ::testing::Values(CUDA_R_32F, CUDA_R_16BF), ::testing::Values(CUDA_R_32F, CUDA_R_16BF)),
    [](const auto& info) {
      auto name = [](cudaDataType t) { return t == CUDA_R_32F ? std::string("f32") : std::string("bf16"); };
      return std::string(std::get<0>(info.param) == CUBLAS_OP_N ? "N" : "T") +
             (std::get<1>(info.param) == CUBLAS_OP_N ? "N" : "T") + "_" + name(std::get<2>(info.param)) + "_" +
             name(std::get<3>(info.param));
    });

TEST(Cublas, SgemmAndSgemmStridedBatched) {
  const int m = 4, n = 3, k = 6, batch = 2;
  HostMatrix a = random_matrix(k, m, 0, batch, CUDA_R_32F, 4), b = random_matrix(k, n, 1, batch, CUDA_R_32F, 5);
  HostMatrix c = random_matrix(m, n, 0, batch, CUDA_R_32F, 6);
  DeviceMatrix da(a), db(b), dc(c);
  cublasHandle_t handle;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  const float alpha = -1.0f, beta = 2.0f;
  ASSERT_EQ(cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, static_cast<float*>(da.ptr), a.ld,
                        static_cast<float*>(db.ptr), b.ld, &beta, static_cast<float*>(dc.ptr), c.ld),
            CUBLAS_STATUS_SUCCESS);
  std::vector<float> got = dc.download();
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j)
      EXPECT_NEAR(got[i + j * c.ld], reference(a, true, b, false, &c, 0, i, j, k, alpha, beta), 1e-4);
  dc.upload(c.v);
  ASSERT_EQ(cublasSgemmStridedBatched(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, static_cast<float*>(da.ptr),
                                      a.ld, a.stride, static_cast<float*>(db.ptr), b.ld, b.stride, &beta,
                                      static_cast<float*>(dc.ptr), c.ld, c.stride, batch),
            CUBLAS_STATUS_SUCCESS);
  got = dc.download();
  for (int bt = 0; bt < batch; ++bt)
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j)
        EXPECT_NEAR(got[bt * c.stride + i + j * c.ld], reference(a, true, b, false, &c, bt, i, j, k, alpha, beta), 1e-4);
  cublasDestroy(handle);
}

// The emulator's fixed summation order (emu/gemm.cpp): one fma chain per element
// over k ascending, so every output equals this scalar loop bit for bit on any
// CPU, and a row does not depend on how many rows the product has (OpenBLAS's
// kernels, chosen per CPU, give neither).
float fma_chain(const HostMatrix& a, bool ta, const HostMatrix& b, bool tb, int i, int j, int k, float alpha) {
  float s = 0.0f;
  for (int p = 0; p < k; ++p)
    s = std::fma(static_cast<float>(op_at(a, 0, ta, i, p)), static_cast<float>(op_at(b, 0, tb, p, j)), s);
  return alpha * s;
}

TEST(EmuGemm, EveryElementIsTheFixedOrderFmaChain) {
  cublasHandle_t handle;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  // Shapes around the 4 x 32 tile: full tiles, edges, k long enough for rounding to show.
  for (auto [m, n, k] : {std::array<int, 3>{37, 70, 29}, {64, 96, 300}, {5, 33, 1}}) {
    for (cudaDataType type : {CUDA_R_32F, CUDA_R_16BF}) {
      HostMatrix a = random_matrix(k, m, 3, 1, type, 11), b = random_matrix(k, n, 0, 1, type, 12);
      DeviceMatrix da(a), db(b), dc(static_cast<size_t>(m) * n, CUDA_R_32F);
      const float alpha = 0.75f, beta = 0.0f;
      ASSERT_EQ(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, da.ptr, type, a.ld, db.ptr, type, b.ld,
                             &beta, dc.ptr, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                CUBLAS_STATUS_SUCCESS);
      const std::vector<float> got = dc.download();
      int differ = 0;
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) differ += got[i + j * m] != fma_chain(a, true, b, false, i, j, k, alpha);
      EXPECT_EQ(differ, 0) << m << "x" << n << "x" << k << (type == CUDA_R_32F ? " fp32" : " bf16");
    }
  }
  cublasDestroy(handle);
}

TEST(EmuGemm, ARowDoesNotDependOnTheNumberOfRows) {
  const int n = 40, k = 257;
  HostMatrix a = random_matrix(48, k, 0, 1, CUDA_R_32F, 21), b = random_matrix(k, n, 0, 1, CUDA_R_32F, 22);
  DeviceMatrix da(a), db(b), c48(48 * n, CUDA_R_32F), c32(32 * n, CUDA_R_32F);
  cublasHandle_t handle;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  const float alpha = 1.0f, beta = 0.0f;
  // The first 32 rows of A (same leading dimension 48) against all 48.
  ASSERT_EQ(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, 48, n, k, &alpha, static_cast<float*>(da.ptr), 48,
                        static_cast<float*>(db.ptr), k, &beta, static_cast<float*>(c48.ptr), 48),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, 32, n, k, &alpha, static_cast<float*>(da.ptr), 48,
                        static_cast<float*>(db.ptr), k, &beta, static_cast<float*>(c32.ptr), 32),
            CUBLAS_STATUS_SUCCESS);
  const std::vector<float> all = c48.download(), first = c32.download();
  int differ = 0;
  for (int i = 0; i < 32; ++i)
    for (int j = 0; j < n; ++j) differ += all[i + j * 48] != first[i + j * 32];
  EXPECT_EQ(differ, 0);
  cublasDestroy(handle);
}

TEST(Cublas, DocumentedErrorCodes) {
  float alpha = 1, beta = 0;
  DeviceMatrix buf(64, CUDA_R_32F);
  EXPECT_EQ(cublasGemmEx(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &alpha, buf.ptr, CUDA_R_32F, 2, buf.ptr, CUDA_R_32F,
                         2, &beta, buf.ptr, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_NOT_INITIALIZED);
  cublasHandle_t h;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  auto gemm = [&](int m, int n, int k, cublasOperation_t ta, int lda, int ldb, int ldc, cudaDataType at, cudaDataType bt,
                  cublasComputeType_t ct) {
    return cublasGemmEx(h, ta, CUBLAS_OP_N, m, n, k, &alpha, buf.ptr, at, lda, buf.ptr, bt, ldb, &beta, buf.ptr,
                        CUDA_R_32F, ldc, ct, CUBLAS_GEMM_DEFAULT);
  };
  EXPECT_EQ(gemm(-1, 2, 2, CUBLAS_OP_N, 2, 2, 2, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(gemm(4, 2, 2, CUBLAS_OP_N, 3, 2, 4, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F), CUBLAS_STATUS_INVALID_VALUE);  // lda < m
  EXPECT_EQ(gemm(4, 2, 3, CUBLAS_OP_T, 2, 3, 4, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F), CUBLAS_STATUS_INVALID_VALUE);  // lda < k
  EXPECT_EQ(gemm(4, 2, 3, CUBLAS_OP_T, 3, 2, 4, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F), CUBLAS_STATUS_INVALID_VALUE);  // ldb < k
  EXPECT_EQ(gemm(4, 2, 2, CUBLAS_OP_N, 4, 2, 3, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F), CUBLAS_STATUS_INVALID_VALUE);  // ldc < m
  EXPECT_EQ(gemm(2, 2, 2, CUBLAS_OP_N, 2, 2, 2, CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(gemm(2, 2, 2, CUBLAS_OP_N, 2, 2, 2, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_16F), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(gemm(0, 2, 2, CUBLAS_OP_N, 1, 2, 1, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F), CUBLAS_STATUS_SUCCESS);  // quick return
  cublasDestroy(h);
}

// ---- cuBLASLt -----------------------------------------------------------------------------------
double gelu(double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }
double gelu_grad(double x) {
  double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x), t = std::tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * std::sqrt(2.0 / M_PI) * (1.0 + 3.0 * 0.044715 * x * x);
}

// A padded layout cuBLASLt accepts (cuBLAS accepts any): every column and batch
// entry starts 16-byte aligned, i.e. ld and batch stride are multiples of 8 elements.
HostMatrix lt_matrix(int rows, int cols, int batch, cudaDataType type, uint32_t seed) {
  const int ld = (rows + 1 + 7) / 8 * 8;
  return random_matrix(rows, cols, ld - rows, batch, type, seed, 8);
}

struct LtCase {
  cublasOperation_t op_a, op_b;
  cudaDataType type;
  cublasLtEpilogue_t epilogue;
  int batch;
};

class LtTest : public ::testing::TestWithParam<LtCase> {};

TEST_P(LtTest, MatmulWithEpilogueMatchesReference) {
  const LtCase p = GetParam();
  const int m = 16, n = 6, k = 11;
  bool ta = p.op_a == CUBLAS_OP_T, tb = p.op_b == CUBLAS_OP_T;
  HostMatrix a = lt_matrix(ta ? k : m, ta ? m : k, p.batch, p.type, 11);
  HostMatrix b = lt_matrix(tb ? n : k, tb ? k : n, p.batch, p.type, 12);
  HostMatrix c = lt_matrix(m, n, p.batch, p.type, 13);
  HostMatrix aux = random_matrix(m, n, 8 - m % 8 == 8 ? 0 : 8 - m % 8, p.batch, p.type, 14);  // ld multiple of 8
  aux.ld = 16;
  aux.stride = 16 * n + 8;  // batch stride multiple of 8
  aux.v.assign(static_cast<size_t>(aux.stride * p.batch), 0.0f);
  std::mt19937 rng(15);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  for (float& x : aux.v) x = round_to(p.type, dist(rng));
  const int bias_len = p.epilogue == CUBLASLT_EPILOGUE_BGRADB ? n : m;
  const long long bias_stride = (bias_len + 7) / 8 * 8 + 8;  // each batch's vector 16-byte aligned
  std::vector<float> bias(static_cast<size_t>(bias_stride * p.batch));
  for (float& x : bias) x = round_to(p.type, dist(rng));

  DeviceMatrix da(a), db(b), dc(c), dd(c.v.size(), p.type), daux(aux), dbias(bias.size(), p.type);
  dbias.upload(bias);
  cublasLtHandle_t lt;
  ASSERT_EQ(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulDesc_t desc;
  ASSERT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &p.op_a, sizeof(p.op_a)), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &p.op_b, sizeof(p.op_b)), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &p.epilogue, sizeof(p.epilogue)),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias.ptr, sizeof(void*)),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &bias_stride, sizeof(bias_stride)),
            CUBLAS_STATUS_SUCCESS);
  int64_t aux_ld = aux.ld, aux_stride = aux.stride;
  ASSERT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &daux.ptr, sizeof(void*)),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &aux_stride,
                                           sizeof(aux_stride)),
            CUBLAS_STATUS_SUCCESS);
  auto make_layout = [&](const HostMatrix& h) {
    cublasLtMatrixLayout_t l;
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&l, h.type, h.rows, h.cols, h.ld), CUBLAS_STATUS_SUCCESS);
    int32_t count = h.batch;
    int64_t stride = h.stride;
    EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)),
              CUBLAS_STATUS_SUCCESS);
    return l;
  };
  cublasLtMatrixLayout_t la = make_layout(a), lb = make_layout(b), lc = make_layout(c);
  cublasLtMatmulPreference_t pref;
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
  uint64_t workspace = 1 << 20;
  ASSERT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                 sizeof(workspace)),
            CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t heuristic;
  int returned = 0;
  ASSERT_EQ(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 1, &heuristic, &returned),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(returned, 1);
  EXPECT_EQ(heuristic.state, CUBLAS_STATUS_SUCCESS);
  const float alpha = 0.75f, beta = p.epilogue == CUBLASLT_EPILOGUE_DEFAULT || p.epilogue == CUBLASLT_EPILOGUE_BIAS ? 0.5f : 0.0f;
  ASSERT_EQ(cublasLtMatmul(lt, desc, &alpha, da.ptr, la, db.ptr, lb, &beta, dc.ptr, lc, dd.ptr, lc, &heuristic.algo,
                           nullptr, 0, 0),
            CUBLAS_STATUS_SUCCESS);
  std::vector<float> got = dd.download(), got_aux = daux.download(), got_bias = dbias.download();
  uint32_t e = p.epilogue;
  for (int bt = 0; bt < p.batch; ++bt) {
    std::vector<double> row_sum(m, 0.0);
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double x = reference(a, ta, b, tb, &c, bt, i, j, k, alpha, beta);
        if (e & CUBLASLT_EPILOGUE_BIAS) x += bias[bt * bias_stride + i];
        if (e & CUBLASLT_EPILOGUE_GELU) {
          if (e & 128) {
            EXPECT_NEAR(got_aux[bt * aux.stride + i + j * aux.ld], x, tolerance(p.type, x)) << "aux " << i << "," << j;
          }
          x = gelu(x);
        } else if (e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD) {
          x *= gelu_grad(aux.at(bt, i, j));
        }
        row_sum[i] += x;
        EXPECT_NEAR(got[bt * c.stride + i + j * c.ld], x, tolerance(p.type, x) + 1e-5) << bt << "," << i << "," << j;
      }
    if (e == CUBLASLT_EPILOGUE_DGELU_BGRAD) {
      for (int i = 0; i < m; ++i) EXPECT_NEAR(got_bias[bt * bias_stride + i], row_sum[i], tolerance(p.type, row_sum[i]) + 1e-4);
    }
    if (e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB) {
      bool from_a = e == CUBLASLT_EPILOGUE_BGRADA;
      for (int idx = 0; idx < bias_len; ++idx) {
        double s = 0;
        for (int kk = 0; kk < k; ++kk) s += from_a ? op_at(a, bt, ta, idx, kk) : op_at(b, bt, tb, kk, idx);
        EXPECT_NEAR(got_bias[bt * bias_stride + idx], s, tolerance(p.type, s)) << "bias grad " << idx;
      }
    }
    if (!(e & (16 | 256 | 512))) {  // no bias gradient: the bias buffer is only read
      for (int i = 0; i < bias_len; ++i) EXPECT_EQ(got_bias[bt * bias_stride + i], bias[bt * bias_stride + i]);
    }
  }
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(lt);
}

std::vector<LtCase> lt_cases() {
  std::vector<LtCase> cases;
  const cublasLtEpilogue_t epilogues[] = {CUBLASLT_EPILOGUE_DEFAULT,  CUBLASLT_EPILOGUE_BIAS,
                                          CUBLASLT_EPILOGUE_GELU,     CUBLASLT_EPILOGUE_GELU_AUX,
                                          CUBLASLT_EPILOGUE_GELU_BIAS, CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
                                          CUBLASLT_EPILOGUE_DGELU,    CUBLASLT_EPILOGUE_DGELU_BGRAD,
                                          CUBLASLT_EPILOGUE_BGRADA,   CUBLASLT_EPILOGUE_BGRADB};
  for (cudaDataType t : {CUDA_R_32F, CUDA_R_16BF})
    for (cublasLtEpilogue_t e : epilogues)
      for (cublasOperation_t oa : {CUBLAS_OP_N, CUBLAS_OP_T})
        for (cublasOperation_t ob : {CUBLAS_OP_N, CUBLAS_OP_T}) cases.push_back({oa, ob, t, e, oa == ob ? 2 : 1});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllEpilogues, LtTest, ::testing::ValuesIn(lt_cases()), [](const auto& info) {
  const LtCase& c = info.param;
  return std::string(c.op_a == CUBLAS_OP_N ? "N" : "T") + (c.op_b == CUBLAS_OP_N ? "N" : "T") +
         (c.type == CUDA_R_32F ? "_f32_" : "_bf16_") + "epi" + std::to_string(static_cast<int>(c.epilogue)) +
         "_batch" + std::to_string(c.batch);
});

TEST(CublasLt, HeuristicRejectsUnsupportedOrInvalidProblems) {
  cublasLtHandle_t lt;
  ASSERT_EQ(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulDesc_t desc;
  ASSERT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  cublasLtMatrixLayout_t a, b, c, bad;
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&a, CUDA_R_32F, 8, 4, 8), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&b, CUDA_R_32F, 4, 3, 4), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&c, CUDA_R_32F, 8, 3, 8), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&bad, CUDA_R_32F, 5, 3, 5), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulPreference_t pref;
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t r;
  int n = -1;
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(lt, desc, a, b, c, c, pref, 1, &r, &n), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(lt, desc, a, b, bad, bad, pref, 1, &r, &n), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(n, 0);
  cublasLtEpilogue_t relu_aux = CUBLASLT_EPILOGUE_RELU_AUX;
  ASSERT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &relu_aux, sizeof(relu_aux)),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(lt, desc, a, b, c, c, pref, 1, &r, &n), CUBLAS_STATUS_NOT_SUPPORTED);
  cublasLtEpilogue_t gelu_aux = CUBLASLT_EPILOGUE_GELU_AUX;
  int64_t aux_ld = 12;  // not a multiple of 8
  ASSERT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &gelu_aux, sizeof(gelu_aux)),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(lt, desc, a, b, c, c, pref, 1, &r, &n), CUBLAS_STATUS_INVALID_VALUE);
  // attribute size checks and size queries
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &gelu_aux, 2), CUBLAS_STATUS_INVALID_VALUE);
  size_t needed = 0;
  EXPECT_EQ(cublasLtMatmulDescGetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, nullptr, 0, &needed),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(needed, sizeof(int64_t));
  int64_t read_back = 0;
  EXPECT_EQ(cublasLtMatmulDescGetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &read_back, sizeof(read_back), &needed),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(read_back, 12);
  int32_t row_order = CUBLASLT_ORDER_ROW;
  cublasLtEpilogue_t plain = CUBLASLT_EPILOGUE_DEFAULT;
  ASSERT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &plain, sizeof(plain)), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutSetAttribute(a, CUBLASLT_MATRIX_LAYOUT_ORDER, &row_order, sizeof(row_order)),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(lt, desc, a, b, c, c, pref, 1, &r, &n), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(nullptr, desc, a, b, c, c, pref, 1, &r, &n), CUBLAS_STATUS_NOT_INITIALIZED);
  for (auto l : {a, b, c, bad}) cublasLtMatrixLayoutDestroy(l);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(lt);
}

// ---- cuBLASLt's documented restrictions: each planted violation refused, its twin accepted ----
enum Operand { kA, kB, kC, kD };
const char* const kOperandName[] = {"A", "B", "C", "D"};
const cublasLtMatmulPreferenceAttributes_t kMinAlignment[] = {
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
using Offsets = std::array<size_t, 4>;  // bytes added to the A, B, C, D pointers

// One small problem, D[m,n] = A[m,k] B[k,n] + 0.5 C (+ epilogue), on buffers with
// spare elements after each matrix, so that any pointer can be offset to plant an
// under-aligned one (cudaMalloc itself is 256-byte aligned).
struct LtProbe {
  static constexpr int m = 16, n = 8, k = 8, spare = 64;
  cudaDataType type;
  HostMatrix host[4];
  std::unique_ptr<DeviceMatrix> dev[4], bias;
  std::vector<float> bias_host;
  cublasLtHandle_t lt = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatrixLayout_t layouts[4] = {};

  explicit LtProbe(cudaDataType t) : type(t) {
    const int rows[4] = {m, k, m, m}, cols[4] = {k, n, n, n};
    for (int i = 0; i < 4; ++i) {
      host[i] = random_matrix(rows[i], cols[i], 0, 1, t, 40 + i, spare);
      dev[i] = std::make_unique<DeviceMatrix>(host[i]);
    }
    bias_host.resize(m + spare);
    std::mt19937 rng(50);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float& x : bias_host) x = round_to(t, dist(rng));
    bias = std::make_unique<DeviceMatrix>(bias_host.size(), t);
    bias->upload(bias_host);
    EXPECT_EQ(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
    for (int i = 0; i < 4; ++i) set_ld(static_cast<Operand>(i), host[i].ld);
  }
  ~LtProbe() {
    for (auto l : layouts) cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(lt);
  }
  void set_ld(Operand o, int64_t ld) {
    if (layouts[o] != nullptr) cublasLtMatrixLayoutDestroy(layouts[o]);
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&layouts[o], type, host[o].rows, host[o].cols, ld), CUBLAS_STATUS_SUCCESS);
  }
  void set_epilogue(cublasLtEpilogue_t e) {
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e), CUBLAS_STATUS_SUCCESS);
  }
  void set_bias(size_t offset_bytes) {
    const void* p = static_cast<const char*>(bias->ptr) + offset_bytes;
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p, sizeof p), CUBLAS_STATUS_SUCCESS);
  }
  void set_bias_type(cudaDataType t) {
    const int32_t v = t;
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &v, sizeof v), CUBLAS_STATUS_SUCCESS);
  }
  void prefer_alignment(Operand o, uint32_t bytes) {
    EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, kMinAlignment[o], &bytes, sizeof bytes), CUBLAS_STATUS_SUCCESS);
  }
  cublasStatus_t heuristic(int* returned, cublasLtMatmulHeuristicResult_t* r) {
    *returned = -1;
    return cublasLtMatmulAlgoGetHeuristic(lt, desc, layouts[kA], layouts[kB], layouts[kC], layouts[kD], pref, 1, r,
                                          returned);
  }
  // The heuristic's algorithm, or a failure naming what it returned instead.
  ::testing::AssertionResult one_algorithm(cublasLtMatmulAlgo_t* algo) {
    int returned;
    cublasLtMatmulHeuristicResult_t r;
    const cublasStatus_t s = heuristic(&returned, &r);
    if (s != CUBLAS_STATUS_SUCCESS || returned != 1 || r.state != CUBLAS_STATUS_SUCCESS)
      return ::testing::AssertionFailure() << "status " << s << ", " << returned << " results";
    *algo = r.algo;
    return ::testing::AssertionSuccess();
  }
  void* at(Operand o, size_t offset) const { return static_cast<char*>(dev[o]->ptr) + offset; }
  cublasStatus_t run(const cublasLtMatmulAlgo_t* algo, Offsets off = {}) {
    const float alpha = 1.0f, beta = 0.5f;
    return cublasLtMatmul(lt, desc, &alpha, at(kA, off[kA]), layouts[kA], at(kB, off[kB]), layouts[kB], &beta,
                          at(kC, off[kC]), layouts[kC], at(kD, off[kD]), layouts[kD], algo, nullptr, 0, 0);
  }
  // D as run() with `off` must have computed it (plus the bias at bias_offset bytes).
  void expect_product(Offsets off, long bias_offset = -1) const {
    const size_t e = type == CUDA_R_32F ? 4 : 2;
    const std::vector<float> got = dev[kD]->download();
    auto el = [&](Operand o, int r, int c) { return host[o].v[off[o] / e + r + c * host[o].ld]; };
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double ref = 0.5 * el(kC, i, j);
        for (int p = 0; p < k; ++p) ref += double(el(kA, i, p)) * el(kB, p, j);
        if (bias_offset >= 0) ref += bias_host[bias_offset / e + i];
        EXPECT_NEAR(got[off[kD] / e + i + j * host[kD].ld], ref, tolerance(type, ref)) << i << "," << j;
      }
  }
};

std::vector<cudaDataType> lt_types() { return {CUDA_R_32F, CUDA_R_16BF}; }

// No MIN_ALIGNMENT preference: cuBLASLt assumes 256-byte-aligned A, B, C, D, so an
// operand sliced at 16 bytes (enough for the kernel) breaks the promise.
TEST(CublasLtStrict, DefaultPreferencePromises256Bytes) {
  for (cudaDataType t : lt_types()) {
    LtProbe probe(t);
    cublasLtMatmulAlgo_t algo;
    ASSERT_TRUE(probe.one_algorithm(&algo));
    ASSERT_EQ(probe.run(&algo), CUBLAS_STATUS_SUCCESS);  // twin: cudaMalloc pointers
    probe.expect_product({});
    ASSERT_EQ(probe.run(nullptr), CUBLAS_STATUS_SUCCESS);  // implicit heuristic, same promise
    for (int o = kA; o <= kD; ++o) {
      Offsets off{};
      off[o] = 16;
      EXPECT_EQ(probe.run(&algo, off), CUBLAS_STATUS_NOT_SUPPORTED) << kOperandName[o];  // planted
      EXPECT_EQ(probe.run(nullptr, off), CUBLAS_STATUS_NOT_SUPPORTED) << kOperandName[o];
    }
  }
}

// A preference below 16 bytes leaves no algorithm (SUCCESS with zero results, as
// the header documents for a query that finds nothing); 16 is enough, and then
// cublasLtMatmul holds the pointer to it.
TEST(CublasLtStrict, UnderAlignedOperandRefusedByTheHeuristic) {
  for (cudaDataType t : lt_types()) {
    for (int o = kA; o <= kD; ++o) {
      LtProbe probe(t);
      const Operand op = static_cast<Operand>(o);
      int returned;
      cublasLtMatmulHeuristicResult_t r;
      probe.prefer_alignment(op, 8);  // planted: an 8-byte-aligned slice, declared honestly
      EXPECT_EQ(probe.heuristic(&returned, &r), CUBLAS_STATUS_SUCCESS);
      EXPECT_EQ(returned, 0) << kOperandName[o];
      probe.prefer_alignment(op, 16);  // twin
      cublasLtMatmulAlgo_t algo;
      ASSERT_TRUE(probe.one_algorithm(&algo)) << kOperandName[o];
      Offsets off{};
      off[o] = 16;
      ASSERT_EQ(probe.run(&algo, off), CUBLAS_STATUS_SUCCESS) << kOperandName[o];
      probe.expect_product(off);
      off[o] = 8;  // planted: the pointer breaks the 16-byte promise
      EXPECT_EQ(probe.run(&algo, off), CUBLAS_STATUS_NOT_SUPPORTED) << kOperandName[o];
    }
  }
}

// The promise covers every column: ld (and the batch stride) in bytes must keep
// each column start 16-byte aligned.
TEST(CublasLtStrict, LeadingDimensionKeepsColumnsAligned) {
  for (cudaDataType t : lt_types()) {
    const int64_t elems_per_16_bytes = t == CUDA_R_32F ? 4 : 8;
    LtProbe probe(t);
    int returned;
    cublasLtMatmulHeuristicResult_t r;
    probe.set_ld(kA, LtProbe::m + elems_per_16_bytes / 2);  // planted: columns 8 bytes apart from aligned
    EXPECT_EQ(probe.heuristic(&returned, &r), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(returned, 0);
    probe.set_ld(kA, LtProbe::m + elems_per_16_bytes);  // twin
    cublasLtMatmulAlgo_t algo;
    EXPECT_TRUE(probe.one_algorithm(&algo));
    const int32_t batches = 2;
    for (auto* l : probe.layouts)
      ASSERT_EQ(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batches, sizeof batches),
                CUBLAS_STATUS_SUCCESS);
    auto set_stride = [&](int64_t stride) {
      ASSERT_EQ(cublasLtMatrixLayoutSetAttribute(probe.layouts[kB], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                 &stride, sizeof stride),
                CUBLAS_STATUS_SUCCESS);
    };
    set_stride(LtProbe::k * LtProbe::n + elems_per_16_bytes / 2);  // planted: misaligned second batch of B
    EXPECT_EQ(probe.heuristic(&returned, &r), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(returned, 0);
    set_stride(LtProbe::k * LtProbe::n + elems_per_16_bytes);  // twin
    EXPECT_TRUE(probe.one_algorithm(&algo));
  }
}

// The heuristic does not judge the bias pointer; a GPU kernel faults on one that is
// not 16-byte aligned, so cublasLtMatmul fails (EXECUTION_FAILED, and the thread's
// last CUDA error is cudaErrorMisalignedAddress). Bias and bias gradient alike.
TEST(CublasLtStrict, BiasPointerMustBe16ByteAligned) {
  for (cudaDataType t : lt_types()) {
    for (cublasLtEpilogue_t e : {CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_BGRADB}) {
      LtProbe probe(t);
      probe.set_epilogue(e);
      probe.set_bias(8);  // planted
      cublasLtMatmulAlgo_t algo;
      ASSERT_TRUE(probe.one_algorithm(&algo));
      EXPECT_EQ(probe.run(&algo), CUBLAS_STATUS_EXECUTION_FAILED) << e;
      EXPECT_EQ(cudaGetLastError(), cudaErrorMisalignedAddress);
      probe.set_bias(16);  // twin
      ASSERT_EQ(probe.run(&algo), CUBLAS_STATUS_SUCCESS) << e;
      if (e == CUBLASLT_EPILOGUE_BIAS) probe.expect_product({}, 16);
    }
  }
}

// The heuristic takes the bias vector's alignment from the pointer the descriptor
// holds ("depend on its value to determine expected pointer alignment",
// cublasLt.h; null: the default 256); a bias less aligned than that when
// cublasLtMatmul runs (set after the query) is refused with NOT_SUPPORTED, as an
// operand that breaks its alignment promise is.
TEST(CublasLtStrict, HeuristicTakesTheBiasAlignmentFromThePointer) {
  for (cudaDataType t : lt_types()) {
    LtProbe planted(t);
    planted.set_epilogue(CUBLASLT_EPILOGUE_BIAS);
    cublasLtMatmulAlgo_t algo;
    ASSERT_TRUE(planted.one_algorithm(&algo));  // no bias pointer yet
    planted.set_bias(16);
    EXPECT_EQ(planted.run(&algo), CUBLAS_STATUS_NOT_SUPPORTED);
    LtProbe twin(t);
    twin.set_epilogue(CUBLASLT_EPILOGUE_BIAS);
    twin.set_bias(16);  // before the query
    ASSERT_TRUE(twin.one_algorithm(&algo));
    ASSERT_EQ(twin.run(&algo), CUBLAS_STATUS_SUCCESS);
    twin.expect_product({}, 16);
    twin.set_bias(32);  // more aligned than the query saw: fine
    ASSERT_EQ(twin.run(&algo), CUBLAS_STATUS_SUCCESS);
    twin.expect_product({}, 32);
  }
}

// Bias and bias-gradient vectors have D's type (BIAS_DATA_TYPE; the IMMA/FP8
// exceptions are not emulated); an aux matrix too (AUX_DATA_TYPE, INVALID_VALUE).
TEST(CublasLtStrict, BiasVectorHasDsType) {
  for (cudaDataType t : lt_types()) {
    const cudaDataType other = t == CUDA_R_32F ? CUDA_R_16BF : CUDA_R_32F;
    for (cublasLtEpilogue_t e : {CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_BGRADB}) {
      LtProbe probe(t);
      probe.set_epilogue(e);
      probe.set_bias(0);
      probe.set_bias_type(other);  // planted (bf16 D with an fp32 BGRADB vector: an easy call to make)
      int returned;
      cublasLtMatmulHeuristicResult_t r;
      EXPECT_EQ(probe.heuristic(&returned, &r), CUBLAS_STATUS_NOT_SUPPORTED) << e;
      EXPECT_EQ(returned, 0);
      EXPECT_EQ(probe.run(nullptr), CUBLAS_STATUS_NOT_SUPPORTED) << e;
      probe.set_bias_type(t);  // twin
      cublasLtMatmulAlgo_t algo;
      ASSERT_TRUE(probe.one_algorithm(&algo));
      EXPECT_EQ(probe.run(&algo), CUBLAS_STATUS_SUCCESS) << e;
    }
    LtProbe probe(t);  // GELU aux: D's type, and 16-byte aligned like the bias
    probe.set_epilogue(CUBLASLT_EPILOGUE_GELU_AUX);
    DeviceMatrix aux(LtProbe::m * LtProbe::n + 8, t);
    const int64_t aux_ld = LtProbe::m;
    const int32_t bad_type = other;
    void* aux_ptr = static_cast<char*>(aux.ptr) + 8;  // planted
    ASSERT_EQ(cublasLtMatmulDescSetAttribute(probe.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld),
              CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatmulDescSetAttribute(probe.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux_ptr,
                                             sizeof aux_ptr),
              CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulAlgo_t algo;
    ASSERT_TRUE(probe.one_algorithm(&algo));
    EXPECT_EQ(probe.run(&algo), CUBLAS_STATUS_EXECUTION_FAILED);
    EXPECT_EQ(cudaGetLastError(), cudaErrorMisalignedAddress);
    aux_ptr = aux.ptr;  // twin
    ASSERT_EQ(cublasLtMatmulDescSetAttribute(probe.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux_ptr,
                                             sizeof aux_ptr),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(probe.run(&algo), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatmulDescSetAttribute(probe.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &bad_type,
                                             sizeof bad_type),
              CUBLAS_STATUS_SUCCESS);  // planted
    EXPECT_EQ(probe.run(&algo), CUBLAS_STATUS_INVALID_VALUE);
  }
}

// The switch: each refusing mode refuses in its own documented way, and
// cublasLtMatmul has no kernel then (a strict-mode algorithm included); strict
// mode is the twin.
TEST(CublasLtSwitch, EachRefusalModeRefusesAndStrictAccepts) {
  using emu::CublasLtMode;
  LtProbe probe(CUDA_R_32F);
  cublasLtMatmulAlgo_t strict_algo;
  ASSERT_TRUE(probe.one_algorithm(&strict_algo));
  for (CublasLtMode mode : {CublasLtMode::kNoAlgorithm, CublasLtMode::kNotSupported, CublasLtMode::kBadState}) {
    emu::ScopedCublasLtMode scoped(mode);
    int returned;
    cublasLtMatmulHeuristicResult_t r;
    const cublasStatus_t s = probe.heuristic(&returned, &r);
    if (mode == CublasLtMode::kNotSupported) {
      EXPECT_EQ(s, CUBLAS_STATUS_NOT_SUPPORTED);
      EXPECT_EQ(returned, 0);
    } else {
      EXPECT_EQ(s, CUBLAS_STATUS_SUCCESS);
      EXPECT_EQ(returned, mode == CublasLtMode::kBadState ? 1 : 0);
    }
    if (mode == CublasLtMode::kBadState) {
      EXPECT_EQ(r.state, CUBLAS_STATUS_NOT_SUPPORTED);
      EXPECT_EQ(probe.run(&r.algo), CUBLAS_STATUS_NOT_SUPPORTED);  // a caller that ignores .state
    }
    EXPECT_EQ(probe.run(nullptr), CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_EQ(probe.run(&strict_algo), CUBLAS_STATUS_NOT_SUPPORTED);
  }
  ASSERT_TRUE(probe.one_algorithm(&strict_algo));  // twin: back to strict
  EXPECT_EQ(probe.run(&strict_algo), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulAlgo_t forged;
  std::memset(&forged, 0, sizeof forged);
  EXPECT_EQ(probe.run(&forged), CUBLAS_STATUS_INVALID_VALUE);  // not from the heuristic
}

// kMatmulNotSupported: the heuristic offers its algorithm as in kStrict, and
// cublasLtMatmul refuses it at execution (a kernel that declines the problem).
TEST(CublasLtSwitch, MatmulNotSupportedRefusesAtExecution) {
  emu::ScopedCublasLtMode scoped(emu::CublasLtMode::kMatmulNotSupported);
  LtProbe probe(CUDA_R_32F);
  cublasLtMatmulAlgo_t algo;
  ASSERT_TRUE(probe.one_algorithm(&algo));
  EXPECT_EQ(probe.run(&algo), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(probe.run(nullptr), CUBLAS_STATUS_NOT_SUPPORTED);
}

// GPT2_EMU_CUBLASLT selects the mode unless set_cublaslt_mode did.
TEST(CublasLtSwitch, EnvironmentVariableSelectsTheMode) {
  using emu::CublasLtMode;
  const auto saved = emu::cublaslt_mode_override();
  emu::set_cublaslt_mode(std::nullopt);
  LtProbe probe(CUDA_R_32F);
  int returned;
  cublasLtMatmulHeuristicResult_t r;
  setenv("GPT2_EMU_CUBLASLT", "refuse", 1);
  EXPECT_EQ(emu::cublaslt_mode(), CublasLtMode::kNoAlgorithm);
  EXPECT_EQ(probe.heuristic(&returned, &r), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(returned, 0);
  setenv("GPT2_EMU_CUBLASLT", "not_supported", 1);
  EXPECT_EQ(probe.heuristic(&returned, &r), CUBLAS_STATUS_NOT_SUPPORTED);
  setenv("GPT2_EMU_CUBLASLT", "bad_state", 1);
  EXPECT_EQ(emu::cublaslt_mode(), CublasLtMode::kBadState);
  {
    emu::ScopedCublasLtMode strict(CublasLtMode::kStrict);  // the override wins
    EXPECT_EQ(emu::cublaslt_mode(), CublasLtMode::kStrict);
  }
  EXPECT_EQ(emu::cublaslt_mode(), CublasLtMode::kBadState);
  setenv("GPT2_EMU_CUBLASLT", "matmul_not_supported", 1);
  EXPECT_EQ(emu::cublaslt_mode(), CublasLtMode::kMatmulNotSupported);
  setenv("GPT2_EMU_CUBLASLT", "strict", 1);
  cublasLtMatmulAlgo_t algo;
  EXPECT_TRUE(probe.one_algorithm(&algo));
  unsetenv("GPT2_EMU_CUBLASLT");
  EXPECT_EQ(emu::cublaslt_mode(), CublasLtMode::kStrict);
  emu::set_cublaslt_mode(saved);
}

}  // namespace
}  // namespace gpt2
