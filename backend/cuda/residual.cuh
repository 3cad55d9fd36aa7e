// Residual add out = a + b; bandwidth-bound (3 accesses per element). Each
// thread handles P consecutive elements: P = kPack<T> (128-bit loads/stores)
// when n % P == 0 and the pointers are 16-byte aligned, else P = 1 (same
// arithmetic, same bits).
// out may alias a or b: each thread reads its elements before writing them.
// a and b are read once (streaming loads); out is the next layernorm's input
// and stays cacheable.
#ifndef BACKEND_CUDA_RESIDUAL_CUH
#define BACKEND_CUDA_RESIDUAL_CUH

#include "backend/cuda/common.cuh"
#include "backend/cuda/pack128.cuh"

namespace gpt2 {
namespace kern {

template <class T, int P>
__global__ void residual_forward_kernel(T* out, const T* a, const T* b, size_t n) {
  const size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * P;
  if (i >= n) return;
  float x[P], y[P];
  load_floats<P, true>(x, a + i);
  load_floats<P, true>(y, b + i);
  for (int k = 0; k < P; k++) x[k] += y[k];
  store_floats<P>(out + i, x);
}

template <class T>
void residual_forward(T* out, const T* a, const T* b, size_t n, cudaStream_t stream) {
  const int block = 256;
  constexpr int P = kPack<T>;
  if (can_pack(n, P, out, a, b)) {
    auto kernel = residual_forward_kernel<T, P>;
    LAUNCH_KERNEL(kernel, ceil_div(n / P, block), block, 0, stream, out, a, b, n);
  } else {
    auto kernel = residual_forward_kernel<T, 1>;
    LAUNCH_KERNEL(kernel, ceil_div(n, block), block, 0, stream, out, a, b, n);
  }
}

}  // namespace kern
}  // namespace gpt2

#endif  // BACKEND_CUDA_RESIDUAL_CUH
