// cuBLAS for the emulator, implemented against the toolkit's own declarations
// (cublas_v2.h) so host code runs unchanged; cuBLASLt is in emu/cublaslt.cpp.
//
// Semantics follow NVIDIA's documentation: column-major matrices, op(A) is m x k,
// op(B) is k x n, C/D are m x n; D = alpha*op(A)op(B) + beta*C where C is not read
// when beta == 0; fp32 compute for every supported type (bf16/fp16 inputs are
// exact in fp32), one rounding to the output type. The inner products run in
// emu/gemm.cpp's fixed order (one fma chain per element, k ascending) after
// converting op(A)/op(B) to dense fp32, so emulated results do not depend on the
// CPU, the shape or the launcher. Plain cuBLAS accepts
// any alignment and leading dimension (unlike cuBLASLt's heuristic).
// TF32: with CUBLAS_COMPUTE_32F_FAST_TF32, or CUBLAS_COMPUTE_32F on a handle whose
// math mode is CUBLAS_TF32_TENSOR_OP_MATH, every element of op(A) and op(B) is
// rounded to TF32 (10-bit mantissa; to nearest, ties away from zero, as PTX's
// cvt.rna.tf32.f32) before the fp32 product; the accumulation stays fp32. A GPU's
// kernels may round differently (or truncate), so only the error bound carries
// over, not the bits. bf16/fp16 inputs are exact in TF32 (the rounding is a no-op).
#include <cublas_v2.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <vector>

#include "emu/blas_internal.h"
#include "emu/runtime_internal.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasMath_t math_mode = CUBLAS_DEFAULT_MATH;
  cublasPointerMode_t pointer_mode = CUBLAS_POINTER_MODE_HOST;
};

namespace gpt2 {
namespace emu {

namespace {

// op(M) as dense fp32 row-major (rows x cols), each element rounded to TF32 if `tf32`.
void gather(const Matrix& m, int64_t batch, bool transposed, int64_t rows, int64_t cols, bool tf32,
            std::vector<float>& out) {
  out.resize(static_cast<size_t>(rows * cols));
  int64_t base = batch * m.batch_stride;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float v = transposed ? load(m.type, m.ptr, base + c + r * m.ld) : load(m.type, m.ptr, base + r + c * m.ld);
      out[static_cast<size_t>(r * cols + c)] = tf32 ? round_to_tf32(v) : v;
    }
}

}  // namespace

// fp32 -> TF32 (1 sign, 8 exponent, 10 mantissa bits, kept in a float with the low
// 13 bits zero): to nearest, ties away from zero; Inf and NaN unchanged; a value
// within half a TF32 ulp of 2^128 becomes Inf.
float round_to_tf32(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7f800000u) != 0x7f800000u) {
    u += 0x1000u;  // half of the dropped 13 bits' range, on the magnitude
    u &= 0xffffe000u;
  }
  std::memcpy(&x, &u, sizeof x);
  return x;
}

void gemm_batch(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const Matrix& a,
                const Matrix& b, float beta, const Matrix* c, int64_t batch, std::vector<float>& a_buf,
                std::vector<float>& b_buf, std::vector<float>& acc) {
  gemm_batch_tf32(false, trans_a, trans_b, m, n, k, alpha, a, b, beta, c, batch, a_buf, b_buf, acc);
}

void gemm_batch_tf32(bool tf32, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const Matrix& a, const Matrix& b, float beta, const Matrix* c, int64_t batch,
                     std::vector<float>& a_buf, std::vector<float>& b_buf, std::vector<float>& acc) {
  acc.assign(static_cast<size_t>(m * n), 0.0f);
  if (k > 0 && alpha != 0.0f) {
    gather(a, batch, trans_a, m, k, tf32, a_buf);
    gather(b, batch, trans_b, k, n, tf32, b_buf);
    fixed_order_sgemm(m, n, k, alpha, a_buf.data(), b_buf.data(), acc.data());
  }
  if (beta != 0.0f && c != nullptr) {
    int64_t base = batch * c->batch_stride;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) acc[static_cast<size_t>(i * n + j)] += beta * load(c->type, c->ptr, base + i + j * c->ld);
  }
}

bool fp32_compute(cublasComputeType_t t) {
  return t == CUBLAS_COMPUTE_32F || t == CUBLAS_COMPUTE_32F_PEDANTIC || t == CUBLAS_COMPUTE_32F_FAST_16F ||
         t == CUBLAS_COMPUTE_32F_FAST_16BF || t == CUBLAS_COMPUTE_32F_FAST_TF32;
}

