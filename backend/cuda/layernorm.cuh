// LayerNorm over the last dimension (C), eps 1e-5, forward and backward.
// A lane moves P consecutive columns per access: P = kPack<T> (128-bit loads and
// stores, 4 floats or 8 bf16) when C % P == 0 and every row pointer is 16-byte
// aligned (checked on the host), else P = 1 (the scalar kernels, same formulas).
// Lane l owns columns (l + 32k) P + j, so P changes only the order of a lane's
// fp32 partial sums.
//
// forward   one warp per row (8 rows per 256-thread block). Two passes over the
//           row in registers/L1: mean, then the variance of (x - mean) (the
//           two-pass form avoids E[x^2] - E[x]^2 cancellation), then the
//           normalised output (the last read of x streams: __ldcs). Saves mean
//           and rstd per row. Traffic: read N*C, write N*C (re-reads hit L1/L2).
//           residual_layernorm_forward: the residual add before it, same warp
//           and row (the residual stream's sum is written and normalised in one
//           kernel, the model's residual2/ln2 and residual3/next ln1).
// backward  one pass over the rows, then a small reduction, deterministic:
//   main      grid G(N) blocks of W(C) warps, block g owns a contiguous range of
//             rows, warp w of it rows w, w + W, ...; per row, with g = w * dout
//             and xhat = (x - mean) * rstd,
//               dinp += (g - mean(g) - xhat * mean(g * xhat)) * rstd
//             and the warp adds dout * xhat and dout to its own fp32 dw/db
//             accumulators (shared memory, [W][2][C]; each lane touches only its
//             own columns, so no atomics and no barrier until the end). Then the
//             block sums its W accumulators in warp order and writes one dw and
//             one db partial row per block to scratch.
//   finish    per column, the G block partials summed in block order (8 warps
//             split them, then fixed-order combine) and added to dw, db.
//           G depends only on N and W only on C, so the bits do not depend on
//           the run order or the GPU. Traffic: read dout, inp, dinp, write dinp
//           (one pass; the second read of a row hits L1), plus 4 G C floats.
//           C > kLnSmemMaxC: the accumulators live in scratch (global), W = 1.
// T (float or __nv_bfloat16) is the storage type of every argument but mean and
// rstd, which are fp32 (kStats) whatever T; math is fp32.
#ifndef BACKEND_CUDA_LAYERNORM_CUH
#define BACKEND_CUDA_LAYERNORM_CUH

#include "backend/cuda/common.cuh"
#include "backend/cuda/pack128.cuh"

