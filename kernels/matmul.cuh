// Linear layers: out[N,OC] = inp[N,C] @ w[OC,C]^T + bias, and the backward.
//
// Row-major tensors are column-major transposes, so every product is issued
// as its transpose: out^T[OC,N] = (w as C x OC)^T (inp as C x N), i.e. cuBLAS
// sees A = w (transposed), B = inp, D = out (OC x N, ld OC). Compute type fp32
// (CUBLAS_COMPUTE_32F: no TF32, results comparable with the CPU backend); the
// matrices are T (float or __nv_bfloat16), the bias-gradient partials fp32.
//
// Two paths, selected per backend (CudaBackendOptions::use_cublaslt):
//   cuBLASLt (default)  forward: one cublasLtMatmul with the BIAS epilogue (bias
//                       added in the GEMM's epilogue, no extra pass over out).
//                       backward: dinp = dout @ w (beta 0); dw += dout^T @ inp
//                       (beta 1) with the BGRADB epilogue, which writes the
//                       column sums of dout (the reduction over the GEMM's k =
//                       N) to a scratch vector; a small kernel adds it to dbias
//                       (the epilogue overwrites, the API promises "+="). If
//                       cuBLASLt offers no BGRADB algorithm (or lt_bias_grad is
//                       off) dbias comes from the fallback's column-sum kernels.
//   cuBLAS fallback     cublasGemmEx for the products; bias added by a kernel
//                       (one read + write of out); dbias by a deterministic
//                       two-stage column sum (fixed row chunks, partials summed
//                       in chunk order).
#ifndef KERNELS_MATMUL_CUH
#define KERNELS_MATMUL_CUH

#include "kernels/common.cuh"

namespace gpt2 {
namespace kern {

struct BlasContext {
  cublasHandle_t blas = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* lt_workspace = nullptr;
  size_t lt_workspace_bytes = 0;
  cudaStream_t stream = nullptr;
  bool use_lt = true;
  bool lt_bias_grad = true;  // BGRADB epilogue for dbias (else the column-sum kernels)
};

template <class T>
__global__ void add_bias_kernel(T* out, const T* bias, int N, int OC) {
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<size_t>(N) * OC) return;
  out[idx] = from_float<T>(to_float(out[idx]) + to_float(bias[idx % OC]));
}

// partials[chunk][OC]: column sums of rows [chunk*rows_per_chunk, ...) of x[N,OC].
template <class T>
__global__ void column_sum_partials_kernel(float* partials, const T* x, int N, int OC,
                                           int rows_per_chunk) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= OC) return;
  const int r0 = blockIdx.y * rows_per_chunk;
  const int r1 = min(N, r0 + rows_per_chunk);
  float s = 0.0f;
  for (int r = r0; r < r1; r++) s += to_float(x[static_cast<size_t>(r) * OC + c]);
  partials[static_cast<size_t>(blockIdx.y) * OC + c] = s;
}

// dst[c] += sum_k partials[k][c], k in order.
template <class T>
__global__ void accumulate_partials_kernel(T* dst, const float* partials, int chunks, int OC) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= OC) return;
  float s = 0.0f;
  for (int k = 0; k < chunks; k++) s += partials[static_cast<size_t>(k) * OC + c];
  dst[c] = from_float<T>(to_float(dst[c]) + s);
}

inline int column_sum_chunks(int N) { return N < 32 ? 1 : (N / 32 < 64 ? N / 32 : 64); }
inline size_t matmul_backward_scratch_floats(int N, int OC) {
  return static_cast<size_t>(column_sum_chunks(N)) * OC;
}

// Owns the cuBLASLt descriptors of one call (released on every exit path).
class LtCall {
 public:
  LtCall() = default;
  LtCall(const LtCall&) = delete;
  LtCall& operator=(const LtCall&) = delete;
  ~LtCall() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
};

// Column-major D[m,n] = op(A)[m,k] op(B)[k,n] + beta D, all of type `type`,
// fp32 compute, with an epilogue whose vector (bias, or the bias gradient) is
// `bias` of type `bias_type`. With `may_refuse`, returns false instead of
// throwing when cuBLASLt has no algorithm for the epilogue (not every epilogue
// exists for every type/transpose on every GPU).
inline bool lt_matmul(const BlasContext& ctx, cudaDataType_t type, bool trans_a, bool trans_b,
                      int m, int n, int k, const void* A, int lda, const void* B, int ldb,
                      void* D, int ldd, float beta, cublasLtEpilogue_t epilogue,
                      const void* bias, cudaDataType_t bias_type, bool may_refuse = false) {
  LtCall call;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&call.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                              sizeof epilogue));
  if (bias != nullptr) {
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                sizeof bias));
    const int32_t bias_type_value = bias_type;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                &bias_type_value, sizeof bias_type_value));
  }
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&call.a, type, trans_a ? k : m, trans_a ? m : k, lda));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&call.b, type, trans_b ? n : k, trans_b ? k : n, ldb));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&call.d, type, m, n, ldd));
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&call.pref));
  const uint64_t ws = ctx.lt_workspace_bytes;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      call.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      ctx.lt, call.op, call.a, call.b, call.d, call.d, call.pref, 1, &heuristic, &found);
  if (may_refuse &&
      (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && found == 0)))
    return false;
  CUBLAS_CHECK(status);
  if (found == 0)
    throw std::runtime_error("kernels/matmul.cuh: cuBLASLt has no algorithm for m=" +
                             std::to_string(m) + " n=" + std::to_string(n) + " k=" +
                             std::to_string(k) + " epilogue=" + std::to_string(epilogue));
  const float alpha = 1.0f;
  CUBLAS_CHECK(cublasLtMatmul(ctx.lt, call.op, &alpha, A, call.a, B, call.b, &beta, D, call.d, D,
                              call.d, &heuristic.algo, ctx.lt_workspace, ctx.lt_workspace_bytes,
                              ctx.stream));
  return true;
}

