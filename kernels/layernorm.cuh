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
// T (float or __nv_bfloat16) is the storage type of every argument, mean and
// rstd included (the model allocates them as activations); math is fp32.
#ifndef KERNELS_LAYERNORM_CUH
#define KERNELS_LAYERNORM_CUH

#include "kernels/common.cuh"

namespace gpt2 {
namespace kern {

constexpr float kLayernormEps = 1e-5f;

template <class T>
__global__ void layernorm_forward_kernel(T* out, T* mean, T* rstd, const T* inp, const T* w,
                                         const T* b, int N, int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (row >= N) return;  // whole warps leave together
  const T* x = inp + static_cast<size_t>(row) * C;
  float sum = 0.0f;
  for (int c = lane; c < C; c += kWarpSize) sum += to_float(x[c]);
  const float m = warp_sum(sum) / C;
  float var = 0.0f;
  for (int c = lane; c < C; c += kWarpSize) {
    const float d = to_float(x[c]) - m;
    var += d * d;
  }
  const float s = 1.0f / sqrtf(warp_sum(var) / C + kLayernormEps);
  T* o = out + static_cast<size_t>(row) * C;
  for (int c = lane; c < C; c += kWarpSize)
    o[c] = from_float<T>((to_float(x[c]) - m) * s * to_float(w[c]) + to_float(b[c]));
  if (lane == 0) {
    mean[row] = from_float<T>(m);
    rstd[row] = from_float<T>(s);
  }
}

template <class T>
__global__ void layernorm_backward_rows_kernel(T* dinp, const T* dout, const T* inp, const T* w,
                                               const T* mean, const T* rstd, int N, int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (row >= N) return;
  const size_t base = static_cast<size_t>(row) * C;
  const float m = to_float(mean[row]), s = to_float(rstd[row]);
  float g_sum = 0.0f, gx_sum = 0.0f;
  for (int c = lane; c < C; c += kWarpSize) {
    const float g = to_float(w[c]) * to_float(dout[base + c]);
    g_sum += g;
    gx_sum += g * (to_float(inp[base + c]) - m) * s;
  }
  const float g_mean = warp_sum(g_sum) / C;
  const float gx_mean = warp_sum(gx_sum) / C;
  for (int c = lane; c < C; c += kWarpSize) {
    const float g = to_float(w[c]) * to_float(dout[base + c]);
    const float xhat = (to_float(inp[base + c]) - m) * s;
    dinp[base + c] = from_float<T>(to_float(dinp[base + c]) + (g - g_mean - xhat * gx_mean) * s);
  }
}

// partials: [2][chunks][C] fp32 (dw partials, then db partials)
template <class T>
__global__ void layernorm_backward_partials_kernel(float* partials, const T* dout, const T* inp,
                                                   const T* mean, const T* rstd, int N, int C,
                                                   int rows_per_chunk) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int chunk = blockIdx.y;
  if (c >= C) return;
  const int r0 = chunk * rows_per_chunk;
  const int r1 = min(N, r0 + rows_per_chunk);
  float dw = 0.0f, db = 0.0f;
  for (int r = r0; r < r1; r++) {
    const size_t i = static_cast<size_t>(r) * C + c;
    const float d = to_float(dout[i]);
    dw += d * (to_float(inp[i]) - to_float(mean[r])) * to_float(rstd[r]);
    db += d;
  }
  partials[static_cast<size_t>(chunk) * C + c] = dw;
  partials[(static_cast<size_t>(gridDim.y) + chunk) * C + c] = db;
}

template <class T>
__global__ void layernorm_backward_finish_kernel(T* dw, T* db, const float* partials, int chunks,
                                                 int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float sw = 0.0f, sb = 0.0f;
  for (int k = 0; k < chunks; k++) {
    sw += partials[static_cast<size_t>(k) * C + c];
    sb += partials[static_cast<size_t>(chunks + k) * C + c];
  }
  dw[c] = from_float<T>(to_float(dw[c]) + sw);
  db[c] = from_float<T>(to_float(db[c]) + sb);
}

// Row chunking of the dw/db reduction: at least 32 rows per chunk, at most 64
// chunks (enough blocks to fill a GPU at C = 768 with 3 blocks of columns).
inline int layernorm_backward_chunks(int N) { return N < 32 ? 1 : (N / 32 < 64 ? N / 32 : 64); }
inline size_t layernorm_backward_scratch_floats(int N, int C) {
  return 2 * static_cast<size_t>(layernorm_backward_chunks(N)) * C;
}

template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int N,
                       int C, cudaStream_t stream) {
  const int block = 256, rows_per_block = block / kWarpSize;
  auto forward_kernel = layernorm_forward_kernel<T>;
  LAUNCH_KERNEL(forward_kernel, ceil_div(N, rows_per_block), block, 0, stream, out, mean, rstd,
                inp, w, b, N, C);
}

// scratch: layernorm_backward_scratch_floats(N, C) floats
template <class T>
void layernorm_backward(T* dinp, T* dw, T* db, float* scratch, const T* dout, const T* inp,
                        const T* w, const T* mean, const T* rstd, int N, int C,
                        cudaStream_t stream) {
  const int block = 256, rows_per_block = block / kWarpSize;
  auto rows_kernel = layernorm_backward_rows_kernel<T>;
  LAUNCH_KERNEL(rows_kernel, ceil_div(N, rows_per_block), block, 0, stream, dinp, dout, inp, w,
                mean, rstd, N, C);
  const int chunks = layernorm_backward_chunks(N);
  const int rows_per_chunk = static_cast<int>(ceil_div(N, chunks));
  const dim3 grid(ceil_div(C, block), chunks);
  auto partials_kernel = layernorm_backward_partials_kernel<T>;
  LAUNCH_KERNEL(partials_kernel, grid, block, 0, stream, scratch, dout, inp, mean, rstd, N, C,
                rows_per_chunk);
  auto finish_kernel = layernorm_backward_finish_kernel<T>;
  LAUNCH_KERNEL(finish_kernel, ceil_div(C, block), block, 0, stream, dw, db, scratch, chunks, C);
}

}  // namespace kern
}  // namespace gpt2

#endif  // KERNELS_LAYERNORM_CUH
