// LayerNorm over the last dimension (C), eps 1e-5, forward and backward.
//
// forward   one warp per row (8 rows per 256-thread block). Two passes over the
//           row in registers/L1: mean, then the variance of (x - mean) (the
//           two-pass form avoids E[x^2] - E[x]^2 cancellation), then the
//           normalised output. Saves mean and rstd per row. Traffic: read N*C,
//           write N*C (the re-reads hit L1/L2).
// backward  three kernels, all deterministic (no atomics):
//   rows      one warp per row: with g = w * dout and xhat = (x - mean) * rstd,
//             dinp += (g - mean(g) - xhat * mean(g * xhat)) * rstd
//   partials  dw/db column sums over a fixed chunking of the rows: block
//             (x = 256 columns, y = row chunk) writes one partial per column
//             and chunk to scratch (coalesced over columns)
//   finish    one thread per column adds the chunk partials in chunk order and
//             accumulates into dw, db.
//           The chunk count depends only on N, so the bits do not depend on the
//           run order or the GPU.
#ifndef KERNELS_LAYERNORM_CUH
#define KERNELS_LAYERNORM_CUH

#include "kernels/common.cuh"

namespace gpt2 {
namespace kern {

constexpr float kLayernormEps = 1e-5f;

__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                         const float* w, const float* b, int N, int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (row >= N) return;  // whole warps leave together
  const float* x = inp + static_cast<size_t>(row) * C;
  float sum = 0.0f;
  for (int c = lane; c < C; c += kWarpSize) sum += x[c];
  const float m = warp_sum(sum) / C;
  float var = 0.0f;
  for (int c = lane; c < C; c += kWarpSize) {
    const float d = x[c] - m;
    var += d * d;
  }
  const float s = 1.0f / sqrtf(warp_sum(var) / C + kLayernormEps);
  float* o = out + static_cast<size_t>(row) * C;
  for (int c = lane; c < C; c += kWarpSize) o[c] = (x[c] - m) * s * w[c] + b[c];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

__global__ void layernorm_backward_rows_kernel(float* dinp, const float* dout, const float* inp,
                                               const float* w, const float* mean,
                                               const float* rstd, int N, int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (row >= N) return;
  const size_t base = static_cast<size_t>(row) * C;
  const float m = mean[row], s = rstd[row];
  float g_sum = 0.0f, gx_sum = 0.0f;
  for (int c = lane; c < C; c += kWarpSize) {
    const float g = w[c] * dout[base + c];
    g_sum += g;
    gx_sum += g * (inp[base + c] - m) * s;
  }
  const float g_mean = warp_sum(g_sum) / C;
  const float gx_mean = warp_sum(gx_sum) / C;
  for (int c = lane; c < C; c += kWarpSize) {
    const float g = w[c] * dout[base + c];
    const float xhat = (inp[base + c] - m) * s;
    dinp[base + c] += (g - g_mean - xhat * gx_mean) * s;
  }
}

// partials: [2][chunks][C] (dw partials, then db partials)
__global__ void layernorm_backward_partials_kernel(float* partials, const float* dout,
                                                   const float* inp, const float* mean,
                                                   const float* rstd, int N, int C,
                                                   int rows_per_chunk) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int chunk = blockIdx.y;
  if (c >= C) return;
  const int r0 = chunk * rows_per_chunk;
  const int r1 = min(N, r0 + rows_per_chunk);
  float dw = 0.0f, db = 0.0f;
  for (int r = r0; r < r1; r++) {
    const size_t i = static_cast<size_t>(r) * C + c;
    const float d = dout[i];
    dw += d * (inp[i] - mean[r]) * rstd[r];
    db += d;
  }
  partials[static_cast<size_t>(chunk) * C + c] = dw;
  partials[(static_cast<size_t>(gridDim.y) + chunk) * C + c] = db;
}

__global__ void layernorm_backward_finish_kernel(float* dw, float* db, const float* partials,
                                                 int chunks, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float sw = 0.0f, sb = 0.0f;
  for (int k = 0; k < chunks; k++) {
    sw += partials[static_cast<size_t>(k) * C + c];
    sb += partials[static_cast<size_t>(chunks + k) * C + c];
  }
  dw[c] += sw;
  db[c] += sb;
}

// Row chunking of the dw/db reduction: at least 32 rows per chunk, at most 64
// chunks (enough blocks to fill a GPU at C = 768 with 3 blocks of columns).
inline int layernorm_backward_chunks(int N) { return N < 32 ? 1 : (N / 32 < 64 ? N / 32 : 64); }
inline size_t layernorm_backward_scratch_floats(int N, int C) {
  return 2 * static_cast<size_t>(layernorm_backward_chunks(N)) * C;
}

inline void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                              const float* w, const float* b, int N, int C, cudaStream_t stream) {
  const int block = 256, rows_per_block = block / kWarpSize;
  LAUNCH_KERNEL(layernorm_forward_kernel, ceil_div(N, rows_per_block), block, 0, stream, out,
                mean, rstd, inp, w, b, N, C);
}

// scratch: layernorm_backward_scratch_floats(N, C) floats
inline void layernorm_backward(float* dinp, float* dw, float* db, float* scratch,
                               const float* dout, const float* inp, const float* w,
                               const float* mean, const float* rstd, int N, int C,
                               cudaStream_t stream) {
  const int block = 256, rows_per_block = block / kWarpSize;
  LAUNCH_KERNEL(layernorm_backward_rows_kernel, ceil_div(N, rows_per_block), block, 0, stream,
                dinp, dout, inp, w, mean, rstd, N, C);
  const int chunks = layernorm_backward_chunks(N);
  const int rows_per_chunk = static_cast<int>(ceil_div(N, chunks));
  const dim3 grid(ceil_div(C, block), chunks);
  LAUNCH_KERNEL(layernorm_backward_partials_kernel, grid, block, 0, stream, scratch, dout, inp,
                mean, rstd, N, C, rows_per_chunk);
  LAUNCH_KERNEL(layernorm_backward_finish_kernel, ceil_div(C, block), block, 0, stream, dw, db,
                scratch, chunks, C);
}

}  // namespace kern
}  // namespace gpt2

#endif  // KERNELS_LAYERNORM_CUH
