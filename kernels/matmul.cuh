// Linear layers: out[N,OC] = inp[N,C] @ w[OC,C]^T + bias, and the backward.
//
// Row-major tensors are column-major transposes, so every product is issued
// as its transpose: out^T[OC,N] = w^T... i.e. cuBLAS sees A = w (C x OC,
// transposed), B = inp (C x N), D = out (OC x N, ld OC). Compute type fp32
// (CUBLAS_COMPUTE_32F: no TF32, results comparable with the CPU backend).
//
// Two paths, selected per backend (CudaBackendOptions::use_cublaslt):
//   cuBLASLt (default)  forward: one cublasLtMatmul with the BIAS epilogue (bias
//                       added in the GEMM's epilogue, no extra pass over out).
//                       backward: dinp = dout @ w (beta 0); dw += dout^T @ inp
//                       (beta 1) with the BGRADB epilogue, which writes the
//                       column sums of dout (the reduction over the GEMM's k =
//                       N) to a scratch vector; a small kernel adds it to dbias
//                       (the epilogue overwrites, the API promises "+=").
//   cuBLAS fallback     cublasSgemm for the products; bias added by a kernel
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
};

__global__ void add_bias_kernel(float* out, const float* bias, int N, int OC) {
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<size_t>(N) * OC) return;
  out[idx] += bias[idx % OC];
}

// partials[chunk][OC]: column sums of rows [chunk*rows_per_chunk, ...) of x[N,OC].
__global__ void column_sum_partials_kernel(float* partials, const float* x, int N, int OC,
                                           int rows_per_chunk) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= OC) return;
  const int r0 = blockIdx.y * rows_per_chunk;
  const int r1 = min(N, r0 + rows_per_chunk);
  float s = 0.0f;
  for (int r = r0; r < r1; r++) s += x[static_cast<size_t>(r) * OC + c];
  partials[static_cast<size_t>(blockIdx.y) * OC + c] = s;
}

// dst[c] += sum_k partials[k][c], k in order.
__global__ void accumulate_partials_kernel(float* dst, const float* partials, int chunks,
                                           int OC) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= OC) return;
  float s = 0.0f;
  for (int k = 0; k < chunks; k++) s += partials[static_cast<size_t>(k) * OC + c];
  dst[c] += s;
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

// Column-major D[m,n] = op(A)[m,k] op(B)[k,n] + beta D, with an epilogue whose
// vector (bias, or the bias gradient) is `bias`.
inline void lt_matmul(const BlasContext& ctx, bool trans_a, bool trans_b, int m, int n, int k,
                      const float* A, int lda, const float* B, int ldb, float* D, int ldd,
                      float beta, cublasLtEpilogue_t epilogue, const float* bias) {
  LtCall call;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&call.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                              sizeof epilogue));
  if (bias != nullptr)
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                sizeof bias));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&call.a, CUDA_R_32F, trans_a ? k : m, trans_a ? m : k, lda));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&call.b, CUDA_R_32F, trans_b ? n : k, trans_b ? k : n, ldb));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&call.d, CUDA_R_32F, m, n, ldd));
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&call.pref));
  const uint64_t ws = ctx.lt_workspace_bytes;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      call.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(ctx.lt, call.op, call.a, call.b, call.d, call.d,
                                              call.pref, 1, &heuristic, &found));
  if (found == 0)
    throw std::runtime_error("kernels/matmul.cuh: cuBLASLt has no algorithm for m=" +
                             std::to_string(m) + " n=" + std::to_string(n) + " k=" +
                             std::to_string(k) + " epilogue=" + std::to_string(epilogue));
  const float alpha = 1.0f;
  CUBLAS_CHECK(cublasLtMatmul(ctx.lt, call.op, &alpha, A, call.a, B, call.b, &beta, D, call.d, D,
                              call.d, &heuristic.algo, ctx.lt_workspace, ctx.lt_workspace_bytes,
                              ctx.stream));
}

inline void matmul_forward(const BlasContext& ctx, float* out, const float* inp, const float* w,
                           const float* bias, int N, int C, int OC) {
  if (ctx.use_lt) {
    lt_matmul(ctx, true, false, OC, N, C, w, C, inp, C, out, OC, 0.0f,
              bias != nullptr ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, bias);
    return;
  }
  const float one = 1.0f, zero = 0.0f;
  CUBLAS_CHECK(cublasSgemm(ctx.blas, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one, w, C, inp, C, &zero,
                           out, OC));
  if (bias != nullptr) {
    const int block = 256;
    LAUNCH_KERNEL(add_bias_kernel, ceil_div(static_cast<size_t>(N) * OC, block), block, 0,
                  ctx.stream, out, bias, N, OC);
  }
}

// scratch: matmul_backward_scratch_floats(N, OC) floats (used only with dbias)
inline void matmul_backward(const BlasContext& ctx, float* dinp, float* dw, float* dbias,
                            float* scratch, const float* dout, const float* inp, const float* w,
                            int N, int C, int OC) {
  const int block = 256;
  if (ctx.use_lt) {
    // dinp^T[C,N] = w^T[C,OC] dout^T[OC,N]
    lt_matmul(ctx, false, false, C, N, OC, w, C, dout, OC, dinp, C, 0.0f,
              CUBLASLT_EPILOGUE_DEFAULT, nullptr);
    // dw^T[C,OC] += inp^T[C,N] (dout^T)^T[N,OC]; BGRADB: scratch[OC] = sum over N of dout
    lt_matmul(ctx, false, true, C, OC, N, inp, C, dout, OC, dw, C, 1.0f,
              dbias != nullptr ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_DEFAULT,
              dbias != nullptr ? scratch : nullptr);
    if (dbias != nullptr)
      LAUNCH_KERNEL(accumulate_partials_kernel, ceil_div(OC, block), block, 0, ctx.stream, dbias,
                    scratch, 1, OC);
    return;
  }
  const float one = 1.0f, zero = 0.0f;
  CUBLAS_CHECK(cublasSgemm(ctx.blas, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, &one, w, C, dout, OC,
                           &zero, dinp, C));
  CUBLAS_CHECK(cublasSgemm(ctx.blas, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, &one, inp, C, dout, OC,
                           &one, dw, C));
  if (dbias != nullptr) {
    const int chunks = column_sum_chunks(N);
    const int rows_per_chunk = static_cast<int>(ceil_div(N, chunks));
    LAUNCH_KERNEL(column_sum_partials_kernel, dim3(ceil_div(OC, block), chunks), block, 0,
                  ctx.stream, scratch, dout, N, OC, rows_per_chunk);
    LAUNCH_KERNEL(accumulate_partials_kernel, ceil_div(OC, block), block, 0, ctx.stream, dbias,
                  scratch, chunks, OC);
  }
}

}  // namespace kern
}  // namespace gpt2

#endif  // KERNELS_MATMUL_CUH
