// GELU, tanh approximation, forward and backward; bandwidth-bound (read 1-2,
// write 1 element). Each thread handles P consecutive elements: P = kPack<T>
// (one 128-bit load/store per array, 4 floats or 8 bf16) when n % P == 0 and
// every pointer is 16-byte aligned, else P = 1 (the scalar kernel, same formula,
// same bits). Inputs are read once: streaming loads (__ldcs); the output is read
// by the next GEMM, so it is stored normally (stays in L2).
//
// 0.5 (1 + tanh(u)) is evaluated as the logistic s = 1 / (1 + e), e = exp(-2u),
// u = sqrt(2/pi) (x + 0.044715 x^3). For the gradient, 1 - s is computed as
// 1 / (1 + 1/e) rather than 1 - s (which cancels for large x) or e * s (which
// is inf * 0 = NaN once e overflows, x < ~-10):
//   gelu'(x) = s + 2 x u'(x) s (1 - s),  u'(x) = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// Every |x| up to fp32's range gives a finite result; NaN propagates.
// gelu_backward may run in place (dinp == dout): each thread reads its elements
// before writing them.
#ifndef BACKEND_CUDA_GELU_CUH
#define BACKEND_CUDA_GELU_CUH

#include "backend/cuda/common.cuh"
#include "backend/cuda/pack128.cuh"

namespace gpt2 {
namespace kern {

constexpr float kGeluK0 = 0.7978845608028654f;              // sqrt(2/pi)
constexpr float kGeluK1 = 0.7978845608028654f * 0.044715f;  // sqrt(2/pi) * 0.044715
constexpr float kGeluK3 = 3.0f * 0.7978845608028654f * 0.044715f;

__device__ inline float gelu_value(float x) {
  const float u = x * (kGeluK0 + kGeluK1 * x * x);
  return x / (1.0f + expf(-2.0f * u));
}

__device__ inline float gelu_grad(float x) {
  const float x2 = x * x;
  const float u = x * (kGeluK0 + kGeluK1 * x2);
  const float du = kGeluK0 + kGeluK3 * x2;
  const float e = expf(-2.0f * u);
  const float s = 1.0f / (1.0f + e);
  const float one_minus_s = 1.0f / (1.0f + 1.0f / e);
  return s + 2.0f * x * du * s * one_minus_s;
}

// n: elements; thread i handles [i*P, i*P + P) (n % P == 0).
template <class T, int P>
__global__ void gelu_forward_kernel(T* out, const T* inp, size_t n) {
  const size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * P;
  if (i >= n) return;
  float x[P];
  load_floats<P, true>(x, inp + i);
  for (int k = 0; k < P; k++) x[k] = gelu_value(x[k]);
  store_floats<P>(out + i, x);
}

template <class T, int P>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, size_t n) {
  const size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * P;
  if (i >= n) return;
  float x[P], d[P];
  load_floats<P, true>(x, inp + i);
  load_floats<P, true>(d, dout + i);
  for (int k = 0; k < P; k++) d[k] = gelu_grad(x[k]) * d[k];
  store_floats<P>(dinp + i, d);
}

template <class T>
void gelu_forward(T* out, const T* inp, size_t n, cudaStream_t stream) {
  const int block = 256;
  constexpr int P = kPack<T>;
  if (can_pack(n, P, out, inp)) {
    auto kernel = gelu_forward_kernel<T, P>;
    LAUNCH_KERNEL(kernel, ceil_div(n / P, block), block, 0, stream, out, inp, n);
  } else {
    auto kernel = gelu_forward_kernel<T, 1>;
    LAUNCH_KERNEL(kernel, ceil_div(n, block), block, 0, stream, out, inp, n);
  }
}

template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n, cudaStream_t stream) {
  const int block = 256;
  constexpr int P = kPack<T>;
  if (can_pack(n, P, dinp, inp, dout)) {
    auto kernel = gelu_backward_kernel<T, P>;
    LAUNCH_KERNEL(kernel, ceil_div(n / P, block), block, 0, stream, dinp, inp, dout, n);
  } else {
    auto kernel = gelu_backward_kernel<T, 1>;
    LAUNCH_KERNEL(kernel, ceil_div(n, block), block, 0, stream, dinp, inp, dout, n);
  }
}

}  // namespace kern
}  // namespace gpt2

#endif  // BACKEND_CUDA_GELU_CUH
