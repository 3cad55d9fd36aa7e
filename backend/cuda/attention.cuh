// Classic causal multi-head self-attention from qkv[B,T,3C] (q | k | v, head h
// at channels h*hs .. h*hs+hs-1 of each third), scale 1/sqrt(hs). The fused
// paths are cuDNN's (backend/cuda/cudnn_attention.h) and ours
// (backend/cuda/flash_attention.cuh, head size <= 64); this one
// (CudaAttention::kClassic, --attention classic) serves any head size.
//
// What `saved` holds: the probabilities P[B,NH,T,T] (masked entries exact
// zeros), llm.c's `att`, in the storage type T (float or __nv_bfloat16). The
// backward reuses them instead of recomputing Q K^T. dP is always fp32.
//
// forward (all GEMMs are cuBLAS strided-batched over the B*NH heads, fp32)
//   split_heads    qkv -> q, k, v [B,NH,T,hs] (workspace)      read/write 3BTC
//   GEMM           S = scale * q k^T -> saved                   B*NH*T*T
//   softmax        causal softmax of each row of S, in place; one warp per row,
//                  max subtraction, exp, sum; j > t written as 0
//   GEMM           y = P v -> yh [B,NH,T,hs] (workspace); with dropout the
//                  softmax also writes P o Z (workspace) and y = (P o Z) v
//   merge_heads    yh -> out[B,T,C]
// backward (scratch = dP, B*NH*T*T floats; with bf16 T followed by dS in bf16)
//   split_heads    qkv -> q, k, v; dout -> dyh                   (workspace)
//   GEMM           dP = dyh v^T -> scratch;   dv = P^T dyh
//   softmax_bwd    dS = P (dP - sum_j P dP) * scale, one warp per row; masked
//                  entries 0; in place on dP for fp32, a bf16 copy for bf16
//                  (the GEMMs need A and B of one type)
//   GEMM           dq = dS k;   dk = dS^T q
//   merge_heads    dq, dk, dv -> dqkv (every element written: "=")
// with dropout: dv from P o Z (Z drawn again), and dP o Z before softmax_bwd
// The full T x T products include the masked upper triangle (P and dS are 0
// there), 2x the causal FLOPs, and P, dP, dS go through global memory; the
// flash path avoids both (docs/kernels.md, "Attention"). No cuDNN path.
#ifndef BACKEND_CUDA_ATTENTION_CUH
#define BACKEND_CUDA_ATTENTION_CUH

#include "backend/cuda/common.cuh"
#include "util/philox.h"

namespace gpt2 {
namespace kern {

// Head-major index idx = ((b*NH + h)*T + t)*hs + d -> its offset in the
// token-major layout (b*T + t) * row + h*hs + d (row = 3C for qkv, C for out).
__device__ inline size_t token_major_offset(size_t idx, int row, int T_, int NH, int hs) {
  const size_t d = idx % hs;
  const size_t t = (idx / hs) % T_;
  const size_t h = (idx / (static_cast<size_t>(hs) * T_)) % NH;
  const size_t b = idx / (static_cast<size_t>(hs) * T_ * NH);
  return (b * T_ + t) * row + h * hs + d;
}

// dst[b,h,t,d] = src[(b*T + t) * src_row + h*hs + d] (converted from TS to TD)
template <class TD, class TS>
__global__ void split_heads_kernel(TD* dst, const TS* src, int src_row, int B, int T_, int NH,
                                   int hs) {
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<size_t>(B) * NH * T_ * hs) return;
  dst[idx] = from_float<TD>(to_float(src[token_major_offset(idx, src_row, T_, NH, hs)]));
}

// The inverse: dst[(b*T + t) * dst_row + h*hs + d] = src[b,h,t,d]
template <class TD, class TS>
__global__ void merge_heads_kernel(TD* dst, int dst_row, const TS* src, int B, int T_, int NH,
                                   int hs) {
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<size_t>(B) * NH * T_ * hs) return;
  dst[token_major_offset(idx, dst_row, T_, NH, hs)] = from_float<TD>(to_float(src[idx]));
}

// Attention dropout's factor (backend.h's Z) of row `row` = (b*NH + h)*T + t, key j.
__device__ inline float attention_dropout_factor(const DropoutMask& m, int row, int j, int NH, int T_) {
  const int t = row % T_, bh = row / T_, b = bh / NH, h = bh % NH;
  return m.keep_attention(m.token0 + static_cast<uint64_t>(b) * T_, T_, h, t, j) ? m.keep_scale() : 0.0f;
}

