// Residual add out = a + b (and the generic x *= s the optimizer uses); one
// thread per element, bandwidth-bound (12 / 8 bytes per element). out may
// alias a or b: each thread reads its element before writing it.
#ifndef KERNELS_RESIDUAL_CUH
#define KERNELS_RESIDUAL_CUH

#include "kernels/common.cuh"

namespace gpt2 {
namespace kern {

template <class T>
__global__ void residual_forward_kernel(T* out, const T* a, const T* b, size_t n) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = from_float<T>(to_float(a[i]) + to_float(b[i]));
}

template <class T>
__global__ void scale_kernel(T* x, float s, size_t n) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  x[i] = from_float<T>(to_float(x[i]) * s);
}

template <class T>
void residual_forward(T* out, const T* a, const T* b, size_t n, cudaStream_t stream) {
  const int block = 256;
  auto residual_kernel = residual_forward_kernel<T>;
  LAUNCH_KERNEL(residual_kernel, ceil_div(n, block), block, 0, stream, out, a, b, n);
}

template <class T>
void scale(T* x, float s, size_t n, cudaStream_t stream) {
  const int block = 256;
  auto scale_k = scale_kernel<T>;
  LAUNCH_KERNEL(scale_k, ceil_div(n, block), block, 0, stream, x, s, n);
}

}  // namespace kern
}  // namespace gpt2

#endif  // KERNELS_RESIDUAL_CUH