bool supported_combination(cudaDataType a, cudaDataType b, cudaDataType c) {
  return supported_storage(a) && a == b && (c == a || c == CUDA_R_32F);
}

namespace {

cublasStatus_t gemm_common(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                           int k, const void* alpha, const void* A, cudaDataType Atype, int lda, long long strideA,
                           const void* B, cudaDataType Btype, int ldb, long long strideB, const void* beta, void* C,
                           cudaDataType Ctype, int ldc, long long strideC, int batch_count,
                           cublasComputeType_t compute) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!valid_op(transa) || !valid_op(transb) || m < 0 || n < 0 || k < 0 || batch_count < 0)
    return CUBLAS_STATUS_INVALID_VALUE;
  int rows_a = transa == CUBLAS_OP_N ? m : k;
  int rows_b = transb == CUBLAS_OP_N ? k : n;
  if (lda < std::max(1, rows_a) || ldb < std::max(1, rows_b) || ldc < std::max(1, m)) return CUBLAS_STATUS_INVALID_VALUE;
  if (!fp32_compute(compute) || !supported_combination(Atype, Btype, Ctype)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (alpha == nullptr || beta == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0 || batch_count == 0) return CUBLAS_STATUS_SUCCESS;
  // Pointer mode device or host: both are host-addressable in emulation.
  float alpha_v = *static_cast<const float*>(alpha), beta_v = *static_cast<const float*>(beta);
  Matrix a{A, Atype, lda, strideA}, b{B, Btype, ldb, strideB}, c{C, Ctype, ldc, strideC};
  // TF32: asked for by the compute type, or allowed by the math mode for plain fp32 compute.
  const bool tf32 = compute == CUBLAS_COMPUTE_32F_FAST_TF32 ||
                    (compute == CUBLAS_COMPUTE_32F && (handle->math_mode & 0xf) == CUBLAS_TF32_TENSOR_OP_MATH);
  auto work = [=] {
    std::vector<float> a_buf, b_buf, acc;
    for (int batch = 0; batch < batch_count; ++batch) {
      gemm_batch_tf32(tf32, is_transposed(transa), is_transposed(transb), m, n, k, alpha_v, a, b, beta_v, &c, batch,
                      a_buf, b_buf, acc);
      int64_t base = batch * strideC;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) store(Ctype, C, base + i + j * ldc, acc[static_cast<size_t>(i * n + j)]);
    }
  };
  // Deferred stream mode: queued on the handle's stream (alpha/beta read now).
  if (defers(handle->stream)) enqueue(handle->stream, work, "cublasGemm");
  else if (drain_legacy() == cudaSuccess) work();
  else return CUBLAS_STATUS_EXECUTION_FAILED;
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace
}  // namespace emu
}  // namespace gpt2

using namespace gpt2::emu;

extern "C" {

// ---- cuBLAS -------------------------------------------------------------------------------
cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new (std::nothrow) cublasContext();
  return *handle == nullptr ? CUBLAS_STATUS_ALLOC_FAILED : CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (stream == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *stream = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t bytes) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (workspace == nullptr && bytes != 0) return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->math_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = handle->math_mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->pointer_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    default: return "CUBLAS_STATUS_UNKNOWN";
  }
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    default: return "unknown error";
  }
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                              int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                              const float* beta, float* C, int ldc) {
  return gemm_common(handle, transa, transb, m, n, k, alpha, A, CUDA_R_32F, lda, 0, B, CUDA_R_32F, ldb, 0, beta, C,
                     CUDA_R_32F, ldc, 0, 1, CUBLAS_COMPUTE_32F);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const float* alpha, const float* A, int lda,
                                         long long strideA, const float* B, int ldb, long long strideB,
                                         const float* beta, float* C, int ldc, long long strideC, int batchCount) {
  return gemm_common(handle, transa, transb, m, n, k, alpha, A, CUDA_R_32F, lda, strideA, B, CUDA_R_32F, ldb, strideB,
                     beta, C, CUDA_R_32F, ldc, strideC, batchCount, CUBLAS_COMPUTE_32F);
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  (void)algo;
  return gemm_common(handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0, beta, C, Ctype, ldc,
                     0, 1, computeType);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long strideA, const void* B, cudaDataType Btype, int ldb,
                                          long long strideB, const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long strideC, int batchCount, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t algo) {
  (void)algo;
  return gemm_common(handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB, beta, C,
                     Ctype, ldc, strideC, batchCount, computeType);
}
}  // extern "C"
