// GELU, tanh approximation, forward and backward; one thread per element
// (read 1-2, write 1 float: bandwidth-bound).
//
// 0.5 (1 + tanh(u)) is evaluated as the logistic s = 1 / (1 + e), e = exp(-2u),
// u = sqrt(2/pi) (x + 0.044715 x^3). For the gradient, 1 - s is computed as
// 1 / (1 + 1/e) rather than 1 - s (which cancels for large x) or e * s (which
// is inf * 0 = NaN once e overflows, x < ~-10):
//   gelu'(x) = s + 2 x u'(x) s (1 - s),  u'(x) = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// Every |x| up to fp32's range gives a finite result; NaN propagates.
// gelu_backward may run in place (dinp == dout): each thread reads its element
// before writing it.
#ifndef KERNELS_GELU_CUH
#define KERNELS_GELU_CUH

#include "kernels/common.cuh"

namespace gpt2 {
namespace kern {

constexpr float kGeluK0 = 0.7978845608028654f;              // sqrt(2/pi)
constexpr float kGeluK1 = 0.7978845608028654f * 0.044715f;  // sqrt(2/pi) * 0.044715
constexpr float kGeluK3 = 3.0f * 0.7978845608028654f * 0.044715f;

template <class T>
__global__ void gelu_forward_kernel(T* out, const T* inp, size_t n) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float x = to_float(inp[i]);
  const float u = x * (kGeluK0 + kGeluK1 * x * x);
  out[i] = from_float<T>(x / (1.0f + expf(-2.0f * u)));
}

template <class T>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, size_t n) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float x = to_float(inp[i]);
  const float x2 = x * x;
  const float u = x * (kGeluK0 + kGeluK1 * x2);
  const float du = kGeluK0 + kGeluK3 * x2;
  const float e = expf(-2.0f * u);
  const float s = 1.0f / (1.0f + e);
  const float one_minus_s = 1.0f / (1.0f + 1.0f / e);
  const float grad = s + 2.0f * x * du * s * one_minus_s;
  dinp[i] = from_float<T>(grad * to_float(dout[i]));
}

template <class T>
void gelu_forward(T* out, const T* inp, size_t n, cudaStream_t stream) {
  const int block = 256;
  auto forward_kernel = gelu_forward_kernel<T>;
  LAUNCH_KERNEL(forward_kernel, ceil_div(n, block), block, 0, stream, out, inp, n);
}

template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n, cudaStream_t stream) {
  const int block = 256;
  auto backward_kernel = gelu_backward_kernel<T>;
  LAUNCH_KERNEL(backward_kernel, ceil_div(n, block), block, 0, stream, dinp, inp, dout, n);
}

}  // namespace kern
}  // namespace gpt2

#endif  // KERNELS_GELU_CUH