namespace gpt2 {
namespace kern {

constexpr float kLayernormEps = 1e-5f;

// One row by one warp: x and o point at the row.
template <class T, int P>
__device__ inline void layernorm_forward_row(T* o, float* mean, float* rstd, const T* x, const T* w, const T* b,
                                             int C, int row, int lane) {
  float sum = 0.0f;
  for (int c = lane * P; c < C; c += kWarpSize * P) {
    float v[P];
    load_floats<P>(v, x + c);
    for (int k = 0; k < P; k++) sum += v[k];
  }
  const float m = warp_sum(sum) / C;
  float var = 0.0f;
  for (int c = lane * P; c < C; c += kWarpSize * P) {
    float v[P];
    load_floats<P>(v, x + c);
    for (int k = 0; k < P; k++) var += (v[k] - m) * (v[k] - m);
  }
  const float s = 1.0f / sqrtf(warp_sum(var) / C + kLayernormEps);
  for (int c = lane * P; c < C; c += kWarpSize * P) {
    float v[P], wv[P], bv[P];
    load_floats<P, true>(v, x + c);
    load_floats<P>(wv, w + c);  // w, b: read by every row, keep cached
    load_floats<P>(bv, b + c);
    for (int k = 0; k < P; k++) v[k] = (v[k] - m) * s * wv[k] + bv[k];
    store_floats<P>(o + c, v);
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

template <class T, int P>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp, const T* w,
                                         const T* b, int N, int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (row >= N) return;  // whole warps leave together
  const size_t off = static_cast<size_t>(row) * C;
  layernorm_forward_row<T, P>(out + off, mean, rstd, inp + off, w, b, C, row, lane);
}

// residual = a + b rounded to T (residual_forward's arithmetic), then the
// layernorm of the stored sum with layernorm_forward_row: the bits of the two
// ops. A lane re-reads only the columns it wrote itself (the same lane mapping),
// so no barrier is needed and the re-reads hit L1/L2. Traffic: read a, b, write
// residual, out: one read of the residual stream less than the two kernels.
template <class T, int P>
__global__ void residual_layernorm_forward_kernel(T* residual, T* out, float* mean, float* rstd, const T* a,
                                                  const T* b, const T* w, const T* bias, int N, int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (row >= N) return;
  const size_t off = static_cast<size_t>(row) * C;
  for (int c = lane * P; c < C; c += kWarpSize * P) {
    float x[P], y[P];
    load_floats<P, true>(x, a + off + c);
    load_floats<P, true>(y, b + off + c);
    for (int k = 0; k < P; k++) x[k] += y[k];
    store_floats<P>(residual + off + c, x);
  }
  layernorm_forward_row<T, P>(out + off, mean, rstd, residual + off, w, bias, C, row, lane);
}

// acc[0..P) += v[0..P): 128-bit shared-memory accesses when P % 4 == 0 (acc is then
// 16-byte aligned: C % P == 0), so a warp touches consecutive 512 B without 8-way
// bank conflicts (a lane's 8 floats would otherwise sit in 4 banks per access).
template <int P>
__device__ inline void accumulate(float* acc, const float (&v)[P]) {
  if constexpr (P % 4 == 0) {
    GPT2_CHECK_ALIGNED(acc, 16, "layernorm accumulate");
    float4* a4 = reinterpret_cast<float4*>(acc);
    for (int j = 0; j < P / 4; j++) {
      float4 t = a4[j];
      t.x += v[4 * j];
      t.y += v[4 * j + 1];
      t.z += v[4 * j + 2];
      t.w += v[4 * j + 3];
      a4[j] = t;
    }
  } else {
    for (int k = 0; k < P; k++) acc[k] += v[k];
  }
}

// One row of the backward by one warp (row pointers already offset); adds the
// row's dw/db terms to this warp's accumulators (lane-owned columns).
template <class T, int P>
__device__ inline void layernorm_backward_row(T* dinp, float* dw_acc, float* db_acc,
                                              const T* dout, const T* inp, const T* w, float m,
                                              float s, int C, int lane) {
  float g_sum = 0.0f, gx_sum = 0.0f;
  for (int c = lane * P; c < C; c += kWarpSize * P) {
    float d[P], x[P], wv[P];
    load_floats<P>(d, dout + c);
    load_floats<P>(x, inp + c);
    load_floats<P>(wv, w + c);
    for (int k = 0; k < P; k++) {
      const float g = wv[k] * d[k];
      g_sum += g;
      gx_sum += g * ((x[k] - m) * s);
    }
  }
  const float g_mean = warp_sum(g_sum) / C;
  const float gx_mean = warp_sum(gx_sum) / C;
  for (int c = lane * P; c < C; c += kWarpSize * P) {
    float d[P], x[P], wv[P], di[P];
    load_floats<P, true>(d, dout + c);  // last reads of dout, inp (the first pass cached them)
    load_floats<P, true>(x, inp + c);
    load_floats<P>(wv, w + c);
    load_floats<P, true>(di, dinp + c);
    for (int k = 0; k < P; k++) {
      const float xhat = (x[k] - m) * s;
      di[k] += (wv[k] * d[k] - g_mean - xhat * gx_mean) * s;
      x[k] = d[k] * xhat;  // x is dead: reuse it for the dw term
    }
    store_floats<P>(dinp + c, di);
    accumulate<P>(dw_acc + c, x);
    accumulate<P>(db_acc + c, d);
  }
}

// partials: [2][gridDim.x][C] fp32 (dw rows, then db rows). global_acc: nullptr
// (accumulators in dynamic shared memory, W * 2 * C floats) or gridDim.x * W * 2 * C
// floats of scratch for C too large for shared memory.
template <class T, int P>
__global__ void layernorm_backward_kernel(T* dinp, float* partials, float* global_acc,
                                          const T* dout, const T* inp, const T* w, const float* mean,
                                          const float* rstd, int N, int C, int rows_per_block) {
  DYNAMIC_SHARED(float, smem_acc);
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  float* block_acc = global_acc == nullptr
                         ? smem_acc
                         : global_acc + static_cast<size_t>(blockIdx.x) * warps * 2 * C;
  float* dw_acc = block_acc + static_cast<size_t>(warp) * 2 * C;
  float* db_acc = dw_acc + C;
  for (int c = lane * P; c < C; c += kWarpSize * P)
    for (int k = 0; k < P; k++) dw_acc[c + k] = db_acc[c + k] = 0.0f;
  const int r0 = blockIdx.x * rows_per_block, r1 = min(N, r0 + rows_per_block);
  for (int r = r0 + warp; r < r1; r += warps) {
    const size_t base = static_cast<size_t>(r) * C;
    layernorm_backward_row<T, P>(dinp + base, dw_acc, db_acc, dout + base, inp + base, w,
                                 mean[r], rstd[r], C, lane);
  }
  __syncthreads();
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float sw = 0.0f, sb = 0.0f;
    for (int k = 0; k < warps; k++) {
      sw += block_acc[static_cast<size_t>(k) * 2 * C + c];
      sb += block_acc[static_cast<size_t>(k) * 2 * C + C + c];
    }
    partials[static_cast<size_t>(blockIdx.x) * C + c] = sw;
    partials[(static_cast<size_t>(gridDim.x) + blockIdx.x) * C + c] = sb;
  }
}

constexpr int kLnFinishWarps = 8;

// 32 columns per block: warp w sums partials w, w + 8, ... in order, then warp 0
// adds the 8 warp sums in warp order and accumulates into dw, db.
template <class T>
__global__ void layernorm_backward_finish_kernel(T* dw, T* db, const float* partials, int blocks,
                                                 int C) {
  __shared__ float sums[2][kLnFinishWarps][kWarpSize];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int c = blockIdx.x * kWarpSize + lane;
  float sw = 0.0f, sb = 0.0f;
  if (c < C)
    for (int k = warp; k < blocks; k += kLnFinishWarps) {
      sw += partials[static_cast<size_t>(k) * C + c];
      sb += partials[static_cast<size_t>(blocks + k) * C + c];
    }
  sums[0][warp][lane] = sw;
  sums[1][warp][lane] = sb;
  __syncthreads();
  if (warp != 0 || c >= C) return;
  for (int k = 1; k < kLnFinishWarps; k++) {
    sw += sums[0][k][lane];
    sb += sums[1][k][lane];
  }
  dw[c] = from_float<T>(to_float(dw[c]) + sw);
  db[c] = from_float<T>(to_float(db[c]) + sb);
}

// Launch shape of the backward: G(N) row blocks (>= 32 rows each, at most 512:
// ~4 blocks per SM on an H100 at N = 65536), W(C) warps whose accumulators
// (8 W C bytes) fit in kLnSmemBytes of shared memory (6 warps at C = 768).
constexpr size_t kLnSmemBytes = static_cast<size_t>(40) * 1024;
constexpr int kLnSmemMaxC = static_cast<int>(kLnSmemBytes / 8);
inline int layernorm_backward_blocks(int N) { return N < 32 ? 1 : (N / 32 < 512 ? N / 32 : 512); }
inline int layernorm_backward_warps(int C) {
  if (C > kLnSmemMaxC) return 1;
  const size_t w = kLnSmemBytes / (8 * static_cast<size_t>(C));
  return w > 8 ? 8 : static_cast<int>(w);
}
inline size_t layernorm_backward_scratch_floats(int N, int C) {
  const size_t partials = 2 * static_cast<size_t>(layernorm_backward_blocks(N)) * C;
  return C > kLnSmemMaxC ? 2 * partials : partials;  // + global accumulators (W = 1)
}

template <class T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* w, const T* b, int N,
                       int C, cudaStream_t stream) {
  const int block = 256, rows_per_block = block / kWarpSize;
  constexpr int P = kPack<T>;
  auto kernel = can_pack(C, P, out, inp, w, b) ? layernorm_forward_kernel<T, P>
                                               : layernorm_forward_kernel<T, 1>;
  LAUNCH_KERNEL(kernel, ceil_div(N, rows_per_block), block, 0, stream, out, mean, rstd, inp, w,
                b, N, C);
}

// Packed when every pointer allows it: then, as layernorm_forward on `residual`
// packs too, the fused op has the two ops' bits (a misaligned a or b alone gives
// the scalar kernel, whose sums may differ from the packed ones in the last bits).
template <class T>
void residual_layernorm_forward(T* residual, T* out, float* mean, float* rstd, const T* a, const T* b, const T* w,
                                const T* bias, int N, int C, cudaStream_t stream) {
  const int block = 256, rows_per_block = block / kWarpSize;
  constexpr int P = kPack<T>;
  auto kernel = can_pack(C, P, residual, out, a, b, w, bias) ? residual_layernorm_forward_kernel<T, P>
                                                             : residual_layernorm_forward_kernel<T, 1>;
  LAUNCH_KERNEL(kernel, ceil_div(N, rows_per_block), block, 0, stream, residual, out, mean, rstd, a, b, w, bias,
                N, C);
}

// scratch: layernorm_backward_scratch_floats(N, C) floats
template <class T>
void layernorm_backward(T* dinp, T* dw, T* db, float* scratch, const T* dout, const T* inp,
                        const T* w, const float* mean, const float* rstd, int N, int C,
                        cudaStream_t stream) {
  const int blocks = layernorm_backward_blocks(N), warps = layernorm_backward_warps(C);
  const int rows_per_block = static_cast<int>(ceil_div(N, blocks));
  const bool in_smem = C <= kLnSmemMaxC;
  float* global_acc = in_smem ? nullptr : scratch + 2 * static_cast<size_t>(blocks) * C;
  const size_t smem = in_smem ? static_cast<size_t>(warps) * 2 * C * sizeof(float) : 0;
  constexpr int P = kPack<T>;
  auto kernel = can_pack(C, P, dinp, dout, inp, w) ? layernorm_backward_kernel<T, P>
                                                   : layernorm_backward_kernel<T, 1>;
  LAUNCH_KERNEL(kernel, blocks, warps * kWarpSize, smem, stream, dinp, scratch, global_acc, dout,
                inp, w, mean, rstd, N, C, rows_per_block);
  auto finish_kernel = layernorm_backward_finish_kernel<T>;
  LAUNCH_KERNEL(finish_kernel, ceil_div(C, kWarpSize), kLnFinishWarps * kWarpSize, 0, stream, dw,
                db, scratch, blocks, C);
}

}  // namespace kern
}  // namespace gpt2

#endif  // BACKEND_CUDA_LAYERNORM_CUH