// dst[row, j] = src[row, j] Z for the B*NH*T rows of T (fp32 dP and P in the
// backward); dst may be src (in place). One thread per element and one Philox
// call each (this path is the fallback; the flash kernels use all four words of a call).
__global__ void attention_dropout_kernel(float* dst, const float* src, DropoutMask m, int rows, int NH, int T_) {
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<size_t>(rows) * T_) return;
  dst[idx] = src[idx] * attention_dropout_factor(m, static_cast<int>(idx / T_), static_cast<int>(idx % T_), NH, T_);
}

// One warp per row r of rows = B*NH*T rows of length T; the row's query
// position is t = r % T. Reads the scores s (fp32 or T), writes the
// probabilities p (may be s itself: each lane rewrites only what it read) and,
// when `dropped` is given, P o Z to it (from the same fp32 p, rounded once).
template <class TS, class TP>
__global__ void causal_softmax_kernel(TP* p, const TS* s, int rows, int T_, TP* dropped, DropoutMask m, int NH) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (row >= rows) return;
  const int t = row % T_;
  const size_t base = static_cast<size_t>(row) * T_;
  float mx = -INFINITY;
  for (int j = lane; j <= t; j += kWarpSize) {
    const float v = to_float(s[base + j]);
    mx = v > mx ? v : mx;
  }
  mx = warp_max(mx);
  float sum = 0.0f;
  for (int j = lane; j <= t; j += kWarpSize) sum += expf(to_float(s[base + j]) - mx);
  const float inv = 1.0f / warp_sum(sum);
  for (int j = lane; j < T_; j += kWarpSize) {
    const float pj = j <= t ? expf(to_float(s[base + j]) - mx) * inv : 0.0f;
    p[base + j] = from_float<TP>(pj);
    if (dropped != nullptr) dropped[base + j] = from_float<TP>(pj * attention_dropout_factor(m, row, j, NH, T_));
  }
}

// dS = P (dP - sum_j P dP) * scale with fp32 dP, P of type TP, dS of type TS;
// dS may be dP itself when TS is float (the row sum is complete before any
// lane writes: warp_sum is a rendezvous of the whole warp).
template <class TP, class TS>
__global__ void causal_softmax_backward_kernel(TS* ds, const float* dp, const TP* att, int rows,
                                               int T_, float scale) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (row >= rows) return;
  const int t = row % T_;
  const size_t base = static_cast<size_t>(row) * T_;
  float dot = 0.0f;
  for (int j = lane; j <= t; j += kWarpSize) dot += to_float(att[base + j]) * dp[base + j];
  dot = warp_sum(dot);
  for (int j = lane; j < T_; j += kWarpSize)
    ds[base + j] =
        from_float<TS>(j <= t ? to_float(att[base + j]) * (dp[base + j] - dot) * scale : 0.0f);
}

