// Causal multi-head self-attention from qkv[B,T,3C] (q | k | v, head h at
// channels h*hs .. h*hs+hs-1 of each third), scale 1/sqrt(hs).
//
// What `saved` holds: the probabilities P[B,NH,T,T] (masked entries exact
// zeros), llm.c's `att`. The backward reuses them instead of recomputing Q K^T.
//
// forward (all GEMMs are cuBLAS strided-batched over the B*NH heads, fp32)
//   split_heads    qkv -> q, k, v [B,NH,T,hs] (workspace)      read/write 3BTC
//   GEMM           S = scale * q k^T -> saved                   B*NH*T*T
//   softmax        causal softmax of each row of S, in place; one warp per row,
//                  max subtraction, exp, sum; j > t written as 0
//   GEMM           y = P v -> yh [B,NH,T,hs] (workspace)
//   merge_heads    yh -> out[B,T,C]
// backward (scratch = dP, B*NH*T*T floats)
//   split_heads    qkv -> q, k, v; dout -> dyh                   (workspace)
//   GEMM           dP = dyh v^T -> scratch;   dv = P^T dyh
//   softmax_bwd    dS = P (dP - sum_j P dP) * scale, in place on scratch, one
//                  warp per row; masked entries 0
//   GEMM           dq = dS k;   dk = dS^T q
//   merge_heads    dq, dk, dv -> dqkv (every element written: "=")
// The full T x T products include the masked upper triangle (P and dS are 0
// there), 2x the causal FLOPs; fine at the sizes this backend targets, and a
// fused flash-style kernel is the next step (docs/kernels.md). No cuDNN path.
#ifndef KERNELS_ATTENTION_CUH
#define KERNELS_ATTENTION_CUH

#include "kernels/common.cuh"

namespace gpt2 {
namespace kern {

// dst[b,h,t,d] = src[(b*T + t) * src_row + h*hs + d]
__global__ void split_heads_kernel(float* dst, const float* src, int src_row, int B, int T,
                                   int NH, int hs) {
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<size_t>(B) * NH * T * hs) return;
  const int d = static_cast<int>(idx % hs);
  const int t = static_cast<int>((idx / hs) % T);
  const int h = static_cast<int>((idx / (static_cast<size_t>(hs) * T)) % NH);
  const int b = static_cast<int>(idx / (static_cast<size_t>(hs) * T * NH));
  dst[idx] = src[(static_cast<size_t>(b) * T + t) * src_row + h * hs + d];
}

// The inverse: dst[(b*T + t) * dst_row + h*hs + d] = src[b,h,t,d]
__global__ void merge_heads_kernel(float* dst, int dst_row, const float* src, int B, int T, int NH,
                                   int hs) {
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<size_t>(B) * NH * T * hs) return;
  const int d = static_cast<int>(idx % hs);
  const int t = static_cast<int>((idx / hs) % T);
  const int h = static_cast<int>((idx / (static_cast<size_t>(hs) * T)) % NH);
  const int b = static_cast<int>(idx / (static_cast<size_t>(hs) * T * NH));
  dst[(static_cast<size_t>(b) * T + t) * dst_row + h * hs + d] = src[idx];
}

// One warp per row r of rows = B*NH*T rows of length T; the row's query
// position is t = r % T.
__global__ void causal_softmax_kernel(float* att, int rows, int T) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (row >= rows) return;
  const int t = row % T;
  float* a = att + static_cast<size_t>(row) * T;
  float mx = -INFINITY;
  for (int j = lane; j <= t; j += kWarpSize) mx = a[j] > mx ? a[j] : mx;
  mx = warp_max(mx);
  float sum = 0.0f;
  for (int j = lane; j <= t; j += kWarpSize) sum += expf(a[j] - mx);
  const float inv = 1.0f / warp_sum(sum);
  for (int j = lane; j < T; j += kWarpSize) a[j] = j <= t ? expf(a[j] - mx) * inv : 0.0f;
}

// dS = P (dP - sum_j P dP) * scale, in place on dP (the row sum is complete
// before any lane writes: warp_sum is a rendezvous of the whole warp).
__global__ void causal_softmax_backward_kernel(float* dp, const float* att, int rows, int T,
                                               float scale) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (row >= rows) return;
  const int t = row % T;
  float* g = dp + static_cast<size_t>(row) * T;
  const float* p = att + static_cast<size_t>(row) * T;
  float dot = 0.0f;
  for (int j = lane; j <= t; j += kWarpSize) dot += p[j] * g[j];
  dot = warp_sum(dot);
  for (int j = lane; j < T; j += kWarpSize) g[j] = j <= t ? p[j] * (g[j] - dot) * scale : 0.0f;
}

// Row-major, batched: C[b] = alpha op(A[b]) op(B[b]) + beta C[b], issued as the
// column-major transpose C^T = op(B)^T op(A)^T.
inline void gemm_rm_batched(cublasHandle_t h, bool trans_a, bool trans_b, int M, int N, int K,
                            float alpha, const float* A, int lda, long long stride_a,
                            const float* B, int ldb, long long stride_b, float beta, float* C,
                            int ldc, long long stride_c, int batch) {
  CUBLAS_CHECK(cublasSgemmStridedBatched(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                         trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B,
                                         ldb, stride_b, A, lda, stride_a, &beta, C, ldc, stride_c,
                                         batch));
}