// cuBLAS fallback: column-major C = op(A) op(B) + beta C, type T, fp32 compute.
template <class T>
void gemm_ex(const BlasContext& ctx, bool trans_a, bool trans_b, int m, int n, int k, const T* A,
             int lda, const T* B, int ldb, float beta, T* C, int ldc) {
  const float alpha = 1.0f;
  const cudaDataType_t type = cuda_data_type<T>();
  CUBLAS_CHECK(cublasGemmEx(ctx.blas, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                            trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, A, type, lda, B,
                            type, ldb, &beta, C, type, ldc, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
}

template <class T>
void matmul_forward(const BlasContext& ctx, T* out, const T* inp, const T* w, const T* bias,
                    int N, int C, int OC) {
  const cudaDataType_t type = cuda_data_type<T>();
  if (ctx.use_lt) {
    lt_matmul(ctx, type, true, false, OC, N, C, w, C, inp, C, out, OC, 0.0f,
              bias != nullptr ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, bias, type);
    return;
  }
  gemm_ex<T>(ctx, true, false, OC, N, C, w, C, inp, C, 0.0f, out, OC);
  if (bias != nullptr) {
    const int block = 256;
    auto bias_kernel = add_bias_kernel<T>;
    LAUNCH_KERNEL(bias_kernel, ceil_div(static_cast<size_t>(N) * OC, block), block, 0, ctx.stream,
                  out, bias, N, OC);
  }
}

// scratch: matmul_backward_scratch_floats(N, OC) floats (used only with dbias)
template <class T>
void matmul_backward(const BlasContext& ctx, T* dinp, T* dw, T* dbias, float* scratch,
                     const T* dout, const T* inp, const T* w, int N, int C, int OC) {
  const int block = 256;
  const cudaDataType_t type = cuda_data_type<T>();
  auto accumulate_kernel = accumulate_partials_kernel<T>;
  if (ctx.use_lt) {
    // dinp^T[C,N] = w^T[C,OC] dout^T[OC,N]
    lt_matmul(ctx, type, false, false, C, N, OC, w, C, dout, OC, dinp, C, 0.0f,
              CUBLASLT_EPILOGUE_DEFAULT, nullptr, type);
    // dw^T[C,OC] += inp^T[C,N] (dout^T)^T[N,OC]; BGRADB: scratch[OC] = sum over N of dout (fp32)
    if (dbias != nullptr && ctx.lt_bias_grad &&
        lt_matmul(ctx, type, false, true, C, OC, N, inp, C, dout, OC, dw, C, 1.0f,
                  CUBLASLT_EPILOGUE_BGRADB, scratch, CUDA_R_32F, true)) {
      LAUNCH_KERNEL(accumulate_kernel, ceil_div(OC, block), block, 0, ctx.stream, dbias, scratch,
                    1, OC);
      return;
    }
    lt_matmul(ctx, type, false, true, C, OC, N, inp, C, dout, OC, dw, C, 1.0f,
              CUBLASLT_EPILOGUE_DEFAULT, nullptr, type);
  } else {
    gemm_ex<T>(ctx, false, false, C, N, OC, w, C, dout, OC, 0.0f, dinp, C);
    gemm_ex<T>(ctx, false, true, C, OC, N, inp, C, dout, OC, 1.0f, dw, C);
  }
  if (dbias != nullptr) {
    const int chunks = column_sum_chunks(N);
    const int rows_per_chunk = static_cast<int>(ceil_div(N, chunks));
    auto partials_kernel = column_sum_partials_kernel<T>;
    LAUNCH_KERNEL(partials_kernel, dim3(ceil_div(OC, block), chunks), block, 0, ctx.stream,
                  scratch, dout, N, OC, rows_per_chunk);
    LAUNCH_KERNEL(accumulate_kernel, ceil_div(OC, block), block, 0, ctx.stream, dbias, scratch,
                  chunks, OC);
  }
}

}  // namespace kern
}  // namespace gpt2

#endif  // KERNELS_MATMUL_CUH
