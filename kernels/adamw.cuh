// AdamW (decoupled weight decay), one thread per parameter, one fused pass:
// read p (or its fp32 master copy), g, m, v; write p, m, v (and the master).
// The bias corrections 1 / (1 - beta^t) are computed once on the host in fp64
// and passed as floats, the same expressions as the CPU backend:
//   g = grad * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2
//   p -= lr * (m / (1-b1^t) / (sqrt(v / (1-b2^t)) + eps) + wd * p)
// With a master copy the update runs on the fp32 master and params receive
// its value rounded to their type T (float or __nv_bfloat16): bf16 params never
// accumulate their own rounding errors. Moments are always fp32.
#ifndef KERNELS_ADAMW_CUH
#define KERNELS_ADAMW_CUH

#include <cmath>

#include "kernels/common.cuh"

namespace gpt2 {
namespace kern {

struct AdamWScalars {
  float lr, beta1, beta2, one_minus_beta1, one_minus_beta2, inv_bias1, inv_bias2, eps,
      weight_decay, grad_scale;
};

inline AdamWScalars adamw_scalars(float lr, float beta1, float beta2, float eps,
                                  float weight_decay, float grad_scale, int t) {
  AdamWScalars s;
  s.lr = lr;
  s.beta1 = beta1;
  s.beta2 = beta2;
  s.one_minus_beta1 = static_cast<float>(1.0 - static_cast<double>(beta1));
  s.one_minus_beta2 = static_cast<float>(1.0 - static_cast<double>(beta2));
  s.inv_bias1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(beta1), t)));
  s.inv_bias2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(beta2), t)));
  s.eps = eps;
  s.weight_decay = weight_decay;
  s.grad_scale = grad_scale;
  return s;
}

template <class T>
__global__ void adamw_kernel(T* params, float* master, const T* grads, float* m, float* v,
                             size_t n, AdamWScalars s) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = to_float(grads[i]) * s.grad_scale;
  const float mi = s.beta1 * m[i] + s.one_minus_beta1 * g;
  const float vi = s.beta2 * v[i] + s.one_minus_beta2 * g * g;
  m[i] = mi;
  v[i] = vi;
  const float mhat = mi * s.inv_bias1;
  const float vhat = vi * s.inv_bias2;
  const float p = master != nullptr ? master[i] : to_float(params[i]);
  const float updated = p - s.lr * (mhat / (sqrtf(vhat) + s.eps) + s.weight_decay * p);
  if (master != nullptr) master[i] = updated;
  params[i] = from_float<T>(updated);
}

template <class T>
void adamw_update(T* params, float* master, const T* grads, float* m, float* v, size_t n,
                  const AdamWScalars& s, cudaStream_t stream) {
  const int block = 256;
  auto kernel = adamw_kernel<T>;
  LAUNCH_KERNEL(kernel, ceil_div(n, block), block, 0, stream, params, master, grads, m, v, n, s);
}

}  // namespace kern
}  // namespace gpt2

#endif  // KERNELS_ADAMW_CUH
