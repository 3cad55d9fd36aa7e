// Inverted dropout, out = inp * (keep ? 1 / (1 - p) : 0), the mask drawn from
// util/philox.h exactly as the CPU backend draws it (the same bits: a mask is
// a function of (seed, step, stream, token, column), not of the backend).
// One thread per row and group of 4 columns: one Philox4x32-10 call (10 rounds
// of two 32x32 -> 64-bit multiplies) gives the four columns' draws. Each
// thread reads and writes 4 consecutive elements (16 bytes fp32, 8 bf16), so a
// warp's requests are contiguous; arithmetic in fp32, one rounding on store.
// out may alias inp: each thread reads its elements before writing them.
#ifndef BACKEND_CUDA_DROPOUT_CUH
#define BACKEND_CUDA_DROPOUT_CUH

#include "backend/cuda/common.cuh"
#include "util/philox.h"

namespace gpt2 {
namespace kern {

template <class T>
__global__ void dropout_kernel(T* out, const T* inp, DropoutMask m, int N, int C) {
  const size_t groups = static_cast<size_t>(C + 3) / 4;
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<size_t>(N) * groups) return;
  const size_t r = i / groups;
  const uint32_t q = static_cast<uint32_t>(i % groups);
  const Philox4 draw = m.draws(m.token0 + r, q);
  const float scale = m.keep_scale();
  const uint32_t threshold = m.threshold();
  for (int k = 0; k < 4; k++) {
    const size_t c = size_t{4} * q + k;
    if (c >= static_cast<size_t>(C)) break;
    const size_t at = r * C + c;
    out[at] = from_float<T>(to_float(inp[at]) * (draw.v[k] >= threshold ? scale : 0.0f));
  }
}

template <class T>
void dropout(T* out, const T* inp, const DropoutMask& m, int N, int C, cudaStream_t stream) {
  const int block = 256;
  const size_t threads = static_cast<size_t>(N) * ((static_cast<size_t>(C) + 3) / 4);
  LAUNCH_KERNEL(dropout_kernel<T>, ceil_div(threads, size_t(block)), block, 0, stream, out, inp, m, N, C);
}

}  // namespace kern
}  // namespace gpt2

#endif  // BACKEND_CUDA_DROPOUT_CUH