inline size_t attention_saved_floats(int B, int T, int NH) {
  return static_cast<size_t>(B) * NH * T * T;
}
inline size_t attention_scratch_floats(int B, int T, int NH) {
  return static_cast<size_t>(B) * NH * T * T;
}
// Backend-owned workspace (depends on C, which the seam's size queries lack).
inline size_t attention_forward_workspace_floats(int B, int T, int C) {
  return 4 * static_cast<size_t>(B) * T * C;
}
inline size_t attention_backward_workspace_floats(int B, int T, int C) {
  return 7 * static_cast<size_t>(B) * T * C;
}

inline void attention_forward(cublasHandle_t blas, float* out, float* att, float* workspace,
                              const float* qkv, int B, int T, int C, int NH,
                              cudaStream_t stream) {
  const int hs = C / NH, block = 256;
  const size_t n = static_cast<size_t>(B) * T * C;
  float *q = workspace, *k = q + n, *v = k + n, *y = v + n;
  const unsigned grid = ceil_div(n, block);
  LAUNCH_KERNEL(split_heads_kernel, grid, block, 0, stream, q, qkv, 3 * C, B, T, NH, hs);
  LAUNCH_KERNEL(split_heads_kernel, grid, block, 0, stream, k, qkv + C, 3 * C, B, T, NH, hs);
  LAUNCH_KERNEL(split_heads_kernel, grid, block, 0, stream, v, qkv + 2 * C, 3 * C, B, T, NH, hs);
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  const long long sh = static_cast<long long>(T) * hs, st = static_cast<long long>(T) * T;
  gemm_rm_batched(blas, false, true, T, T, hs, scale, q, hs, sh, k, hs, sh, 0.0f, att, T, st,
                  B * NH);
  const int rows = B * NH * T, rows_per_block = block / kWarpSize;
  LAUNCH_KERNEL(causal_softmax_kernel, ceil_div(rows, rows_per_block), block, 0, stream, att,
                rows, T);
  gemm_rm_batched(blas, false, false, T, hs, T, 1.0f, att, T, st, v, hs, sh, 0.0f, y, hs, sh,
                  B * NH);
  LAUNCH_KERNEL(merge_heads_kernel, grid, block, 0, stream, out, C, y, B, T, NH, hs);
}

inline void attention_backward(cublasHandle_t blas, float* dqkv, float* dp, float* workspace,
                               const float* dout, const float* qkv, const float* att, int B,
                               int T, int C, int NH, cudaStream_t stream) {
  const int hs = C / NH, block = 256;
  const size_t n = static_cast<size_t>(B) * T * C;
  float *q = workspace, *k = q + n, *v = k + n, *dy = v + n, *dq = dy + n, *dk = dq + n,
        *dv = dk + n;
  const unsigned grid = ceil_div(n, block);
  LAUNCH_KERNEL(split_heads_kernel, grid, block, 0, stream, q, qkv, 3 * C, B, T, NH, hs);
  LAUNCH_KERNEL(split_heads_kernel, grid, block, 0, stream, k, qkv + C, 3 * C, B, T, NH, hs);
  LAUNCH_KERNEL(split_heads_kernel, grid, block, 0, stream, v, qkv + 2 * C, 3 * C, B, T, NH, hs);
  LAUNCH_KERNEL(split_heads_kernel, grid, block, 0, stream, dy, dout, C, B, T, NH, hs);
  const long long sh = static_cast<long long>(T) * hs, st = static_cast<long long>(T) * T;
  const int heads = B * NH;
  gemm_rm_batched(blas, false, true, T, T, hs, 1.0f, dy, hs, sh, v, hs, sh, 0.0f, dp, T, st, heads);
  gemm_rm_batched(blas, true, false, T, hs, T, 1.0f, att, T, st, dy, hs, sh, 0.0f, dv, hs, sh,
                  heads);
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  const int rows = B * NH * T, rows_per_block = block / kWarpSize;
  LAUNCH_KERNEL(causal_softmax_backward_kernel, ceil_div(rows, rows_per_block), block, 0, stream,
                dp, att, rows, T, scale);
  gemm_rm_batched(blas, false, false, T, hs, T, 1.0f, dp, T, st, k, hs, sh, 0.0f, dq, hs, sh, heads);
  gemm_rm_batched(blas, true, false, T, hs, T, 1.0f, dp, T, st, q, hs, sh, 0.0f, dk, hs, sh, heads);
  LAUNCH_KERNEL(merge_heads_kernel, grid, block, 0, stream, dqkv, 3 * C, dq, B, T, NH, hs);
  LAUNCH_KERNEL(merge_heads_kernel, grid, block, 0, stream, dqkv + C, 3 * C, dk, B, T, NH, hs);
  LAUNCH_KERNEL(merge_heads_kernel, grid, block, 0, stream, dqkv + 2 * C, 3 * C, dv, B, T, NH, hs);
}

}  // namespace kern
}  // namespace gpt2

#endif  // KERNELS_ATTENTION_CUH