// Row-major, batched: C[b] = alpha op(A[b]) op(B[b]) + beta C[b], issued as the
// column-major transpose C^T = op(B)^T op(A)^T. A and B share a type; C may be
// fp32 with bf16 inputs. fp32 compute.
inline void gemm_rm_batched(cublasHandle_t h, bool trans_a, bool trans_b, int M, int N, int K,
                            float alpha, cudaDataType_t ab_type, const void* A, int lda,
                            long long stride_a, const void* B, int ldb, long long stride_b,
                            float beta, cudaDataType_t c_type, void* C, int ldc,
                            long long stride_c, int batch) {
  CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha,
      B, ab_type, ldb, stride_b, A, ab_type, lda, stride_a, &beta, C, c_type, ldc, stride_c, batch,
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

inline size_t attention_saved_elems(int B, int T_, int NH) {
  return static_cast<size_t>(B) * NH * T_ * T_;
}
// Scratch (fp32 elements): dP, followed for a 2-byte T by dS of type T.
template <class T>
size_t attention_scratch_floats(int B, int T_, int NH) {
  const size_t n = static_cast<size_t>(B) * NH * T_ * T_;
  return sizeof(T) == sizeof(float) ? n : n + (n * sizeof(T) + sizeof(float) - 1) / sizeof(float);
}
// Backend-owned workspace in floats (depends on C, which the seam's size
// queries lack): 4 (forward) or 7 (backward) B*T*C tensors of T, and for a
// 2-byte T the fp32 scores / probabilities of all heads after them. With
// dropout the forward adds P o Z (B*NH*T*T of T), the fp32 backward the same in fp32.
template <class T>
size_t attention_forward_workspace_floats(int B, int T_, int C, int NH, bool dropping) {
  const size_t dropped = dropping ? (attention_saved_elems(B, T_, NH) * sizeof(T) + 3) / 4 : 0;
  return 4 * static_cast<size_t>(B) * T_ * C + dropped +
         (sizeof(T) == sizeof(float) ? 0 : attention_saved_elems(B, T_, NH));
}
// (bf16 backward: 7 tensors of T, then fp32 P, dy and dv.)
template <class T>
size_t attention_backward_workspace_floats(int B, int T_, int C, int NH, bool dropping) {
  return 7 * static_cast<size_t>(B) * T_ * C +
         (sizeof(T) == sizeof(float)
              ? (dropping ? attention_saved_elems(B, T_, NH) : 0)
              : attention_saved_elems(B, T_, NH) + 2 * static_cast<size_t>(B) * T_ * C);
}

template <class T>
void attention_forward(cublasHandle_t blas, T* out, T* att, float* workspace, const T* qkv, int B,
                       int T_, int C, int NH, const DropoutMask& drop, cudaStream_t stream) {
  const int hs = C / NH, block = 256;
  const size_t n = static_cast<size_t>(B) * T_ * C;
  T* q = reinterpret_cast<T*>(workspace);
  T *k = q + n, *v = k + n, *y = v + n;
  const unsigned grid = ceil_div(n, block);
  auto split = split_heads_kernel<T, T>;
  LAUNCH_KERNEL(split, grid, block, 0, stream, q, qkv, 3 * C, B, T_, NH, hs);
  LAUNCH_KERNEL(split, grid, block, 0, stream, k, qkv + C, 3 * C, B, T_, NH, hs);
  LAUNCH_KERNEL(split, grid, block, 0, stream, v, qkv + 2 * C, 3 * C, B, T_, NH, hs);
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  const long long sh = static_cast<long long>(T_) * hs, st = static_cast<long long>(T_) * T_;
  const cudaDataType_t type = cuda_data_type<T>();
  // Scores in fp32 (in place in `att` for fp32; in the workspace for bf16, so
  // the softmax sees unrounded scores and only P is rounded).
  float* scores = sizeof(T) == sizeof(float)
                      ? reinterpret_cast<float*>(att)
                      : workspace + (4 * n * sizeof(T) + sizeof(float) - 1) / sizeof(float);
  gemm_rm_batched(blas, false, true, T_, T_, hs, scale, type, q, hs, sh, k, hs, sh, 0.0f,
                  CUDA_R_32F, scores, T_, st, B * NH);
  const int rows = B * NH * T_, rows_per_block = block / kWarpSize;
  // P o Z after the scores (and for bf16 after the fp32 scores): B*NH*T*T of T
  T* dropped = drop.p > 0.0f ? reinterpret_cast<T*>(workspace + attention_forward_workspace_floats<T>(
                                                                    B, T_, C, NH, false))
                             : nullptr;
  auto softmax = causal_softmax_kernel<float, T>;
  LAUNCH_KERNEL(softmax, ceil_div(rows, rows_per_block), block, 0, stream, att, scores, rows, T_, dropped, drop, NH);
  gemm_rm_batched(blas, false, false, T_, hs, T_, 1.0f, type, dropped != nullptr ? dropped : att, T_, st, v, hs, sh,
                  0.0f, type, y, hs, sh, B * NH);
  auto merge = merge_heads_kernel<T, T>;
  LAUNCH_KERNEL(merge, grid, block, 0, stream, out, C, y, B, T_, NH, hs);
}

// scratch: attention_scratch_floats<T>(B, T, NH) floats
template <class T>
void attention_backward(cublasHandle_t blas, T* dqkv, float* scratch, float* workspace,
                        const T* dout, const T* qkv, const T* att, int B, int T_, int C, int NH,
                        const DropoutMask& drop, cudaStream_t stream) {
  const int hs = C / NH, block = 256;
  const size_t n = static_cast<size_t>(B) * T_ * C;
  T* q = reinterpret_cast<T*>(workspace);
  T *k = q + n, *v = k + n, *dy = v + n, *dq = dy + n, *dk = dq + n, *dv = dk + n;
  float* dp = scratch;
  T* ds = sizeof(T) == sizeof(float) ? reinterpret_cast<T*>(scratch)
                                     : reinterpret_cast<T*>(scratch + attention_saved_elems(B, T_, NH));
  // bf16 only: P recomputed in fp32, after the 7 tensors (rounded up to whole floats)
  float* p32 = workspace + (7 * n * sizeof(T) + sizeof(float) - 1) / sizeof(float);
  const unsigned grid = ceil_div(n, block);
  auto split = split_heads_kernel<T, T>;
  LAUNCH_KERNEL(split, grid, block, 0, stream, q, qkv, 3 * C, B, T_, NH, hs);
  LAUNCH_KERNEL(split, grid, block, 0, stream, k, qkv + C, 3 * C, B, T_, NH, hs);
  LAUNCH_KERNEL(split, grid, block, 0, stream, v, qkv + 2 * C, 3 * C, B, T_, NH, hs);
  LAUNCH_KERNEL(split, grid, block, 0, stream, dy, dout, C, B, T_, NH, hs);
  const long long sh = static_cast<long long>(T_) * hs, st = static_cast<long long>(T_) * T_;
  const int heads = B * NH;
  const cudaDataType_t type = cuda_data_type<T>();
  gemm_rm_batched(blas, false, true, T_, T_, hs, 1.0f, type, dy, hs, sh, v, hs, sh, 0.0f,
                  CUDA_R_32F, dp, T_, st, heads);
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  const int rows = B * NH * T_, rows_per_block = block / kWarpSize;
  const bool dropping = drop.p > 0.0f;
  const unsigned elem_grid = static_cast<unsigned>(ceil_div(static_cast<size_t>(rows) * T_, size_t(block)));
  if constexpr (std::is_same<T, float>::value) {
    // dv = (P o Z)^T dy: the forward's P o Z drawn again (the same fp32 products) after the 7
    // tensors, by one kernel that reads P and writes P o Z (no copy of P first)
    const T* pz = att;
    if (dropping) {
      float* buf = workspace + 7 * n;
      LAUNCH_KERNEL(attention_dropout_kernel, elem_grid, block, 0, stream, buf, att, drop, rows, NH, T_);
      pz = buf;
    }
    gemm_rm_batched(blas, true, false, T_, hs, T_, 1.0f, type, pz, T_, st, dy, hs, sh, 0.0f, type,
                    dv, hs, sh, heads);
  }
  if (dropping) LAUNCH_KERNEL(attention_dropout_kernel, elem_grid, block, 0, stream, dp, dp, drop, rows, NH, T_);
  if constexpr (std::is_same<T, float>::value) {
    auto softmax_backward = causal_softmax_backward_kernel<T, T>;
    LAUNCH_KERNEL(softmax_backward, ceil_div(rows, rows_per_block), block, 0, stream, ds, dp, att,
                  rows, T_, scale);
  } else {
    // sum_j P dP cancels: with P rounded to bf16 the error would scale with the
    // terms, so P is recomputed in fp32 (one more q k^T) for this step; dS is
    // rounded once, for the GEMMs.
    gemm_rm_batched(blas, false, true, T_, T_, hs, scale, type, q, hs, sh, k, hs, sh, 0.0f,
                    CUDA_R_32F, p32, T_, st, heads);
    auto softmax = causal_softmax_kernel<float, float>;
    LAUNCH_KERNEL(softmax, ceil_div(rows, rows_per_block), block, 0, stream, p32, p32, rows, T_,
                  static_cast<float*>(nullptr), DropoutMask{}, NH);
    auto softmax_backward = causal_softmax_backward_kernel<float, T>;
    LAUNCH_KERNEL(softmax_backward, ceil_div(rows, rows_per_block), block, 0, stream, ds, dp, p32,
                  rows, T_, scale);
    // dv = (P o Z)^T dy from the fp32 P (a sum of up to T rounded products otherwise)
    if (dropping) LAUNCH_KERNEL(attention_dropout_kernel, elem_grid, block, 0, stream, p32, p32, drop, rows, NH, T_);
    float* dy32 = p32 + attention_saved_elems(B, T_, NH);
    float* dv32 = dy32 + n;
    auto split32 = split_heads_kernel<float, T>;
    LAUNCH_KERNEL(split32, grid, block, 0, stream, dy32, dout, C, B, T_, NH, hs);
    gemm_rm_batched(blas, true, false, T_, hs, T_, 1.0f, CUDA_R_32F, p32, T_, st, dy32, hs, sh,
                    0.0f, CUDA_R_32F, dv32, hs, sh, heads);
    auto merge32 = merge_heads_kernel<T, float>;
    LAUNCH_KERNEL(merge32, grid, block, 0, stream, dqkv + 2 * C, 3 * C, dv32, B, T_, NH, hs);
  }
  gemm_rm_batched(blas, false, false, T_, hs, T_, 1.0f, type, ds, T_, st, k, hs, sh, 0.0f, type,
                  dq, hs, sh, heads);
  gemm_rm_batched(blas, true, false, T_, hs, T_, 1.0f, type, ds, T_, st, q, hs, sh, 0.0f, type,
                  dk, hs, sh, heads);
  auto merge = merge_heads_kernel<T, T>;
  LAUNCH_KERNEL(merge, grid, block, 0, stream, dqkv, 3 * C, dq, B, T_, NH, hs);
  LAUNCH_KERNEL(merge, grid, block, 0, stream, dqkv + C, 3 * C, dk, B, T_, NH, hs);
  if constexpr (std::is_same<T, float>::value)
    LAUNCH_KERNEL(merge, grid, block, 0, stream, dqkv + 2 * C, 3 * C, dv, B, T_, NH, hs);
}

}  // namespace kern
}  // namespace gpt2

#endif  // BACKEND_CUDA_ATTENTION_CUH
