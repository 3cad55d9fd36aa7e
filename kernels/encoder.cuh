// Token + position embedding, forward and backward.
//
// forward   one thread per output element (B*T*C): out = wte[token] + wpe[t].
//           Reads 2 floats + 1 token (cached across the row), writes 1 float.
//           A token id outside [0, V) cannot be checked on the host without a
//           download, so the kernel writes NaN for that row instead: the loss
//           becomes NaN and the trainer's NaN guard stops the run.
// backward  dwpe: one thread per (t, c) sums the B rows in order (deterministic,
//           coalesced over c). dwte: one thread per (b, t, c) adds its element
//           with atomicAdd, since several positions may share a token; fp32
//           atomics make the summation order (and so the last bits) vary from
//           run to run. Out-of-range ids are skipped.
#ifndef KERNELS_ENCODER_CUH
#define KERNELS_ENCODER_CUH

#include "kernels/common.cuh"

namespace gpt2 {
namespace kern {

__global__ void encoder_forward_kernel(float* out, const int* tokens, const float* wte,
                                       const float* wpe, int B, int T, int C, int V) {
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<size_t>(B) * T * C) return;
  const size_t bt = idx / C;
  const int c = static_cast<int>(idx % C);
  const int t = static_cast<int>(bt % T);
  const int token = tokens[bt];
  out[idx] = (token >= 0 && token < V)
                 ? wte[static_cast<size_t>(token) * C + c] + wpe[static_cast<size_t>(t) * C + c]
                 : NAN;
}

__global__ void encoder_backward_wpe_kernel(float* dwpe, const float* dout, int B, int T, int C) {
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;  // t * C + c
  if (idx >= T * C) return;
  float sum = 0.0f;
  for (int b = 0; b < B; b++) sum += dout[static_cast<size_t>(b) * T * C + idx];
  dwpe[idx] += sum;
}

__global__ void encoder_backward_wte_kernel(float* dwte, const float* dout, const int* tokens,
                                            int B, int T, int C, int V) {
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<size_t>(B) * T * C) return;
  const size_t bt = idx / C;
  const int c = static_cast<int>(idx % C);
  const int token = tokens[bt];
  if (token < 0 || token >= V) return;
  atomicAdd(&dwte[static_cast<size_t>(token) * C + c], dout[idx]);
}

inline void encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe,
                            int B, int T, int C, int V, cudaStream_t stream) {
  const int block = 256;
  const size_t n = static_cast<size_t>(B) * T * C;
  LAUNCH_KERNEL(encoder_forward_kernel, ceil_div(n, block), block, 0, stream, out, tokens, wte,
                wpe, B, T, C, V);
}

inline void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* tokens,
                             int B, int T, int C, int V, cudaStream_t stream) {
  const int block = 256;
  LAUNCH_KERNEL(encoder_backward_wpe_kernel, ceil_div(static_cast<size_t>(T) * C, block), block,
                0, stream, dwpe, dout, B, T, C);
  const size_t n = static_cast<size_t>(B) * T * C;
  LAUNCH_KERNEL(encoder_backward_wte_kernel, ceil_div(n, block), block, 0, stream, dwte, dout,
                tokens, B, T, C, V);
}

}  // namespace kern
}  // namespace gpt2

#endif  // KERNELS_ENCODER_CUH
